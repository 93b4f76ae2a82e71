"""The store side of METADATA (RFC 5464; mailstore/metadata.py, docs/decisions/0019), on both
backends: entries per mailbox and per server, private per user and shared, limits, and
annotations that follow RENAME and go with DELETE."""

from __future__ import annotations

import pytest

from mailstore import keys
from mailstore.errors import NotFound, OverQuota
from mailstore.metadata import (
    BadSpecialUse,
    EntryTooLarge,
    InvalidEntry,
    Policy,
    ReadOnlyEntry,
    TooManyEntries,
    changed_entries,
    entry_name,
    select,
)
from mailstore.schema import METADATA
from mailstore.store import MailStore


@pytest.fixture
def store(backend):
    s = MailStore(backend)
    s.create_user("u", "pw")
    s.create_user("v", "pw")
    return s


def values(store, user, mailbox, *names, depth=0, policy=None):
    return dict(store.get_metadata(user, mailbox, list(names), depth,
                                   policy or Policy())[1])


def test_private_and_shared_entries_per_mailbox(store):
    """RFC 5464 3.2.2: /private entries are the user's own, /shared ones are the mailbox's;
    a value may be any octets, NUL included (5: literal8), and empty."""
    store.set_metadata("u", "INBOX", [("/private/comment", b"mine"),
                                      ("/shared/comment", b"bin\x00ary"),
                                      ("/shared/empty", b"")])
    assert values(store, "u", "INBOX", "/private/comment", "/shared/comment",
                  "/shared/empty") == {"/private/comment": b"mine",
                                       "/shared/comment": b"bin\x00ary", "/shared/empty": b""}
    assert values(store, "u", "Sent", "/private/comment") == {"/private/comment": None}
    # The same row key layout keeps another user's private entries apart (keys.metadata_key).
    inbox = store.mailbox("u", "INBOX")
    store.metadata.write(inbox.id, "v", {"/private/comment": b"v's"})
    assert values(store, "u", "INBOX", "/private/comment") == {"/private/comment": b"mine"}
    assert store.metadata.read(inbox.id, "v") == {"/private/comment": b"v's",
                                                  "/shared/comment": b"bin\x00ary",
                                                  "/shared/empty": b""}


def test_nil_deletes_and_depth(store):
    """RFC 5464 4.3: NIL removes an entry; 4.2.2: DEPTH 0, 1 and infinity."""
    store.set_metadata("u", "INBOX", [("/private/a", b"1"), ("/private/a/b", b"2"),
                                      ("/private/a/b/c", b"3"), ("/private/ab", b"x")])
    assert values(store, "u", "INBOX", "/private/a") == {"/private/a": b"1"}
    assert values(store, "u", "INBOX", "/private/a", depth=1) == {
        "/private/a": b"1", "/private/a/b": b"2"}
    assert values(store, "u", "INBOX", "/private", depth=None) == {
        "/private/a": b"1", "/private/a/b": b"2", "/private/a/b/c": b"3",
        "/private/ab": b"x"}
    store.set_metadata("u", "INBOX", [("/private/a/b", None)])
    assert values(store, "u", "INBOX", "/private/a", depth=None) == {
        "/private/a": b"1", "/private/a/b/c": b"3"}


def test_server_entries(store):
    """RFC 5464 3.1 (METADATA-SERVER): mailbox "" -- private per user; /shared/admin from the
    configuration; other server /shared entries are the administrator's (read-only)."""
    policy = Policy(admin="mailto:postmaster@example.com")
    store.set_metadata("u", None, [("/private/vendor/vendor.x/theme", b"dark")], policy)
    assert values(store, "u", None, "/private/vendor/vendor.x/theme", "/shared/admin",
                  policy=policy) == {"/private/vendor/vendor.x/theme": b"dark",
                                     "/shared/admin": b"mailto:postmaster@example.com"}
    assert values(store, "v", None, "/private/vendor/vendor.x/theme") == {
        "/private/vendor/vendor.x/theme": None}
    for name in ("/shared/admin", "/shared/comment"):
        with pytest.raises(ReadOnlyEntry):
            store.set_metadata("u", None, [(name, b"x")], policy)
    store.annotations.set_server_shared("/shared/comment", b"maintenance at 22:00")
    assert values(store, "v", None, "/shared/comment") == {
        "/shared/comment": b"maintenance at 22:00"}
    store.delete_user("u")
    assert store.metadata.read(None, "u") == {"/shared/comment": b"maintenance at 22:00"}


