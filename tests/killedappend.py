"""A process that APPENDs one message and SIGKILLs itself just before its ``n``-th write
(tests/test_append_killed.py): a real kill at a step boundary of an append, on either backend.

    python -m tests.killedappend embedded DATA_DIR USER SIZE N
    python -m tests.killedappend hbase HOST:PORT:PREFIX USER SIZE N

Exits 0 if the append completed before its ``n``-th write (``n`` past its last), else dies by
SIGKILL: nothing after the kill runs, as in a crashed server (no ``finally``, no rollback but
the one SQLite's journal makes).
"""

from __future__ import annotations

import os
import signal
import sys

from tests.crashing import Budget, DyingBackend
from tests.mailgen import message


class KillAt(Budget):
    """SIGKILLs the process at the write that would overspend the budget, before it is sent."""

    def spend(self, write: bool, table: str = "", method: str = "", args=()) -> None:
        if write:
            self.left -= 1
            if self.left < 0:
                os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    kind, where, user, size, writes = argv
    if kind == "embedded":
        from mailstore.backends.embedded import EmbeddedBackend
        backend = EmbeddedBackend(where)
    else:
        from mailstore.backends.hbase import HBaseBackend
        host, port, prefix = where.split(":")
        backend = HBaseBackend(host=host, port=int(port), table_prefix=prefix, pool_size=1)
    from mailstore.store import MailStore
    store = MailStore(DyingBackend(backend, KillAt(int(writes))), create_tables=False)
    store.append(user, "INBOX", message(7, size=int(size)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
