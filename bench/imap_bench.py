"""IMAP figures (issue 3), each beside Debian's Dovecot measured on this machine in the same run.

    .venv/bin/python bench/imap_bench.py [--quick] [--messages 100000] [--clients 200]
        [--idle 1000] [--duration 30] [--long-cycles 20] [--appends 200] [--profile]
        [--json FILE]

Both servers run at the same time, each over its own temporary directory (see
bench/imap_servers.py for how each is configured and filled); every measure runs on ours, then
on Dovecot.  The measures:

* APPEND of a 10 KiB message by one client: median and p95 latency over ``--appends``
  appends with a LITERAL+ literal, and over a quarter as many with a synchronizing literal (one
  more round trip: the server's ``+``); then the rate of 10 clients appending at once.
* A 100,000-message INBOX: SELECT, then ``FETCH n-24:* (UID FLAGS INTERNALDATE RFC822.SIZE
  ENVELOPE)``, each time on a fresh connection (LOGIN not timed).  Dovecot's first SELECT
  indexes the maildir it has never seen and is reported apart ("cold"); the comparison is with
  its later, indexed SELECTs ("warm"), which is what its users see.  Measured twice: with the
  mailbox unchanged since the previous SELECT, and with one new message APPENDed by another
  connection before each SELECT (what an INBOX usually looks like).  Then SEARCH for flags
  (UNSEEN, 10% match), a header (SUBJECT, 1%) and body text (BODY, 0.1%): first run, and the
  median of the next ones.
* QRESYNC (RFC 7162) on the big INBOX: a client that last saw it (ENABLE QRESYNC, SELECT:
  its UIDVALIDITY and HIGHESTMODSEQ) comes back after another connection made 100 flag changes
  and 10 expunges, with ``SELECT INBOX (QRESYNC (uidvalidity modseq 1:n))`` on a fresh
  connection (LOGIN and ENABLE not timed): median over ``--reps``; against what a client
  with CONDSTORE only does (SELECT, ``UID FETCH 1:* (FLAGS) (CHANGEDSINCE m)``), and one
  with neither (SELECT, ``FETCH 1:* (FLAGS)``).  ``--only qresync`` runs only
  this measure (after filling).
* SORT and THREAD on the same INBOX (issue 12): ``UID SORT (REVERSE DATE) UTF-8 ALL`` and
  ``UID THREAD REFERENCES UTF-8 ALL``, the first run in the server process ("cold": ours reads
  the stored sort keys, Dovecot builds its sort and thread indexes) and the median of the next
  ones ("warm"), then the median of runs each after one new message was appended by another
  connection (what a live INBOX sees).  ``--sort-only`` fills just that INBOX and runs just
  this measure.
* A 50 MB message APPENDed, then FETCHed (``BODY.PEEK[]``) by a fast reader and by one reading
  10 MB/s: the growth of the serving process's RSS over its value just before the command,
  sampled every 5 ms and checked against VmHWM (reset first through /proc/<pid>/clear_refs).
  For Dovecot the serving process is the ``imap`` process that holds the connection.
* Mixed load: ``--clients`` sessions at once, one per user, each looping LOGIN, SELECT, FETCH
  of the newest 25 envelopes, 3 x (FETCH a body, STORE \\Seen, APPEND, STORE \\Deleted on the
  oldest, EXPUNGE), LOGOUT, from a separate process (asyncio, raw sockets).  Commands per
  second over ``--duration`` seconds after a warm-up, the server's CPU per command, and the
  latency of each kind of command.  One LOGIN in 19 commands makes this largely a measure of
  password checking, so a second run does ``--long-cycles`` rounds per session (1 LOGIN in
  ~100 commands).  A session that gets no greeting in 20 s or no answer in 120 s is counted
  as a timeout and starts again, so the load always ends.
* ``--idle`` connections, each logged in, INBOX selected, in IDLE: the server's memory.  Ours
  is one process (VmRSS).  Dovecot forks an ``imap`` process per connection: the table gives
  the RSS summed over all of them (shared library pages counted once per process, so it
  overstates) and their PSS (shared pages divided among the sharers: the fair total).  Both
  servers are restarted before this measure.  Ours is then measured once more with glibc's
  mmap threshold pinned (``MALLOC_MMAP_THRESHOLD_=131072`` in its environment, nothing else
  changed), which shows how much of its RSS is freed-but-kept malloc arenas.

Prints a Markdown table for bench/RESULTS.md; ratio = ours / Dovecot (for rates above 1 is
better, for times and memory below 1).  Figures, never assertions.  ``--profile`` samples our
server with py-spy (installed into the venv on first use) during the big-mailbox SELECTs and
the mixed load and prints where its time goes; figures from such a run are perturbed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from imap_load import COMMAND_TIMEOUT, GREETING_TIMEOUT, Conn, percentile, run_child  # noqa: E402
from imap_servers import (  # noqa: E402
    PASSWORD,
    Dovecot,
    Mail,
    Mailbox,
    OurServer,
    Sampler,
    fill_maildir,
    fill_ours,
    message,
    process_tree,
    pss_kib,
    reset_hwm,
    socket_owner,
    status_kib,
)

MIB = 1024  # KiB per MiB


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def raise_nofile() -> int:
    """Raise the open-files soft limit to the hard limit (servers inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def ms(seconds: float) -> float:
    return seconds * 1000


# -- measures --------------------------------------------------------------------------------------

def measure_append(server, user: str, count: int) -> dict:
    msg = message(1, 10 * 1024)
    c = Conn(server.port)
    c.login(user, PASSWORD)
    for _ in range(5):  # warm-up
        c.command(b"APPEND INBOX", msg)
    plus, sync = [], []
    for _ in range(count):
        t0 = time.perf_counter()
        c.command(b"APPEND INBOX", msg)
        plus.append(time.perf_counter() - t0)
    for _ in range(max(1, count // 4)):
        t0 = time.perf_counter()
        c.command(b"APPEND INBOX", msg, sync=True)
        sync.append(time.perf_counter() - t0)
    c.command(b"LOGOUT")
    c.close()
    return {"median_ms": ms(statistics.median(plus)), "p95_ms": ms(percentile(plus, 0.95)),
            "rate": len(plus) / sum(plus), "sync_median_ms": ms(statistics.median(sync)),
            "sync_p95_ms": ms(percentile(sync, 0.95))}


def measure_append_load(server, users: list[str], each: int) -> dict:
    return run_child("append", port=server.port, users=users, password=PASSWORD, each=each,
                     message=message(2, 10 * 1024))


NEWEST = b"FETCH %d:* (UID FLAGS INTERNALDATE RFC822.SIZE ENVELOPE)"
SEARCHES = [("UNSEEN", b"UNSEEN"), ("SUBJECT", b'SUBJECT "topic 42 report"'),
            ("BODY", b"BODY needle123")]


def measure_big(server, user: str, reps: int, search_reps: int) -> dict:
    out: dict = {}
    c = Conn(server.port)
    c.login(user, PASSWORD)
    t0 = time.perf_counter()
    c.command(b"SELECT INBOX")
    t1 = time.perf_counter()
    _tagged, untagged = c.command(NEWEST % max(1, c.exists - 24))
    t2 = time.perf_counter()
    out.update(exists=c.exists, cold_select_ms=ms(t1 - t0), cold_fetch_ms=ms(t2 - t1),
               fetched=sum(1 for u in untagged if b" FETCH " in u))
    c.close()
    selects, fetches = [], []
    for _ in range(reps):
        select, fetch = select_and_fetch_newest(server, user)
        selects.append(select)
        fetches.append(fetch)
    both = [a + b for a, b in zip(selects, fetches, strict=True)]
    out.update(select_ms=ms(statistics.median(selects)), fetch_ms=ms(statistics.median(fetches)),
               select_fetch_ms=ms(statistics.median(both)))
    c = Conn(server.port)
    c.login(user, PASSWORD)
    c.command(b"SELECT INBOX")
    for name, query in SEARCHES:
        times, hits = [], None
        for _ in range(1 + (search_reps if name != "BODY" else 1)):
            t0 = time.perf_counter()
            _tagged, untagged = c.command(b"SEARCH " + query)
            times.append(time.perf_counter() - t0)
            line = next(u for u in untagged if u.startswith(b"* SEARCH"))
            hits = len(line.split()) - 2
        out[f"search_{name}"] = {"first_ms": ms(times[0]),
                                 "warm_ms": ms(statistics.median(times[1:])), "hits": hits}
    c.command(b"LOGOUT")
    c.close()
    # A real INBOX changes between SELECTs: one new message (from another connection) before
    # each of these, so nothing the server kept from the previous SELECT is current.
    side = Conn(server.port)
    side.login(user, PASSWORD)
    news = message(99_999, 1500)
    selects, both = [], []
    for _ in range(max(3, reps // 2)):
        side.command(b"APPEND INBOX (\\Seen)", news)
        select, fetch = select_and_fetch_newest(server, user)
        selects.append(select)
        both.append(select + fetch)
    side.command(b"LOGOUT")
    side.close()
    out.update(changed_select_ms=ms(statistics.median(selects)),
               changed_select_fetch_ms=ms(statistics.median(both)))
    return out


def measure_qresync(server, user: str, reps: int) -> dict:
    """QRESYNC SELECT after 100 flag changes and 10 expunges made elsewhere, against a plain
    SELECT + FETCH 1:* (FLAGS) (see the module docstring)."""
    c = Conn(server.port)
    c.login(user, PASSWORD)
    c.command(b"ENABLE QRESYNC")
    _tagged, untagged = c.command(b"SELECT INBOX")
    text = b"\n".join(untagged)
    uidvalidity = int(re.search(rb"UIDVALIDITY (\d+)", text).group(1))
    highest = int(re.search(rb"HIGHESTMODSEQ (\d+)", text).group(1))
    _tagged, untagged = c.command(b"UID SEARCH ALL")
    uids = [int(u) for u in untagged[-1].split()[2:]]
    c.command(b"LOGOUT")
    c.close()
    other = Conn(server.port)
    other.login(user, PASSWORD)
    other.command(b"SELECT INBOX")
    step = max(1, len(uids) // 120)
    picked = uids[::step][:110]
    for uid in picked[:100]:
        other.command(b"UID STORE %d +FLAGS.SILENT (\\Flagged)" % uid)
    for uid in picked[100:]:
        other.command(b"UID STORE %d +FLAGS.SILENT (\\Deleted)" % uid)
        other.command(b"UID EXPUNGE %d" % uid)
    other.command(b"LOGOUT")
    other.close()
    resync, full, changed, counts = [], [], [], None
    for _ in range(reps):
        c = Conn(server.port)
        c.login(user, PASSWORD)
        c.command(b"ENABLE QRESYNC")
        t0 = time.perf_counter()
        _tagged, untagged = c.command(b"SELECT INBOX (QRESYNC (%d %d 1:%d))"
                                      % (uidvalidity, highest, uids[-1]))
        resync.append(time.perf_counter() - t0)
        counts = (sum(1 for u in untagged if b" FETCH " in u),
                  next((u for u in untagged if u.startswith(b"* VANISHED")), b"")[:80])
        c.command(b"LOGOUT")
        c.close()
        c = Conn(server.port)
        c.login(user, PASSWORD)
        t0 = time.perf_counter()
        c.command(b"SELECT INBOX")
        c.command(b"FETCH 1:* (FLAGS)", keep=False)
        full.append(time.perf_counter() - t0)
        c.command(b"LOGOUT")
        c.close()
        c = Conn(server.port)
        c.login(user, PASSWORD)
        t0 = time.perf_counter()
        c.command(b"SELECT INBOX")
        c.command(b"UID FETCH 1:* (FLAGS) (CHANGEDSINCE %d)" % highest, keep=False)
        changed.append(time.perf_counter() - t0)
        c.command(b"LOGOUT")
        c.close()
    return {"resync_ms": ms(statistics.median(resync)), "full_ms": ms(statistics.median(full)),
            "changedsince_ms": ms(statistics.median(changed)),
            "fetched": counts[0], "vanished": counts[1].decode(errors="replace")}
SORTS = [("UID SORT (REVERSE DATE) UTF-8 ALL", b"* SORT"),
         ("UID THREAD REFERENCES UTF-8 ALL", b"* THREAD")]


def measure_sort(server, user: str, reps: int) -> dict:
    """Each of :data:`SORTS` on the big INBOX: the first run in the server process and the
    median of ``reps`` more, on one connection."""
    out: dict = {}
    c = Conn(server.port)
    c.login(user, PASSWORD)
    c.command(b"SELECT INBOX")
    for query, prefix in SORTS:
        times, size = [], 0
        for _ in range(1 + reps):
            t0 = time.perf_counter()
            tagged, untagged = c.command(query.encode())
            times.append(time.perf_counter() - t0)
            if b" OK" not in tagged:
                raise RuntimeError(f"{server.name}: {query}: {tagged!r}")
            size = sum(len(u) for u in untagged if u.startswith(prefix))
        out[query] = {"cold_ms": ms(times[0]), "warm_ms": ms(statistics.median(times[1:])),
                      "octets": size}
    # What a live INBOX sees: one new message (from another connection) before each run, so
    # no answer kept from the previous run is current.
    side = Conn(server.port)
    side.login(user, PASSWORD)
    news = message(99_998, 1500)
    for query, _prefix in SORTS:
        times = []
        for _ in range(max(3, reps)):
            side.command(b"APPEND INBOX (\\Seen)", news)
            c.command(b"NOOP")
            t0 = time.perf_counter()
            c.command(query.encode())
            times.append(time.perf_counter() - t0)
        out[query]["changed_ms"] = ms(statistics.median(times))
    side.command(b"LOGOUT")
    side.close()
    c.command(b"LOGOUT")
    c.close()
    return out


TEXT_SEARCHES = [("SUBJECT", b'SEARCH SUBJECT "topic 42 report"'),
                 ("BODY", b"SEARCH BODY needle123")]


def measure_text_search(server, user: str, reps: int) -> dict:
    """SEARCH SUBJECT and SEARCH BODY on the big INBOX (issue 14): each in a freshly started
    server ("cold": the process has read nothing yet; the OS page cache is warm for both
    servers, and Dovecot's index files exist from earlier SELECTs), the median of ``reps``
    more on the same connection ("warm"), and the median of runs each after one new message
    APPENDed by another connection ("changed")."""
    out: dict = {}
    for name, query in TEXT_SEARCHES:
        server.stop()
        server.start()
        c = Conn(server.port)
        c.login(user, PASSWORD)
        c.command(b"SELECT INBOX")
        times, hits = [], 0
        for _ in range(1 + reps):
            t0 = time.perf_counter()
            tagged, untagged = c.command(query)
            times.append(time.perf_counter() - t0)
            if b" OK" not in tagged:
                raise RuntimeError(f"{server.name}: {query!r}: {tagged!r}")
            line = next(u for u in untagged if u.startswith(b"* SEARCH"))
            hits = len(line.split()) - 2
        side = Conn(server.port)
        side.login(user, PASSWORD)
        news = message(99_997, 1500)
        changed = []
        for _ in range(max(3, reps // 2)):
            side.command(b"APPEND INBOX (\\Seen)", news)
            c.command(b"NOOP")
            t0 = time.perf_counter()
            c.command(query)
            changed.append(time.perf_counter() - t0)
        side.command(b"LOGOUT")
        side.close()
        c.command(b"LOGOUT")
        c.close()
        out[name] = {"cold_ms": ms(times[0]), "warm_ms": ms(statistics.median(times[1:])),
                     "changed_ms": ms(statistics.median(changed)), "hits": hits}
    return out


def sort_rows(r: dict, row, f_ms) -> None:
    o, d = r["ours"]["sort"], r["dovecot"]["sort"]
    for query, _prefix in SORTS:
        a, b = o[query], d[query]
        same = "" if a["octets"] == b["octets"] else \
            f" (answer {a['octets']:,} octets, Dovecot {b['octets']:,})"
        row(f"{query}, warm{same}", a["warm_ms"], b["warm_ms"], f_ms, "<= 1.0 x",
            a["warm_ms"] <= b["warm_ms"])
        row("... after one new message (nothing kept from the previous run is current)",
            a["changed_ms"], b["changed_ms"], f_ms)
        row("... cold (first in the server process)", a["cold_ms"], b["cold_ms"], f_ms)


def select_and_fetch_newest(server, user: str) -> tuple[float, float]:
    """A fresh session's SELECT INBOX and FETCH of its newest 25, in seconds each."""
    c = Conn(server.port)
    c.login(user, PASSWORD)
    t0 = time.perf_counter()
    c.command(b"SELECT INBOX")
    t1 = time.perf_counter()
    c.command(NEWEST % max(1, c.exists - 24))
    t2 = time.perf_counter()
    c.command(b"LOGOUT")
    c.close()
    return t1 - t0, t2 - t1


def big_message(size: int) -> bytes:
    head = (b"From: Big <big@example.org>\r\nTo: user@example.com\r\nSubject: 50 MB\r\n"
            b"Date: Sat, 21 Nov 2026 12:00:00 +0000\r\nMIME-Version: 1.0\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n")
    line = b"A" * 76 + b"\r\n"
    body = line * ((size - len(head)) // len(line))
    return head + body + b"B" * (size - len(head) - len(body))


def _serving_pid(server, conn: Conn) -> int:
    if isinstance(server, OurServer):
        return server.pid
    pid = socket_owner(server.port, conn.local_port)
    if pid is None:
        raise RuntimeError("no Dovecot process holds the bench's connection")
    return pid


def _growth(pid: int, run) -> tuple[float, int]:
    """Seconds ``run()`` took and the serving process's RSS growth meanwhile, in KiB."""
    rss = lambda: status_kib(pid, "VmRSS")  # noqa: E731
    base = rss()
    hwm_ok = reset_hwm(pid)
    with Sampler(rss) as sampler:
        t0 = time.perf_counter()
        run()
        seconds = time.perf_counter() - t0
    peak = max(sampler.peak, status_kib(pid, "VmHWM") if hwm_ok else 0)
    return seconds, peak - base


def measure_big_message(server, user: str, size: int, slow_rate: float) -> dict:
    msg = big_message(size)
    want = hashlib.sha256(msg).hexdigest()
    c = Conn(server.port)
    c.login(user, PASSWORD)
    pid = _serving_pid(server, c)
    out = {"rss_before_kib": status_kib(pid, "VmRSS")}
    out["append_s"], out["append_growth_kib"] = _growth(
        pid, lambda: c.command(b"APPEND INBOX", msg))
    msg = b""  # the bench's copy is not needed any more
    c.command(b"SELECT INBOX")
    for mode, rate in (("fast", None), ("slow", slow_rate)):
        c.read_rate = rate
        c.skipped = hashlib.sha256()  # the octets read are checked, not only counted
        seconds, growth = _growth(pid, lambda: c.command(b"FETCH 1 BODY.PEEK[]", keep=False))
        out[f"fetch_{mode}_s"], out[f"fetch_{mode}_growth_kib"] = seconds, growth
        if c.skipped.hexdigest() != want:
            raise RuntimeError(f"{server.name}: FETCH of the {size}-octet message ({mode} "
                               f"reader) did not return the octets APPENDed")
    c.read_rate = None
    c.skipped = None
    c.command(b"LOGOUT")
    c.close()
    return out


def measure_mixed(server, users: list[str], args, cycles: int, profiler=None) -> dict:
    marks: dict[str, tuple[float, float]] = {}

    def on_message(kind, name):
        if kind == "mark":
            marks[name] = (time.monotonic(), server.cpu())
            if profiler and name == "start":
                profiler.start()
            if profiler and name == "end":
                profiler.stop()
    result = run_child("mixed", on_message, port=server.port, users=users, password=PASSWORD,
                       warmup=args.warmup, duration=args.duration, cycles=cycles,
                       message=message(7, 4096))
    cpu = marks["end"][1] - marks["start"][1]
    result["server_cores"] = cpu / args.duration
    result["cpu_ms_per_command"] = ms(cpu / max(1, result["commands"]))
    return result


def memory_snapshot(server) -> dict:
    if isinstance(server, OurServer):
        return {"rss_kib": status_kib(server.pid, "VmRSS"), "pss_kib": pss_kib(server.pid),
                "processes": 1}
    imap = server.imap_pids()
    return {"rss_kib": server.rss_kib(),
            "imap_rss_kib": sum(status_kib(p, "VmRSS") for p in imap),
            "imap_pss_kib": sum(pss_kib(p) for p in imap),
            "pss_kib": pss_kib(server.pid) + sum(pss_kib(p) for p, _ in
                                                 process_tree(server.pid)),
            "processes": len(imap)}


def measure_idle(server, users: list[str], count: int) -> dict:
    time.sleep(1)
    before = memory_snapshot(server)
    held: dict = {}

    def on_message(kind, info):
        if kind == "ready":
            time.sleep(3)  # let the processes settle (Dovecot's imap-login ones exit)
            held.update(memory_snapshot(server), **info)
            return "release"
    result = run_child("idle", on_message, port=server.port, users=users, password=PASSWORD,
                       count=count)
    return {"before": before, "held": held, **result}


# -- profiling (py-spy) ----------------------------------------------------------------------------

class Profiler:
    """py-spy sampling one process between start() and stop(); summarised afterwards."""

    def __init__(self, pid: int, out: str):
        self.pid = pid
        self.out = out
        self.proc: subprocess.Popen | None = None
        self.exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if not os.path.exists(self.exe):
            log("installing py-spy into the venv (bench only)")
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=True)

    def start(self) -> None:
        self.proc = subprocess.Popen([self.exe, "record", "--pid", str(self.pid), "--rate", "250",
                                      "--format", "raw", "--output", self.out, "--nonblocking"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(60)
            self.proc = None

    IDLE = ("Condition.wait", "Queue.get", "EpollSelector.select", "_PollLikeSelector.select",
            "Event.wait", "Thread.join")

    def summary(self, top: int = 12) -> tuple[list, list, int, int]:
        """Where the busy samples were: (inclusive shares of our own functions -- mailstore
        and imapserver --, self shares of any function, busy samples, all samples).  Samples
        of threads waiting for work (a leaf in :attr:`IDLE`) are not busy."""
        inclusive, own, busy, total = Counter(), Counter(), 0, 0
        for line in Path(self.out).read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            n = int(count)
            total += n
            frames = [f for f in stack.split(";") if " (" in f]
            if not frames or frames[-1].split(" (")[0] in self.IDLE:
                continue
            busy += n
            short = [re.sub(r" \((?:.*/)?([^/]+?)(?::\d+)?\)$", r" (\1)", f) for f in frames]
            for f, s in set(zip(frames, short, strict=True)):
                if "mailstore/" in f or "imapserver/" in f:
                    inclusive[s] += n
            own[short[-1]] += n
        return inclusive.most_common(top), own.most_common(top), busy, total


# -- the table -------------------------------------------------------------------------------------

def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f} x" if theirs else "n/a"


def table(r: dict, args) -> str:
    o, d = r["ours"], r["dovecot"]
    rows = []

    def row(name, a, b, fmt, target="", met=None):
        verdict = "" if met is None else (" (met)" if met else " (missed)")
        rows.append(f"| {name} | {fmt(a)} | {fmt(b)} | {ratio(a, b)} | {target}{verdict} |")

    f_ms = lambda v: f"{v:,.1f} ms"  # noqa: E731
    f_rate = lambda v: f"{v:,.0f}/s"  # noqa: E731
    f_mib = lambda v: f"{v / MIB:,.1f} MiB"  # noqa: E731
    f_s = lambda v: f"{v:,.2f} s"  # noqa: E731
    a, b = o["append"], d["append"]
    row("APPEND 10 KiB, 1 client, LITERAL+: median", a["median_ms"], b["median_ms"], f_ms,
        "<= 10 ms", a["median_ms"] <= 10)
    row("... p95", a["p95_ms"], b["p95_ms"], f_ms)
    row("... synchronizing literal: median", a["sync_median_ms"], b["sync_median_ms"], f_ms)
    row("APPEND rate, 1 client", a["rate"], b["rate"], f_rate)
    a, b = o["append_load"], d["append_load"]
    row(f"APPEND rate, {args.append_clients} clients at once", a["rate"], b["rate"], f_rate)
    a, b = o["big"], d["big"]
    n = f"{a['exists']:,}"
    rows.append(f"| first SELECT of the {n}-message INBOX (ours: from the index checkpoint "
                "the import left; Dovecot: indexing its maildir) | "
                f"{f_ms(a['cold_select_ms'])} | {f_ms(b['cold_select_ms'])} | "
                f"{ratio(a['cold_select_ms'], b['cold_select_ms'])} | |")
    row(f"SELECT again, {n} messages unchanged (Dovecot warm)", a["select_ms"], b["select_ms"],
        f_ms)
    row("FETCH newest 25 envelopes", a["fetch_ms"], b["fetch_ms"], f_ms)
    row("SELECT + FETCH newest 25 envelopes", a["select_fetch_ms"], b["select_fetch_ms"],
        f_ms, "<= 50 ms", a["select_fetch_ms"] <= 50)
    row("SELECT after one new message arrived", a["changed_select_ms"], b["changed_select_ms"],
        f_ms)
    row("... SELECT + FETCH newest 25 envelopes", a["changed_select_fetch_ms"],
        b["changed_select_fetch_ms"], f_ms, "<= 50 ms", a["changed_select_fetch_ms"] <= 50)
    for name, _query in SEARCHES:
        sa, sb = a[f"search_{name}"], b[f"search_{name}"]
        hits = f"{sa['hits']:,} hits" + ("" if sa["hits"] == sb["hits"] else
                                          f" (Dovecot {sb['hits']:,})")
        row(f"SEARCH {name} ({hits}), warm", sa["warm_ms"], sb["warm_ms"], f_ms)
        row("... first run", sa["first_ms"], sb["first_ms"], f_ms)
    if "qresync" in o:
        qresync_rows(row, o["qresync"], d["qresync"], f_ms)
    if "sort" in o:
        sort_rows(r, row, f_ms)
    a, b = o["big_message"], d["big_message"]
    row("APPEND 50 MB: time", a["append_s"], b["append_s"], f_s)
    row("... RSS growth", a["append_growth_kib"], b["append_growth_kib"], f_mib)
    row("FETCH 50 MB, fast reader: time", a["fetch_fast_s"], b["fetch_fast_s"], f_s)
    row("... RSS growth", a["fetch_fast_growth_kib"], b["fetch_fast_growth_kib"], f_mib,
        "< 32 MiB", a["fetch_fast_growth_kib"] < 32 * MIB)
    row("FETCH 50 MB, reader at 10 MB/s: RSS growth", a["fetch_slow_growth_kib"],
        b["fetch_slow_growth_kib"], f_mib, "< 32 MiB", a["fetch_slow_growth_kib"] < 32 * MIB)
    a, b = o["mixed"], d["mixed"]
    row(f"mixed load, {args.clients} clients: commands", a["commands_per_s"],
        b["commands_per_s"], f_rate, ">= 1.0 x", a["commands_per_s"] >= b["commands_per_s"])
    row("... sessions (LOGIN to LOGOUT)", a["sessions_per_s"], b["sessions_per_s"],
        lambda v: f"{v:,.1f}/s")
    row("... server CPU per command", a["cpu_ms_per_command"], b["cpu_ms_per_command"],
        lambda v: f"{v:.2f} ms")
    row("... server CPU in use (cores)", a["server_cores"], b["server_cores"],
        lambda v: f"{v:.2f}")
    if "mixed_long" in o:
        a, b = o["mixed_long"], d["mixed_long"]
        row(f"mixed load, long sessions ({args.long_cycles} rounds per LOGIN): commands",
            a["commands_per_s"], b["commands_per_s"], f_rate)
        row("... server CPU per command", a["cpu_ms_per_command"], b["cpu_ms_per_command"],
            lambda v: f"{v:.2f} ms")
        row("... server CPU in use (cores)", a["server_cores"], b["server_cores"],
            lambda v: f"{v:.2f}")
    a, b = o["idle"], d["idle"]
    k = args.idle
    row(f"{k:,} idle connections (IDLE): RSS", a["held"]["rss_kib"], b["held"]["rss_kib"],
        f_mib, "<= 200 MB", a["held"]["rss_kib"] <= 200 * 1000 * 1000 / 1024)
    row("... PSS (shared pages split)", a["held"]["pss_kib"], b["held"]["pss_kib"], f_mib)
    if "idle_mmap" in o:
        t = o["idle_mmap"]
        row("... ours with MALLOC_MMAP_THRESHOLD_=131072 (environment only): RSS",
            t["held"]["rss_kib"], b["held"]["rss_kib"], f_mib, "<= 200 MB",
            t["held"]["rss_kib"] <= 200 * 1000 * 1000 / 1024)
    per_b = b["held"]["imap_pss_kib"] / max(1, b["held"]["processes"])
    for label, held in (("", a), (" (ours with the pinned threshold)", o.get("idle_mmap"))):
        if held:
            per_a = (held["held"]["rss_kib"] - held["before"]["rss_kib"]) / max(1, held["open"])
            row(f"... per connection{label}: ours RSS growth / n, Dovecot PSS of an imap "
                "process", per_a, per_b, lambda v: f"{v:,.0f} KiB")
    head = ["| measure | ours | Dovecot | ratio (ours / Dovecot) | target |",
            "|---|---|---|---|---|"]
    return "\n".join(head + rows)


def qresync_rows(row, a: dict, b: dict, f_ms) -> None:
    row(f"QRESYNC SELECT after 100 flag changes and 10 expunges elsewhere ({a['fetched']} "
        "FETCH + VANISHED)", a["resync_ms"], b["resync_ms"], f_ms, "<= 10 ms",
        a["resync_ms"] <= 10)
    row("... CONDSTORE only: SELECT + UID FETCH 1:* (FLAGS) (CHANGEDSINCE m)",
        a["changedsince_ms"], b["changedsince_ms"], f_ms)
    row("... neither: SELECT + FETCH 1:* (FLAGS)", a["full_ms"], b["full_ms"], f_ms)


def qresync_table(r: dict) -> str:
    rows: list[str] = []

    def row(name, a, b, fmt, target="", met=None):
        verdict = "" if met is None else (" (met)" if met else " (missed)")
        rows.append(f"| {name} | {fmt(a)} | {fmt(b)} | {ratio(a, b)} | {target}{verdict} |")
    qresync_rows(row, r["ours"]["qresync"], r["dovecot"]["qresync"],
                 lambda v: f"{v:,.1f} ms")
    return "\n".join(["| measure | ours | Dovecot | ratio (ours / Dovecot) | target |",
                      "|---|---|---|---|---|", *rows])


def kinds_table(r: dict) -> str:
    o, d = r["ours"]["mixed"]["kinds"], r["dovecot"]["mixed"]["kinds"]
    lines = ["| mixed load, per command | ours median | ours p95 | Dovecot median | "
             "Dovecot p95 | ours count | Dovecot count |", "|---|---|---|---|---|---|---|"]
    for kind in ("LOGIN", "SELECT", "FETCH envelopes", "FETCH body", "STORE", "APPEND",
                 "EXPUNGE", "LOGOUT"):
        a, b = o.get(kind, {}), d.get(kind, {})
        cell = lambda s, key: f"{s[key]:.1f} ms" if key in s else "-"  # noqa: E731
        lines.append(f"| {kind} | {cell(a, 'median_ms')} | {cell(a, 'p95_ms')} | "
                     f"{cell(b, 'median_ms')} | {cell(b, 'p95_ms')} | {a.get('count', 0):,} | "
                     f"{b.get('count', 0):,} |")
    return "\n".join(lines)


def log_summary(text: str, pattern: str) -> list[tuple[str, int]]:
    """Matching log lines, with times and session ids taken out, counted."""
    lines = Counter()
    for line in text.splitlines():
        if re.search(pattern, line):
            line = re.sub(r"^(\w{3} +\d+ [\d:]+|[\d-]+T[\d:+]+) ", "", line)
            line = re.sub(r"\(([^)]*)\)<\d+><[^>]*>", "(...)", line)
            lines[re.sub(r"pid=\d+", "pid=...", line)] += 1
    return lines.most_common(10)


# -- main ------------------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--messages", type=int, help="messages in the big INBOX (100000)")
    ap.add_argument("--clients", type=int, help="mixed-load sessions at once (200)")
    ap.add_argument("--mailbox", type=int, help="messages in each mixed-load INBOX (100)")
    ap.add_argument("--idle", type=int, help="idle connections held (1000)")
    ap.add_argument("--duration", type=float, help="mixed-load window, seconds (30)")
    ap.add_argument("--warmup", type=float, help="mixed-load warm-up, seconds (5)")
    ap.add_argument("--cycles", type=int, default=3,
                    help="FETCH/STORE/APPEND/STORE/EXPUNGE rounds per mixed-load session")
    ap.add_argument("--long-cycles", type=int, default=20,
                    help="rounds per session of the second, login-light mixed load (0: skip)")
    ap.add_argument("--appends", type=int, help="single-client APPENDs timed (200)")
    ap.add_argument("--append-clients", type=int, default=10)
    ap.add_argument("--reps", type=int, help="SELECT + FETCH repetitions (10)")
    ap.add_argument("--big-mb", type=int, default=50, help="size of the big message, MB")
    ap.add_argument("--profile", action="store_true", help="py-spy our server (perturbs it)")
    ap.add_argument("--json", help="also write every figure to this file")
    ap.add_argument("--only", choices=["qresync"], help="run only this measure")
    ap.add_argument("--sort-only", action="store_true",
                    help="only the big INBOX and its SORT/THREAD measure")
    ap.add_argument("--search-only", action="store_true",
                    help="only the big INBOX and its SEARCH SUBJECT/BODY measure (issue 14)")
    args = ap.parse_args()
    full = dict(messages=100_000, clients=200, mailbox=100, idle=1000, duration=30.0,
                warmup=5.0, appends=200, reps=10)
    quick = dict(messages=10_000, clients=40, mailbox=50, idle=200, duration=8.0,
                 warmup=3.0, appends=50, reps=3)
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main() -> None:
    args = parse_args()
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    nofile = raise_nofile()
    if nofile < args.idle * 2 + 200:
        sys.exit(f"open-files limit {nofile} is too low for {args.idle} connections")
    work = tempfile.mkdtemp(prefix="imap-bench-")
    users = [f"u{i:03d}" for i in range(args.clients)]
    appenders = [f"append{i}" for i in range(args.append_clients)]
    small = [message(i, 4096) for i in range(args.mailbox)]
    corpus = [message(i, 1500) for i in range(1000)]
    if args.sort_only or args.search_only:
        users, appenders = [], []
    mail = Mail({**{u: Mailbox(args.mailbox, small) for u in users},
                 **{u: Mailbox() for u in appenders},
                 "big": Mailbox(args.messages, corpus, unseen_every=10), "huge": Mailbox()})
    ours = OurServer(os.path.join(work, "store"), os.path.join(work, "imapserver.log"))
    dovecot = Dovecot(list(mail.users))
    results: dict = {"ours": {}, "dovecot": {}}
    profiles = {}
    try:
        t0 = time.perf_counter()
        # The maildirs are written by another process meanwhile (two cores).
        ctx = multiprocessing.get_context("spawn")
        writer = ctx.Process(target=fill_maildir, args=(dovecot.mail, mail, dovecot.uid,
                                                          dovecot.gid))
        writer.start()
        fill_ours(ours.data_dir, mail)
        writer.join()
        if writer.exitcode != 0:
            raise RuntimeError("writing the maildirs failed")
        fill_s = time.perf_counter() - t0
        log(f"filled our store and the maildirs in {fill_s:.1f} s")
        ours.start()
        dovecot.start()
        servers = (ours, dovecot)

        def each(name: str, fn, *fn_args, **kwargs):
            for server in servers:
                t = time.perf_counter()
                results[server.name][name] = fn(server, *fn_args, **kwargs)
                log(f"{name} on {server.name}: {time.perf_counter() - t:.1f} s "
                    f"{json.dumps(results[server.name][name], default=str)[:600]}")

        if args.search_only:
            each("text_search", measure_text_search, "big", args.reps)
            print(f"\n{args.messages:,}-message INBOX, filled in {fill_s:.0f} s (both stores "
                  f"at once), {args.reps} warm runs\n")
            print("| measure | ours | Dovecot | ratio (ours / Dovecot) | target |\n"
                  "|---|---|---|---|---|")
            for name, _query in TEXT_SEARCHES:
                a, b = results["ours"]["text_search"][name], \
                    results["dovecot"]["text_search"][name]
                for kind, target in (("cold", "<= Dovecot"), ("warm", "<= 50 ms"),
                                     ("changed", "")):
                    x, y = a[f"{kind}_ms"], b[f"{kind}_ms"]
                    met = (x <= y) if kind == "cold" else (x <= 50) if kind == "warm" else None
                    print(f"| SEARCH {name} ({a['hits']} hits), {kind} | {x:,.1f} ms | "
                          f"{y:,.1f} ms | {ratio(x, y)} | {target}"
                          f"{'' if met is None else (' (met)' if met else ' (missed)')} |")
            ours.stop()
            dovecot.stop()
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(dovecot.dir, ignore_errors=True)
            return
        if args.sort_only:
            each("sort", measure_sort, "big", args.reps)
            rows: list[str] = []
            sort_rows(results, lambda name, a, b, fmt, target="", met=None: rows.append(
                f"| {name} | {fmt(a)} | {fmt(b)} | {ratio(a, b)} | {target}"
                f"{'' if met is None else (' (met)' if met else ' (missed)')} |"),
                lambda v: f"{v:,.1f} ms")
            print(f"\n{args.messages:,}-message INBOX, {args.reps} warm runs\n")
            print("| measure | ours | Dovecot | ratio (ours / Dovecot) | target |\n"
                  "|---|---|---|---|---|\n" + "\n".join(rows))
            ours.stop()
            dovecot.stop()
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(dovecot.dir, ignore_errors=True)
            return
        each("append", measure_append, appenders[0], args.appends)
        each("append_load", measure_append_load, appenders, max(10, args.appends // 4))
        if args.profile:
            prof = Profiler(ours.pid, os.path.join(work, "select.txt"))
            prof.start()
            measure_big(ours, "big", args.reps, 1)
            prof.stop()
            profiles["SELECT + FETCH + SEARCH on the big INBOX"] = prof
        if args.only == "qresync":
            each("qresync", measure_qresync, "big", max(5, args.reps))
            print(qresync_table(results))
            raise SystemExit(0)  # through the cleanup below
        each("big", measure_big, "big", args.reps, 2)
        each("qresync", measure_qresync, "big", max(5, args.reps))
        each("sort", measure_sort, "big", args.reps)
        each("big_message", measure_big_message, "huge", args.big_mb * 1000 * 1000, 10e6)
        for server in servers:
            prof = Profiler(ours.pid, os.path.join(work, "mixed.txt")) \
                if args.profile and server is ours else None
            results[server.name]["mixed"] = measure_mixed(server, users, args, args.cycles, prof)
            if prof:
                profiles["mixed load"] = prof
            log(f"mixed on {server.name}: {json.dumps(results[server.name]['mixed'])[:1500]}")
        if args.long_cycles:
            each("mixed_long", measure_mixed, users, args, args.long_cycles)
        for server in servers:  # fresh processes for the memory measure
            server.stop()
            server.start()
        each("idle", measure_idle, users, args.idle)
        # The same with glibc's mmap threshold pinned (environment only, no code change): big
        # buffers (scrypt's 16 MiB) then go back to the system when freed.
        ours.stop()
        ours = OurServer(ours.data_dir, ours.log_path, env={"MALLOC_MMAP_THRESHOLD_": "131072"})
        ours.start()
        results["ours"]["idle_mmap"] = measure_idle(ours, users, args.idle)
        log(f"idle on ours (mmap threshold): {results['ours']['idle_mmap']}")
    except BaseException:
        ours.stop()
        dovecot.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(dovecot.dir, ignore_errors=True)
        raise
    finally:
        ours.stop()
        dovecot.stop()
    results["dovecot_scheme"] = dovecot.scheme
    results["logs"] = {"ours": log_summary(ours.log(), r"Traceback|Error|error|failed"),
                       "dovecot": log_summary(dovecot.log(), r"Error|Fatal|Panic|Warning")}
    version = subprocess.run(["dovecot", "--version"], capture_output=True,
                             text=True).stdout.split()[0]
    print(f"\n{(time.monotonic() - started) / 60:.1f} minutes; "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; "
          f"messages={args.messages} clients={args.clients} mailbox={args.mailbox} "
          f"idle={args.idle} duration={args.duration:g}s appends={args.appends} "
          f"(Dovecot {version}, passwords {dovecot.scheme}; ours scrypt)\n")
    print(table(results, args))
    print()
    print(kinds_table(results))
    for name in ("ours", "dovecot"):
        for key in ("mixed", "mixed_long"):
            m = results[name].get(key)
            if not m:
                continue
            extra = [f"client CPU {m['client_cpu_share']:.2f} cores",
                     f"connection errors {m['connection_errors']}",
                     f"no greeting in {GREETING_TIMEOUT:g} s {m['greeting_timeouts']}",
                     f"no answer in {COMMAND_TIMEOUT:g} s {m['command_timeouts']}"]
            if m["errors"]:
                extra.append(f"NO/BAD {m['errors']}")
            print(f"\n{name} {key}: " + ", ".join(extra))
            for t in m["transcripts"]:
                print("    " + t.replace("\n", "\n    "))
        idle = results[name]["idle"]
        print(f"{name} idle: {idle['open']} open in {idle['open_seconds']:.1f} s, "
              f"{idle['alive_after']} answered DONE after the hold, {idle['failed']} failed "
              f"{idle['failures']}")
        if name == "ours" and "idle_mmap" in results["ours"]:
            t = results["ours"]["idle_mmap"]
            print(f"ours idle (pinned mmap threshold): {t['open']} open in "
                  f"{t['open_seconds']:.1f} s, {t['alive_after']} answered DONE, "
                  f"{t['failed']} failed {t['failures']}")
        for line, count in results["logs"][name]:
            print(f"{name} log, {count} x: {line[:300]}")
    for title, prof in profiles.items():
        inclusive, own, busy, total = prof.summary()
        print(f"\nProfile of our server, {title}: {busy} busy samples of {total} (py-spy, "
              f"250/s); shares of the busy ones.")
        print("| inclusive (our code) | share | self (any code) | share |\n|---|---|---|---|")
        for i in range(max(len(inclusive), len(own))):
            a = inclusive[i] if i < len(inclusive) else ("", 0)
            b = own[i] if i < len(own) else ("", 0)
            print(f"| {a[0]} | {a[1] * 100 / max(1, busy):.0f}% | {b[0]} | "
                  f"{b[1] * 100 / max(1, busy):.0f}% |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(dovecot.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
