"""Mail semantics over every backend (the same tests for embedded and hbase-over-Thrift).

RFC 3501 2.3.1.1 (UIDs, UIDVALIDITY), 6.3.3-6.3.5 (CREATE/DELETE/RENAME), 6.4.3 (EXPUNGE),
6.4.6 (STORE), 6.4.7 (COPY), RFC 6851 (MOVE), RFC 4315 (UIDPLUS pairs).
"""

from __future__ import annotations

import pytest

from mailstore import keys
from mailstore.errors import AlreadyExists, InvalidName, NotFound, OverQuota, TooLarge
from mailstore.fsck import Fsck
from mailstore.store import MailStore
from tests.mailgen import message


@pytest.fixture
def store(backend):
    s = MailStore(backend, abandon_after=2.0)
    yield s


@pytest.fixture
def alice(store):
    return store.create_user("Alice", "secret")


def content_rows(store):
    """Content rows in use.  Content whose last reference went is *released*: it stays for a
    grace period, for sessions still reading it (docs/decisions/0011), see released_rows."""
    released = store.content.pending_releases()
    return [(key, row) for key, row in store.content.table.scan(start=b"", stop=b"\xff" * 17)
            if key not in released]


def released_rows(store):
    """Content rows released (no reference left) and waiting out their grace period."""
    released = store.content.pending_releases()
    rows = [key for key, _ in store.content.table.scan(start=b"", stop=b"\xff" * 17)
            if key in released]
    assert all(store.content.refs(key) <= 0 for key in rows)
    return rows


def test_new_user_has_inbox_and_special_use_folders(store, alice):
    assert alice == "alice"
    names = {m.name: m.special_use for m in store.list_mailboxes(alice)}
    assert names == {"INBOX": None, "Drafts": "\\Drafts", "Sent": "\\Sent", "Trash": "\\Trash",
                     "Junk": "\\Junk", "Archive": "\\Archive"}
    assert "INBOX" in store.subscriptions(alice)
    assert store.authenticate("ALICE", "secret") == "alice"
    assert store.authenticate("alice", "wrong") is None
    assert store.authenticate("nobody", "secret") is None
    with pytest.raises(AlreadyExists):
        store.create_user("alice", "x")


def test_password_is_never_stored_in_clear(store, alice):
    row = store.users.table.row(store.user_keys.user_key(alice))
    assert all(b"secret" not in value for value in row.values())
    assert row[b"a:pw"].startswith(b"scrypt$")


def test_append_assigns_ascending_uids_and_reads_back_exact_bytes(store, alice):
    data = [message(i) for i in range(5)]
    results = [store.append(alice, "INBOX", d) for d in data]
    inbox = store.mailbox(alice, "inbox")
    assert [uid for _, uid in results] == [1, 2, 3, 4, 5]
    assert {v for v, _ in results} == {inbox.uidvalidity}
    assert store.uids(inbox) == [1, 2, 3, 4, 5]
    assert inbox.messages == 5 and inbox.unseen == 5 and inbox.uidnext == 6
    assert inbox.size == sum(len(d) for d in data)
    for view in store.fetch(inbox, [1, 3, 5]):
        assert store.read_message(view) == data[view.uid - 1]


def test_newest_page_is_newest_first_with_envelopes(store, alice):
    for i in range(30):
        store.append(alice, "INBOX", message(i))
    page = store.newest(store.mailbox(alice, "INBOX"), 25)
    assert [v.uid for v in page] == list(range(30, 5, -1))
    assert page[0].envelope is not None
    assert page[0].header.startswith(b"From: Alice")
    assert page[0].header.endswith(b"\r\n\r\n")


def test_flags_change_by_mode_bump_modseq_and_unseen(store, alice):
    for i in range(3):
        store.append(alice, "INBOX", message(i), flags=["\\seen"] if i == 0 else [])
    inbox = store.mailbox(alice, "INBOX")
    assert inbox.unseen == 2
    before = inbox.highest_modseq
    changed, failed = store.store_flags(inbox, [2, 3], ["\\Seen", "$Work"], "add")
    assert [uid for uid, _ in changed] == [2, 3] and not failed
    assert all(f.modseq > before for _, f in changed)
    inbox = store.mailbox(alice, "INBOX")
    assert inbox.unseen == 0
    store.store_flags(inbox, [1], ["\\Flagged"], "replace")
    store.store_flags(inbox, [2], ["$Work"], "remove")
    views = {v.uid: v.flags.names for v in store.fetch(inbox, [1, 2, 3])}
    assert views == {1: {"\\Flagged"}, 2: {"\\Seen"}, 3: {"\\Seen", "$Work"}}
    assert store.mailbox(alice, "INBOX").unseen == 1
    # RFC 7162 UNCHANGEDSINCE: a message changed after the given MODSEQ is not touched.
    changed, failed = store.store_flags(inbox, [3], ["\\Deleted"], "add", unchanged_since=1)
    assert changed == [] and failed == [3]


