"""Worker processes for the concurrency and crash tests: real subprocesses on one store.

    python -m tests.workers append DATA_DIR TAG THREADS COUNT
    python -m tests.workers churn DATA_DIR TAG

Each acknowledged message is printed as ``ACK <message-id>`` (flushed) only after the store
returned, so the parent knows exactly which messages the store promised to keep.
"""

from __future__ import annotations

import sys
import threading

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.errors import AlreadyExists
from mailstore.store import MailStore
from tests.mailgen import message

_print_lock = threading.Lock()


def say(line: str) -> None:
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def open_store(data_dir: str) -> MailStore:
    return MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"), abandon_after=2.0)


def ensure_user(store: MailStore) -> None:
    try:
        store.create_user("u", "pw")
    except AlreadyExists:
        pass


def append(data_dir: str, tag: str, threads: int, count: int) -> None:
    store = open_store(data_dir)
    ensure_user(store)

    def work(t: int) -> None:
        for i in range(count):
            mid = f"{tag}-{t}-{i}"
            _, uid = store.append("u", "INBOX", message(0, subject=mid).replace(
                b"<m0@test>", f"<{mid}@test>".encode()))
            say(f"ACK {mid} {uid}")

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    say("DONE")


def churn(data_dir: str, tag: str) -> None:
    """Append forever; every few messages move a batch to Archive.  Killed from outside."""
    store = open_store(data_dir)
    ensure_user(store)
    say("READY")
    i = 0
    while True:
        mid = f"{tag}-{i}"
        store.append("u", "INBOX", message(0, subject=mid, size=300 + (i % 7) * 40000)
                     .replace(b"<m0@test>", f"<{mid}@test>".encode()))
        say(f"ACK {mid}")
        i += 1
        if i % 5 == 0:
            inbox = store.mailbox("u", "INBOX")
            uids = store.uids(inbox)[:3]
            store.move(inbox, uids, store.mailbox("u", "Archive"))
        if i % 7 == 0:
            inbox = store.mailbox("u", "INBOX")
            store.copy(inbox, store.uids(inbox)[:1], store.mailbox("u", "Trash"))
            trash = store.mailbox("u", "Trash")
            store.expunge(trash, store.uids(trash)[:1])


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "append":
        append(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "churn":
        churn(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown mode {mode}")
