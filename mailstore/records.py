"""Cell encodings of a message row, in one place.

``m:s`` is the commit record of a message row.  It is written last, by check-and-put, and its
first byte is the row's state:

* ``C`` + record: committed and visible.
* ``M`` + record: committed, visible, and claimed by a move in progress (see docs/decisions).
* ``D`` + record: being expunged; invisible.
* ``X``: the UID was abandoned by a writer that stalled or crashed; invisible forever.

The record after the state byte is a version byte and fixed-size little-endian fields
(``_LAYOUT``, version 2; version 1 lacks the save date).  It was JSON at first; every scan of a
mailbox decodes one per message, and a profile of SEARCH over 30,000 messages spent half its
time in ``json.loads``, so it became a struct (about 30 times faster to decode).  JSON and
version-1 records still decode, with no save date (``save_date`` None: RFC 8514 section 3 lets
SAVEDATE be NIL where the server does not know it).

A row without ``m:s`` is still being written (or was left by a crash) and is invisible.
``f:v`` holds the flags: the 8-byte MODSEQ of their last change, then the flag names separated by
spaces.  Flag names are IMAP atoms, so they contain no space.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

COMMITTED, MOVING, DELETING, ABANDONED = b"C", b"M", b"D", b"X"
VISIBLE_STATES = (COMMITTED, MOVING)
_VERSION_1 = b"\x01"
_LAYOUT_1 = struct.Struct("<16sqdqqqqq")  # content, size, date, modseq, uid, header, lines, chunk
_VERSION = b"\x02"
_LAYOUT = struct.Struct("<16sqdqqqqqd")  # version 1's fields, then the save date


@dataclass
class MessageRecord:
    """The small, fixed facts of one message, kept in ``m:s``."""

    uid: int
    content: bytes
    size: int
    internal_date: float
    modseq: int
    header_size: int = 0
    lines: int = 0
    chunk_size: int = 0
    save_date: float | None = None
    """When the message was saved into its current mailbox (RFC 8514): set by APPEND,
    delivery, import, COPY and MOVE; None for a row written before save dates were kept."""

    def encode(self, state: bytes = COMMITTED) -> bytes:
        # A negative save date stands for "unknown" (no real save date is before 1970).
        saved = -1.0 if self.save_date is None else float(self.save_date)
        return state + _VERSION + _LAYOUT.pack(
            self.content, self.size, float(self.internal_date), self.modseq, self.uid,
            self.header_size, self.lines, self.chunk_size, saved)

    @classmethod
    def decode(cls, raw: bytes) -> MessageRecord:
        version = raw[1:2]
        if version == _VERSION:
            content, size, date, modseq, uid, header_size, lines, chunk_size, saved = \
                _LAYOUT.unpack_from(raw, 2)
            return cls(uid, content, size, date, modseq, header_size, lines, chunk_size,
                       None if saved < 0 else saved)
        if version == _VERSION_1:
            content, size, date, modseq, uid, header_size, lines, chunk_size = \
                _LAYOUT_1.unpack_from(raw, 2)
            return cls(uid, content, size, date, modseq, header_size, lines, chunk_size)
        body = json.loads(raw[1:])  # the first, JSON, layout
        return cls(uid=body["uid"], content=bytes.fromhex(body["c"]), size=body["size"],
                   internal_date=body["date"], modseq=body["ms"], header_size=body.get("hs", 0),
                   lines=body.get("ln", 0), chunk_size=body.get("cs", 0))


def state_of(raw: bytes | None) -> bytes | None:
    """The state byte of an ``m:s`` value, or None for a row still being written."""
    return raw[:1] if raw else None


def with_state(raw: bytes, state: bytes) -> bytes:
    """The same commit record in another state (for the check-and-put that changes it)."""
    return state + raw[1:]


_NAMES: dict[bytes, frozenset[str]] = {}


@dataclass
class Flags:
    modseq: int
    names: frozenset[str] = field(default_factory=frozenset)

    def encode(self) -> bytes:
        return self.modseq.to_bytes(8, "big") + " ".join(sorted(self.names)).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> Flags:
        if not raw:
            return cls(0, frozenset())
        # A mailbox holds few distinct flag sets, and scans decode one per message: the sets
        # are shared through a small cache (a profile of SEARCH UNSEEN over 100,000 messages
        # spent a quarter of its time splitting the same few strings).
        tail = raw[8:]
        names = _NAMES.get(tail)
        if names is None:
            text = tail.decode()
            names = frozenset(text.split()) if text else frozenset()
            if len(_NAMES) > 4096:
                _NAMES.clear()
            _NAMES[tail] = names
        return cls(int.from_bytes(raw[:8], "big"), names)

    @property
    def seen(self) -> bool:
        return "\\Seen" in self.names
