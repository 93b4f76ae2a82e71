"""Cell encodings of a message row, in one place.

``m:s`` is the commit record of a message row.  It is written last, by check-and-put, and its
first byte is the row's state:

* ``C`` + record: committed and visible.
* ``M`` + record + intent id: committed, visible, and claimed by a move in progress (see
  docs/decisions/0003; the 16-byte id of the intent that claimed it follows the record).
* ``D`` + record + intent id: being expunged; invisible.
* ``X``: the UID was abandoned by a writer that stalled or crashed; invisible forever.

The record after the state byte is a version byte (1) and fixed-size little-endian fields
(``_LAYOUT``), then, in records written since save dates are kept (RFC 8514), the save date
(``_SAVED``).  It was JSON at first; every scan of a mailbox decodes one per message, and a
profile of SEARCH over 30,000 messages spent half its time in ``json.loads``, so it became a
struct (about 30 times faster to decode).  JSON records still decode.  The save date is a tail,
not a new version, so that a server of the previous release sharing the store during a rolling
upgrade still reads every record (``unpack_from`` ignores what follows its fields, and a state
change keeps the bytes after the state byte); a record without it has ``save_date`` None
(SAVEDATE NIL, as RFC 8514 section 3 allows where the server does not know it).

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
_VERSION = b"\x01"
_LAYOUT = struct.Struct("<16sqdqqqqq")  # content, size, date, modseq, uid, header, lines, chunk
_SAVED = struct.Struct("<d")  # the save date, after _LAYOUT where known
_SAVED_AT = 2 + _LAYOUT.size


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
        record = state + _VERSION + _LAYOUT.pack(
            self.content, self.size, float(self.internal_date), self.modseq, self.uid,
            self.header_size, self.lines, self.chunk_size)
        if self.save_date is None:
            return record
        return record + _SAVED.pack(float(self.save_date))

    @classmethod
    def decode(cls, raw: bytes) -> MessageRecord:
        if raw[1:2] == _VERSION:
            content, size, date, modseq, uid, header_size, lines, chunk_size = \
                _LAYOUT.unpack_from(raw, 2)
            # The tail is 8 (save date) or 24 (save date, owner) bytes when a save date is
            # kept; 16 alone is a claim's owner on a record without one.
            saved = _SAVED.unpack_from(raw, _SAVED_AT)[0] \
                if len(raw) - _SAVED_AT in (8, 24) else None
            return cls(uid, content, size, date, modseq, header_size, lines, chunk_size, saved)
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


_RECORD_END = 2 + _LAYOUT.size
_OWNER_LEN = 16


def _tail(raw: bytes) -> tuple[bytes, bytes]:
    """A version-1 record split into (record with its save date if any, owner or b"").  The
    tail after ``_LAYOUT`` is 0 or 8 bytes (save date) in a committed record and 16 or 24 in
    a claimed one (save date if any, then the owner): the lengths tell them apart."""
    extra = len(raw) - _RECORD_END
    if extra >= _OWNER_LEN:
        return raw[:len(raw) - _OWNER_LEN], raw[len(raw) - _OWNER_LEN:]
    return raw, b""


def claimed_by(raw: bytes, state: bytes, owner: bytes) -> bytes:
    """The commit record claimed (``M`` or ``D``) by the intent ``owner`` (its 16-byte id),
    which follows the record and its save date: a roll forward then takes only the rows its
    own intent claimed, never those a later operation claimed after it died (decision 0003).
    The save date (RFC 8514) is kept.  Records of the first, JSON, layout carry no owner."""
    if raw[1:2] != _VERSION:
        return with_state(raw, state)
    return state + _tail(raw)[0][1:] + owner


def owner_of(raw: bytes) -> bytes | None:
    """The intent id a claimed record names, or None (a claim from before owners existed)."""
    if raw[1:2] != _VERSION:
        return None
    return _tail(raw)[1] or None


def unclaimed(raw: bytes) -> bytes:
    """A claimed record back to committed, without its owner (its save date kept)."""
    if raw[1:2] != _VERSION:
        return with_state(raw, COMMITTED)
    return COMMITTED + _tail(raw)[0][1:]


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
