"""Store-level benchmarks, each beside the raw backend rate measured in the same run.

    .venv/bin/python bench/store_bench.py [--messages 100000] [--appends 2000] [--rounds 5]
                                          [--synchronous FULL] [--backend embedded|hbase]
                                          [--skip-big]
    .venv/bin/python bench/store_bench.py --wire [--backend embedded|hbase] [--appends 2000]
                                          [--writers 1,16] [--latency-ms 0]
                                          [--api thrift1,thrift2] [--text-index yes]

``--backend hbase`` (or its old name ``thrift``) runs the HBase backend through happybase over
the in-process Thrift1 gateway (mailstore/testing/thrift_gateway.py).  ``--wire`` runs only the
wire measures: Thrift round trips per operation, and appends against raw puts of the same size
with 1 and 16 concurrent writers.  ``--latency-ms`` makes the gateway wait that long before
answering each call (the gateway thread sleeps, without the GIL), as a real gateway's network and
WAL sync do: the in-process gateway alone answers in a fraction of a real one's time, so without
it the figures show CPU, not round trips.

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


def open_backend(kind: str, path: str, synchronous: str, latency: float = 0.0,
                 pool_size: int = 10, api: str = "thrift1"):
    if kind == "embedded":
        return EmbeddedBackend(path, synchronous=synchronous), None
    from mailstore.backends import open_hbase
    from mailstore.testing.thrift_gateway import ThriftGateway
    gateway = ThriftGateway(EmbeddedBackend(path, synchronous=synchronous), api=api,
                            delay=latency)
    gateway.start()
    return open_hbase(api, host="127.0.0.1", port=gateway.port, pool_size=pool_size), gateway


def round_trips(backend) -> dict[str, int]:
    counts = getattr(backend, "round_trips", None)
    return counts() if counts else {}


def per_op(backend, op, repeat: int) -> tuple[float, str]:
    """Thrift round trips one call of ``op(i)`` makes and its time, on average over ``repeat``
    calls, and the round trips' split by Thrift method.  With a gateway latency well above
    the CPU time of a call, time / latency is the number of round trips waited for one after
    the other."""
    before = round_trips(backend)
    start = time.perf_counter()
    for i in range(repeat):
        op(i)
    took = (time.perf_counter() - start) / repeat
    after = round_trips(backend)
    diff = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    split = ", ".join(f"{k} {v / repeat:g}" for k, v in sorted(diff.items()) if v)
    return sum(diff.values()) / repeat, took, split


def run_threads(count: int, work) -> float:
    """Run ``work(w)`` in ``count`` threads at once; the wall time until all are done."""
    import threading
    errors: list[BaseException] = []

    def guarded(w: int) -> None:
        try:
            work(w)
        except BaseException as exc:   # reported after the join, with the others
            errors.append(exc)
    threads = [threading.Thread(target=guarded, args=(w,)) for w in range(count)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


class WireSetup:
    """One backend (over one API, with its own gateway and store) for :func:`wire`."""

    def __init__(self, args, tmp: str, api: str, writers: int):
        self.api = api
        self.label = args.backend if args.backend == "embedded" else f"hbase {api}"
        self.backend, self.gateway = open_backend(
            args.backend, os.path.join(tmp, api), args.synchronous, args.latency_ms / 1000,
            pool_size=4 * writers, api=api)
        create_schema(self.backend)
        self.store = MailStore(self.backend, text_index=args.text_index)
        self.backend.create_table("BENCH_RAW", CONTENT.family_options())
        self.raw = self.backend.table("BENCH_RAW")
        for w in range(writers):
            self.store.create_user(f"w{w}", "pw", default_folders=False)
        self.raw_time: dict[int, float] = {}
        self.append_time: dict[int, float] = {}

    def close(self) -> None:
        self.store.close()
        if self.gateway:
            self.gateway.stop()


def round_trip_table(setup: WireSetup, k: int = 20) -> list[tuple[str, ...]]:
    """Round trips per operation (one message each; IMAP passes the selected Mailbox)."""
    store, raw, backend = setup.store, setup.raw, setup.backend
    body = msg(0)
    trips = []
    store.create_user("rt", "pw", default_folders=False)
    store.create_mailbox("rt", "Other")
    inbox = store.mailbox("rt", "INBOX")
    other = store.mailbox("rt", "Other")
    store.append("rt", inbox, msg(0))     # warm the caches (families, mailbox ids)
    ops = [
        ("raw put, 10 KiB", lambda i: raw.put(b"rt%04d" % i, {b"c:1": body})),
        ("APPEND 10 KiB (IMAP: mailbox known)", lambda i: store.append("rt", inbox, msg(i))),
        ("APPEND 10 KiB by name", lambda i: store.append("rt", "INBOX", msg(i))),
        ("deliver to 1 recipient", lambda i: store.deliver([("rt", "INBOX")], msg(i))),
        ("deliver to 3 recipients", lambda i: store.deliver(
            [("rt", "INBOX"), ("rt", "Other"), ("w0", "INBOX")], msg(i))),
    ]
    for name, op in ops:
        n, took, split = per_op(backend, op, k)
        trips.append((setup.label, name, f"{n:g}", f"{took * 1000:.1f} ms", split))
    inbox = store.mailbox("rt", "INBOX")
    uids = store.uids(inbox)
    for name, op in [
            ("STORE +FLAGS (\\Seen), one message",
             lambda i: store.store_flags(inbox, [uids[i]], ["\\Seen"])),
            ("COPY one message", lambda i: store.copy(inbox, [uids[i]], other)),
            ("MOVE one message", lambda i: store.move(inbox, [uids[k + i]], other)),
            ("EXPUNGE one message", lambda i: store.expunge(inbox, [uids[2 * k + i]]))]:
        n, took, split = per_op(backend, op, k)
        trips.append((setup.label, name, f"{n:g}", f"{took * 1000:.1f} ms", split))
    return trips


def wire(args) -> None:
    """Round trips per operation, and appends against raw puts with concurrent writers, for
    each API of ``--api`` (HBase) in one run: the rounds of every API alternate, so the load of
    the moment weighs on all of them alike."""
    writers = [int(w) for w in args.writers.split(",")]
    apis = args.api.split(",") if args.backend == "hbase" else ["-"]
    rows: list[tuple[str, ...]] = []
    trips: list[tuple[str, ...]] = []
    with tempfile.TemporaryDirectory() as tmp:
        setups = [WireSetup(args, tmp, api, max(writers)) for api in apis]
        try:
            for setup in setups:
                trips += round_trip_table(setup)
            body = msg(0)
            n = args.appends
            seq = [0]
            rounds = max(1, args.rounds)
            for count in writers:
                per = max(1, n // (rounds * count))
                for _r in range(rounds):
                    for setup in setups:
                        base = seq[0]
                        seq[0] += per * count
                        boxes = [setup.store.mailbox(f"w{w}", "INBOX") for w in range(count)]

                        def put(w: int, base=base, per=per, setup=setup) -> None:
                            for i in range(per):
                                setup.raw.put(b"raw%02d%08d" % (w, base + i), {b"c:1": body})
                                setup.backend.sync()

                        def append(w: int, per=per, boxes=boxes, setup=setup) -> None:
                            for i in range(per):
                                setup.store.append(f"w{w}", boxes[w], msg(i))
                        setup.raw_time[count] = (setup.raw_time.get(count, 0.0)
                                                 + run_threads(count, put))
                        setup.append_time[count] = (setup.append_time.get(count, 0.0)
                                                    + run_threads(count, append))
                done = per * count * rounds
                for setup in setups:
                    raw_rate = rate(done, setup.raw_time[count])
                    app_rate = rate(done, setup.append_time[count])
                    rows.append((setup.label, f"{count} writer{'s' if count > 1 else ''}",
                                 f"{raw_rate:,.0f}/s", f"{app_rate:,.0f}/s",
                                 f"{1000 * count / app_rate:.2f} ms",
                                 f"{app_rate / raw_rate:.2f} x",
                                 ">= 0.5 x" if count >= 16 else
                                 ">= 0.25 x" if count == 1 else ""))
        finally:
            for setup in setups:
                setup.close()
    print(f"\nbackend={args.backend} api={args.api} text_index={args.text_index} "
          f"wire latency={args.latency_ms} ms "
          f"synchronous={args.synchronous} appends={args.appends} rounds={args.rounds} "
          f"load average={os.getloadavg()[0]:.1f}\n")
    if trips:
        print("| backend | operation | Thrift round trips | time (1 writer) | by method |")
        print("|---|---|---|---|---|")
        for row in trips:
            print("| " + " | ".join(row) + " |")
        print()
    print("| backend | writers | raw put 10 KiB | store append 10 KiB | time per append | ratio "
          "| target |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--appends", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5,
                    help="alternating rounds of raw puts and appends")
    ap.add_argument("--synchronous", default="FULL")
    ap.add_argument("--backend", default="embedded", choices=["embedded", "hbase", "thrift"])
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--wire", action="store_true",
                    help="only round trips per operation and concurrent appends vs raw puts")
    ap.add_argument("--writers", default="1,16", help="concurrent writer counts for --wire")
    ap.add_argument("--latency-ms", type=float, default=0.0,
                    help="the test gateway answers each call this late (hbase only)")
    ap.add_argument("--api", default="thrift1",
                    help="HBase Thrift API(s) for --wire, comma-separated: thrift1,thrift2")
    ap.add_argument("--text-index", default="yes", choices=["yes", "lazy", "no"],
                    help="[store] text_index of the stores --wire appends to")
    args = ap.parse_args()
    if args.backend == "thrift":
        args.backend = "hbase"
    if args.wire:
        wire(args)
        return
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
