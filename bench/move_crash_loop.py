"""The long SIGKILL loop with MOVE of issue 16 part 4: a real ``imapserver`` killed at random
moments (default 300 times) while a client APPENDs sets of 1-100 messages, ``UID MOVE``s each
set to Work, moves some back and marks some \\Seen (tests/moveloop.py).  After every restart
STATUS MESSAGES/UNSEEN and the size counter must equal the rows and every acknowledged message
be in one place; at the end ``mailadmin fsck`` must find 0 problems (no repair ever runs).

    PYTHONPATH=. .venv/bin/python bench/move_crash_loop.py --kills 300 [--seed N]

Prints one line per kill and the figures as JSON; exits 1 if anything was off.
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

from tests.moveloop import run_loop  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=4 * 3600, help="stop after this long")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        figures = run_loop(os.path.join(tmp, "store"), args.kills, args.seconds, args.seed,
                           log=lambda line: print(line, flush=True))
    result = figures.as_dict()
    result["seed"] = args.seed
    result["fsck_problems"] = len(figures.fsck.get("problems", []))
    print(json.dumps(result, indent=1))
    return 0 if figures.fsck.get("ok") and not figures.mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
