"""What SELECT and a session's refresh cost on a 100,000-message mailbox, store level.

    .venv/bin/python bench/index_bench.py [--messages 100000] [--changes 100]

Issue 3: "SELECT of such a mailbox does not read every message row."  Each figure sits beside
the baseline measured in the same run: one raw scan of the commit and flag cells of every
message (what SELECT used to cost at the least).  Measured:

* building the index from the rows (what a process's first SELECT did before checkpoints);
* opening it in a fresh process (a new MailStore over the same files) from the checkpoint;
* the same after ``--changes`` flag changes, as many expunges and as many appends by others;
* a session's refresh after one flag change by another session (the delta), beside the full
  rescan it replaced.

Prints a Markdown table for bench/RESULTS.md.  Figures, never assertions.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from mailstore import keys  # noqa: E402
from mailstore.backends.embedded import EmbeddedBackend  # noqa: E402
from mailstore.messages import FLAGS, STATE  # noqa: E402
from mailstore.store import MailStore  # noqa: E402


def msg(n: int) -> bytes:
    return (f"From: Bench <bench@example.com>\r\nTo: u@example.com\r\nSubject: bench {n}\r\n"
            f"Message-ID: <i{n}@bench>\r\n\r\n" + "x" * 200 + "\r\n").encode()


def timed(fn, repeat: int = 5) -> float:
    """Median seconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def fill(store: MailStore, n: int) -> None:
    """``n`` messages sharing one content (what is measured never reads content), 10% unseen."""
    inbox = store.mailbox("bench", "INBOX")
    stored = store.ingest(msg(0), refs=n)
    for i in range(n):
        store.add_stored(inbox, stored, ["\\Seen"] if i % 10 else [])
        if i and i % 20000 == 0:
            print(f"  {i:,} messages", file=sys.stderr)
    store.backend.sync()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--changes", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "store")
        backend = EmbeddedBackend(path)
        store = MailStore(backend)
        store.create_user("bench", "pw", default_folders=False)
        print(f"filling {args.messages:,} messages ...", file=sys.stderr)
        fill(store, args.messages)
        inbox = store.mailbox("bench", "INBOX")
        table = store.messages.table
        start, stop = keys.message_range(inbox.id)

        def raw_scan():
            for _ in table.scan(start=start, stop=stop, columns=[STATE, FLAGS],
                                batch_size=5000):
                pass

        now = store.marks([inbox.id])[inbox.id]
        rows = {
            "raw": timed(raw_scan),
            "build": timed(lambda: store.indexes.build(inbox, now)),
        }
        store.indexes.save_checkpoint(inbox.id, store.indexes.build(inbox, now))

        def cold_open():
            MailStore(backend, create_tables=False).open_index(inbox)
        rows["cold"] = timed(cold_open)
        rows["warm"] = timed(lambda: store.open_index(inbox))

        # Others change the mailbox: flag changes, expunges and appends.
        rng = random.Random(1)
        uids = store.uids(inbox)
        for uid in rng.sample(uids, args.changes):
            store.store_flags(inbox, [uid], ["\\Flagged"])
        store.expunge(inbox, rng.sample(uids, args.changes))
        for i in range(args.changes):
            store.append("bench", "INBOX", msg(10**7 + i))
        rows["cold_changed"] = timed(cold_open)

        # A session's refresh after one flag change by another session.
        session_view = store.open_index(inbox)
        victim = store.uids(inbox)[len(uids) // 2]

        def one_change_then_delta():
            store.store_flags(inbox, [victim], ["\\Answered"], "add")
            store.store_flags(inbox, [victim], ["\\Answered"], "remove")
            start_t = time.perf_counter()
            delta = store.changes_since(inbox, session_view.marks)
            elapsed = time.perf_counter() - start_t
            session_view.apply(delta)
            return elapsed
        deltas = [one_change_then_delta() for _ in range(5)]
        rows["delta"] = statistics.median(deltas)
        rows["rescan"] = timed(lambda: list(store.uid_flags(inbox, session_view.marks.visible)))
        backend.close()

    n = args.messages
    raw = rows["raw"]

    def line(name, seconds, target=""):
        return (f"| {name} | {seconds * 1000:,.1f} ms | {seconds / raw:.3f} x raw scan | "
                f"{target} |")
    print(f"Command: `.venv/bin/python bench/index_bench.py --messages {n} "
          f"--changes {args.changes}`\n")
    print("| measure | figure | ratio | note |")
    print("|---|---|---|---|")
    print(f"| raw scan of the commit and flag cells of {n:,} messages | {raw * 1000:,.1f} ms "
          "| baseline | |")
    print(line("index built from the rows (first SELECT before checkpoints)", rows["build"]))
    print(line("first SELECT in a fresh process: index from the checkpoint", rows["cold"],
               "reads no message row"))
    print(line(f"... after {args.changes} flag changes, {args.changes} expunges and "
               f"{args.changes} appends by others", rows["cold_changed"],
               f"reads {args.changes * 3} rows"))
    print(line("SELECT again in the same process, unchanged", rows["warm"]))
    print(line("a session's refresh after one flag change elsewhere (delta)", rows["delta"]))
    print(line("... the full rescan it replaces", rows["rescan"]))


if __name__ == "__main__":
    main()
