"""The fuzz test of tests/test_fuzz.py, run for minutes: IMAP, SMTP and LMTP against one server.

    .venv/bin/python bench/fuzz_imap.py --minutes 10            # fresh randomness each run
    .venv/bin/python bench/fuzz_imap.py --examples 5000 --seed 7

Same strategies (tests/fuzzgen.py) and the same judge (tests/fuzzrun.py) as ``make test``, in
batches of fresh seeds, mostly IMAP (a batch of SMTP and one of LMTP after every
``--imap-batches`` IMAP batches).  A finding does not stop the run: it is recorded (its first
example kept, later ones counted by signature) and printed at the end with examples/s per
protocol and what the input was answered.  A server that died is restarted.  Exit status 1
when anything was found.
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from tests.fuzzgen import imap_example, smtp_example  # noqa: E402
from tests.fuzzrun import FuzzServer  # noqa: E402

BATCH = settings(deadline=None, database=None, phases=[Phase.generate],
                 suppress_health_check=list(HealthCheck))


def signature(findings: list[str]) -> str:
    """What makes two findings the same defect: the first finding's text without numbers,
    and the last line of a traceback when there is one."""
    first = re.sub(r"\d+", "N", findings[0].splitlines()[0])[:120]
    exc = [line.strip() for f in findings for line in f.splitlines()
           if re.match(r"\s*[\w.]+(Error|Exception)\b", line)]
    return first + (" / " + exc[-1][:160] if exc else "")


class Run:
    def __init__(self, server: FuzzServer):
        self.server = server
        self.examples: Counter = Counter()
        self.seconds: Counter = Counter()
        self.found: dict[str, list] = {}  # signature -> [count, first findings]

    def batch(self, protocol: str, count: int, batch_seed: int) -> None:
        strategy = imap_example() if protocol == "imap" else smtp_example(protocol == "lmtp")

        @seed(batch_seed)
        @settings(BATCH, max_examples=count)
        @given(strategy)
        def run(example):
            self.server.restart_if_dead()
            if protocol == "imap":
                findings = self.server.imap(*example)
            else:
                findings = self.server.delivery(protocol, example)
            self.examples[protocol] += 1
            if findings:
                entry = self.found.setdefault(signature(findings), [0, findings])
                entry[0] += 1
                if entry[0] == 1:
                    print(f"finding ({protocol}): {signature(findings)}", flush=True)

        started = time.monotonic()
        run()
        self.seconds[protocol] += time.monotonic() - started

    def report(self, elapsed: float) -> None:
        total = sum(self.examples.values())
        print(f"\n{total} examples in {elapsed:.0f} s ({total / elapsed:.1f}/s)")
        for protocol in ("imap", "smtp", "lmtp"):
            n, s = self.examples[protocol], self.seconds[protocol] or 1
            print(f"  {protocol}: {n} examples, {n / s:.1f}/s")
        answers = Counter()
        for (protocol, answer), n in self.server.tally.items():
            answers[f"{protocol} {answer}"] += n
        print("answers: " + ", ".join(f"{k} {v}" for k, v in sorted(answers.items())))
        print(f"findings: {len(self.found)} distinct, {sum(c for c, _ in self.found.values())}"
              " examples")
        for sig, (count, findings) in self.found.items():
            print(f"\n== {count} x {sig}")
            print("\n".join(findings)[:4000])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--examples", type=int, default=0, help="stop after this many")
    parser.add_argument("--seed", type=int, default=None, help="first batch seed")
    parser.add_argument("--batch", type=int, default=200, help="examples per batch")
    parser.add_argument("--imap-batches", type=int, default=3,
                        help="IMAP batches per SMTP and LMTP batch")
    args = parser.parse_args()
    # SIGTERM ends the run like ^C: the report is printed and the server stopped.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    first = args.seed if args.seed is not None else random.randrange(2**32)
    print(f"seed {first}", flush=True)
    with tempfile.TemporaryDirectory(prefix="fuzz-") as base:
        server = FuzzServer(Path(base)).start()
        run = Run(server)
        started = time.monotonic()
        deadline = started + args.minutes * 60
        plan = ["imap"] * args.imap_batches + ["smtp", "lmtp"]
        i = 0
        try:
            while time.monotonic() < deadline:
                if args.examples and sum(run.examples.values()) >= args.examples:
                    break
                protocol = plan[i % len(plan)]
                run.batch(protocol, args.batch, first + i)
                i += 1
                print(f"{time.monotonic() - started:6.0f} s: {dict(run.examples)}, "
                      f"{len(run.found)} findings", flush=True)
        except KeyboardInterrupt:
            pass
        finally:
            run.report(time.monotonic() - started)
            server.stop()
    return 1 if run.found else 0


if __name__ == "__main__":
    sys.exit(main())
