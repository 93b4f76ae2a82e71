"""A random-fault loop: the Thrift gateway SIGKILLed and restarted at random moments while IMAP
clients APPEND, STORE, MOVE and EXPUNGE and LMTP delivers to several users (issue 16).  Used by
tests/test_gateway_fault_loop.py (a few faults) and bench/gateway_fault_loop.py (hundreds).

Every command's answer is kept in a ledger of where each message may be:

* an acknowledged APPEND or LMTP 250: in that mailbox, exactly once;
* an acknowledged ``UID MOVE``: in the target, exactly once (RFC 6851 3.1), never the source;
* an acknowledged ``UID EXPUNGE``: gone (RFC 4315 2.1);
* a refused one (``NO [UNAVAILABLE]``, ``451 4.3.0``): one of the outcomes it may have had
  (before or after; an APPEND present or absent), but never twice, never both;
* an acknowledged ``UID STORE +FLAGS (\\Flagged \\Seen)``: those flags, wherever it is.

UIDs from APPENDUID and COPYUID (RFC 4315 3) must never be handed out twice in one mailbox.
At the end, once intents have been rolled forward (the opens a client's STATUS brings, decision
0003), each mailbox's counters (STATUS MESSAGES/UNSEEN, the size counter) must equal its rows,
and ``mailadmin fsck`` may report only what a call cut half-way by the gateway leaves -- a
counter or reference count too high (tests/gatewayproc.py) -- which ``fsck --repair`` must
clear.  Any other answer than
OK or ``NO [UNAVAILABLE]`` / ``451 4.3.0``, or a dropped IMAP connection, is an error too.
"""

from __future__ import annotations

import os
import random
import re
import socket
import threading
import time
from dataclasses import dataclass, field

from mailstore.backends.hbase import HBaseBackend
from mailstore.schema import create_schema
from mailstore.store import MailStore
from tests.gatewayproc import GatewayProcess, free_port, fsck, hbase_args, unsafe_leftovers
from tests.imapproc import Client, ServerProcess
from tests.mailgen import message

PASSWORD = "pw"
USERS = ("alice", "bob", "carol")
FOLDERS = ("INBOX", "Work")
# An intent is rolled forward by another session only once its owner must be gone (decision
# 0003): the timeout must exceed the longest a live operation can take, here a MOVE of five
# messages on a loaded machine through outages with calls bounded by timeout_ms.  At 0.5 s
# (as tests/moveloop.py, whose single client never races itself) a second session of the same
# user rolled forward moves still in progress and wrote their copies twice.
INTENT_TIMEOUT = 5.0
ABANDON_AFTER = 0.5
CONFIG = f"""[store]
intent_timeout = {INTENT_TIMEOUT}
abandon_after = {ABANDON_AFTER}

[hbase]
timeout_ms = 2000
"""
GONE = None     # a ledger location: expunged (or an APPEND that never happened)


@dataclass
class Figures:
    faults: int = 0
    appends: int = 0
    appends_refused: int = 0
    stores: int = 0
    moves: int = 0
    moved_messages: int = 0
    expunges: int = 0
    expunged_messages: int = 0
    deliveries: int = 0
    deliveries_refused: int = 0
    unavailable: int = 0
    messages_checked: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)
    uid_reused: list[str] = field(default_factory=list)
    flags_wrong: list[str] = field(default_factory=list)
    counters_wrong: list[str] = field(default_factory=list)
    counters_low: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    fsck_problems: list[dict] = field(default_factory=list)
    fsck_unsafe: list[dict] = field(default_factory=list)
    fsck_after_repair: int = -1
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def failures(self) -> list:
        """What breaks a documented guarantee.  A counter *above* its rows is the safe
        leftover of a call cut after the gateway applied part of it (decision 0004), listed
        in ``counters_wrong`` and repaired by fsck; one below is a failure."""
        return (self.lost + self.duplicated + self.misplaced + self.uid_reused
                + self.flags_wrong + self.counters_low + self.errors + self.fsck_unsafe
                + ([] if self.fsck_after_repair == 0 else ["fsck after --repair not clean"]))


