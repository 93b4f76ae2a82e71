"""Delivery rate over LMTP with an active 20-rule Sieve script against none, same server.

    .venv/bin/python bench/sieve_bench.py [--messages N] [--connections C ...] [--rounds R]

One ``imapserver`` (embedded store, ``synchronous = FULL``) with two sets of ten users: the
``plain`` ones have no script, the ``sieve`` ones have tests/sieve_corpus/scripts/
complex_20_rules.sieve active (20 rules: header, address, envelope, body, relational and
size tests, flags; none files the bench message away, so every message also pays the implicit
keep).  The same client as bench/delivery_bench.py delivers N messages of 10 KiB to 1 and to
10 recipients of each set, alternating the sets, and prints the rate of each and their ratio
(target: sieve / plain >= 0.8, issue 15).  The best of ``--rounds`` counts.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import delivery_bench  # noqa: E402
from delivery_bench import deliver, wait_banner  # noqa: E402

from mailstore.backends.embedded import EmbeddedBackend  # noqa: E402
from mailstore.store import MailStore  # noqa: E402

SCRIPT = ROOT / "tests" / "sieve_corpus" / "scripts" / "complex_20_rules.sieve"
PLAIN = [f"plain{i}" for i in range(10)]
SIEVED = [f"sieve{i}" for i in range(10)]


def start(workdir: Path) -> tuple[subprocess.Popen, int]:
    data = workdir / "store"
    store = MailStore(EmbeddedBackend(str(data)))
    text = SCRIPT.read_text()
    for user in PLAIN + SIEVED:
        store.create_user(user, None, default_folders=False)
    for user in SIEVED:
        store.sieve_scripts.put(user, "rules", text)
        store.sieve_scripts.activate(user, "rules")
    store.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "imapserver.main", "--data-dir", str(data), "--imap-port", "0",
         "--imaps-port", "0", "--smtp-port", "0", "--lmtp-port", "auto", "--sieve-port", "0",
         "--workers", "1"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = proc.stdout.readline().decode()
    if not line.startswith("lmtp listening on "):
        raise RuntimeError(f"imapserver did not start: {line!r}")
    port = int(line.rsplit(":", 1)[1])
    wait_banner(port, proc)
    return proc, port


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=300, help="messages per measurement")
    p.add_argument("--connections", type=int, nargs="+", default=[1, 4],
                   help="concurrent LMTP sessions (each value is measured)")
    p.add_argument("--rounds", type=int, default=2, help="measurements per configuration")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="sieve-bench-") as work:
        proc, port = start(Path(work))
        try:
            for users in (PLAIN, SIEVED):  # warm up: imports, the parse cache
                delivery_bench.USERS = users
                deliver(port, 20, 1, 1)
            print(f"{'recipients':>10} {'conns':>5} {'plain msg/s':>12} {'sieve msg/s':>12} "
                  f"{'ratio':>6}")
            for recipients in (1, 10):
                for connections in args.connections:
                    best = {"plain": 0.0, "sieve": 0.0}
                    for _ in range(args.rounds):
                        for name, users in (("plain", PLAIN), ("sieve", SIEVED)):
                            delivery_bench.USERS = users
                            rate = deliver(port, args.messages, recipients, connections)
                            best[name] = max(best[name], rate)
                    print(f"{recipients:>10} {connections:>5} {best['plain']:>12.1f} "
                          f"{best['sieve']:>12.1f} {best['sieve'] / best['plain']:>6.2f}",
                          flush=True)
        finally:
            proc.terminate()
            proc.wait(30)
            proc.stdout.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
