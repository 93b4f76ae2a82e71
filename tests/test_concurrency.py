"""Several threads in two processes append to one mailbox at once (RFC 3501 2.3.1.1).

Every UID must be unique, no message lost, and a reader polling meanwhile must never see a
message appear with a UID lower than one it has already seen, even though appends commit out of
order across threads and processes.
"""

from __future__ import annotations

import subprocess
import sys
import threading

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.fsck import Fsck
from mailstore.store import MailStore

THREADS, COUNT = 4, 25


def test_two_processes_append_concurrently_and_readers_see_uids_in_order(tmp_path):
    data_dir = str(tmp_path / "store")
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"))
    store.create_user("u", "pw")
    inbox = store.mailbox("u", "INBOX")
    violations: list[str] = []
    stop = threading.Event()
    polls = 0

    def reader() -> None:
        nonlocal polls
        seen: set[int] = set()
        highest = 0
        while not stop.is_set():
            uids = store.uids(inbox)
            polls += 1
            new = [u for u in uids if u not in seen]
            if new and min(new) < highest:
                violations.append(f"uid {min(new)} appeared after {highest}")
            seen.update(new)
            highest = max(seen, default=0)

    watcher = threading.Thread(target=reader)
    watcher.start()
    procs = [subprocess.Popen([sys.executable, "-m", "tests.workers", "append", data_dir,
                               f"p{n}", str(THREADS), str(COUNT)],
                              stdout=subprocess.PIPE, text=True) for n in range(2)]
    try:
        outputs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        stop.set()
        watcher.join()
    assert [p.returncode for p in procs] == [0, 0]
    acks = [line.split() for out in outputs for line in out.splitlines() if line.startswith("ACK")]
    assert len(acks) == 2 * THREADS * COUNT
    uids = [int(a[2]) for a in acks]
    assert len(set(uids)) == len(uids), "a UID was handed out twice"
    assert violations == []
    assert polls > 5
    final = store.uids(inbox)
    assert sorted(uids) == final
    views = store.fetch(inbox, final, [b"m:hdr"])
    ids = sorted(v.header.split(b"Message-ID: <")[1].split(b"@")[0].decode() for v in views)
    assert ids == sorted(a[1] for a in acks)
    assert store.mailbox("u", "INBOX").messages == len(acks)
    assert Fsck(store).run().ok
    store.close()