class Ledger:
    """Where each message may be: (user, Message-ID) -> the set of mailboxes it may be in
    (``GONE`` among them when it may be absent), and whether it must carry \\Flagged \\Seen."""

    def __init__(self):
        self.lock = threading.Lock()
        self.where: dict[tuple[str, str], set] = {}
        self.flagged: dict[tuple[str, str], bool] = {}
        self.uids: dict[tuple[str, str, int, int], str] = {}   # (user, box, validity, uid)
        self.next = 0

    def new_id(self) -> int:
        with self.lock:
            self.next += 1
            return self.next

    def put(self, user: str, mid: str, places: set) -> None:
        with self.lock:
            self.where[(user, mid)] = set(places)

    def flag(self, user: str, mid: str, value: bool) -> None:
        with self.lock:
            self.flagged[(user, mid)] = value

    def uid(self, figures: Figures, user: str, box: str, validity: int, uid: int, mid: str
            ) -> None:
        with self.lock:
            before = self.uids.setdefault((user, box, validity, uid), mid)
        if before != mid:
            figures.uid_reused.append(f"{user} {box} UID {uid}: {before} then {mid}")


def _uid_set(text: bytes) -> list[int]:
    out = []
    for part in text.split(b","):
        low, _, high = part.partition(b":")
        out.extend(range(int(low), int(high or low) + 1))
    return out


class ImapWorker:
    """One IMAP session of ``user``, working only on messages it appended itself, so that its
    knowledge of their UIDs is exact whatever the other sessions do."""

    def __init__(self, port: int, user: str, seed: int, ledger: Ledger, figures: Figures,
                 stop: threading.Event):
        self.port, self.user, self.ledger, self.figures, self.stop = (
            port, user, ledger, figures, stop)
        self.rng = random.Random(seed)
        self.known: dict[str, dict[int, str]] = {box: {} for box in FOLDERS}
        self.selected: str | None = None
        self.client: Client | None = None
        self.tag = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                if self.client is None:
                    self.client = Client(self.port, timeout=30)
                    self.command(f"LOGIN {self.user} {PASSWORD}")
                    self.selected = None
                self.step()
            except (OSError, ConnectionError) as exc:
                self.figures.errors.append(f"{self.user}: connection lost: {exc!r}")
                self.drop()
            except AssertionError as exc:
                self.figures.errors.append(f"{self.user}: {exc}")
        if self.client is not None:
            self.drop()

    def drop(self) -> None:
        try:
            self.client.close()
        except Exception:
            pass
        self.client = None
        # Nothing known is lost by reconnecting: the UIDs stay those of the messages.

    def command(self, text: str, literal: bytes | None = None) -> tuple[bool, list[bytes]]:
        """Send one command; (True, lines) for OK, (False, lines) for NO [UNAVAILABLE];
        anything else fails the run's assertion (AssertionError)."""
        self.tag += 1
        tag = f"w{self.tag}"
        if literal is None:
            lines = self.client.cmd(tag, text)
        else:
            self.client.send(f"{tag} {text} {{{len(literal)}+}}\r\n".encode() + literal
                             + b"\r\n")
            lines = self.client.until_tagged(tag)
        last = lines[-1]
        if last.startswith(f"{tag} OK".encode()):
            return True, lines
        if last.startswith(f"{tag} NO [UNAVAILABLE]".encode()):
            self.figures.unavailable += 1
            time.sleep(0.05)    # as a client would, rather than spin while the store is down
            return False, lines
        raise AssertionError(f"{text[:40]!r} answered {last[:200]!r}")

    def select(self, box: str) -> None:
        ok, _ = self.command(f"SELECT {box}")
        # A failed SELECT leaves no mailbox selected (RFC 3501 6.3.1).
        self.selected = box if ok else None

    def step(self) -> None:
        if self.selected is None:
            self.select(self.rng.choice(FOLDERS))
            return
        roll = self.rng.random()
        mine = self.known[self.selected]
        if roll < 0.45 or not mine:
            self.append()
        elif roll < 0.6:
            self.store(self.pick(mine))
        elif roll < 0.8:
            self.move(self.pick(mine))
        elif roll < 0.9:
            self.expunge(self.pick(mine))
        else:
            self.select(FOLDERS[1 - FOLDERS.index(self.selected)])

    def pick(self, mine: dict[int, str]) -> list[int]:
        return sorted(self.rng.sample(sorted(mine), min(len(mine), self.rng.choice((1, 2, 5)))))

    def append(self) -> None:
        n = self.ledger.new_id()
        mid = f"m{n}@test"
        seen = self.rng.random() < 0.3
        body = message(n, size=self.rng.choice((300, 3000, 12000)))
        box = self.selected
        self.ledger.put(self.user, mid, {box, GONE})     # before: the answer may never come
        ok, lines = self.command(f"APPEND {box}" + (" (\\Seen)" if seen else ""), body)
        if not ok:
            self.figures.appends_refused += 1
            return
        found = re.search(rb"APPENDUID (\d+) (\d+)", lines[-1])
        assert found, lines[-1]
        validity, uid = int(found.group(1)), int(found.group(2))
        self.ledger.uid(self.figures, self.user, box, validity, uid, mid)
        self.ledger.put(self.user, mid, {box})
        self.known[box][uid] = mid
        self.figures.appends += 1

    def store(self, uids: list[int]) -> None:
        mine = self.known[self.selected]
        ok, _ = self.command(f"UID STORE {','.join(map(str, uids))} +FLAGS.SILENT "
                             "(\\Flagged \\Seen)")
        if ok:
            self.figures.stores += 1
            for uid in uids:
                self.ledger.flag(self.user, mine[uid], True)

    def move(self, uids: list[int]) -> None:
        source = self.selected
        target = FOLDERS[1 - FOLDERS.index(source)]
        mine = self.known[source]
        mids = {uid: mine.pop(uid) for uid in uids}
        for mid in mids.values():     # before: the answer may never come
            self.ledger.put(self.user, mid, {source, target})
        ok, lines = self.command(f"UID MOVE {','.join(map(str, uids))} {target}")
        if not ok:
            return
        self.figures.moves += 1
        self.figures.moved_messages += len(uids)
        found = re.search(rb"COPYUID (\d+) ([\d,:]+) ([\d,:]+)", b"\n".join(lines))
        assert found, lines
        validity = int(found.group(1))
        for old, new in zip(_uid_set(found.group(2)), _uid_set(found.group(3)), strict=True):
            mid = mids[old]
            self.ledger.uid(self.figures, self.user, target, validity, new, mid)
            self.ledger.put(self.user, mid, {target})
            self.known[target][new] = mid

    def expunge(self, uids: list[int]) -> None:
        box = self.selected
        mine = self.known[box]
        numbers = ",".join(map(str, uids))
        ok, _ = self.command(f"UID STORE {numbers} +FLAGS.SILENT (\\Deleted)")
        if not ok:
            return
        mids = [mine.pop(uid) for uid in uids]
        for mid in mids:
            self.ledger.put(self.user, mid, {box, GONE})
        ok, _ = self.command(f"UID EXPUNGE {numbers}")
        if ok:
            self.figures.expunges += 1
            self.figures.expunged_messages += len(uids)
            for mid in mids:
                self.ledger.put(self.user, mid, {GONE})


