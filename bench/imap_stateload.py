"""A random IMAP load that checks every response against each session's model of its mailbox.

    python bench/imap_stateload.py [--clients 50] [--seconds 600] [--users 5]
                                    [--servers ours,dovecot] [--seed 1]

Many clients share a few accounts (so several sessions have the same mailbox selected) and
issue a random mix: NOOP, FETCH (flags, envelopes, bodies), STORE of system flags and of
keywords from a small pool, STORE \\Deleted + EXPUNGE / UID EXPUNGE, APPEND and MULTIAPPEND
(some with keywords, some over 1 MiB), COPY and MOVE between two folders and into the selected
one, SEARCH, STATUS, LIST, IDLE with DONE, SELECT of the other folder, LOGOUT and back.

Each session keeps what RFC 3501 lets a client know -- the UID at each sequence number, the
flag names announced by ``* FLAGS`` -- and counts as a protocol error anything that breaks it:

* ``* n EXPUNGE`` or ``* n FETCH`` with n outside 1..EXISTS (7.4.1, 7.4.2); EXISTS shrinking
  without EXPUNGE (7.3.1); a FETCH UID other than the one that sequence number had; UIDs not
  ascending with sequence numbers (2.3.1.1);
* a FETCH FLAGS naming a keyword the session was not told of by ``* FLAGS`` (7.2.6);
* ``\\Recent`` on one message in two sessions (2.3.2: exactly one session sees it);
* a body that differs from what was appended (every message carries its own id);
* a tagged BAD, a NO that says the server failed (``[SERVERBUG]``, "Internal"), a malformed
  response, a dropped connection, or no answer within ``COMMAND_TIMEOUT``.

Other NOs (a message expunged by another session, a mailbox over quota) are legal and tallied.
Running the same load against Dovecot in the same run checks the checker: it must find nothing
there.  Every loop is bounded in time and ends by itself; only loopback is contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from dovecot import parse_value, split_fetch  # noqa: E402
from imap_servers import PASSWORD, Dovecot, OurServer  # noqa: E402

from mailstore.backends.embedded import EmbeddedBackend  # noqa: E402
from mailstore.store import MailStore  # noqa: E402

COMMAND_TIMEOUT = 60.0
KEYWORDS = [f"$k{i}" for i in range(8)]
SYSTEM = {"\\Seen", "\\Answered", "\\Flagged", "\\Deleted", "\\Draft", "\\Recent"}
FOLDERS = ["INBOX", "Work"]
BIG = 1024 * 1024 + 4096  # over the server's 1 MiB streaming threshold
_LITERAL = re.compile(rb"\{(\d+)\+?\}$")
_SERVER_FAILED = re.compile(rb"SERVERBUG|[Ii]nternal")


class ProtocolError(Exception):
    pass


class Shared:
    """What all sessions of one run know: appended bodies by id, who saw \\Recent, tallies."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.bodies: dict[bytes, bytes] = {}
        self.recent_seen: dict[tuple[str, str, int], int] = {}
        self.errors: list[str] = []
        self.ops = Counter()
        self.nos = Counter()
        self.next_id = 0

    def error(self, client: int, text: str) -> None:
        self.errors.append(f"client {client}: {text}")

    def message(self, big: bool = False) -> bytes:
        self.next_id += 1
        ident = b"%d-%d" % (os.getpid(), self.next_id)
        size = BIG if big else self.rng.choice([300, 2000, 9000, 40000])
        line = b"line of text for the load checker %s\r\n" % ident
        body = line * (size // len(line) + 1)  # whole lines: no bare CR for a server to mend
        raw = (b"From: load@example.org\r\nTo: user@example.org\r\nSubject: load " + ident +
               b"\r\nMessage-ID: <" + ident + b"@load>\r\nX-Load-Id: " + ident + b"\r\n\r\n" +
               body)
        self.bodies[ident] = raw
        return raw


class Session:
    """One connection and its model of the selected mailbox."""

    def __init__(self, shared: Shared, index: int, port: int, user: str):
        self.shared = shared
        self.index = index
        self.port = port
        self.user = user
        self.rng = random.Random(shared.rng.random())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.tag = 0
        self.mailbox: str | None = None
        self.uids: list[int | None] = []
        self.flag_names: set[str] = set()

    # -- wire ---------------------------------------------------------------------------------

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        greeting = await self._response()
        if not greeting.startswith(b"* OK"):
            raise ProtocolError(f"greeting {greeting[:100]!r}")
        await self.command(b"LOGIN %s %s" % (self.user.encode(), PASSWORD.encode()))
        self.mailbox = None

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
        self.writer = None

    async def _response(self) -> bytes:
        out = bytearray()
        while True:
            line = await self.reader.readuntil(b"\r\n")
            out += line
            m = _LITERAL.search(line[:-2])
            if m is None:
                return bytes(out[:-2])
            out += await self.reader.readexactly(int(m.group(1)))

    async def command(self, text: bytes, literals: list[bytes] | None = None,
                      allow_no: bool = True) -> tuple[bytes, list[bytes]]:
        """Send a command (literals as LITERAL+ after ``{}`` markers in order); check every
        response against the model; return (status, untagged)."""
        self.tag += 1
        tag = b"L%d" % self.tag
        pieces = text.split(b"{}")
        data = [tag + b" " + pieces[0]]
        for literal, piece in zip(literals or [], pieces[1:], strict=True):
            data += [b"{%d+}\r\n" % len(literal), literal, piece]
        self.writer.writelines([*data, b"\r\n"])
        name = text.split(b" ", 2)[0].upper()
        if name == b"UID":
            name = b"UID " + text.split(b" ", 2)[1].upper()
        self.shared.ops[name.decode()] += 1
        untagged = []
        while True:
            response = await asyncio.wait_for(self._response(), COMMAND_TIMEOUT)
            if response.startswith(tag + b" "):
                status = response.split(b" ", 2)[1]
                if status == b"BAD" or (status == b"NO" and _SERVER_FAILED.search(response)):
                    raise ProtocolError(f"{text[:80]!r} -> {response[:200]!r}")
                if status == b"NO":
                    if not allow_no:
                        raise ProtocolError(f"{text[:80]!r} -> {response[:200]!r}")
                    self.shared.nos[f"{name.decode()}: {response.split(b' ', 2)[2][:60]!r}"] += 1
                return status, untagged
            self.track(response)
            untagged.append(response)

    # -- the model ----------------------------------------------------------------------------

    def track(self, response: bytes) -> None:
        m = re.match(rb"\* (\d+) (EXISTS|EXPUNGE|FETCH|RECENT)\b", response)
        if response.startswith(b"* FLAGS "):
            value, _ = parse_value(response, 8)
            self.flag_names = {atom[1].decode() for atom in value}
            return
        if m is None:
            return
        n, kind = int(m.group(1)), m.group(2)
        if kind == b"EXISTS":
            if n < len(self.uids):
                raise ProtocolError(f"EXISTS {n} below {len(self.uids)} without EXPUNGE")
            self.uids.extend([None] * (n - len(self.uids)))
        elif kind == b"EXPUNGE":
            if not 1 <= n <= len(self.uids):
                raise ProtocolError(f"EXPUNGE {n} with {len(self.uids)} messages")
            del self.uids[n - 1]
        elif kind == b"FETCH":
            if not 1 <= n <= len(self.uids):
                raise ProtocolError(f"FETCH {n} with {len(self.uids)} messages")
            try:
                items = dict(split_fetch(response))
            except (IndexError, ValueError) as exc:
                raise ProtocolError(f"malformed FETCH response {response[:120]!r}...") from exc
            self._check_fetch(n, items)

    def _check_fetch(self, n: int, items: dict[bytes, bytes]) -> None:
        if b"UID" in items:
            uid = int(items[b"UID"])
            known = self.uids[n - 1]
            if known is not None and known != uid:
                raise ProtocolError(f"FETCH {n} says UID {uid}; it was {known}")
            below = next((u for u in reversed(self.uids[:n - 1]) if u is not None), 0)
            above = next((u for u in self.uids[n:] if u is not None), None)
            if uid <= below or (above is not None and uid >= above):
                raise ProtocolError(f"UID {uid} at {n} out of order ({below}, {above})")
            self.uids[n - 1] = uid
        if b"FLAGS" in items:
            flags = {atom[1].decode() for atom in parse_value(items[b"FLAGS"])[0]}
            unknown = {f for f in flags - SYSTEM if f not in self.flag_names}
            if unknown:
                raise ProtocolError(f"FETCH FLAGS {sorted(unknown)} before * FLAGS told of them")
            uid = self.uids[n - 1]
            if "\\Recent" in flags and uid is not None:
                key = (self.user, self.mailbox, uid)
                other = self.shared.recent_seen.setdefault(key, self.index)
                if other != self.index:
                    raise ProtocolError(f"\\Recent on UID {uid} in sessions {other} and "
                                        f"{self.index}")
        for name, value in items.items():
            if name.startswith(b"BODY[]") or name == b"RFC822":
                body = parse_value(value)[0]
                ident = re.search(rb"X-Load-Id: (\S+)", body or b"")
                want = self.shared.bodies.get(ident.group(1)) if ident else None
                if ident and want is not None and body != want:
                    raise ProtocolError(f"body of {ident.group(1)!r} differs "
                                        f"({len(body)} vs {len(want)} octets)")

    # -- the mix ------------------------------------------------------------------------------

    async def select(self, mailbox: str) -> None:
        self.uids = []
        self.flag_names = set()
        self.mailbox = mailbox
        await self.command(b"SELECT " + mailbox.encode(), allow_no=False)

    def _seq(self) -> int:
        return self.rng.randint(1, len(self.uids))

    async def step(self) -> None:
        rng = self.rng
        if self.mailbox is None:
            await self.select(rng.choice(FOLDERS))
            await self.command(b"FETCH 1:* (UID FLAGS)" if self.uids else b"NOOP")
            return
        roll = rng.random()
        have = bool(self.uids)
        if roll < 0.12:
            await self.command(b"NOOP")
        elif roll < 0.22 and have:
            await self.command(b"FETCH %d:* (UID FLAGS)" % self._seq())
        elif roll < 0.30 and have:
            a = self._seq()
            await self.command(b"FETCH %d:%d (UID RFC822.SIZE FLAGS ENVELOPE)"
                               % (a, min(len(self.uids), a + 30)))
        elif roll < 0.36 and have:
            await self.command(b"FETCH %d (UID BODY.PEEK[])" % self._seq())
        elif roll < 0.50 and have:
            flag = rng.choice(["\\Seen", "\\Flagged", "\\Answered", *KEYWORDS])
            await self.command(b"STORE %d %sFLAGS (%s)" % (self._seq(), rng.choice([b"+", b"-"]),
                                                           flag.encode()))
        elif roll < 0.55 and have:
            await self.command(b"STORE %d +FLAGS.SILENT (\\Deleted)" % self._seq())
            await self.command(rng.choice([b"EXPUNGE", b"CHECK"]))
        elif roll < 0.66:
            await self.append()
        elif roll < 0.72 and have:
            target = rng.choice(FOLDERS)
            verb = rng.choice([b"COPY", b"MOVE"])
            await self.command(b"%s %d %s" % (verb, self._seq(), target.encode()))
        elif roll < 0.77:
            await self.command(rng.choice([b"SEARCH UNSEEN", b"SEARCH KEYWORD $k1",
                                           b"SEARCH FLAGGED NOT SEEN", b"UID SEARCH ALL"]))
        elif roll < 0.82:
            other = [f for f in FOLDERS if f != self.mailbox][0]
            await self.command(b"STATUS %s (MESSAGES UNSEEN UIDNEXT RECENT)" % other.encode())
        elif roll < 0.85:
            await self.command(b'LIST "" "*"')
        elif roll < 0.91:
            await self.idle()
        elif roll < 0.96:
            await self.select(rng.choice(FOLDERS))
        else:
            await self.command(b"LOGOUT")
            await self.close()
            await self.connect()

    async def append(self) -> None:
        rng = self.rng
        count = 1 if rng.random() < 0.8 else rng.randint(2, 4)
        big = rng.random() < 0.01
        parts, literals = [], []
        for _ in range(count):
            flags = " ".join(rng.sample(KEYWORDS + ["\\Seen", "\\Flagged"], rng.randint(0, 2)))
            parts.append(b"(%s) {}" % flags.encode())
            literals.append(self.shared.message(big))
            big = False
        target = rng.choice(FOLDERS)
        await self.command(b"APPEND %s %s" % (target.encode(), b" ".join(parts)), literals)

    async def idle(self) -> None:
        self.tag += 1
        tag = b"L%d" % self.tag
        self.writer.write(tag + b" IDLE\r\n")
        self.shared.ops["IDLE"] += 1
        first = await asyncio.wait_for(self._response(), COMMAND_TIMEOUT)
        while not first.startswith(b"+"):
            self.track(first)
            first = await asyncio.wait_for(self._response(), COMMAND_TIMEOUT)
        deadline = time.monotonic() + self.rng.uniform(0.1, 1.0)
        while (left := deadline - time.monotonic()) > 0:
            try:
                self.track(await asyncio.wait_for(self._response(), left))
            except TimeoutError:
                break
        self.writer.write(b"DONE\r\n")
        while True:
            response = await asyncio.wait_for(self._response(), COMMAND_TIMEOUT)
            if response.startswith(tag + b" "):
                if not response.startswith(tag + b" OK"):
                    raise ProtocolError(f"IDLE -> {response[:200]!r}")
                return
            self.track(response)


async def _client(session: Session, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            if session.writer is None:
                await session.connect()
            while time.monotonic() < deadline:
                await session.step()
        except ProtocolError as exc:
            session.shared.error(session.index, str(exc))
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            session.shared.error(session.index, f"connection: {type(exc).__name__} {exc}")
        await session.close()
        session.mailbox = None
    await session.close()


async def run_load(port: int, users: list[str], clients: int, seconds: float,
                   seed: int) -> Shared:
    shared = Shared(random.Random(seed))
    # Both folders exist for every user before the clock starts.
    for user in users:
        setup = Session(shared, -1, port, user)
        await setup.connect()
        await setup.command(b"CREATE Work")
        await setup.command(b"LOGOUT")
        await setup.close()
    shared.ops.clear()
    shared.nos.clear()
    deadline = time.monotonic() + seconds
    sessions = [Session(shared, i, port, users[i % len(users)]) for i in range(clients)]
    await asyncio.gather(*(_client(s, deadline) for s in sessions))
    return shared


def _report(name: str, shared: Shared, seconds: float, log_text: str) -> int:
    total = sum(shared.ops.values())
    tracebacks = log_text.count("Traceback")
    print(f"{name}: {total} commands in {seconds:.0f} s ({total / seconds:.0f}/s), "
          f"protocol errors {len(shared.errors)}, tracebacks in log {tracebacks}")
    print("  commands: " + ", ".join(f"{k} {v}" for k, v in shared.ops.most_common()))
    if shared.nos:
        print("  legal NOs: " + "; ".join(f"{k} x{v}" for k, v in shared.nos.most_common(8)))
    for line in shared.errors[:20]:
        print("  ERROR " + line)
    return len(shared.errors) + tracebacks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--users", type=int, default=5)
    ap.add_argument("--servers", default="ours", help="comma list of: ours, dovecot")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", default="1", help="our server's --workers (auto, 1, 2, ...)")
    args = ap.parse_args()
    users = [f"load{i}" for i in range(args.users)]
    failures = 0
    for name in args.servers.split(","):
        work = tempfile.mkdtemp(prefix="stateload-")
        try:
            if name == "ours":
                data = os.path.join(work, "data")
                store = MailStore(EmbeddedBackend(data))
                for user in users:
                    store.create_user(user, PASSWORD)
                store.close()
                server = OurServer(data, os.path.join(work, "server.log"),
                                   workers=args.workers).start()
            else:
                server = Dovecot(users).start()
            try:
                started = time.monotonic()
                shared = asyncio.run(run_load(server.port, users, args.clients, args.seconds,
                                              args.seed))
                elapsed = time.monotonic() - started
                if name == "ours":
                    print(f"ours: --workers {args.workers}, server CPU {server.cpu():.1f} s")
            finally:
                log_text = server.log()
                server.stop()
            failures += _report(name, shared, elapsed, log_text)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
