"""Big bodies (issue 14): APPEND and FETCH of one 50 MB message, ours beside Dovecot.

    .venv/bin/python bench/bigbody_bench.py [--mb 50] [--reps 5] [--slow-rate 10e6]
        [--compress] [--json FILE]

The same measures as ``imap_bench.py``'s "50 MB message" rows, alone and repeated, so that a
change to the big-body path can be judged in a minute: both servers run at once over their own
temporary directories (bench/imap_servers.py), and every repetition runs on ours, then on
Dovecot, alternating.  Per repetition, on one logged-in connection:

* ``APPEND INBOX {n+}`` of the message (LITERAL+, sent with one ``sendall``);
* ``FETCH n BODY.PEEK[]`` by a fast reader (reads 256 KiB at a time);
* ``FETCH n BODY[]`` (the same octets; it also sets \\Seen);
* once, the first message fetched by a reader at ``--slow-rate`` octets/s (RSS only).

Each time is the client's wall time from sending the command to reading its tagged OK (the
server's CPU seconds meanwhile are shown too: they move less with the machine's load); each
growth is the serving process's RSS over its value just before the command (sampled every 5 ms
and checked against VmHWM, reset first).  Every FETCH's literal is hashed as it is read and
compared with the message APPENDed: a run that returns other octets fails.  Medians are
printed as a Markdown table for bench/RESULTS.md; ratio = ours / Dovecot.  ``--compress``
also times ours under COMPRESS=DEFLATE (RFC 4978; Dovecot's imap_zlib is not loaded).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from imap_bench import _growth, _serving_pid, big_message  # noqa: E402
from imap_load import Conn  # noqa: E402
from imap_servers import (  # noqa: E402
    PASSWORD,
    Dovecot,
    Mail,
    Mailbox,
    OurServer,
    cpu_seconds,
    fill_maildir,
    fill_ours,
)


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class DeflateConn(Conn):
    """A Conn after ``COMPRESS DEFLATE``: what it sends is deflated, what it reads inflated."""

    def start_deflate(self) -> None:
        self._out = zlib.compressobj(6, zlib.DEFLATED, -15)
        self._in = zlib.decompressobj(-15)
        self._raw_send = self.sock.sendall
        self._raw_recv = self.sock.recv

    def send(self, data: bytes) -> None:
        if getattr(self, "_out", None) is None:
            return super().send(data)
        self._raw_send(self._out.compress(data) + self._out.flush(zlib.Z_SYNC_FLUSH))

    def _fill(self, size: int = 262144) -> None:
        if getattr(self, "_in", None) is None:
            return super()._fill(size)
        while True:
            raw = self._raw_recv(size)
            if not raw:
                raise ConnectionError("server closed the connection")
            out = self._in.decompress(raw)
            if out:
                self.buf += out
                return


def one_round(server, user: str, msg: bytes, want: str, number: int, slow_rate: float | None,
              compress: bool = False) -> dict:
    c = DeflateConn(server.port)
    c.login(user, PASSWORD)
    if compress:
        c.command(b"COMPRESS DEFLATE")
        c.start_deflate()
    pid = _serving_pid(server, c)
    out: dict = {}

    def measure(name: str, run) -> None:
        cpu = cpu_seconds(pid)
        out[f"{name}_s"], out[f"{name}_kib"] = _growth(pid, run)
        out[f"{name}_cpu"] = cpu_seconds(pid) - cpu
    measure("append", lambda: c.command(b"APPEND INBOX", msg))
    c.command(b"SELECT INBOX")
    fetches = [("peek", b"FETCH %d BODY.PEEK[]" % number, None),
               ("body", b"FETCH %d BODY[]" % number, None)]
    if slow_rate:
        fetches.append(("slow", b"FETCH %d BODY.PEEK[]" % number, slow_rate))
    for name, command, rate in fetches:
        c.read_rate = rate
        c.skipped = hashlib.sha256()
        measure(name, lambda cmd=command: c.command(cmd, keep=False))
        if c.skipped.hexdigest() != want:
            raise RuntimeError(f"{server.name}: {command!r} did not return the octets APPENDed")
    c.read_rate = None
    c.skipped = None
    c.command(b"LOGOUT")
    c.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=50, help="size of the message, MB (10^6)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--slow-rate", type=float, default=10e6,
                    help="octets/s of the slow reader (first repetition only; 0: none)")
    ap.add_argument("--compress", action="store_true", help="also ours with COMPRESS=DEFLATE")
    ap.add_argument("--json", help="also write every figure to this file")
    args = ap.parse_args()
    size = args.mb * 1000 * 1000
    msg = big_message(size)
    want = hashlib.sha256(msg).hexdigest()
    work = tempfile.mkdtemp(prefix="bigbody-bench-")
    users = ["huge", "zhuge"]
    ours = OurServer(os.path.join(work, "store"), os.path.join(work, "imapserver.log"))
    dovecot = Dovecot(users)
    runs: dict[str, list[dict]] = {"ours": [], "dovecot": [], "ours_deflate": []}
    try:
        fill_ours(ours.data_dir, Mail({u: Mailbox() for u in users}))
        fill_maildir(dovecot.mail, Mail({u: Mailbox() for u in users}), dovecot.uid,
                     dovecot.gid)
        ours.start()
        dovecot.start()
        for rep in range(args.reps):
            for server in (ours, dovecot):
                r = one_round(server, "huge", msg, want, rep + 1,
                              args.slow_rate if rep == 0 else None)
                runs[server.name].append(r)
                log(f"{server.name} #{rep + 1}: " + json.dumps(
                    {k: round(v, 3) for k, v in r.items()}))
            if args.compress:
                r = one_round(ours, "zhuge", msg, want, rep + 1, None, compress=True)
                runs["ours_deflate"].append(r)
                log(f"ours (DEFLATE) #{rep + 1}: " + json.dumps(
                    {k: round(v, 3) for k, v in r.items()}))
    finally:
        ours.stop()
        dovecot.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(dovecot.dir, ignore_errors=True)

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name] if key in r)

    def worst(name: str, key: str) -> float:
        return max(r[key] for r in runs[name] if key in r)

    print(f"\n{args.mb} MB message, {args.reps} repetitions alternating; medians "
          f"(RSS growth: the largest); load average {os.getloadavg()[0]:.1f}\n")
    print("| measure | ours | Dovecot | ratio (ours / Dovecot) | target |\n|---|---|---|---|---|")
    for label, key in (("APPEND", "append"), ("FETCH BODY.PEEK[], fast reader", "peek"),
                       ("FETCH BODY[], fast reader", "body")):
        a, b = med("ours", key + "_s"), med("dovecot", key + "_s")
        print(f"| {label}: time | {a:.3f} s | {b:.3f} s | {a / b:.2f} x | <= 2 x "
              f"({'met' if a <= 2 * b else 'missed'}) |")
        a, b = med("ours", key + "_cpu"), med("dovecot", key + "_cpu")
        print(f"| ... server CPU | {a:.3f} s | {b:.3f} s | {a / max(b, 1e-3):.2f} x |  |")
        ga, gb = worst("ours", key + "_kib") / 1024, worst("dovecot", key + "_kib") / 1024
        print(f"| ... RSS growth | {ga:.1f} MiB | {gb:.1f} MiB | n/a | <= 32 MiB "
              f"({'met' if ga <= 32 else 'missed'}) |")
    if args.slow_rate:
        ga, gb = worst("ours", "slow_kib") / 1024, worst("dovecot", "slow_kib") / 1024
        print(f"| FETCH, reader at {args.slow_rate / 1e6:g} MB/s: RSS growth | {ga:.1f} MiB | "
              f"{gb:.1f} MiB | n/a | <= 32 MiB ({'met' if ga <= 32 else 'missed'}) |")
    if runs["ours_deflate"]:
        for label, key in (("APPEND", "append"), ("FETCH BODY.PEEK[]", "peek")):
            a = med("ours_deflate", key + "_s")
            ga = worst("ours_deflate", key + "_kib") / 1024
            print(f"| ours under COMPRESS=DEFLATE: {label} | {a:.3f} s, RSS +{ga:.1f} MiB | "
                  "n/a | n/a |  |")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
