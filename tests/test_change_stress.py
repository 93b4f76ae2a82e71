"""Concurrency: several writers, each its own store connection (as separate processes are),
change one mailbox at random while a session follows it through its refreshes.

RFC 3501 7.4.1 / 2.3.1.2: a client that applies the untagged EXPUNGE (by sequence number) and
EXISTS it is sent must end up with exactly the server's UID list, and flag changes must all be
seen.  This is the change log's and the index's contract (docs/decisions/0009) under real
interleavings, not only in sequence.
"""

from __future__ import annotations

import random
import threading

from imapserver.imap.selected import SelectedMailbox
from mailstore.store import MailStore


def msg(n: int) -> bytes:
    return f"From: a@example.com\r\nSubject: s{n}\r\n\r\nbody {n}\r\n".encode()


def test_a_session_follows_concurrent_writers_exactly(connect):
    setup = MailStore(connect())
    setup.create_user("ann", "pw", default_folders=False)
    setup.create_mailbox("ann", "Other")
    for i in range(30):
        setup.append("ann", "INBOX", msg(i))
    inbox = setup.mailbox("ann", "INBOX")
    other = setup.mailbox("ann", "Other")
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        store = MailStore(connect(), create_tables=False)
        rng = random.Random(seed)
        try:
            for step in range(40):
                uids = store.uids(inbox)
                op = rng.choice(["append", "flags", "flags", "flags", "expunge", "move"])
                if op == "append" or len(uids) < 5:
                    store.append("ann", "INBOX", msg(seed * 1000 + step),
                                 rng.choice([[], ["\\Seen"]]))
                elif op == "flags":
                    store.store_flags(inbox, rng.sample(uids, 3),
                                      rng.choice([["\\Seen"], ["\\Flagged"], ["$k"]]),
                                      rng.choice(["add", "remove"]))
                elif op == "expunge":
                    store.expunge(inbox, rng.sample(uids, 2))
                else:
                    store.move(inbox, rng.sample(uids, 1), other)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    reader_store = MailStore(connect(), create_tables=False)
    session = SelectedMailbox(reader_store, inbox, readonly=False)
    session.load()
    client = list(session.uids)   # what a client following the responses believes
    flags_seen: dict[int, frozenset[str]] = {}

    def follow() -> None:
        changes = session.refresh()
        for seq in changes.expunged_seqs:          # highest first, each valid when applied
            del client[seq - 1]
        if changes.exists is not None:
            assert changes.exists >= len(client)
            client.extend(session.uids[len(client):changes.exists])
        assert client == list(session.uids)
        for seq, uid, names, _modseq in changes.flags:
            assert client[seq - 1] == uid
            flags_seen[uid] = names

    threads = [threading.Thread(target=writer, args=(seed,)) for seed in (1, 2, 3)]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            follow()
    finally:
        for t in threads:
            t.join()
    assert not errors, errors
    follow()
    truth = setup.uids(inbox)
    assert client == truth
    views = {v.uid: v.flags.names for v in setup.fetch(inbox, truth)}
    index = session.index
    assert set(index.unseen) == {u for u, n in views.items() if "\\Seen" not in n}
    assert set(index.flagged["\\Flagged"]) == {u for u, n in views.items()
                                               if "\\Flagged" in n}
    # Every flag change is reported, so the last report of a message is its present flags.
    for uid, names in flags_seen.items():
        if uid in views and names != views[uid]:
            raise AssertionError(f"UID {uid}: last reported {set(names)}, is {set(views[uid])}")
    # A process opening the mailbox now agrees.
    fresh = MailStore(connect(), create_tables=False).open_index(inbox)
    assert list(fresh.uids) == truth