def lmtp_worker(port: int, seed: int, ledger: Ledger, figures: Figures,
                stop: threading.Event) -> None:
    """Deliver to 1-3 of the users at a time over LMTP (RFC 2033), raw, reading one reply per
    accepted recipient after the data; a 250 is a message that must be there once."""
    rng = random.Random(seed)
    while not stop.is_set():
        users = rng.sample(USERS, rng.randint(1, len(USERS)))
        n = ledger.new_id()
        mid = f"m{n}@test"
        for user in users:
            ledger.put(user, mid, {"INBOX", GONE})
        try:
            deliver(port, users, message(n, size=rng.choice((500, 5000))), mid, ledger, figures)
        except (OSError, ConnectionError) as exc:
            figures.errors.append(f"LMTP: connection lost: {exc!r}")


def deliver(port: int, users: list[str], data: bytes, mid: str, ledger: Ledger,
            figures: Figures) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock, \
            sock.makefile("rb") as reader:
        def reply() -> bytes:
            line = reader.readline()
            while line[3:4] == b"-":
                line = reader.readline()
            if not line:
                raise ConnectionError("LMTP connection closed")
            return line.rstrip()

        def expect(line: bytes, what: str) -> bool:
            if line.startswith(b"451 4.3.0"):
                figures.deliveries_refused += 1
                time.sleep(0.05)
                return False
            if not line.startswith((b"2", b"3")):
                figures.errors.append(f"LMTP {what} answered {line[:120]!r}")
                return False
            return True

        reply()
        sock.sendall(b"LHLO loop\r\n")
        reply()
        sock.sendall(b"MAIL FROM:<a@example.org>\r\n")
        if not expect(reply(), "MAIL"):
            return
        accepted = []
        for user in users:
            sock.sendall(f"RCPT TO:<{user}@localhost>\r\n".encode())
            if expect(reply(), "RCPT"):
                accepted.append(user)
        for user in set(users) - set(accepted):
            ledger.put(user, mid, {GONE})
        if not accepted:
            sock.sendall(b"QUIT\r\n")
            return
        sock.sendall(b"DATA\r\n")
        if not reply().startswith(b"354"):
            return
        sock.sendall(data + b".\r\n")
        for user in accepted:
            if expect(reply(), "DATA"):
                ledger.put(user, mid, {"INBOX"})
                figures.deliveries += 1
        sock.sendall(b"QUIT\r\n")