def test_uids_are_never_reused_after_expunge_and_rename(store, alice):
    store.create_mailbox(alice, "Work")
    for i in range(3):
        store.append(alice, "Work", message(i))
    work = store.mailbox(alice, "Work")
    assert store.expunge(work, [3]) == [3]
    store.rename_mailbox(alice, "Work", "Projects/Work")
    renamed = store.mailbox(alice, "Projects/Work")
    assert renamed.id == work.id and renamed.uidvalidity == work.uidvalidity
    assert store.append(alice, "Projects/Work", message(9))[1] == 4
    assert store.uids(renamed) == [1, 2, 4]
    with pytest.raises(NotFound):
        store.mailbox(alice, "Work")
    assert "Projects" in {m.name for m in store.list_mailboxes(alice)}


def test_a_remembered_mailbox_id_never_outlives_a_rename_or_delete_elsewhere(store, alice):
    """Lookups by name remember the id (Mailboxes.get); another process renaming, deleting
    and re-creating names must still be seen at once (RFC 3501 6.3.4, 6.3.5)."""
    other = MailStore(store.backend)  # another process: its own lookups, same store
    store.create_mailbox(alice, "Work")
    first = store.mailbox(alice, "Work")
    assert store.append(alice, "Work", message(1)) == (first.uidvalidity, 1)
    other.rename_mailbox(alice, "Work", "Old")
    other.create_mailbox(alice, "Work")
    second = other.mailbox(alice, "Work")
    assert store.append(alice, "Work", message(2)) == (second.uidvalidity, 1)
    assert store.mailbox(alice, "Work").id == second.id
    other.delete_mailbox(alice, "Work")
    with pytest.raises(NotFound):
        store.append(alice, "Work", message(3))
    other.rename_mailbox(alice, "Old", "Work")  # the first one, back under its old name
    assert store.append(alice, "Work", message(4)) == (first.uidvalidity, 2)
    assert store.uids(store.mailbox(alice, "Work")) == [1, 2]
    with pytest.raises(NotFound):
        store.mailbox(alice, "Old")


def test_a_memoryview_of_wide_items_is_sized_in_bytes(backend):
    """len() of a memoryview counts items: one of 4-byte items that looks under a chunk by
    len() but is over it in bytes must still be stored whole (streamed), and read back."""
    store = MailStore(backend, chunk_size=64 * 1024)
    user = store.create_user("u", "pw")
    data = message(1)
    data += b"x" * (96_000 - len(data))
    source = memoryview(data).cast("I")
    assert len(source) <= store.content.chunk_size < source.nbytes
    _, uid = store.append(user, "INBOX", source)
    view = store.newest(store.mailbox(user, "INBOX"), 1)[0]
    assert view.uid == uid and view.record.size == len(data)
    assert store.open_message(view).read() == data


def test_the_checkpoint_refresh_of_an_append_holds_no_other_writer_up(tmp_path, monkeypatch):
    """Every CHECKPOINT_EVERY UIDs an append refreshes the mailbox's index checkpoint, which
    reads up to that many rows: it must run after the append's transaction is committed."""
    import mailstore.store as store_module
    from mailstore.backends.embedded import EmbeddedBackend
    monkeypatch.setattr(store_module, "CHECKPOINT_EVERY", 3)
    store = MailStore(EmbeddedBackend(str(tmp_path / "e")))
    user = store.create_user("u", "pw")
    seen = []
    real = store.indexes.refresh_checkpoint

    def refresh(mailbox):
        seen.append(store.backend._db().in_transaction)
        return real(mailbox)

    monkeypatch.setattr(store.indexes, "refresh_checkpoint", refresh)
    for i in range(7):
        store.append(user, "INBOX", message(i))
    assert seen == [False, False]
    assert store.uids(store.mailbox(user, "INBOX")) == list(range(1, 8))


def test_rename_moves_children_and_keeps_their_uids(store, alice):
    store.create_mailbox(alice, "a/b/c")
    store.append(alice, "a/b/c", message(1))
    store.rename_mailbox(alice, "a", "z")
    names = {m.name for m in store.list_mailboxes(alice)}
    assert {"z", "z/b", "z/b/c"} <= names and not {"a", "a/b", "a/b/c"} & names
    assert store.uids(store.mailbox(alice, "z/b/c")) == [1]
    with pytest.raises(AlreadyExists):
        store.rename_mailbox(alice, "z", "Sent")
    with pytest.raises(InvalidName):
        store.rename_mailbox(alice, "z", "z/inside")


