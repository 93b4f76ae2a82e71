"""Store-level benchmarks, each beside the raw backend rate measured in the same run.

    .venv/bin/python bench/store_bench.py [--messages 100000] [--appends 2000] [--rounds 5]
                                          [--synchronous FULL] [--backend embedded|thrift]
                                          [--skip-big]

Prints a Markdown table that goes into bench/RESULTS.md.  Figures, never assertions: targets
from the issue are shown beside them.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import sys
import tempfile
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from mailstore.backends.embedded import EmbeddedBackend  # noqa: E402
from mailstore.schema import CONTENT, create_schema  # noqa: E402
from mailstore.store import MailStore  # noqa: E402

KIB10 = 10 * 1024


def msg(n: int, size: int = KIB10) -> bytes:
    head = (f"From: Bench <bench@example.com>\r\nTo: u@example.com\r\nSubject: bench {n}\r\n"
            f"Message-ID: <b{n}@bench>\r\nDate: Sat, 21 Nov 2026 12:00:00 +0000\r\n\r\n").encode()
    line = b"y" * 78 + b"\r\n"
    return head + line * ((size - len(head)) // len(line))


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds else float("inf")


def timed(fn, repeat: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


class Streamed(io.RawIOBase):
    """A message of ``size`` bytes produced on the fly, so the source costs no memory."""

    def __init__(self, size: int):
        super().__init__()
        self.left = size
        self.head = b"Subject: big\r\n\r\n"
        self.digest = hashlib.sha256()  # of every octet handed out, to check the read-back

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self.head:
            out, self.head = self.head, b""
            self.left -= len(out)
            self.digest.update(out)
            return out
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        out = bytes(range(97, 123)) * (n // 26) + bytes(range(97, 97 + n % 26))
        self.digest.update(out)
        return out


def open_backend(kind: str, path: str, synchronous: str):
    if kind == "embedded":
        return EmbeddedBackend(path, synchronous=synchronous), None
    from mailstore.backends.hbase import HBaseBackend
    from mailstore.testing.thrift_gateway import ThriftGateway
    gateway = ThriftGateway(EmbeddedBackend(path, synchronous=synchronous))
    gateway.start()
    return HBaseBackend(host="127.0.0.1", port=gateway.port), gateway


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--appends", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5,
                    help="alternating rounds of raw puts and appends")
    ap.add_argument("--synchronous", default="FULL")
    ap.add_argument("--backend", default="embedded", choices=["embedded", "thrift"])
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args()
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        backend, gateway = open_backend(args.backend, tmp, args.synchronous)
        create_schema(backend)
        store = MailStore(backend)
        # The baselines write to a table of their own, with the content table's family: raw
        # rows in JAMES_CONTENT would sort after every content id (UUIDv7, time-ordered) and
        # turn each new content row from an insert at the B-tree's right edge, as in a real
        # store, into one in the middle that splits full pages (1.3 more pages written per
        # append, measured with SQLite's dbstat over the WAL's frames).
        backend.create_table("BENCH_RAW", CONTENT.family_options())
        raw = backend.table("BENCH_RAW")

        # Raw backend put of a 10 KiB cell: the baseline for append.  The two are measured in
        # alternating rounds, so a change in the machine's fsync speed during the run (other
        # load, the disk's own caching) weighs on both alike instead of on one of them.
        body = msg(0)
        n = args.appends
        rounds = max(1, min(args.rounds, n))
        store.create_user("u", "pw")
        raw_time = append_time = 0.0
        done = 0
        for r in range(rounds):
            batch = range(done, n * (r + 1) // rounds)
            done = batch.stop
            start = time.perf_counter()
            for i in batch:
                raw.put(b"raw%08d" % i, {b"c:1": body})
                backend.sync()  # as durable as an acknowledged append
            raw_time += time.perf_counter() - start
            messages = [msg(i) for i in batch]
            start = time.perf_counter()
            for message in messages:
                store.append("u", "INBOX", message)
            append_time += time.perf_counter() - start
        raw_put = rate(n, raw_time)
        append = rate(n, append_time)
        rows.append(("raw backend put, 10 KiB", f"{raw_put:,.0f}/s", "baseline", ""))
        rows.append(("store append, 10 KiB", f"{append:,.0f}/s",
                     f"{append / raw_put:.2f} x raw put", ">= 0.5 x raw put"))

        # Flag changes against raw check-and-put.
        inbox = store.mailbox("u", "INBOX")
        uids = store.uids(inbox)
        def one_cas(i: int) -> None:
            # Not synced: STORE is not fsynced either (as Dovecot's default fsync_mode).
            raw.check_and_put(b"cas", b"c:x", None if i == 0 else b"%d" % (i - 1), b"c:x",
                              b"%d" % i)
        t = timed(lambda: [one_cas(i) for i in range(n)])
        raw_cas = rate(n, t)
        t = timed(lambda: [store.store_flags(inbox, [u], ["\\Seen"]) for u in uids[:n]])
        flags = rate(n, t)
        rows.append(("raw check-and-put", f"{raw_cas:,.0f}/s", "baseline", ""))
        rows.append(("flag change (STORE one message)", f"{flags:,.0f}/s",
                     f"{flags / raw_cas:.2f} x raw CAS", ""))

        # A big mailbox: newest-25 page and full UID list.
        store.create_mailbox("u", "Big")
        big = store.mailbox("u", "Big")
        stored = store.ingest(msg(1), refs=args.messages)
        start = time.perf_counter()
        for i in range(args.messages):
            store.add_stored(big, stored)
            if i and i % 20000 == 0:
                print(f"  filled {i:,} messages, {rate(i, time.perf_counter() - start):,.0f}/s",
                      file=sys.stderr)
        big = store.mailbox("u", "Big")
        page = timed(lambda: store.newest(big, 25), repeat=20)
        listing = timed(lambda: store.uids(big), repeat=3)
        start_key, stop_key = (big.id, big.id + b"\xff" * 9)
        raw_scan = timed(lambda: sum(1 for _ in backend.table("JAMES_MESSAGES").scan(
            start=start_key, stop=stop_key, columns=[b"m:s"], batch_size=5000)), repeat=3)
        m = args.messages
        rows.append((f"raw scan of {m:,} commit cells", f"{raw_scan * 1000:,.0f} ms",
                     "baseline", ""))
        rows.append((f"newest 25 (with envelopes) of {m:,}", f"{page * 1000:.1f} ms", "",
                     "<= 20 ms"))
        rows.append((f"full UID list of {m:,}", f"{listing * 1000:,.0f} ms",
                     f"{listing / raw_scan:.2f} x raw scan", "<= 300 ms"))

        if not args.skip_big:
            size = 50 * 1024 * 1024
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
            t0 = time.perf_counter()
            source = Streamed(size)
            store.append("u", "INBOX", source)
            t_store = time.perf_counter() - t0
            peak_store = tracemalloc.get_traced_memory()[1] - base
            tracemalloc.reset_peak()
            inbox = store.mailbox("u", "INBOX")
            view = store.newest(inbox, 1)[0]
            reader = store.open_message(view)
            t0 = time.perf_counter()
            total = 0
            read_back = hashlib.sha256()
            while chunk := reader.read(64 * 1024):
                total += len(chunk)
                read_back.update(chunk)
            t_read = time.perf_counter() - t0
            peak_read = tracemalloc.get_traced_memory()[1] - base
            tracemalloc.stop()
            chunk = store.content.chunk_size
            assert total == size
            # Not only the size: the octets read back are the octets stored.
            assert read_back.digest() == source.digest.digest(), "50 MB message read back differs"
            rows.append(("store 50 MB message (streamed)", f"{t_store:.2f} s",
                         f"peak +{peak_store / chunk:.1f} chunks ({peak_store / 2**20:.2f} MiB)",
                         "< 4 chunks"))
            rows.append(("read 50 MB message back", f"{t_read:.2f} s",
                         f"peak +{peak_read / chunk:.1f} chunks ({peak_read / 2**20:.2f} MiB)",
                         "< 4 chunks"))
        store.close()
        if gateway:
            gateway.stop()

    print(f"\nbackend={args.backend} synchronous={args.synchronous} "
          f"messages={args.messages} appends={args.appends}\n")
    print("| measure | figure | ratio | target |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
