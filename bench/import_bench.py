"""mailadmin import benchmark: rate and peak memory of importing a large mbox file.

    .venv/bin/python bench/import_bench.py [--messages 100000] [--small 10000] [--size 10240]
                                           [--dir DIR] [--keep]

Generates two mbox files of ``--size``-byte messages on disk (streamed: the generator holds
one message at a time), then for each one: a fresh embedded store, ``mailadmin user add``, and
``mailadmin import`` run as the real console script in a subprocess.  The peak resident memory
is the child's own ``ru_maxrss`` (from ``os.wait4``), so the two files' peaks show whether memory
stays flat as the file grows.  A re-run of the small import measures the idempotent skip path.
Beside them, the store's own bulk ceiling measured in the same run: ``ingest`` + ``add_stored``
of in-memory messages, one unit of work each, synced every 1,000, in-process (what import
does minus reading and parsing the file).  Prints a Markdown table for bench/RESULTS.md.
Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from mailstore.backends.embedded import EmbeddedBackend  # noqa: E402
from mailstore.store import MailStore  # noqa: E402

TARGET_RATE = 1000


def mailadmin() -> list[str]:
    script = shutil.which("mailadmin", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", "mailstore.admin.cli"]


def message(n: int, size: int) -> bytes:
    head = (f"Return-Path: <sender{n % 97}@example.org>\nFrom: Sender <sender{n % 97}@example.org>"
            f"\nTo: bench@example.com\nSubject: bench message {n}\nMessage-ID: <b{n}@bench>\n"
            f"Date: Sat, 21 Nov 2026 12:00:00 +0000\nMIME-Version: 1.0\n"
            f"Content-Type: text/plain; charset=us-ascii\n").encode()
    meta = b"Status: RO\n" if n % 3 else b""
    line = (f"line of message {n:08d} ".encode() + b"z" * 60)[:78] + b"\n"
    body_len = max(0, size - len(head) - len(meta) - 1)
    body = line * (body_len // len(line)) + b"y" * (body_len % len(line) - 1 if
                                                     body_len % len(line) else 0)
    return head + meta + b"\n" + body + (b"\n" if body_len % len(line) else b"")


def write_mbox(path: str, count: int, size: int) -> int:
    """Write ``count`` messages, one at a time; return the file's size."""
    start = 1_600_000_000
    with open(path, "wb", buffering=1 << 20) as f:
        for n in range(count):
            stamp = time.asctime(time.gmtime(start + n * 37)).encode()
            f.write(b"From sender@example.org " + stamp + b"\n")
            f.write(message(n, size))
            f.write(b"\n")
    return os.path.getsize(path)


def run_import(data_dir: str, path: str, user: str = "bench") -> dict:
    """Run ``mailadmin import`` in a child; its report, wall time, CPU time, peak RSS (KiB) and
    the rate over time, from its plain progress lines (one every 10 s)."""
    cmd = [*mailadmin(), "import", user, path, "--data-dir", data_dir, "--json"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.stdout.read(), proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"import failed ({proc.returncode}): {err.decode()}")
    report = json.loads(out)
    return {"report": report, "seconds": seconds, "peak_kib": usage.ru_maxrss,
            "cpu": usage.ru_utime + usage.ru_stime, "rates": interval_rates(err.decode())}


def interval_rates(progress: str) -> list[tuple[int, float]]:
    """(messages done, rate since the previous line) from ``importing ... N msgs  R msgs/s``
    lines, whose rate is the average since the start: elapsed = N / R."""
    out, last_n, last_t = [], 0, 0.0
    for line in progress.splitlines():
        words = line.split()
        if "msgs/s" not in words or "in" in words:
            continue
        n = int(words[words.index("msgs") - 1].replace(",", ""))
        rate = float(words[words.index("msgs/s") - 1].replace(",", ""))
        t = n / rate if rate else 0.0
        if t > last_t:
            out.append((n, (n - last_n) / (t - last_t)))
        last_n, last_t = n, t
    return out