def test_rename_inbox_moves_its_messages_and_leaves_it_empty(store, alice):
    store.append(alice, "INBOX", message(1))
    store.rename_mailbox(alice, "INBOX", "Old")
    assert store.uids(store.mailbox(alice, "INBOX")) == []
    old = store.mailbox(alice, "Old")
    assert len(store.uids(old)) == 1


def test_delete_and_recreate_gives_new_identity_and_frees_content(store, alice):
    store.create_mailbox(alice, "Tmp")
    store.append(alice, "Tmp", message(1, size=5000))
    tmp = store.mailbox(alice, "Tmp")
    assert len(content_rows(store)) == 1
    store.delete_mailbox(alice, "Tmp")
    assert content_rows(store) == [] and len(released_rows(store)) == 1
    start, stop = keys.message_range(tmp.id)
    assert list(store.messages.table.scan(start=start, stop=stop)) == []
    again = store.create_mailbox(alice, "Tmp")
    assert again.id != tmp.id and again.uidvalidity != tmp.uidvalidity
    assert store.append(alice, "Tmp", message(2))[1] == 1
    with pytest.raises(InvalidName):
        store.delete_mailbox(alice, "INBOX")


def test_copy_shares_content_until_the_last_reference_goes(store, alice):
    store.append(alice, "INBOX", message(1, size=3000))
    inbox, archive = store.mailbox(alice, "INBOX"), store.mailbox(alice, "Archive")
    assert store.copy(inbox, [1], archive) == [(1, 1)]
    assert len(content_rows(store)) == 1
    source = store.fetch(inbox, [1])[0]
    assert store.content.refs(source.record.content) == 2
    store.expunge(inbox, [1])
    copy = store.fetch(store.mailbox(alice, "Archive"), [1])[0]
    assert store.read_message(copy) == message(1, size=3000)
    assert released_rows(store) == []
    store.expunge(store.mailbox(alice, "Archive"), [1])
    assert content_rows(store) == [] and len(released_rows(store)) == 1


def test_move_is_all_or_nothing_and_keeps_flags(store, alice):
    for i in range(4):
        store.append(alice, "INBOX", message(i))
    inbox = store.mailbox(alice, "INBOX")
    store.store_flags(inbox, [2], ["\\Seen"])
    pairs = store.move(inbox, [1, 2, 3], store.mailbox(alice, "Archive"))
    assert pairs == [(1, 1), (2, 2), (3, 3)]
    inbox, archive = store.mailbox(alice, "INBOX"), store.mailbox(alice, "Archive")
    assert store.uids(inbox) == [4] and store.uids(archive) == [1, 2, 3]
    assert inbox.messages == 1 and archive.messages == 3 and archive.unseen == 2
    flags = {v.uid: v.flags.names for v in store.fetch(archive, [1, 2, 3])}
    assert flags[2] == {"\\Seen"}
    for view in store.fetch(archive, [1, 2, 3]):
        assert store.content.refs(view.record.content) == 1
        assert store.read_message(view) == message(view.uid - 1)
    assert store.transfers.pending(inbox.id) == []
    assert Fsck(store).run(alice).ok


def test_deliver_stores_content_once_for_every_recipient(store, alice):
    bob = store.create_user("bob", "pw")
    results = store.deliver([(alice, "INBOX"), (bob, "INBOX"), ("nobody", "INBOX")],
                            message(7, size=20000))
    assert [r.uid for r in results] == [1, 1, None]
    assert isinstance(results[2].error, NotFound)
    assert len(content_rows(store)) == 1
    view = store.fetch(store.mailbox(bob, "INBOX"), [1])[0]
    assert store.content.refs(view.record.content) == 2


def test_bad_input_raises_typed_errors_and_writes_nothing(backend):
    store = MailStore(backend, max_message_size=100_000)
    user = store.create_user("carol", "pw")
    for bad in ("", "a//b", "/a", "a/", "*", "a%b", "x\x00y", "../etc", "a/../b", "x" * 1001):
        with pytest.raises(InvalidName):
            store.create_mailbox(user, bad)
    with pytest.raises(InvalidName):
        store.create_user("bad user", "pw")
    with pytest.raises(NotFound):
        store.append(user, "Nope", message(1))
    with pytest.raises(TooLarge):
        store.append(user, "INBOX", message(1, size=200_000))
    import io
    with pytest.raises(TooLarge):  # streamed: size unknown until read
        store.append(user, "INBOX", io.BytesIO(message(1, size=200_000)))
    store.users.set_quota(user, storage=5000, messages=None)
    store.append(user, "INBOX", message(1, size=3000))
    with pytest.raises(OverQuota):
        store.append(user, "INBOX", message(2, size=3000))
    assert store.uids(store.mailbox(user, "INBOX")) == [1]
    assert len(content_rows(store)) == 1