def test_rename_keeps_and_delete_drops(store):
    """RFC 5464 3.1: annotations belong to the mailbox: they follow RENAME (the UUID stays)
    and go with DELETE (one prefix scan drops every user's)."""
    store.create_mailbox("u", "Projects/Old")
    store.set_metadata("u", "Projects/Old", [("/shared/comment", b"s"),
                                             ("/private/comment", b"p")])
    box = store.mailbox("u", "Projects/Old")
    store.metadata.write(box.id, "v", {"/private/x": b"v"})
    store.rename_mailbox("u", "Projects", "Work")
    assert values(store, "u", "Work/Old", "/shared/comment", "/private/comment") == {
        "/shared/comment": b"s", "/private/comment": b"p"}
    store.delete_mailbox("u", "Work/Old")
    table = store.backend.table(METADATA.name)
    assert list(table.scan(prefix=box.id)) == []
    store.create_mailbox("u", "Work/Old")  # a new mailbox of the same name starts bare
    assert values(store, "u", "Work/Old", "/shared/comment") == {"/shared/comment": None}
    with pytest.raises(NotFound):
        store.get_metadata("u", "Nowhere", ["/shared/comment"])


def test_limits_all_or_nothing(store):
    """RFC 5464 4.3: MAXSIZE and TOOMANY refuse the whole command (no entry is set); a
    per-user octet limit refuses growth (OverQuota); shrinking always passes."""
    policy = Policy(max_value=10, max_entries=2, max_user_octets=70)
    with pytest.raises(EntryTooLarge) as too_large:
        store.set_metadata("u", "INBOX", [("/private/a", b"ok"), ("/private/b", b"x" * 11)],
                           policy)
    assert too_large.value.limit == 10
    assert values(store, "u", "INBOX", "/private/a") == {"/private/a": None}
    store.set_metadata("u", "INBOX", [("/private/a", b"1"), ("/shared/b", b"2")], policy)
    with pytest.raises(TooManyEntries):
        store.set_metadata("u", "INBOX", [("/private/c", b"3")], policy)
    store.set_metadata("u", "INBOX", [("/private/a", None), ("/private/c", b"3")], policy)
    # Names count: INBOX holds 9 + 1 + 10 + 1 = 21 octets, Sent then 18 + 10, so another 28
    # in Trash (77) is over 70 -- until Sent shrinks by 9 (68).
    store.set_metadata("u", "Sent", [("/private/aaaaaaaaa", b"1234567890")], policy)
    with pytest.raises(OverQuota):
        store.set_metadata("u", "Trash", [("/private/bbbbbbbbb", b"1234567890")], policy)
    store.set_metadata("u", "Sent", [("/private/aaaaaaaaa", b"1")], policy)
    store.set_metadata("u", "Trash", [("/private/bbbbbbbbb", b"1234567890")], policy)


def test_special_use_entry(store):
    """RFC 6154 3: /private/specialuse reflects the mailbox's special use; setting it (one
    attribute of a real folder) changes the use LIST shows; NIL clears it."""
    assert values(store, "u", "Sent", "/private/specialuse") == {
        "/private/specialuse": b"\\Sent"}
    store.create_mailbox("u", "Outbox")
    store.set_metadata("u", "Outbox", [("/private/specialuse", b"\\sent")])
    assert store.mailbox("u", "Outbox").special_use == "\\Sent"
    for bad in (b"\\All", b"\\Sent \\Drafts", b"\\Bogus"):
        with pytest.raises(BadSpecialUse):
            store.set_metadata("u", "Outbox", [("/private/specialuse", bad)])
    store.set_metadata("u", "Outbox", [("/private/specialuse", None)])
    assert store.mailbox("u", "Outbox").special_use is None
    assert values(store, "u", "Outbox", "/private", depth=None) == {}


