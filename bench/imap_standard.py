"""The standard IMAP mix of issue 14 against Dovecot stock and Dovecot tuned, at 1, 20, 50 clients.

    PYTHONPATH=. .venv/bin/python bench/imap_standard.py [--clients 1,20,50] [--duration 30]
        [--warmup 3] [--rounds 1] [--users 20] [--servers ours,dovecot,tuned] [--workers 1]
        [--base DIR]

Three servers over the same mail (``--users`` users, each INBOX 100 messages of 4 KB, 10%
unseen): ours (``imapserver``, embedded store, ``--workers``), Dovecot in its stock
configuration and Dovecot in its high-performance mode (bench/imap_servers.py: long-lived
``imap-login`` and ``imap`` processes, an auth cache, a fast password scheme).  For each
client count, each server in turn (interleaved, ``--rounds`` times) gets the standard mix
(bench/imap_load.py ``standard_job``: imaptest's default states -- LOGIN, LIST, STATUS,
SELECT, FETCH, FETCH of 30, STORE, STORE \\Deleted, EXPUNGE, APPEND/MULTIAPPEND, LOGOUT --
pipelined, every response checked against the session's model by bench/imap_stateload.py's
checker) from a separate process.  Reported: commands/s in the window after a warm-up, the
server's CPU (its whole process tree, from /proc) in cores and per command, protocol errors,
legal NOs, and p50/p99 latency per command.  Figures, never assertions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from imap_load import STANDARD_KINDS, run_child  # noqa: E402
from imap_servers import (  # noqa: E402
    Dovecot,
    Mail,
    Mailbox,
    OurServer,
    fill_maildir,
    fill_ours,
    message,
)

SIZE = 100


def run(server, users: list[str], clients: int, args) -> dict:
    marks: dict[str, tuple[float, float]] = {}

    def on_message(kind, name):
        if kind == "mark":
            marks[name] = (time.monotonic(), server.cpu())
    result = run_child("standard", on_message, port=server.port, users=users, clients=clients,
                       warmup=args.warmup, duration=args.duration, size=SIZE)
    cpu = marks["end"][1] - marks["start"][1]
    result["server_cores"] = cpu / args.duration
    result["cpu_ms_per_command"] = cpu * 1000 / max(1, result["commands"])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="1,20,50")
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--servers", default="ours,dovecot,tuned")
    ap.add_argument("--workers", default="1", help="our server's --workers")
    ap.add_argument("--base", help="also run this checkout's server (the code before a "
                    "change, e.g. from `git archive`) as \"base\", interleaved")
    args = ap.parse_args()
    users = [f"std{i:02d}" for i in range(args.users)]
    mail = Mail({u: Mailbox(SIZE, [message(i, 4096) for i in range(SIZE)], unseen_every=10)
                 for u in users})
    work = tempfile.mkdtemp(prefix="imap-standard-")
    servers = []
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    try:
        for kind in args.servers.split(",") + (["base"] if args.base else []):
            if kind in ("ours", "base"):
                server = OurServer(os.path.join(work, kind), os.path.join(work, kind + ".log"),
                                   workers=args.workers,
                                   root=args.base if kind == "base" else None)
                server.name = kind
                fill_ours(server.data_dir, mail)
            else:
                server = Dovecot(users, tuned=kind == "tuned")
                fill_maildir(server.mail, mail, server.uid, server.gid)
            servers.append(server.start())
        results: dict[tuple[int, str], list[dict]] = {}
        for clients in (int(c) for c in args.clients.split(",")):
            for _ in range(args.rounds):
                for server in servers:
                    r = run(server, users, clients, args)
                    results.setdefault((clients, server.name), []).append(r)
                    print(f"{clients} clients, {server.name}: {r['commands_per_s']:.0f}/s, "
                          f"{r['server_cores']:.2f} cores, errors {r['protocol_errors']}, "
                          f"connection errors {r['connection_errors']}", file=sys.stderr,
                          flush=True)
    finally:
        logs = {s.name: s.log() for s in servers}
        for server in servers:
            server.stop()
            if isinstance(server, Dovecot):
                shutil.rmtree(server.dir, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    names = [s.name for s in servers]
    print(f"\n{(time.monotonic() - started) / 60:.1f} minutes; load average {load_before:.1f} "
          f"before, {os.getloadavg()[0]:.1f} after; {args.users} users, {SIZE}-message INBOXes, "
          f"{args.duration:g} s windows after {args.warmup:g} s, {args.rounds} round(s) "
          f"(medians), ours --workers {args.workers}\n")
    print("| clients | server | commands/s | vs stock Dovecot | vs tuned Dovecot | server CPU "
          "(cores) | CPU per command | protocol errors | connection errors | legal NOs |")
    print("|---|---|---|---|---|---|---|---|---|---|")

    def med(clients, name, key):
        return statistics.median(r[key] for r in results[(clients, name)])
    for clients in sorted({c for c, _ in results}):
        for name in names:
            rate = med(clients, name, "commands_per_s")
            ratios = []
            for base in ("dovecot", "tuned"):
                ratios.append(f"{rate / med(clients, base, 'commands_per_s'):.2f} x"
                              if (clients, base) in results else "-")
            runs = results[(clients, name)]
            nos = {}
            for r in runs:
                for k, v in r["nos"].items():
                    nos[k] = nos.get(k, 0) + v
            print(f"| {clients} | {name} | {rate:,.0f} | {ratios[0]} | {ratios[1]} | "
                  f"{med(clients, name, 'server_cores'):.2f} | "
                  f"{med(clients, name, 'cpu_ms_per_command'):.2f} ms | "
                  f"{sum(r['protocol_errors'] for r in runs)} | "
                  f"{sum(r['connection_errors'] for r in runs)} | {nos or 0} |")
    for clients in sorted({c for c, _ in results}):
        print(f"\n{clients} clients, p50 / p99 per command (ms)\n")
        print("| command | " + " | ".join(names) + " |")
        print("|---" * (len(names) + 1) + "|")
        for kind in STANDARD_KINDS:
            cells = []
            for name in names:
                k = results[(clients, name)][0]["kinds"].get(kind)
                cells.append(f"{k['median_ms']:.1f} / {k['p99_ms']:.1f}" if k else "-")
            print(f"| {kind} | " + " | ".join(cells) + " |")
    for (clients, name), runs in results.items():
        for r in runs:
            for t in r["transcripts"]:
                print(f"{name} at {clients}: {t}")
    for name, text in logs.items():
        print(f"{name} log: {text.count('Traceback')} tracebacks, "
              f"{text.count('Error') + text.count('Fatal')} Error/Fatal lines")


if __name__ == "__main__":
    main()
