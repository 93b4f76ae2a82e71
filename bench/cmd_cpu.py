"""Server CPU per IMAP command, one client, a 100-message INBOX (issue 14).

    PYTHONPATH=. .venv/bin/python bench/cmd_cpu.py [--reps 1000] [--only NOOP,LIST]
        [--servers ours,tuned] [--profile DIR] [--rounds 3]

One blocking client sends each command ``--reps`` times, one at a time (no pipelining), on an
INBOX of 100 messages (4 KB each, as bench/imap_bench.py's mixed load), after a warm-up; the
figure is the server's CPU (user + system, from /proc, the whole process tree) over those
commands divided by their number.  ``--rounds`` repeats every command that many times,
interleaved, and keeps the median, so a burst of other work on the machine moves one round,
not the figure.  ``tuned`` is Dovecot in its high-performance mode (bench/imap_servers.py),
``dovecot`` its stock configuration.

``--profile DIR`` records our server with py-spy during each command's loop (a flame graph per
command in DIR, and a raw collapsed-stack file beside it); figures from such a run are
perturbed.  Figures, never assertions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from imap_load import Conn  # noqa: E402
from imap_servers import (  # noqa: E402
    PASSWORD,
    Dovecot,
    Mail,
    Mailbox,
    OurServer,
    fill_maildir,
    fill_ours,
    message,
)

COMMANDS = {
    # No store call at all: the floor (reading, parsing, dispatch, writing, metrics).
    "CAPABILITY": [b"CAPABILITY"],
    "NOOP": [b"NOOP"],
    "STATUS": [b"STATUS Work (MESSAGES UNSEEN UIDNEXT)"],
    "SELECT": [b"SELECT INBOX"],
    # Alternating, so that every STORE changes a flag (and writes), as in a real session.
    "STORE": [b"STORE 7 +FLAGS (\\Flagged)", b"STORE 7 -FLAGS (\\Flagged)"],
    "LIST": [b'LIST "" "*"'],
    "FETCH 1:25 envelopes": [b"FETCH 1:25 (UID FLAGS INTERNALDATE RFC822.SIZE ENVELOPE)"],
    "FETCH 1:* FLAGS": [b"FETCH 1:* (FLAGS)"],
}
SESSION = "connect+LOGIN+LOGOUT"
"""Not one command but a whole short session per repetition: connect, greeting, LOGIN (the
password right, so an auth cache answers after the first), LOGOUT, close."""
COMMANDS[SESSION] = []


def _sessions(server, user: str, count: int) -> None:
    for _ in range(count):
        c = Conn(server.port)
        c.login(user, PASSWORD)
        c.command(b"LOGOUT")
        c.close()


def measure(server, user: str, name: str, reps: int, profile: str | None) -> float:
    """ms of server CPU per command ``name`` over ``reps`` commands."""
    c = None
    if name == SESSION:
        _sessions(server, user, max(20, reps // 10))  # warm-up (and the auth cache)
    else:
        c = Conn(server.port)
        c.login(user, PASSWORD)
        c.command(b"SELECT INBOX")
        texts = COMMANDS[name]
        for i in range(max(20, reps // 10)):  # warm-up
            c.command(texts[i % len(texts)])
    spy = None
    if profile:
        out = os.path.join(profile, name.replace(" ", "_").replace(":", "").replace("*", "all"))
        exe = str(Path(sys.executable).parent / "py-spy")
        spy = subprocess.Popen([exe, "record", "--pid", str(server.pid), "--rate", "500",
                                "--format", "raw", "--output", out + ".txt", "--nonblocking"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    before = server.cpu()
    if c is None:
        _sessions(server, user, reps)
    else:
        for i in range(reps):
            c.command(texts[i % len(texts)])
    after = server.cpu()
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)
    if c is not None:
        c.command(b"LOGOUT")
        c.close()
    return (after - before) * 1000 / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", help="comma list of command names (default: all)")
    ap.add_argument("--servers", default="ours", help="comma list of: ours, dovecot, tuned")
    ap.add_argument("--profile", help="py-spy our server into this directory")
    ap.add_argument("--base", help="also run this checkout's server (e.g. `git archive` of the "
                    "code before a change) as server \"base\", interleaved with ours")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(COMMANDS)
    user = "cpu"
    mail = Mail({user: Mailbox(100, [message(i, 4096) for i in range(100)], unseen_every=10)})
    work = tempfile.mkdtemp(prefix="cmd-cpu-")
    servers = []
    try:
        kinds = args.servers.split(",") + (["base"] if args.base else [])
        for kind in kinds:
            if kind in ("ours", "base"):
                server = OurServer(os.path.join(work, kind), os.path.join(work, kind + ".log"),
                                   root=args.base if kind == "base" else None)
                server.name = kind
                fill_ours(server.data_dir, mail)
            else:
                server = Dovecot([user], tuned=kind == "tuned")
                server.name = kind
                fill_maildir(server.mail, mail, server.uid, server.gid)
            server.start()
            servers.append(server)
            c = Conn(server.port)
            c.login(user, PASSWORD)
            c.command(b"CREATE Work")
            c.command(b"LOGOUT")
            c.close()
        if args.profile:
            os.makedirs(args.profile, exist_ok=True)
        figures: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for name in names:
                for server in servers:
                    prof = args.profile if server.name == "ours" else None
                    figures.setdefault((server.name, name), []).append(
                        measure(server, user, name, args.reps, prof))
        load = os.getloadavg()[0]
        print(f"\n{args.reps} commands each, median of {args.rounds} rounds, load average "
              f"{load:.1f} after\n")
        heads = [s.name for s in servers]
        print("| command (server CPU per command) | " + " | ".join(heads) +
              (" | ours / " + " | ours / ".join(heads[1:]) if len(heads) > 1 else "") + " |")
        print("|---" * (2 * len(heads)) + "|")
        for name in names:
            cells = [statistics.median(figures[(h, name)]) for h in heads]
            ratios = [f"{cells[0] / x:.2f} x" if x else "n/a" for x in cells[1:]]
            print(f"| {name} | " + " | ".join(f"{x:.3f} ms" for x in cells) +
                  "".join(f" | {r}" for r in ratios) + " |")
        spread = {k: f"{min(v):.3f}-{max(v):.3f}" for k, v in figures.items()}
        print(f"\nspread of the rounds: {spread}")
    finally:
        for server in servers:
            server.stop()
            if isinstance(server, Dovecot):
                shutil.rmtree(server.dir, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