def killer(gateway: GatewayProcess, rng: random.Random, faults: int, until: float,
           figures: Figures, stop: threading.Event, busy: bool = False) -> None:
    """SIGKILL the gateway at a random moment, leave it down a random while, start it again.
    ``busy``: go on past ``faults`` until an APPEND and a delivery were acknowledged."""
    while ((figures.faults < faults
            or busy and not (figures.appends and figures.deliveries))
           and time.monotonic() < until and not stop.is_set()):
        time.sleep(rng.uniform(0.1, 1.2))
        gateway.kill()
        figures.faults += 1
        time.sleep(rng.uniform(0.0, 0.4))
        gateway.start(timeout=30)


def settle(port: int) -> None:
    """Open every mailbox twice, ``intent_timeout`` and ``abandon_after`` apart: the opens roll
    the intents of cut operations forward and give up UIDs allocated and never written."""
    for user in USERS:
        client = Client(port, timeout=30)
        try:
            client.cmd("a", f"LOGIN {user} {PASSWORD}")
            time.sleep(INTENT_TIMEOUT if user == USERS[0] else 0)   # once for all users
            for round_ in range(3):
                time.sleep(ABANDON_AFTER + 0.1)
                for box in FOLDERS:
                    client.cmd(f"s{round_}", f"STATUS {box} (MESSAGES UNSEEN)")
            client.cmd("z", "LOGOUT")
        finally:
            client.close()


def status(client: Client, box: str) -> dict[str, int]:
    lines = client.cmd("st", f"STATUS {box} (MESSAGES UNSEEN)")
    assert lines[-1].startswith(b"st OK"), lines
    found = re.search(rb"\((.*)\)", lines[0]).group(1).split()
    return {k.decode(): int(v) for k, v in zip(found[::2], found[1::2], strict=True)}


def check(port: int, gateway: GatewayProcess, ledger: Ledger, figures: Figures) -> None:
    """Compare what the store holds with the ledger, and STATUS and counters with the rows."""
    found: dict[tuple[str, str], list[str]] = {}
    flags: dict[tuple[str, str], set[str]] = {}
    backend = HBaseBackend(host="127.0.0.1", port=gateway.port, pool_size=1)
    store = MailStore(backend, create_tables=False)
    try:
        for user in USERS:
            client = Client(port, timeout=60)
            try:
                client.cmd("a", f"LOGIN {user} {PASSWORD}")
                for box in FOLDERS:
                    said = status(client, box)
                    mailbox = store.mailboxes.get(user, box)
                    views = list(store.messages.scan(mailbox.id, columns=[b"m:s", b"f:v"]))
                    rows = (len(views), sum(1 for v in views if not v.flags.seen),
                            sum(v.record.size for v in views))
                    got = (said["MESSAGES"], said["UNSEEN"], mailbox.size)
                    if got != rows:
                        figures.counters_wrong.append(
                            f"{user} {box} ({mailbox.id.hex()}): STATUS/size counter {got}, "
                            f"rows {rows}")
                    if any(g < r for g, r in zip(got, rows, strict=True)):
                        figures.counters_low.append(
                            f"{user} {box}: STATUS/size counter {got}, rows {rows}")
                    client.cmd("b", f"EXAMINE {box}")
                    lines = client.cmd("c", "UID FETCH 1:* (FLAGS BODY.PEEK[HEADER.FIELDS "
                                            "(MESSAGE-ID)])")
                    assert lines[-1].startswith(b"c OK"), lines[-1]
                    for line in lines[:-1]:
                        mid = re.search(rb"Message-ID: <([^>]+)>", line)
                        if not mid:
                            continue
                        key = (user, mid.group(1).decode())
                        found.setdefault(key, []).append(box)
                        flag_text = re.search(rb"FLAGS \(([^)]*)\)", line).group(1)
                        flags[key] = set(flag_text.decode().split())
                client.cmd("z", "LOGOUT")
            finally:
                client.close()
    finally:
        store.close()
    for key, places in sorted(ledger.where.items()):
        where = found.get(key, [])
        name = f"{key[0]} {key[1]}"
        if len(where) > 1:
            # The ledger says whether the operation that led here was acknowledged (one
            # place) or refused (several: its outcome unknown to the client).
            figures.duplicated.append(f"{name} in {where}, ledger {sorted(places, key=str)}")
        elif not where and GONE not in places:
            figures.lost.append(f"{name}, expected in {sorted(places, key=str)}")
        elif where and where[0] not in places:
            figures.misplaced.append(f"{name} in {where[0]}, expected {sorted(places, key=str)}")
        if where and ledger.flagged.get(key) and not {"\\Flagged", "\\Seen"} <= flags[key]:
            figures.flags_wrong.append(f"{name}: {sorted(flags[key])}")
    for key in set(found) - set(ledger.where):
        figures.errors.append(f"{key} found but never sent")
    figures.messages_checked = len(ledger.where)


