"""How many transactions the embedded store commits for a mail operation (issue 14).

Every commit writes the pages it changed to SQLite's log and pays the commit's work; a STORE
of one message made five (bench/RESULTS.md).  Durability is unchanged by grouping: a crash
rolls back a whole group, never part of one (tests/test_crash*.py).
"""

from __future__ import annotations

from mailstore.backends.embedded import EmbeddedBackend


def committed_transactions(backend: EmbeddedBackend, call) -> int:
    """How many SQLite transactions ``call`` (made in this thread) committed: COMMITs, plus
    writing statements run on their own (an implicit transaction each)."""
    db = backend._db()
    seen: list[tuple[str, bool]] = []
    db.set_trace_callback(lambda sql: seen.append((sql.split(None, 1)[0].upper(),
                                                   db.in_transaction)))
    try:
        call()
    finally:
        db.set_trace_callback(None)
    return sum(1 for word, in_txn in seen
               if word == "COMMIT" or (word in ("INSERT", "UPDATE", "DELETE") and not in_txn))


def test_a_store_of_one_message_is_one_transaction(tmp_path):
    """RFC 3501 6.4.6 STORE: the change number and MODSEQ, the change-log entry opened and
    closed, the flag cell and the watermark are one commit on the embedded store (they
    were five); \\Seen flips (the journal and the unseen count) included."""
    from mailstore.store import MailStore
    from tests.mailgen import message

    store = MailStore(EmbeddedBackend(str(tmp_path)))
    store.create_user("u", "pw")
    store.append("u", "INBOX", message(1))
    inbox = store.mailbox("u", "INBOX")
    uid = store.uids(inbox)[0]
    for flags in (["\\Flagged"], ["\\Seen"]):
        assert committed_transactions(
            store.backend, lambda f=flags: store.store_flags(inbox, [uid], f, "add")) == 1
        assert store.fetch(inbox, [uid])[0].flags.names >= set(flags)
    assert store.mailbox("u", "INBOX").unseen == 0
    store.backend.close()
