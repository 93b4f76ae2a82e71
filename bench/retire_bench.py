"""STORE, MOVE and EXPUNGE of one message at a time over the in-process Thrift gateway, with
the deletes of intents, markers and removed rows waiting out HBase's ``delete_settle`` (as
before ``Table.retire``) and without (as now), in interleaved rounds (issue 16).

    PYTHONPATH=. .venv/bin/python bench/retire_bench.py [MESSAGES_PER_ROUND]

Prints the median time per operation of six rounds in each mode, and the ratio.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mailstore.backends.hbase import HBaseBackend, HBaseTable  # noqa: E402
from mailstore.schema import create_schema  # noqa: E402
from mailstore.store import MailStore  # noqa: E402
from mailstore.testing.thrift_gateway import ThriftGateway  # noqa: E402
from tests.mailgen import message  # noqa: E402

RETIRE = HBaseTable.retire


def settled_retire(self, mutations):
    """The baseline: a retire that settles like any delete."""
    self.mutate_rows(mutations)


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    gateway = ThriftGateway(tempfile.mkdtemp() + "/hbase")
    gateway.start()
    backend = HBaseBackend(host="127.0.0.1", port=gateway.port, pool_size=4)
    create_schema(backend)
    store = MailStore(backend, create_tables=False)
    store.create_user("u", "pw")
    store.create_mailbox("u", "Work")
    times = {mode: {op: [] for op in ("store", "move", "expunge")}
             for mode in ("settle", "retire")}
    for _round in range(6):
        for mode in ("settle", "retire"):
            HBaseTable.retire = settled_retire if mode == "settle" else RETIRE
            inbox, work = store.mailbox("u", "INBOX"), store.mailbox("u", "Work")
            uids = [store.append("u", inbox, message(i, size=2000))[1] for i in range(count)]
            started = time.perf_counter()
            for uid in uids:
                store.store_flags(inbox, [uid], ["\\Seen"], "add")
            times[mode]["store"].append((time.perf_counter() - started) / count * 1000)
            started = time.perf_counter()
            moved = [new for uid in uids for _old, new in store.move(inbox, [uid], work)]
            times[mode]["move"].append((time.perf_counter() - started) / count * 1000)
            started = time.perf_counter()
            for uid in moved:
                store.expunge(work, [uid])
            times[mode]["expunge"].append((time.perf_counter() - started) / count * 1000)
    HBaseTable.retire = RETIRE
    for op in ("store", "move", "expunge"):
        before = statistics.median(times["settle"][op])
        after = statistics.median(times["retire"][op])
        print(f"{op}: settle {before:.2f} ms, retire {after:.2f} ms, ratio {after / before:.2f}")
    backend.close()
    gateway.stop()


if __name__ == "__main__":
    main()