def test_marks_move_on_change(store):
    """The hook NOTIFY's MailboxMetadataChange (RFC 5465 5.4) polls: a number per mailbox
    that moves when an entry the user sees there changes -- theirs or a shared one -- and
    digests that tell which entries changed."""
    inbox = store.mailbox("u", "INBOX")
    before = store.metadata_marks("u", [inbox.id, None])
    store.set_metadata("u", "INBOX", [("/shared/comment", b"x")])
    after = store.metadata_marks("u", [inbox.id, None])
    assert after[inbox.id] > before[inbox.id] and after[None] == before[None]
    v_before = store.metadata_marks("v", [inbox.id])[inbox.id]
    store.set_metadata("u", "INBOX", [("/private/comment", b"x")])
    assert store.metadata_marks("v", [inbox.id])[inbox.id] == v_before
    snapshot = store.metadata_digests("u", inbox.id)
    store.set_metadata("u", "INBOX", [("/private/comment", b"y"), ("/shared/comment", None),
                                      ("/shared/new", b"n")])
    # What changed, for the unsolicited METADATA response (RFC 5464 4.4.2).
    assert changed_entries(snapshot, store.metadata_digests("u", inbox.id)) == [
        "/private/comment", "/shared/comment", "/shared/new"]
    assert changed_entries(snapshot, snapshot) == []


@pytest.mark.parametrize("name", ["private/x", "/private/", "/private//x", "/private/*",
                                  "/shared/a%", "/public/x", "/private/a\x01", "/privatex"])
def test_entry_name_syntax(name):
    """RFC 5464 3.2.1: entry names start with /private or /shared, contain no '*' or '%',
    no consecutive '/', do not end in '/', hold no control characters."""
    with pytest.raises(InvalidEntry):
        entry_name(name)


@pytest.mark.parametrize("name", ["/private", "/shared", "/shared/vendor",
                                  "/private/vendor/vendor.example"])
def test_no_value_at_the_tops(store, name):
    """RFC 5464 3.2.1: /private and /shared are the roots of the entry tree, and
    /shared/vendor/<vendor-token> the top of one vendor's entries: none takes a value."""
    with pytest.raises(InvalidEntry):
        store.set_metadata("u", "INBOX", [(name, b"x")])
    store.set_metadata("u", "INBOX", [(name + "/x/y" if "vendor" in name else name + "/x",
                                       b"x")])


def test_entry_names_are_case_insensitive():
    """RFC 5464 3.2.1: names are case-insensitive (kept lower case here, as Dovecot does)."""
    assert entry_name("/Shared/Vendor/vendor.Example/X") == "/shared/vendor/vendor.example/x"
    assert select({"/shared/a": b"1"}, ["/shared/a", "/shared/a"], 0) == [("/shared/a", b"1")]


def test_server_rows_outside_every_mailbox_prefix():
    """The server's rows can never fall in a mailbox's prefix scan (no UUID4 has version 0)."""
    key = keys.metadata_key(None, "u")
    assert key.startswith(keys.SERVER_METADATA) and (key[6] >> 4) == 0


def test_fsck_finds_annotations_of_gone_mailboxes(store):
    """A SETMETADATA racing the DELETE of its mailbox (or a deletion cut short) can leave
    annotation rows behind: fsck reports them and --repair removes them; the server's rows
    and live mailboxes' are left alone."""
    from mailstore.fsck import Fsck

    store.set_metadata("u", "INBOX", [("/shared/comment", b"live")])
    store.set_metadata("u", None, [("/private/x", b"server")])
    gone = b"\x42" * 16
    store.metadata.write(gone, "u", {"/private/comment": b"left", "/shared/comment": b"left"})
    report = Fsck(store).run()
    assert [(p.kind, p.detail) for p in report.problems] == [
        ("metadata", "2 annotation row(s) of a mailbox that no longer exists")]
    Fsck(store, repair=True).run()
    assert Fsck(store).run().ok
    assert store.metadata.read(gone, "u") == {}
    assert values(store, "u", "INBOX", "/shared/comment") == {"/shared/comment": b"live"}
    assert values(store, "u", None, "/private/x") == {"/private/x": b"server"}
