"""The random-fault loop of issue 16: the Thrift gateway SIGKILLed and restarted at random
moments (default 200 times) while IMAP clients APPEND, STORE, MOVE and EXPUNGE and LMTP
delivers to three users (tests/faultloop.py).  Afterwards every acknowledged operation is
checked (0 lost, 0 duplicated, every acknowledged move exactly once in its target, no UID
handed out twice), STATUS and the size counters against the rows, and ``mailadmin fsck``: only
the safe leftovers of a call cut off after it was applied, and nothing after ``--repair``.

    PYTHONPATH=. .venv/bin/python bench/gateway_fault_loop.py --faults 200 [--seed N]

Prints a progress line every ten faults and the figures as JSON; exits 1 if anything was off.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.faultloop import run_loop  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=4 * 3600, help="stop after this long")
    parser.add_argument("--clients", type=int, default=4, help="IMAP sessions (plus one LMTP)")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--trace", metavar="FILE",
                        help="have the gateway log every incrementRows cell to FILE, to tell "
                             "which calls its deaths cut half-way (then summarised)")
    args = parser.parse_args()
    if args.trace:
        os.environ["THRIFT_GATEWAY_TRACE_INCREMENTS"] = os.path.abspath(args.trace)
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        figures = run_loop(tmp, args.faults, args.seconds, args.seed, clients=args.clients,
                           log=lambda line: print(line, flush=True))
    result = figures.as_dict()
    result["seed"] = args.seed
    result["fsck_problems_by_kind"] = {}
    for problem in figures.fsck_problems:
        kind = problem["kind"]
        result["fsck_problems_by_kind"][kind] = result["fsck_problems_by_kind"].get(kind, 0) + 1
    if args.trace:
        result["increments_cut"] = cut_increments(args.trace)
    print(json.dumps(result, indent=1))
    return 1 if figures.failures() else 0


def cut_increments(path: str) -> list[str]:
    """The ``incrementRows`` calls the gateway began and never ended (it was killed), each
    as the cells it applied and the one it was applying when it died (``cut in``: its
    SQLite commit may or may not have been made): ``table row column delta``.  The cells the
    call held after that one were never begun."""
    calls: dict[str, list[list]] = {}
    ended = set()
    with open(path) as trace:
        for line in trace:
            kind, call, *rest = line.split()
            if kind == "cell":
                calls.setdefault(call, []).append([*rest, False])
            elif kind == "done":
                calls[call][-1][-1] = True
            else:
                ended.add(call)
    return [" | ".join(("applied " if done else "cut in ") + " ".join(cell)
                       for *cell, done in cells)
            for call, cells in calls.items() if call not in ended]


if __name__ == "__main__":
    sys.exit(main())
