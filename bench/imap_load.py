"""IMAP clients for bench/imap_bench.py: one blocking, for single-client latencies, and an
asyncio one for many sessions at once, run in a child process so that the load generator does
not share an interpreter (or a GIL) with the bench's measuring.

Both speak raw IMAP over loopback sockets and understand just enough of the responses: tagged
status lines, literals (``{n}``, read or skipped), ``* n EXISTS`` and ``* n EXPUNGE``.  Every
load job is bounded in time and count and ends by itself.

A child job talks to the bench over a pipe: ``("mark", name)`` when its measuring window opens
and closes, ``("ready", info)`` when it holds its connections (it then waits for the bench's
word to let them go), and finally ``("result", figures)``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import re
import socket
import statistics
import time

GREETING_TIMEOUT = 20.0
"""Seconds to wait for a greeting.  A connection whose handshake completed on the client side
but that the server's full accept queue dropped gets no greeting, ever (IMAP is server-first)."""
COMMAND_TIMEOUT = 120.0
"""Seconds to wait for a command's tagged response before giving the connection up."""

_LITERAL = re.compile(rb"\{(\d+)\}$")
_LITERAL_CRLF = re.compile(rb"\{(\d+)\}\r\n$")


class CommandFailed(Exception):
    """A tagged NO or BAD where OK was needed; carries the transcript."""


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# -- blocking client -------------------------------------------------------------------------------