def test_append_refused_over_quota_gives_back_counts_content_and_uid(store, alice):
    """An APPEND refused over quota (RFC 9208 5.1; RFC 3501 6.3.11 NO) changes nothing a
    client or fsck can see: the counters STATUS reads are as before, its content is gone at
    once (not kept for a grace period: no row ever referred to it).  Its UID may be skipped
    (RFC 3501 2.3.1.1 lets UIDs have gaps), but the next APPEND gets a higher one.  An
    account exactly at its limit still takes the message that reaches it."""
    first, second = message(1, size=3000), message(2, size=3000)
    store.users.set_quota(alice, storage=len(first) + len(second), messages=None)
    store.append(alice, "INBOX", first)
    store.append(alice, "INBOX", second)  # reaches the limit exactly: allowed
    with pytest.raises(OverQuota):
        store.append(alice, "INBOX", message(3, size=10))
    inbox = store.mailbox(alice, "INBOX")
    assert (inbox.messages, inbox.unseen, inbox.size) == (2, 2, len(first) + len(second))
    assert len(content_rows(store)) == 2 and released_rows(store) == []
    assert Fsck(store).run(alice).ok
    store.users.set_quota(alice, storage=None, messages=None)
    _, uid = store.append(alice, "INBOX", message(4))
    assert uid > 2 and store.uids(store.mailbox(alice, "INBOX")) == [1, 2, uid]


def test_delivery_counts_an_accounts_recipients_together_against_its_quota(store, alice):
    """One delivery to two mailboxes of an account with room for one more message (RFC
    9208 5.1): the first gets it, the second is refused over quota, the other recipients
    are not held up by the refusals, and nothing is left over (counters, content: fsck)."""
    store.create_user("bob", "pw")
    store.create_mailbox(alice, "Lists")
    store.users.set_quota(alice, storage=None, messages=1)
    results = store.deliver([(alice, "INBOX"), (alice, "Lists"), (alice, "Nope"),
                             ("nobody", "INBOX"), ("bob", "INBOX")], message(1))
    assert [(r.mailbox, r.uid, type(r.error).__name__) for r in results] == [
        ("INBOX", 1, "NoneType"), ("Lists", None, "OverQuota"), ("Nope", None, "OverQuota"),
        ("INBOX", None, "NotFound"), ("INBOX", 1, "NoneType")]
    assert [m.messages for m in store.list_mailboxes(alice) if m.name != "INBOX"] == [0] * 6
    assert len(content_rows(store)) == 1 and store.content.refs(content_rows(store)[0][0]) == 2
    assert Fsck(store).run(alice).ok and Fsck(store).run("bob").ok


def test_user_names_cannot_reach_other_users_mailboxes(store, alice):
    store.create_user("alice2", "pw")
    store.append("alice2", "INBOX", message(1))
    # Mailbox names are looked up under the user's own prefix only.
    for name in ("../alice2/INBOX", "alice2\x00INBOX"):
        with pytest.raises((NotFound, InvalidName)):
            store.mailbox(alice, name)
    assert {m.owner for m in store.list_mailboxes(alice)} == {"alice"}


def test_message_scans_stay_inside_their_mailbox(store, alice):
    """James's expunge scan could run into the next mailbox; ours are bounded by prefix."""
    low = b"\x11" * 15 + b"\x01"
    high = b"\x11" * 15 + b"\x02"
    for mailbox_id in (low, high):
        store.messages.table.put(keys.message_key(mailbox_id, 1), {b"m:s": b"X"})
    start, stop = keys.message_range(low)
    assert [keys.message_key_mailbox(k) for k, _ in
            store.messages.table.scan(start=start, stop=stop)] == [low]


def test_subscriptions(store, alice):
    store.subscribe(alice, "Nonexistent/Folder")
    assert "Nonexistent/Folder" in store.subscriptions(alice)
    store.unsubscribe(alice, "Nonexistent/Folder")
    with pytest.raises(NotFound):
        store.unsubscribe(alice, "Nonexistent/Folder")


