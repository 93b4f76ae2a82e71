"""Throughput with one versus two imapserver frontends on one embedded store (issue 6).

    .venv/bin/python bench/frontends_bench.py [--clients 40] [--seconds 20]

The same mixed load (SELECT, FETCH envelopes and a body, STORE, APPEND, NOOP) is run for a
fixed time by client processes, first against one frontend, then spread over two frontends on
the same data directory.  Prints commands/s for each and the ratio.  Loopback only; bounded by
time and count.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from mailstore.backends.embedded import EmbeddedBackend  # noqa: E402
from mailstore.store import MailStore  # noqa: E402
from tests.imapproc import Client, ServerProcess  # noqa: E402
from tests.mailgen import message  # noqa: E402

USERS = 20


def prepare(data_dir: str) -> None:
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"))
    for u in range(USERS):
        user = store.create_user(f"user{u}", "pw")
        stored = store.ingest(message(u, size=8000), refs=200)
        inbox = store.mailbox(user, "INBOX")
        for _ in range(200):
            store.add_stored(inbox, stored)
    store.close()


def session(port: int, user: int, deadline: float, counts) -> None:
    client = Client(port, timeout=60)
    n = 0
    data = message(99, size=4000)
    try:
        client.cmd("l", f"LOGIN user{user} pw")
        client.cmd("s", "SELECT INBOX")
        n += 2
        i = 0
        while time.monotonic() < deadline:
            i += 1
            client.cmd("f", "FETCH 1:25 (UID FLAGS ENVELOPE)")
            client.cmd("b", f"FETCH {1 + i % 150} BODY.PEEK[]")
            client.cmd("t", f"STORE {1 + i % 150} +FLAGS (\\Seen)")
            client.send(b"a APPEND INBOX {%d+}\r\n" % len(data) + data + b"\r\n")
            client.until_tagged("a")
            client.cmd("n", "NOOP")
            n += 5
        client.cmd("o", "LOGOUT")
        n += 1
    finally:
        client.close()
        counts.put(n)


def worker(ports: list[int], users: list[int], deadline: float, counts) -> None:
    import threading
    threads = [threading.Thread(target=session, args=(ports[i % len(ports)], u, deadline,
                                                       counts))
               for i, u in enumerate(users)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def run(ports: list[int], clients: int, seconds: float) -> float:
    counts = multiprocessing.Queue()
    deadline = time.monotonic() + seconds
    procs = []
    for p in range(2):
        users = [u % USERS for u in range(p, clients, 2)]
        proc = multiprocessing.Process(target=worker, args=(ports, users, deadline, counts))
        proc.start()
        procs.append(proc)
    for proc in procs:
        proc.join(seconds + 120)
    total = sum(counts.get() for _ in range(clients))
    return total / seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = os.path.join(tmp, "store")
        prepare(data_dir)
        with ServerProcess(data_dir) as one:
            single = run([one.port], args.clients, args.seconds)
        with ServerProcess(data_dir) as a, ServerProcess(data_dir) as b:
            double = run([a.port, b.port], args.clients, args.seconds)
    print(f"\nclients={args.clients} seconds={args.seconds} (2 cores; clients share them)\n")
    print("| frontends | commands/s | ratio |")
    print("|---|---|---|")
    print(f"| 1 | {single:,.0f} | baseline |")
    print(f"| 2 | {double:,.0f} | {double / single:.2f} x |")


if __name__ == "__main__":
    main()
