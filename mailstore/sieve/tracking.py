"""Sieve's memory between deliveries: vacation replies sent (RFC 5230 4.2) and duplicate ids
seen (RFC 7352 3), each for a number of seconds.  One row per tracked key in
``JAMES_SIEVE_TRACKING`` (mailstore/schema.py, docs/decisions/0025-sieve-execution.md).

Records are written only after the message they concern is durably stored (a delivery that
fails must not mark a sender as answered, RFC 7352 3.1 says the same of duplicates), so the
interpreter only asks :meth:`seen` and the executor calls :meth:`record` at the end.
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

    def sweep(self, user: str) -> int:
        """Remove ``user``'s expired rows; how many.  Called now and then by delivery."""
        prefix = self.keys.tracking_prefix(user.lower())
        now = self.clock()
        gone = [key for key, row in self.table.scan(prefix=prefix, columns=[EXPIRY])
                if decode_counter(row.get(EXPIRY)) <= now]
        for key in gone:
            self.table.delete(key)
        return len(gone)

    def delete_all(self, user: str) -> None:
        prefix = self.keys.tracking_prefix(user.lower())
        for key, _row in self.table.scan(prefix=prefix, columns=[EXPIRY]):
            self.table.delete(key)
