"""A SIGKILL loop with MOVE: a real ``imapserver`` killed at random moments while a client
APPENDs sets of 1-100 messages, ``UID MOVE``s each set to ``Work`` (and some back), and
``UID STORE``s ``\\Seen`` on some (issue 16 part 4).  Used by tests/test_crash_move_loop.py
(bounded to seconds) and bench/move_crash_loop.py (hundreds of kills).

After every restart, once the intent timeout has passed and the mailboxes were opened (the
roll forward a client's STATUS brings), STATUS MESSAGES and UNSEEN and the size counter must
equal the rows, and every acknowledged message must be in INBOX or Work exactly once.  At the
end ``mailadmin fsck`` must find no problem at all.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from dataclasses import dataclass, field

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.admincli import run as mailadmin
from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message

USER, PASSWORD = "alice", "pw"
INTENT_TIMEOUT = 0.5
ABANDON_AFTER = 0.5
SET_SIZES = (1, 1, 2, 3, 5, 10, 20, 50, 100)
CONFIG = f"""[store]
intent_timeout = {INTENT_TIMEOUT}
abandon_after = {ABANDON_AFTER}
synchronous = NORMAL
"""


@dataclass
class Figures:
    kills: int = 0
    appends: int = 0
    moves: int = 0
    moved_messages: int = 0
    stores: int = 0
    checks: int = 0
    seconds: float = 0.0
    mismatches: list[str] = field(default_factory=list)
    fsck: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class Killed(Exception):
    """The server went away under the client."""


def _status(client: Client, tag: str, name: str) -> dict[str, int]:
    lines = client.cmd(tag, f"STATUS {name} (MESSAGES UNSEEN)")
    assert lines[-1].split()[1] == b"OK", lines
    found = re.search(rb"\((.*)\)", lines[0]).group(1).split()
    return {k.decode(): int(v) for k, v in zip(found[::2], found[1::2], strict=True)}


def _rows(store: MailStore, name: str) -> tuple[int, int, int, dict[str, int]]:
    """(messages, unseen, bytes) as the rows say, without any recovery; counters as stored."""
    mailbox = store.mailboxes.get(USER, name)
    views = list(store.messages.scan(mailbox.id, columns=[b"m:s", b"f:v", b"m:hdr"]))
    ids: dict[str, int] = {}
    for v in views:
        mid = v.header.split(b"Message-ID: <")[1].split(b">")[0].decode()
        ids[mid] = ids.get(mid, 0) + 1
    rows = (len(views), sum(1 for v in views if not v.flags.seen),
            sum(v.record.size for v in views))
    return (*rows, ids, (mailbox.messages, mailbox.unseen, mailbox.size))


def check(data_dir: str, port: int, acked: set[str], figures: Figures) -> None:
    """After a restart: let the roll forward run, then compare STATUS with the rows."""
    client = Client(port)
    try:
        client.cmd("a", f"LOGIN {USER} {PASSWORD}")
        time.sleep(INTENT_TIMEOUT + 0.1)
        for i, name in enumerate(("INBOX", "Work")):   # rolls intents forward, notes stuck
            _status(client, f"b{i}", name)              # UIDs
        time.sleep(ABANDON_AFTER + 0.1)
        status = {name: _status(client, f"c{i}", name)  # gives the stuck UIDs up
                  for i, name in enumerate(("INBOX", "Work"))}
        client.cmd("z", "LOGOUT")
    finally:
        client.close()
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"), create_tables=False)
    try:
        seen: dict[str, int] = {}
        for name in ("INBOX", "Work"):
            messages, unseen, size, ids, counters = _rows(store, name)
            got = (status[name]["MESSAGES"], status[name]["UNSEEN"], counters[2])
            if got != (messages, unseen, size):
                figures.mismatches.append(f"after kill {figures.kills}: {name} STATUS/size "
                                          f"{got}, rows {(messages, unseen, size)}")
            for mid, n in ids.items():
                seen[mid] = seen.get(mid, 0) + n
        lost = sorted(acked - set(seen))
        twice = sorted(m for m, n in seen.items() if n > 1)
        if lost or twice:
            figures.mismatches.append(f"after kill {figures.kills}: lost {lost[:5]}, "
                                      f"twice {twice[:5]}")
    finally:
        store.close()
    figures.checks += 1


def workload(port: int, rng: random.Random, acked: set[str], counter, figures: Figures
             ) -> None:
    """Append a set, move it to Work, now and then mark some seen or move some back; until
    the connection dies."""
    client = None
    try:
        client = Client(port)
        client.cmd("a", f"LOGIN {USER} {PASSWORD}")
        client.cmd("b", "SELECT INBOX")
        tag = 0
        while True:
            size = rng.choice(SET_SIZES)
            uids = []
            for _ in range(size):
                n = next(counter)
                body = message(n, size=rng.choice((200, 2000, 9000)))
                flags = "(\\Seen) " if rng.random() < 0.3 else ""
                tag += 1
                client.send(f"t{tag} APPEND INBOX {flags}{{{len(body)}+}}\r\n".encode() + body
                            + b"\r\n")
                reply = client.until_tagged(f"t{tag}")[-1]
                if b" OK " in reply:
                    acked.add(f"m{n}@test")
                    figures.appends += 1
                    uids.append(int(re.search(rb"APPENDUID \d+ (\d+)", reply).group(1)))
            if rng.random() < 0.3:
                tag += 1
                some = ",".join(map(str, uids[: max(1, len(uids) // 2)]))
                client.cmd(f"t{tag}", f"UID STORE {some} +FLAGS (\\Seen)")
                figures.stores += 1
            tag += 1
            reply = client.cmd(f"t{tag}", f"UID MOVE {','.join(map(str, uids))} Work")[-1]
            if b" OK " in reply:
                figures.moves += 1
                figures.moved_messages += len(uids)
            if rng.random() < 0.2:   # some back, so both mailboxes are sources and targets
                tag += 1
                client.cmd(f"t{tag}", "SELECT Work")
                tag += 1
                client.cmd(f"t{tag}", f"MOVE 1:{rng.randint(1, 5)} INBOX")
                tag += 1
                client.cmd(f"t{tag}", "SELECT INBOX")
    except (OSError, ConnectionError, AttributeError, IndexError):
        return  # killed (a reply cut short fails to parse as well)
    finally:
        if client is not None:
            client.close()


def run_loop(data_dir: str, kills: int, seconds: float, seed: int, log=lambda s: None,
             min_moves: int = 0) -> Figures:
    """Kill the server ``kills`` times (or for ``seconds``, whichever comes first), and on
    until ``min_moves`` MOVEs were acknowledged (the kill moments are random: a run of early
    kills may cut every set before its MOVE)."""
    conf = os.path.join(os.path.dirname(data_dir), "moveloop.conf")
    with open(conf, "w") as f:
        f.write(CONFIG)
    make_users(data_dir, (USER, PASSWORD))
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"))
    store.create_mailbox(USER, "Work")
    store.close()
    rng = random.Random(seed)
    acked: set[str] = set()
    counter = iter(range(10**9))
    figures = Figures()
    start = time.monotonic()
    while ((figures.kills < kills or figures.moves < min_moves)
           and time.monotonic() - start < seconds):
        server = ServerProcess(data_dir, config=conf).start()
        try:
            check(data_dir, server.port, acked, figures)
            proc = server.proc
            killer = threading.Timer(rng.uniform(0.05, 0.8), proc.kill)
            killer.start()
            workload(server.port, rng, acked, counter, figures)
            killer.join()
            proc.wait()
        finally:
            server.stop()
        figures.kills += 1
        log(f"kill {figures.kills}: {figures.appends} appends, {figures.moves} moves, "
            f"{len(figures.mismatches)} mismatches")
    with ServerProcess(data_dir, config=conf) as server:
        check(data_dir, server.port, acked, figures)
    out = mailadmin("fsck", "--json", data_dir=data_dir)
    figures.fsck = json.loads(out.stdout)
    figures.seconds = round(time.monotonic() - start, 1)
    return figures