def test_delete_user_removes_everything(store, alice):
    store.append(alice, "INBOX", message(1))
    store.delete_user(alice)
    assert content_rows(store) == [] and len(released_rows(store)) == 1
    assert store.list_mailboxes(alice) == []
    with pytest.raises(NotFound):
        store.user(alice)


def test_verified_logins_are_cached_until_the_password_changes(store, alice):
    import mailstore.users as users_mod
    calls = []
    real = users_mod.verify_password
    users_mod.verify_password = lambda pw, stored: calls.append(pw) or real(pw, stored)
    try:
        assert store.authenticate("alice", "secret") == "alice"
        assert store.authenticate("alice", "secret") == "alice"
        assert calls == ["secret"]  # the second login was answered from the cache
        assert store.authenticate("alice", "wrong") is None  # a wrong password never is
        store.users.set_password("alice", "new-secret")
        assert store.authenticate("alice", "secret") is None
        assert store.authenticate("alice", "new-secret") == "alice"
    finally:
        users_mod.verify_password = real


def test_a_login_verified_lately_is_known_without_the_hash(store, alice):
    """RFC 3501 6.2.3 LOGIN: the IMAP server asks authenticate_cached first (in its reactor
    thread) and the hashing authenticate only on a miss -- so a miss must never be a hit:
    not before the first verification, not for a wrong password or unknown user, not after
    the password changed."""
    assert store.authenticate_cached("alice", "secret") is None   # never verified yet
    assert store.authenticate("alice", "secret") == "alice"
    assert store.authenticate_cached("ALICE", "secret") == "alice"
    assert store.authenticate_cached("alice", "wrong") is None
    assert store.authenticate_cached("nobody", "secret") is None
    assert store.authenticate_cached("bad name\x00", "secret") is None
    store.users.set_password("alice", "new-secret")
    assert store.authenticate_cached("alice", "secret") is None


def test_mailboxes_need_an_existing_user_and_take_their_import_records_along(store, alice):
    with pytest.raises(NotFound):
        store.create_mailbox("ghost", "Folder")
    assert store.list_mailboxes("ghost") == []
    store.create_mailbox(alice, "Imported")
    mailbox = store.mailbox(alice, "Imported")
    records = store.backend.table("JAMES_IMPORTS")
    records.put(keys.import_key(mailbox.id, b"\x01" * 32), {b"i:uid": b"\x00" * 8})
    store.delete_mailbox(alice, "Imported")
    assert list(records.scan(prefix=mailbox.id)) == []


def test_expunge_of_deleted_only_keeps_what_lost_its_deleted_flag(store, alice):
    """RFC 3501 6.4.3: EXPUNGE removes the messages that have \\Deleted.  Candidates a session
    picked a moment ago are checked as the store reads them to expunge, so one whose \\Deleted
    another session just removed stays."""
    uids = [store.append(alice, "INBOX", message(i), ["\\Deleted"])[1] for i in range(3)]
    inbox = store.mailbox(alice, "INBOX")
    store.store_flags(inbox, [uids[1]], ["\\Deleted"], "remove")
    assert store.expunge(inbox, uids, only_deleted=True) == [uids[0], uids[2]]
    assert store.uids(inbox) == [uids[1]]


def test_quota_usage_and_deleted_usage(store, alice):
    """RFC 9208 4.1.1/4.1.4 from the store's side: a user's limits and what they use (over all
    their mailboxes), and what an EXPUNGE would free in one mailbox (\\Deleted messages, their
    octets, as read from the rows, not from a stale index)."""
    usage = store.quota(alice)
    assert not usage.limited and usage.storage_used == 0
    sizes = []
    for n, mailbox in enumerate(("INBOX", "INBOX", "Archive")):
        raw = message(n, size=1000 + 100 * n)
        sizes.append(len(raw))
        store.append(alice, mailbox, raw, ["\\Deleted"] if n == 1 else [])
    store.set_quota(alice, 100_000, None)
    usage = store.quota(alice)
    assert (usage.storage_used, usage.storage_limit) == (sum(sizes), 100_000)
    assert (usage.messages_used, usage.message_limit) == (3, None) and usage.limited
    inbox = store.mailbox(alice, "INBOX")
    assert store.deleted_usage(inbox) == (1, sizes[1])
    store.store_flags(inbox, [1], ["\\Deleted"], "add")
    assert store.deleted_usage(inbox) == (2, sizes[0] + sizes[1])
    store.store_flags(inbox, [2], ["\\Deleted"], "remove")
    assert store.deleted_usage(inbox) == (1, sizes[0])
    assert store.deleted_usage(store.mailbox(alice, "Archive")) == (0, 0)
    with pytest.raises(NotFound):
        store.quota("nobody")
