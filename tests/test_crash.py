"""Crash safety: a real subprocess killed with SIGKILL at random points while appending, moving,
copying and expunging.  After recovery (fsck --repair), every acknowledged message is present
exactly once and every counter matches the rows.
"""

from __future__ import annotations

import os
import random
import selectors
import signal
import subprocess
import sys
import time

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.fsck import Fsck
from mailstore.store import MailStore

ROUNDS = 4


def run_until_killed(data_dir: str, tag: str, acks: set[str], rng: random.Random) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "tests.workers", "churn", data_dir, tag],
                            stdout=subprocess.PIPE)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buffer = b""
    kill_after = rng.randint(5, 40)  # acknowledged messages before the kill
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if not sel.select(timeout=1):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.startswith(b"ACK "):
                    acks.add(line.split()[1].decode())
            if len([a for a in acks if a.startswith(tag + "-")]) >= kill_after:
                # Land the kill somewhere inside the next operation, not between them.
                time.sleep(rng.random() * 0.02)
                break
        else:
            raise AssertionError("worker made no progress")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        sel.close()
        proc.stdout.close()
    # Lines written before the kill but not yet read are acknowledgements too.
    for line in (buffer + b"").split(b"\n"):
        if line.startswith(b"ACK ") and len(line.split()) == 2:
            acks.add(line.split()[1].decode())


def message_ids(store: MailStore) -> list[str]:
    return [i for m in store.list_mailboxes("u") for i in message_ids_in(store, m)]


def test_sigkill_at_random_points_loses_and_duplicates_nothing(tmp_path):
    data_dir = str(tmp_path / "store")
    rng = random.Random(int(os.environ.get("CRASH_SEED", time.time())))
    acks: set[str] = set()
    for round_ in range(ROUNDS):
        run_until_killed(data_dir, f"r{round_}", acks, rng)
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"), abandon_after=0.2,
                      intent_timeout=0)
    Fsck(store, repair=True).run()
    report = Fsck(store).run()
    assert report.ok, [p.as_dict() for p in report.problems]
    everywhere = message_ids(store)
    missing = acks - set(everywhere)
    assert not missing, f"acknowledged messages lost: {sorted(missing)}"
    # Trash holds copies (the worker copies, then expunges them; a kill in between leaves one).
    # Anywhere else, a message must be in exactly one place: a move never leaves two.
    moved = [i for m in store.list_mailboxes("u") if m.name != "Trash"
             for i in message_ids_in(store, m)]
    dupes = {i for i in moved if moved.count(i) > 1}
    assert not dupes, f"messages visible twice: {sorted(dupes)}"
    for mailbox in store.list_mailboxes("u"):
        assert mailbox.messages == len(store.uids(mailbox))
    store.close()


def message_ids_in(store: MailStore, mailbox) -> list[str]:
    views = store.fetch(mailbox, store.uids(mailbox), [b"m:hdr"])
    return [v.header.split(b"Message-ID: <")[1].split(b"@")[0].decode() for v in views]