def store_ceiling(size: int, count: int, workdir: str) -> float:
    """ingest + add_stored in-process, one unit of work each, sync every 1,000: messages per
    second."""
    data_dir = os.path.join(workdir, "ceiling")
    store = MailStore(EmbeddedBackend(data_dir))
    store.create_user("ceiling", None)
    box = store.mailbox("ceiling", "INBOX")
    messages = [message(n, size) for n in range(count)]
    start = time.perf_counter()
    for i, m in enumerate(messages):
        with store.unit_of_work(len(m)):  # as import does: one unit of work per message
            store.add_stored(box, store.ingest(m), (), None)
        if i % 1000 == 999:
            store.backend.sync()
    store.backend.sync()
    seconds = time.perf_counter() - start
    store.close()
    shutil.rmtree(data_dir)
    return count / seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--small", type=int, default=10_000)
    p.add_argument("--size", type=int, default=10 * 1024)
    p.add_argument("--ceiling", type=int, default=5_000,
                   help="messages for the in-process store ceiling")
    p.add_argument("--dir", help="work directory (default: a temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the files and stores")
    args = p.parse_args()
    workdir = args.dir or tempfile.mkdtemp(prefix="import-bench-")
    os.makedirs(workdir, exist_ok=True)
    rows = []
    load_start = os.getloadavg()[0]
    try:
        ceiling = store_ceiling(args.size, args.ceiling, workdir)
        rows.append(("store ceiling: ingest + add_stored, in-process",
                     f"{ceiling:,.0f} msg/s", "baseline", ""))
        results = {}
        for count in (args.small, args.messages):
            path = os.path.join(workdir, f"bench-{count}.mbox")
            gen_start = time.perf_counter()
            file_size = write_mbox(path, count, args.size)
            gen = time.perf_counter() - gen_start
            data_dir = os.path.join(workdir, f"store-{count}")
            subprocess.run([*mailadmin(), "user", "add", "bench", "--data-dir", data_dir],
                           check=True, capture_output=True)
            result = run_import(data_dir, path)
            assert result["report"]["imported"] == count, result["report"]
            rate = count / result["seconds"]
            results[count] = (result, file_size, path, data_dir)
            print(f"# {count:,} messages ({file_size / 2**20:,.0f} MiB, generated in "
                  f"{gen:.1f} s): {rate:,.0f} msg/s, {file_size / 2**20 / result['seconds']:.1f}"
                  f" MiB/s, peak RSS {result['peak_kib'] / 1024:.1f} MiB", file=sys.stderr)
            rows.append((f"import {count:,} x {args.size // 1024} KiB "
                         f"({file_size / 2**20:,.0f} MiB mbox)",
                         f"{rate:,.0f} msg/s ({file_size / 2**20 / result['seconds']:.1f} MiB/s,"
                         f" {result['seconds']:.1f} s)", f"{rate / ceiling:.2f} x ceiling",
                         f">= {TARGET_RATE:,} msg/s"))
            rows.append((f"CPU time, import of {count:,}",
                         f"{result['cpu']:.1f} s ({count / result['cpu']:,.0f} msg per CPU s)",
                         f"{result['cpu'] / result['seconds']:.2f} x wall", ""))
            if len(result["rates"]) >= 4:
                first, last = result["rates"][0], result["rates"][-1]
                rows.append((f"rate over time, import of {count:,}",
                             f"{first[1]:,.0f} msg/s at {first[0]:,}, {last[1]:,.0f} msg/s at "
                             f"{last[0]:,}", f"{last[1] / first[1]:.2f} x", ""))
            rows.append((f"peak RSS, import of {count:,}",
                         f"{result['peak_kib'] / 1024:.1f} MiB", "", "flat"))
        small_result, _, small_path, small_dir = results[args.small]
        again = run_import(small_dir, small_path)
        assert again["report"]["skipped"] == args.small, again["report"]
        rows.append((f"re-import of {args.small:,} (all skipped)",
                     f"{args.small / again['seconds']:,.0f} msg/s", "", ""))
        big_peak = results[args.messages][0]["peak_kib"]
        rows.append(("peak RSS growth, 10 x the messages",
                     f"{(big_peak - small_result['peak_kib']) / 1024:+.1f} MiB",
                     f"{big_peak / small_result['peak_kib']:.2f} x", "flat"))
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"Load average (1 min) at the start {load_start:.1f}, at the end "
          f"{os.getloadavg()[0]:.1f}, on {os.cpu_count()} cores.\n")
    print("| measure | figure | ratio | target |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
