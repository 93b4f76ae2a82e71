"""Each user's Sieve runtime errors, kept so the user can see why a filter did not act.

RFC 5228 2.10.6: a script that fails at run time keeps the message (implicit keep); the
user must be able to learn why, and no standard command reads it (ManageSieve, RFC 5804,
has none; Pigeonhole writes a per-user log file).  We keep the last :data:`MAX_ENTRIES`
errors per user in the store, readable by every frontend: ``mailadmin sieve log USER`` and,
for the user, the read-only METADATA server entry :data:`ENTRY` (RFC 5464 3.2:
``GETMETADATA "" /private/vendor/hbase-imap/sieve/log``).  Decision 0025.

Rows live in ``JAMES_SIEVE_TRACKING`` beside the tracking records, kind ``e``: ``user 0x00 e
0x00`` + 8-byte microseconds + 2 bytes of a counter + 2 random bytes (time order), cells
``t:x`` (expiry: the row goes with the tracking sweep after :data:`KEEP_SECONDS`), ``t:w``
(when, ms), ``t:s`` (script), ``t:l`` (line), ``t:m`` (message).
"""

from __future__ import annotations

import datetime
import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..backends.base import Backend, decode_counter, encode_counter
from ..keys import UserKeys
from ..metadata import SIEVE_LOG
from ..schema import SIEVE_TRACKING
from .tracking import EXPIRY

KIND = b"e"
WHEN, SCRIPT, LINE, MESSAGE = b"t:w", b"t:s", b"t:l", b"t:m"
MAX_ENTRIES = 20
"""Errors kept per user; older ones are removed as new ones come."""
KEEP_SECONDS = 30 * 86400
"""An error older than this is removed even if fewer than MAX_ENTRIES came since."""
MAX_MESSAGE = 500
_SEQUENCE = itertools.count()
ENTRY = SIEVE_LOG
"""The METADATA server entry showing the log to its user (read-only)."""


@dataclass(frozen=True)
class LoggedError:
    when: float
    script: str
    line: int
    message: str

    def as_dict(self) -> dict:
        return {"time": self.when, "script": self.script, "line": self.line,
                "message": self.message}

    def text(self) -> str:
        stamp = datetime.datetime.fromtimestamp(self.when, datetime.UTC)
        where = f"line {self.line}" if self.line else "line ?"
        return f"{stamp:%Y-%m-%dT%H:%M:%SZ} {self.script}: {where}: {self.message}"


class SieveErrorLog:
    """The last errors of each user's scripts.  ``clock``: seconds since the epoch."""

    def __init__(self, backend: Backend, clock: Callable[[], float] = time.time,
                 user_keys: UserKeys | None = None):
        self.table = backend.table(SIEVE_TRACKING.name)
        self.clock = clock
        self.keys = user_keys or UserKeys()

    def _prefix(self, user: str) -> bytes:
        # The tracking table's key layout (keys.UserKeys: salted by user, decision 0027).
        return self.keys.tracking_prefix(user.lower()) + KIND + b"\0"

    def add(self, user: str, script: str, line: int, message: str) -> None:
        """Record one error, then drop the oldest beyond :data:`MAX_ENTRIES`."""
        now = self.clock()
        prefix = self._prefix(user)
        # Time order; within one tick, this process's order, then another's at random.
        row = (prefix + int(now * 1_000_000).to_bytes(8, "big")
               + (next(_SEQUENCE) & 0xFFFF).to_bytes(2, "big") + os.urandom(2))
        # One line, bounded: the text is shown in a METADATA value and a terminal.
        text = " ".join(str(message).split())[:MAX_MESSAGE]
        self.table.put(row, {EXPIRY: encode_counter(int(now + KEEP_SECONDS)),
                             WHEN: encode_counter(int(now * 1000)),
                             SCRIPT: script.encode("utf-8", "replace"),
                             LINE: encode_counter(max(int(line), 0)),
                             MESSAGE: text.encode("utf-8", "replace")})
        keys = [key for key, _row in self.table.scan(prefix=prefix, columns=[EXPIRY])]
        for key in keys[:-MAX_ENTRIES] if len(keys) > MAX_ENTRIES else []:
            self.table.delete(key)

    def entries(self, user: str) -> list[LoggedError]:
        """The user's errors still kept, oldest first."""
        now = self.clock()
        out = []
        for _key, row in self.table.scan(prefix=self._prefix(user),
                                         columns=[EXPIRY, WHEN, SCRIPT, LINE, MESSAGE]):
            if decode_counter(row.get(EXPIRY)) <= now:
                continue
            out.append(LoggedError(decode_counter(row.get(WHEN)) / 1000,
                                   row.get(SCRIPT, b"").decode("utf-8", "replace"),
                                   decode_counter(row.get(LINE)),
                                   row.get(MESSAGE, b"").decode("utf-8", "replace")))
        return out[-MAX_ENTRIES:]

    def text(self, user: str) -> bytes | None:
        """The log as the METADATA entry shows it: one error a line, oldest first, CRLF;
        None when there is none (the entry is then absent, RFC 5464 4.2)."""
        found = self.entries(user)
        if not found:
            return None
        return "".join(e.text() + "\r\n" for e in found).encode("utf-8")

    def clear(self, user: str) -> int:
        keys = [key for key, _row in self.table.scan(prefix=self._prefix(user),
                                                      columns=[EXPIRY])]
        for key in keys:
            self.table.delete(key)
        return len(keys)