class Conn:
    """One blocking IMAP connection; ``command`` returns (tagged line, untagged responses)."""

    def __init__(self, port: int, timeout: float = 300.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.tags = 0
        self.exists = 0
        self.greeting = self.line()
        self.read_rate: float | None = None  # octets/s while skipping literals (slow reader)
        self.skipped = None  # a hashlib object fed every literal octet skipped, when set

    @property
    def local_port(self) -> int:
        return self.sock.getsockname()[1]

    def close(self) -> None:
        self.sock.close()

    def _fill(self, size: int = 262144) -> None:
        chunk = self.sock.recv(size)
        if not chunk:
            raise ConnectionError(f"server closed the connection; buffered {bytes(self.buf)!r}")
        self.buf += chunk

    def line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                out = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return out
            self._fill()

    def read(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def skip(self, n: int) -> None:
        """Read ``n`` octets and drop them; at ``read_rate`` octets/s if that is set."""
        start = time.perf_counter()
        left = n
        while left:
            if not self.buf:
                self._fill(65536 if self.read_rate else 262144)
            take = min(left, len(self.buf))
            if self.skipped is not None:
                self.skipped.update(memoryview(self.buf)[:take])
            del self.buf[:take]
            left -= take
            if self.read_rate:
                ahead = (n - left) / self.read_rate - (time.perf_counter() - start)
                if ahead > 0:
                    time.sleep(ahead)

    def response(self, keep: bool = True) -> bytes:
        """One response, its literals folded in (or replaced by ``{n}`` when not kept)."""
        out = self.line()
        while True:
            m = _LITERAL.search(out)
            if m is None:
                return out
            if keep:
                out += b"\r\n" + self.read(int(m.group(1)))
            else:
                self.skip(int(m.group(1)))
            out += self.line()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def command(self, text: bytes, literal: bytes | None = None, sync: bool = False,
                keep: bool = True, check: bool = True) -> tuple[bytes, list[bytes]]:
        self.tags += 1
        tag = b"c%d" % self.tags
        untagged: list[bytes] = []
        if literal is None:
            self.send(tag + b" " + text + b"\r\n")
        elif sync:
            self.send(tag + b" " + text + b" {%d}\r\n" % len(literal))
            while True:
                r = self.response()
                if r.startswith(b"+"):
                    break
                untagged.append(r)
                if r.startswith(tag + b" "):
                    raise CommandFailed(f"{text!r} -> {r!r}")
            self.send(literal + b"\r\n")
        else:
            self.send(tag + b" " + text + b" {%d+}\r\n" % len(literal) + literal + b"\r\n")
        while True:
            r = self.response(keep)
            if r.startswith(tag + b" "):
                if check and r.split(b" ", 2)[1] != b"OK":
                    raise CommandFailed(f"C: {text!r}\nS: " + "\nS: ".join(
                        repr(u[:300]) for u in [*untagged, r]))
                return r, untagged
            _track(self, r)
            untagged.append(r)

    def login(self, user: str, password: str) -> None:
        self.command(b"LOGIN %s %s" % (user.encode(), password.encode()))


def _track(client, line: bytes) -> None:
    """Follow the mailbox size from untagged EXISTS / EXPUNGE."""
    if line.endswith(b"\r\n"):
        line = line[:-2]
    parts = line.split(b" ")
    if len(parts) == 3 and parts[0] == b"*" and parts[1].isdigit():
        if parts[2] == b"EXISTS":
            client.exists = int(parts[1])
        elif parts[2] == b"EXPUNGE":
            client.exists -= 1


# -- asyncio client --------------------------------------------------------------------------------

class AClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.tags = 0
        self.exists = 0

    @classmethod
    async def open(cls, port: int) -> AClient:
        async with asyncio.timeout(GREETING_TIMEOUT):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
            client = cls(reader, writer)
            try:
                greeting = await reader.readline()
            except BaseException:
                writer.close()
                raise
        if not greeting.startswith(b"* OK"):
            writer.close()
            raise ConnectionError(f"greeting {greeting!r}")
        return client

    def close(self) -> None:
        self.writer.close()

    async def command(self, text: bytes, literal: bytes | None = None
                      ) -> tuple[bytes, list[bytes]]:
        """Send a command (its literal as LITERAL+); the tagged line and untagged lines.
        Raises TimeoutError after :data:`COMMAND_TIMEOUT` seconds without the tagged line."""
        async with asyncio.timeout(COMMAND_TIMEOUT):
            return await self._command(text, literal)

    async def _command(self, text: bytes, literal: bytes | None) -> tuple[bytes, list[bytes]]:
        self.tags += 1
        tag = b"a%d " % self.tags
        if literal is None:
            self.writer.write(tag + text + b"\r\n")
        else:
            self.writer.write(tag + text + b" {%d+}\r\n" % len(literal) + literal + b"\r\n")
        untagged = []
        reader = self.reader
        while True:
            line = await reader.readline()
            if not line:
                raise ConnectionError("server closed the connection")
            first = line
            while line.endswith(b"}\r\n"):
                m = _LITERAL_CRLF.search(line)
                if m is None:
                    break
                await reader.readexactly(int(m.group(1)))
                line = await reader.readline()
                if not line:
                    raise ConnectionError("server closed the connection")
            if first.startswith(tag):
                return first, untagged
            _track(self, first)
            if len(untagged) < 8:
                untagged.append(first[:200])


# -- child jobs ------------------------------------------------------------------------------------

class Stats:
    """Latencies of the commands that completed inside the measuring window, per kind."""

    def __init__(self, start: float, end: float):
        self.start, self.end = start, end
        self.latency: dict[str, list[float]] = {}
        self.errors: dict[str, int] = {}
        self.transcripts: list[str] = []
        self.sessions = 0
        self.connection_errors = 0
        self.greeting_timeouts = 0
        self.command_timeouts = 0

    def add(self, kind: str, started: float, finished: float) -> None:
        if self.start <= finished <= self.end:
            self.latency.setdefault(kind, []).append(finished - started)

    def failed(self, kind: str, transcript: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1
        if len(self.transcripts) < 5:
            self.transcripts.append(transcript)

    def summary(self) -> dict:
        window = self.end - self.start
        kinds = {k: {"count": len(v), "median_ms": statistics.median(v) * 1000,
                     "p95_ms": percentile(v, 0.95) * 1000} for k, v in self.latency.items()}
        total = sum(len(v) for v in self.latency.values())
        return {"commands": total, "commands_per_s": total / window, "window_s": window,
                "sessions": self.sessions, "sessions_per_s": self.sessions / window,
                "kinds": kinds, "errors": self.errors, "transcripts": self.transcripts,
                "connection_errors": self.connection_errors,
                "greeting_timeouts": self.greeting_timeouts,
                "command_timeouts": self.command_timeouts}


async def _timed(client: AClient, stats: Stats, kind: str, text: bytes,
                 literal: bytes | None = None) -> bool:
    started = time.monotonic()
    tagged, untagged = await client.command(text, literal)
    finished = time.monotonic()
    status = tagged.split(b" ", 2)[1]
    if status != b"OK":
        stats.failed(kind, f"C: {text.decode()}\nS: " + "\nS: ".join(
            u.decode(errors="replace").rstrip() for u in [*untagged, tagged]))
        return False
    stats.add(kind, started, finished)
    return True


async def _session_loop(port: int, user: str, password: str, cycles: int, message: bytes,
                        stats: Stats, seed: int) -> None:
    """Sessions back to back until the window closes: LOGIN, SELECT, FETCH the newest 25
    envelopes, then ``cycles`` times (FETCH a body, STORE \\Seen on it, APPEND, STORE \\Deleted
    on the oldest, EXPUNGE), LOGOUT.  The mailbox keeps its size."""
    rng = random.Random(seed)
    login = b"LOGIN %s %s" % (user.encode(), password.encode())
    while time.monotonic() < stats.end:
        client = None
        try:
            try:
                client = await AClient.open(port)
            except TimeoutError:
                # Handshake done, greeting never sent: dropped from a full accept queue.
                stats.greeting_timeouts += 1
                continue
            if not await _timed(client, stats, "LOGIN", login):
                await asyncio.sleep(1)
                continue
            await _timed(client, stats, "SELECT", b"SELECT INBOX")
            await _timed(client, stats, "FETCH envelopes", b"FETCH %d:* (UID FLAGS "
                         b"INTERNALDATE RFC822.SIZE ENVELOPE)" % max(1, client.exists - 24))
            for _ in range(cycles):
                if time.monotonic() >= stats.end or client.exists < 1:
                    break
                seq = rng.randint(1, client.exists)
                await _timed(client, stats, "FETCH body", b"FETCH %d BODY.PEEK[]" % seq)
                await _timed(client, stats, "STORE", b"STORE %d +FLAGS (\\Seen)" % seq)
                await _timed(client, stats, "APPEND", b"APPEND INBOX", message)
                await _timed(client, stats, "STORE", b"STORE 1 +FLAGS.SILENT (\\Deleted)")
                await _timed(client, stats, "EXPUNGE", b"EXPUNGE")
            await _timed(client, stats, "LOGOUT", b"LOGOUT")
            if time.monotonic() <= stats.end:
                stats.sessions += 1
        except TimeoutError:
            stats.command_timeouts += 1
            if len(stats.transcripts) < 5:
                stats.transcripts.append(f"{user}: no answer in {COMMAND_TIMEOUT:g} s")
        except (ConnectionError, OSError, asyncio.IncompleteReadError) as exc:
            stats.connection_errors += 1
            if len(stats.transcripts) < 5:
                stats.transcripts.append(f"{user}: connection error {exc!r}")
            await asyncio.sleep(0.2)
        finally:
            if client is not None:
                client.close()


async def mixed_job(send, recv, port: int, users: list[str], password: str, warmup: float,
                    duration: float, cycles: int, message: bytes) -> dict:
    """One session loop per user, all at once; figures for the window after ``warmup``."""
    loop = asyncio.get_running_loop()
    now = time.monotonic()
    stats = Stats(now + warmup, now + warmup + duration)
    cpu = {}

    def mark(name: str) -> None:
        cpu[name] = time.process_time()
        send(("mark", name))
    loop.call_at(stats.start, mark, "start")
    loop.call_at(stats.end, mark, "end")
    await asyncio.gather(*(_session_loop(port, u, password, cycles, message, stats, seed)
                           for seed, u in enumerate(users)))
    out = stats.summary()
    out["client_cpu_share"] = (cpu["end"] - cpu["start"]) / duration
    return out


async def append_job(send, recv, port: int, users: list[str], password: str, each: int,
                     message: bytes) -> dict:
    """Every user's client logs in, then all APPEND ``each`` messages as fast as they can."""
    clients = [await AClient.open(port) for _ in users]
    for client, user in zip(clients, users, strict=True):
        tagged, _ = await client.command(b"LOGIN %s %s" % (user.encode(), password.encode()))
        if b" OK " not in tagged:
            raise CommandFailed(tagged.decode())
    latencies: list[float] = []
    failures: list[str] = []

    async def run(client: AClient) -> None:
        for _ in range(each):
            t0 = time.monotonic()
            tagged, _ = await client.command(b"APPEND INBOX", message)
            latencies.append(time.monotonic() - t0)
            if b" OK " not in tagged and len(failures) < 5:
                failures.append(tagged.decode(errors="replace"))
    start = time.monotonic()
    await asyncio.gather(*(run(c) for c in clients))
    wall = time.monotonic() - start
    for client in clients:
        client.close()
    return {"rate": len(latencies) / wall, "median_ms": statistics.median(latencies) * 1000,
            "p95_ms": percentile(latencies, 0.95) * 1000, "failures": failures}


async def idle_job(send, recv, port: int, users: list[str], password: str, count: int,
                   parallel: int = 50) -> dict:
    """Open ``count`` sessions (LOGIN, SELECT INBOX, IDLE), ``parallel`` at a time, report
    ready, hold them until the bench says so, then close them."""
    gate = asyncio.Semaphore(parallel)
    clients: list[AClient] = []
    failures: list[str] = []
    failed = 0

    async def one(i: int) -> None:
        async with gate:
            try:
                client = await AClient.open(port)
                user = users[i % len(users)]
                for text in (b"LOGIN %s %s" % (user.encode(), password.encode()),
                             b"SELECT INBOX"):
                    tagged, _ = await client.command(text)
                    if b" OK " not in tagged:
                        raise CommandFailed(f"{user}: {text.split()[0]!r} -> {tagged!r}")
                client.writer.write(b"idle IDLE\r\n")
                while True:
                    line = await asyncio.wait_for(client.reader.readline(), 60)
                    if not line:
                        raise ConnectionError("closed before IDLE")
                    if line.startswith(b"+"):
                        break
                    if line.startswith(b"idle "):
                        raise CommandFailed(f"IDLE -> {line!r}")
                clients.append(client)
            except (CommandFailed, ConnectionError, OSError, TimeoutError) as exc:
                nonlocal failed
                failed += 1
                if len(failures) < 5:
                    failures.append(repr(exc))
    t0 = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(count)))
    opened = time.monotonic() - t0
    send(("ready", {"open": len(clients)}))
    await asyncio.get_running_loop().run_in_executor(None, recv)
    # Still alive?  Each connection must still be open (no BYE, no close) after the hold.
    alive = 0
    for client in clients:
        client.writer.write(b"DONE\r\n")
    for client in clients:
        try:
            while True:
                line = await asyncio.wait_for(client.reader.readline(), 30)
                if not line or line.startswith(b"idle "):
                    break
            alive += line.startswith(b"idle OK")
        except (OSError, TimeoutError):
            pass
        client.close()
    return {"open": len(clients), "open_seconds": opened, "alive_after": alive,
            "failures": failures, "failed": failed}


# -- the standard mix (issue 14) -------------------------------------------------------------------

STANDARD_KINDS = ("LOGIN", "LIST", "STATUS", "SELECT", "FETCH", "FETCH 30", "STORE",
                  "STORE \\Deleted", "EXPUNGE", "APPEND", "LOGOUT")


async def _pipeline(session, stats: Stats, sent: list[tuple[str, bytes, list[bytes]]]) -> None:
    """Send ``sent`` -- (kind, command text with ``{}`` for each literal, literals) -- in one
    write, then read every response, checking each against the session's model (the checker
    of bench/imap_stateload.py); latency of each = from the write to its tagged line."""
    from imap_stateload import _SERVER_FAILED, COMMAND_TIMEOUT, ProtocolError
    tags = []
    data = []
    for kind, text, literals in sent:
        session.tag += 1
        tag = b"L%d" % session.tag
        pieces = text.split(b"{}")
        data.append(tag + b" " + pieces[0])
        for literal, piece in zip(literals, pieces[1:], strict=True):
            data += [b"{%d+}\r\n" % len(literal), literal, piece]
        data.append(b"\r\n")
        tags.append((tag + b" ", kind, text))
    started = time.monotonic()
    session.writer.writelines(data)
    for tag, kind, text in tags:
        while True:
            response = await asyncio.wait_for(session._response(), COMMAND_TIMEOUT)
            if response.startswith(tag):
                break
            if response.startswith(b"L") and b" " in response:
                raise ProtocolError(f"tagged {response[:80]!r} while waiting for {tag!r}")
            session.track(response)
        stats.add(kind, started, time.monotonic())
        status = response.split(b" ", 2)[1]
        if status == b"BAD" or (status == b"NO" and _SERVER_FAILED.search(response)) or \
                status not in (b"OK", b"NO"):
            raise ProtocolError(f"{text[:80]!r} -> {response[:200]!r}")
        if status == b"NO":
            stats.nos[kind] = stats.nos.get(kind, 0) + 1


async def _standard_client(port: int, user: str, shared, stats: Stats, index: int,
                           size: int) -> None:
    """Sessions back to back until the window closes, each going through the states of
    Dovecot's imaptest in its default order and probabilities: LOGIN; LIST and STATUS (each
    half the time, pipelined); SELECT; then pipelined FETCH of one body, FETCH of 30
    messages' envelopes, STORE of a flag (half the time) and STORE \\Deleted; then pipelined
    EXPUNGE and APPEND (a MULTIAPPEND of two messages a third of the time, one otherwise;
    while the mailbox is over ``size`` messages two are deleted, so it keeps its size);
    LOGOUT."""
    from imap_servers import PASSWORD
    from imap_stateload import COMMAND_TIMEOUT, ProtocolError, Session
    rng = random.Random(index)
    while time.monotonic() < stats.end:
        session = Session(shared, index, port, user)
        try:
            session.reader, session.writer = await asyncio.open_connection("127.0.0.1", port)
            greeting = await asyncio.wait_for(session._response(), GREETING_TIMEOUT)
            if not greeting.startswith(b"* OK"):
                raise ProtocolError(f"greeting {greeting[:100]!r}")
            await _pipeline(session, stats, [("LOGIN", b"LOGIN %s %s" % (
                user.encode(), PASSWORD.encode()), [])])
            group = []
            if rng.random() < 0.5:
                group.append(("LIST", b'LIST "" "*"', []))
            if rng.random() < 0.5:
                group.append(("STATUS", b"STATUS INBOX (MESSAGES UNSEEN UIDNEXT)", []))
            if group:
                await _pipeline(session, stats, group)
            session.mailbox = "INBOX"
            session.uids, session.flag_names = [], set()
            await _pipeline(session, stats, [("SELECT", b"SELECT INBOX", [])])
            n = len(session.uids)
            if n:
                group = [("FETCH", b"FETCH %d (UID FLAGS BODY.PEEK[])" % rng.randint(1, n), [])]
                a = rng.randint(1, max(1, n - 29))
                group.append(("FETCH 30", b"FETCH %d:%d (UID FLAGS INTERNALDATE RFC822.SIZE "
                              b"ENVELOPE)" % (a, min(n, a + 29)), []))
                if rng.random() < 0.5:
                    flag = rng.choice([b"\\Seen", b"\\Flagged", b"\\Answered", b"$k1"])
                    group.append(("STORE", b"STORE %d %sFLAGS (%s)" % (
                        rng.randint(1, n), rng.choice([b"+", b"-"]), flag), []))
                doomed = b"%d" % rng.randint(1, n)
                if n > size and n > 1:
                    doomed = b"%d,%d" % tuple(rng.sample(range(1, n + 1), 2))
                group.append(("STORE \\Deleted", b"STORE %s +FLAGS.SILENT (\\Deleted)" % doomed,
                              []))
                await _pipeline(session, stats, group)
            count = 2 if rng.random() < 1 / 3 else 1
            literals = [shared.message() for _ in range(count)]
            await _pipeline(session, stats, [
                ("EXPUNGE", b"EXPUNGE", []),
                ("APPEND", b"APPEND INBOX " + b" ".join([b"(\\Seen) {}"] * count), literals)])
            await _pipeline(session, stats, [("LOGOUT", b"LOGOUT", [])])
            if time.monotonic() <= stats.end:
                stats.sessions += 1
        except ProtocolError as exc:
            stats.failed("protocol", f"{user}: {exc}")
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            stats.connection_errors += 1
            if len(stats.transcripts) < 5:
                stats.transcripts.append(f"{user}: {type(exc).__name__} {exc} "
                                         f"(timeout {COMMAND_TIMEOUT:g} s)")
        finally:
            if session.writer is not None:
                session.writer.close()


async def standard_job(send, recv, port: int, users: list[str], clients: int, warmup: float,
                       duration: float, size: int, seed: int = 1) -> dict:
    """``clients`` connections on ``users`` (client i as users[i % len(users)]) running the
    standard mix; figures for the window after ``warmup``: commands/s, p50 and p99 per
    command, protocol errors (state-checked), legal NOs."""
    from imap_stateload import Shared
    loop = asyncio.get_running_loop()
    now = time.monotonic()
    stats = Stats(now + warmup, now + warmup + duration)
    stats.nos = {}
    shared = Shared(random.Random(seed))
    loop.call_at(stats.start, send, ("mark", "start"))
    loop.call_at(stats.end, send, ("mark", "end"))
    await asyncio.gather(*(_standard_client(port, users[i % len(users)], shared, stats, i, size)
                           for i in range(clients)))
    out = stats.summary()
    for kind, values in stats.latency.items():
        out["kinds"][kind]["p99_ms"] = percentile(values, 0.99) * 1000
    out["protocol_errors"] = sum(stats.errors.values())
    out["nos"] = stats.nos
    return out


JOBS = {"mixed": mixed_job, "append": append_job, "idle": idle_job, "standard": standard_job}


def child_main(pipe, job: str, kwargs: dict) -> None:
    try:
        result = asyncio.run(JOBS[job](pipe.send, pipe.recv, **kwargs))
        pipe.send(("result", result))
    except BaseException as exc:  # report, never hang the bench
        pipe.send(("error", repr(exc)))
    finally:
        pipe.close()


def run_child(job: str, on_message=None, timeout: float = 900.0, **kwargs) -> dict:
    """Run a load job in a fresh process; ``on_message(kind, payload)`` sees its marks and
    ready reports (its return value, if not None, is sent back).  Returns the job's figures."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=child_main, args=(child, job, kwargs), daemon=True)
    proc.start()
    child.close()
    deadline = time.monotonic() + timeout
    try:
        while True:
            if not parent.poll(1.0):
                if time.monotonic() > deadline or not proc.is_alive():
                    raise RuntimeError(f"load job {job} died or hung")
                continue
            try:
                kind, payload = parent.recv()
            except EOFError:
                raise RuntimeError(f"load job {job} exited without a result") from None
            if kind == "result":
                return payload
            if kind == "error":
                raise RuntimeError(f"load job {job} failed: {payload}")
            reply = on_message(kind, payload) if on_message else None
            if reply is not None:
                parent.send(reply)
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
        parent.close()
