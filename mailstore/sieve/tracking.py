"""Sieve's memory between deliveries: vacation replies sent (RFC 5230 4.2) and duplicate ids
seen (RFC 7352 3), each for a number of seconds.  One row per tracked key in
``JAMES_SIEVE_TRACKING`` (mailstore/schema.py, docs/decisions/0025-sieve-execution.md).

A record is a *claim*: :meth:`claim` is a check-and-put on the row's one cell, so of two
deliveries racing for the same key -- two processes, two workers, two machines over one
HBase -- exactly one gets it (RFC 5230 4.2: one reply per sender per period; RFC 7352 3: a
message id seen once).  The vacation claim is taken after the message is stored and before
the reply is queued; the duplicate claim when the test runs.  A delivery that fails or is
withdrawn afterwards gives its claims back (:meth:`release`), so the sender's retry answers
or tests as if the first attempt never happened (RFC 7352 3.1: only delivered messages are
tracked).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from ..backends.base import Backend, decode_counter, encode_counter
from ..keys import UserKeys
from ..schema import SIEVE_TRACKING

EXPIRY = b"t:x"
VACATION = b"v"
DUPLICATE = b"d"


class SieveTracking:
    """Tracked keys per user, with expiry.  ``clock`` returns seconds since the epoch."""

    def __init__(self, backend: Backend, clock: Callable[[], float] = time.time,
                 user_keys: UserKeys | None = None):
        self.table = backend.table(SIEVE_TRACKING.name)
        self.clock = clock
        self.keys = user_keys or UserKeys()

    def _row(self, user: str, kind: bytes, key: str) -> bytes:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()[:16]
        return self.keys.tracking_key(user.lower(), kind, digest)

    def seen(self, user: str, kind: bytes, key: str) -> bool:
        """Whether ``key`` was recorded for ``user`` and has not expired."""
        row = self.table.row(self._row(user, kind, key), [EXPIRY])
        raw = row.get(EXPIRY)
        return raw is not None and decode_counter(raw) > self.clock()

    def record(self, user: str, kind: bytes, key: str, seconds: int) -> None:
        """Remember ``key`` for ``seconds`` from now (a later record replaces the expiry)."""
        expiry = int(self.clock() + seconds)
        self.table.put(self._row(user, kind, key), {EXPIRY: encode_counter(expiry)})

    def claim(self, user: str, kind: bytes, key: str, seconds: int) -> bytes | None:
        """Take ``key`` for ``seconds`` unless a live record holds it: atomic (check-and-put
        of the expiry cell against the value just read, or against absence), so two
        claimants never both win.  Returns the claim (the expiry written, for
        :meth:`release`), or None when someone holds the key."""
        row = self._row(user, kind, key)
        for _ in range(5):  # lost only to a sweep or an expired record rewritten meanwhile
            now = self.clock()
            current = self.table.row(row, [EXPIRY]).get(EXPIRY)
            if current is not None and decode_counter(current) > now:
                return None
            # At least one second past now, so the claim is live when it is written.
            mine = encode_counter(max(int(now + seconds), int(now) + 1))
            if self.table.check_and_put(row, EXPIRY, current, EXPIRY, mine):
                return mine
        return None

    def release(self, user: str, kind: bytes, key: str, claim: bytes) -> bool:
        """Give a claim back (its delivery failed or was withdrawn): the record expires now,
        unless it is no longer ours.  Check-and-put, never a blind delete, so a later
        claimant's record is left alone."""
        return self.table.check_and_put(self._row(user, kind, key), EXPIRY, claim, EXPIRY,
                                        encode_counter(0))

    def sweep(self, user: str) -> int:
        """Remove ``user``'s expired rows; how many.  Called now and then by delivery."""
        prefix = self.keys.tracking_prefix(user.lower())
        now = self.clock()
        gone = [key for key, row in self.table.scan(prefix=prefix, columns=[EXPIRY])
                if decode_counter(row.get(EXPIRY)) <= now]
        for key in gone:
            self.table.delete(key)
        return len(gone)

    def sweep_all(self, repair: bool = False) -> int:
        """Expired rows of every user (fsck): how many; removed when ``repair``."""
        now = self.clock()
        gone = [key for key, row in self.table.scan(start=b"", columns=[EXPIRY])
                if decode_counter(row.get(EXPIRY)) <= now]
        if repair:
            for key in gone:
                self.table.delete(key)
        return len(gone)

    def delete_all(self, user: str) -> None:
        prefix = self.keys.tracking_prefix(user.lower())
        for key, _row in self.table.scan(prefix=prefix, columns=[EXPIRY]):
            self.table.delete(key)