def run_loop(work_dir: str, faults: int, seconds: float, seed: int, clients: int = 4,
             log=lambda line: None, busy: bool = False) -> Figures:
    """Kill the gateway ``faults`` times (or for ``seconds``) under ``clients`` IMAP sessions
    and one LMTP deliverer, then check everything (see the module's docstring).  ``busy``:
    and on until an APPEND and a delivery were acknowledged (the gateway may be down in
    most of the moments a few faults leave)."""
    figures = Figures()
    ledger = Ledger()
    rng = random.Random(seed)
    conf = os.path.join(work_dir, "faultloop.conf")
    with open(conf, "w") as f:
        f.write(CONFIG)
    gateway = GatewayProcess(os.path.join(work_dir, "hbase"), free_port()).start()
    try:
        backend = HBaseBackend(host="127.0.0.1", port=gateway.port, pool_size=1)
        try:
            create_schema(backend)
            store = MailStore(backend, create_tables=False)
            for user in USERS:
                store.create_user(user, PASSWORD)
                store.create_mailbox(user, "Work")
        finally:
            backend.close()
        start = time.monotonic()
        with ServerProcess(os.path.join(work_dir, "unused"), "--lmtp-port", "auto",
                           *hbase_args(gateway), config=conf) as server:
            stop = threading.Event()
            workers = [threading.Thread(target=ImapWorker(
                server.port, USERS[i % len(USERS)], rng.random(), ledger, figures, stop).run)
                for i in range(clients)]
            workers.append(threading.Thread(target=lmtp_worker, args=(
                server.ports["lmtp"], rng.random(), ledger, figures, stop)))
            for worker in workers:
                worker.start()
            try:
                last = -1
                kill = threading.Thread(target=killer, args=(
                    gateway, random.Random(rng.random()), faults, start + seconds, figures,
                    stop, busy))
                kill.start()
                while kill.is_alive():
                    kill.join(timeout=5)
                    if figures.faults // 10 != last // 10:
                        last = figures.faults
                        log(f"faults {figures.faults}: {figures.appends} appends, "
                            f"{figures.moves} moves, {figures.deliveries} deliveries, "
                            f"{figures.unavailable} NO [UNAVAILABLE], "
                            f"{len(figures.errors)} errors")
            finally:
                stop.set()
                for worker in workers:
                    worker.join(timeout=120)
            settle(server.port)
            check(server.port, gateway, ledger, figures)
        status_code, report = fsck(gateway)
        figures.fsck_problems = report.get("problems", [])
        figures.fsck_unsafe = unsafe_leftovers(report)
        if status_code:
            fsck(gateway, "--repair")
        figures.fsck_after_repair = len(fsck(gateway)[1].get("problems", []))
        figures.seconds = round(time.monotonic() - start, 1)
    finally:
        gateway.stop()
    return figures
