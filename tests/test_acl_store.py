"""ACLs and shared mailboxes in the mail store, over every backend (embedded, HBase/Thrift).

RFC 4314 2 (identifiers, ``anyone``, negative rights), 2.1 (the rights), 2.1.1 (``c`` and
``d``), 3.1/3.2 (SETACL, DELETEACL), 4 (which right each operation needs), 6 (no existence
oracle); RFC 2342 (the ``Other Users/`` and ``Shared/`` namespaces);
docs/decisions/0018-acl.md (the storage).
"""

from __future__ import annotations

import pytest

from mailstore import sharing
from mailstore.acl import ALL_RIGHTS, SHARED_OWNER, format_rights, parse_rights, rights_of
from mailstore.errors import InvalidName, NotFound, OverQuota, PermissionDenied
from mailstore.schema import ACL_INDEX
from mailstore.store import MailStore
from tests.mailgen import message

OTHER = "Other Users/alice/Team"


@pytest.fixture
def store(backend):
    s = MailStore(backend, abandon_after=2.0)
    s.create_user("alice", "pw", default_folders=False)
    s.create_user("bob", "pw", default_folders=False)
    s.create_user("carol", "pw", default_folders=False)
    s.create_mailbox("alice", "Team")
    s.create_mailbox("alice", "Secret")
    return s


def grant(store, rights: str, who: str = "bob", name: str = "Team") -> None:
    sharing.set_acl(store, "alice", name, who, rights)


def test_rights_function_owner_anyone_and_negative_rights():
    """RFC 4314 2: the owner has every right here (decision 0018); others the union of their
    entry and ``anyone``'s, less the negative ``-user`` and ``-anyone`` entries."""
    acl = {"bob": "lr", "anyone": "l", "-carol": "l", "dave": "lrsw", "-dave": "w",
           "-anyone": "a"}
    assert rights_of("alice", "alice", acl) == ALL_RIGHTS
    assert rights_of("bob", "alice", acl) == frozenset("lr")
    assert rights_of("carol", "alice", acl) == frozenset()      # anyone's l, taken away
    assert rights_of("dave", "alice", acl) == frozenset("lrs")
    assert rights_of("erin", "alice", acl) == frozenset("l")
    assert rights_of("bob", "alice", {"bob": "lra", "-anyone": "a"}) == frozenset("lr")


def test_obsolete_c_and_d_expand_and_show_again():
    """RFC 4314 2.1.1: ``c`` stands for k and x, ``d`` for t and e (its first group,
    RIGHTS=texk, as Dovecot); a list holding any of them shows ``c``/``d`` again.  A letter
    that is no right is refused (3.1: BAD)."""
    assert parse_rights("+c") == ("+", frozenset("kx"))
    assert parse_rights("lrd") == ("=", frozenset("lrte"))
    assert parse_rights("-w") == ("-", frozenset("w"))
    assert format_rights(frozenset("lrkx")) == "lrkxc"
    assert format_rights(frozenset("lrx")) == "lrxc"
    assert format_rights(frozenset("e")) == "ed"
    assert format_rights(ALL_RIGHTS) == "lrwstipekxacd"
    assert format_rights(frozenset("lr")) == "lr"
    with pytest.raises(ValueError):
        parse_rights("lrz")


def test_a_mailbox_without_a_grant_is_answered_as_one_that_does_not_exist(store):
    """RFC 4314 6: without ``l`` (or the right asked for) another user's mailbox is not
    there: the same NotFound, with the same text, as a name that does not exist."""
    errors = []
    for name in ("Other Users/alice/Secret", "Other Users/alice/Nope",
                 "Other Users/nobody/Secret"):
        with pytest.raises(NotFound) as err:
            sharing.open_mailbox(store, "bob", name, "r")
        errors.append(str(err.value).replace(name, "NAME"))
    assert len(set(errors)) == 1


class CountingTable:
    """A table that counts the reads made through it."""

    def __init__(self, table, counts):
        self._table, self._counts = table, counts

    def __getattr__(self, name):
        attr = getattr(self._table, name)
        if name in ("row", "rows", "scan"):
            def counted(*args, **kwargs):
                self._counts.append(name)
                return attr(*args, **kwargs)
            return counted
        return attr


def test_refusals_cost_the_same_reads_whether_the_mailbox_exists_or_not(store):
    """RFC 4314 6, no timing oracle: looking up another user's mailbox that exists but is not
    granted takes exactly the reads a name that does not exist takes (an index get and a row
    get), also after the mailbox was looked up before (no per-process cache on this path)."""
    sharing.open_mailbox(store, "alice", "Secret")  # the owner's lookup fills the id cache
    counts: list[str] = []
    store.mailboxes.rows = CountingTable(store.mailboxes.rows, counts)
    store.mailboxes.index = CountingTable(store.mailboxes.index, counts)
    reads = {}
    for name in ("Other Users/alice/Secret", "Other Users/alice/Nope",
                 "Other Users/nobody/Inbox"):
        counts.clear()
        with pytest.raises(NotFound):
            sharing.open_mailbox(store, "bob", name, "r")
        reads[name] = list(counts)
    assert len({tuple(r) for r in reads.values()}) == 1, reads
    assert reads["Other Users/alice/Nope"] == ["row", "row"]


def test_l_shows_the_mailbox_and_refusals_become_noperm(store):
    """RFC 4314 4 and 6: with ``l`` the mailbox is visible (LIST), so lacking another right
    is PermissionDenied (NO [NOPERM]) rather than NotFound."""
    grant(store, "l")
    with pytest.raises(PermissionDenied):
        sharing.open_mailbox(store, "bob", OTHER, "r")
    mailbox, rights = sharing.open_mailbox(store, "bob", OTHER, "")
    assert (mailbox.owner, mailbox.name, rights) == ("alice", "Team", frozenset("l"))
    names = {m.name for m, _ in sharing.visible_mailboxes(store, "bob")}
    assert OTHER in names and "Other Users/alice/Secret" not in names
    assert {m.name for m, _ in sharing.visible_mailboxes(store, "carol")} == {"INBOX"}


def test_r_without_l_opens_but_does_not_list(store):
    """RFC 4314 4: SELECT needs ``r``; LIST shows only what has ``l``."""
    grant(store, "r")
    mailbox, rights = sharing.open_mailbox(store, "bob", OTHER, "r")
    assert rights == frozenset("r")
    assert OTHER not in {m.name for m, _ in sharing.visible_mailboxes(store, "bob")}


def test_anyone_and_negative_entries_through_the_store(store):
    """RFC 4314 2: ``anyone`` reaches every user; ``-bob`` takes from bob alone.  The grant
    index finds mailboxes shared with ``anyone`` for everybody."""
    grant(store, "lr", who="anyone")
    grant(store, "r", who="-bob")
    assert OTHER in {m.name for m, _ in sharing.visible_mailboxes(store, "carol")}
    assert sharing.open_mailbox(store, "bob", OTHER, "")[1] == frozenset("l")
    with pytest.raises(PermissionDenied):
        sharing.open_mailbox(store, "bob", OTHER, "r")
    assert sharing.open_mailbox(store, "carol", OTHER, "r")[1] == frozenset("lr")


def test_setacl_modes_and_deleteacl(store):
    """RFC 4314 3.1: ``+`` adds, ``-`` removes, else replaces; 3.2 DELETEACL removes the
    entry, and with it the index row (nothing left to find)."""
    grant(store, "lr")
    assert sharing.set_acl(store, "alice", "Team", "bob", "+sw") == frozenset("lrsw")
    assert sharing.set_acl(store, "alice", "Team", "bob", "-r") == frozenset("lsw")
    assert sharing.set_acl(store, "alice", "Team", "bob", "lr") == frozenset("lr")
    team = store.mailbox("alice", "Team")
    assert team.acl == {"bob": "lr"}
    sharing.delete_acl(store, "alice", "Team", "bob")
    assert store.mailbox("alice", "Team").acl == {}
    index = store.backend.table(ACL_INDEX.name)
    assert list(index.scan(prefix=store.user_keys.acl_index_prefix("bob"))) == []
    with pytest.raises(InvalidName):
        sharing.set_acl(store, "alice", "Team", "Bad Name!", "l")


def test_only_a_grants_administer(store):
    """RFC 4314 3.1-3.4: changing or reading the ACL needs ``a``."""
    grant(store, "lr")
    with pytest.raises(PermissionDenied):
        sharing.set_acl(store, "bob", OTHER, "carol", "lr")
    grant(store, "lra")
    sharing.set_acl(store, "bob", OTHER, "carol", "lr")
    assert sharing.open_mailbox(store, "carol", OTHER, "r")[1] == frozenset("lr")


def test_create_needs_k_on_the_parent_and_inherits_its_acl(store):
    """RFC 4314 4: CREATE needs ``k`` on the parent; the child starts with the parent's ACL
    (as Dovecot), so its creator sees it.  The top level of another user's namespace is
    never the user's to create in."""
    grant(store, "lr")
    with pytest.raises(PermissionDenied):
        sharing.create_mailbox(store, "bob", OTHER + "/Child")
    grant(store, "lrk")
    child = sharing.create_mailbox(store, "bob", OTHER + "/Child")
    assert (child.owner, child.name) == ("alice", "Team/Child")
    assert sharing.open_mailbox(store, "bob", OTHER + "/Child", "r")[1] == frozenset("lrk")
    with pytest.raises(PermissionDenied):
        sharing.create_mailbox(store, "bob", "Other Users/alice/Top")
    # A parent bob cannot see refuses exactly as a parent that does not exist.
    for name in ("Other Users/alice/Secret/x", "Other Users/alice/Nope/x"):
        with pytest.raises(PermissionDenied):
            sharing.create_mailbox(store, "bob", name)


def test_delete_needs_x_and_drops_the_grants(store):
    """RFC 4314 4: DELETE needs ``x``; the deleted mailbox's index rows go with it."""
    grant(store, "lr")
    with pytest.raises(PermissionDenied):
        sharing.delete_mailbox(store, "bob", OTHER)
    grant(store, "lrx")
    sharing.delete_mailbox(store, "bob", OTHER)
    with pytest.raises(NotFound):
        store.mailbox("alice", "Team")
    assert store.grants.candidates("bob") == []


def test_rename_needs_x_and_k_and_keeps_the_acl(store):
    """RFC 4314 4: RENAME needs ``x`` on the mailbox and ``k`` on the new parent; the ACL
    stays with the mailbox (it lives in its row); no rename into another owner's names."""
    store.create_mailbox("alice", "Team/Old")
    grant(store, "lrx", name="Team/Old")
    with pytest.raises(PermissionDenied):
        sharing.rename_mailbox(store, "bob", OTHER + "/Old", OTHER + "/New")
    grant(store, "lrk")
    sharing.rename_mailbox(store, "bob", OTHER + "/Old", OTHER + "/New")
    assert store.mailbox("alice", "Team/New").acl == {"bob": "lrx"}
    with pytest.raises(InvalidName):
        sharing.rename_mailbox(store, "bob", OTHER + "/New", "Mine")


def test_shared_messages_live_once_in_the_owners_mailbox_on_the_owners_quota(store):
    """Messages appended to another user's mailbox are stored in it (one copy) and count
    against the owner's quota, not the writer's."""
    grant(store, "lri")
    team, _ = sharing.open_mailbox(store, "bob", OTHER, "i")
    store.append("bob", team, message(1))
    assert store.usage("alice")[1] == 1 and store.usage("bob")[1] == 0
    store.set_quota("alice", None, 1)
    with pytest.raises(OverQuota):
        store.append("bob", team, message(2))
    inbox = store.mailbox("bob", "INBOX")
    store.append("bob", inbox, message(3))
    with pytest.raises(OverQuota):  # MOVE into it too (the owner's quota)
        store.move(inbox, store.uids(inbox), team)


def test_store_flags_keeps_what_the_rights_do_not_cover(store):
    """RFC 4314 4 (STORE): \\Seen needs ``s``, \\Deleted ``t``, other flags ``w``; a flag the
    user may not change keeps its state, also under FLAGS (replace)."""
    team = store.mailbox("alice", "Team")
    store.append("alice", team, message(1), flags=["\\Flagged"])
    uid = store.uids(team)[0]
    store.store_flags(team, [uid], ["\\Seen", "\\Deleted", "$Work"], "add", rights=frozenset("s"))
    assert store.fetch(team, [uid])[0].flags.names == frozenset({"\\Flagged", "\\Seen"})
    store.store_flags(team, [uid], ["\\Deleted"], "replace", rights=frozenset("t"))
    assert store.fetch(team, [uid])[0].flags.names == frozenset(
        {"\\Flagged", "\\Seen", "\\Deleted"})


def test_deleting_a_user_takes_back_their_grants(store):
    """A new account with a deleted user's name must not inherit what was granted to the old
    one (RFC 4314 2 identifiers are names)."""
    grant(store, "lr")
    grant(store, "l", who="-bob", name="Secret")
    store.delete_user("bob")
    store.create_user("bob", "pw", default_folders=False)
    assert store.mailbox("alice", "Team").acl == {}
    assert store.mailbox("alice", "Secret").acl == {}
    with pytest.raises(NotFound):
        sharing.open_mailbox(store, "bob", OTHER, "")


def test_shared_namespace_mailboxes_have_no_owner_rights(store):
    """RFC 2342 5: ``Shared/`` mailboxes belong to no user; every right comes from the ACL,
    and they have no quota."""
    box = sharing.admin_create_shared(store, "Announcements")
    assert box.owner == SHARED_OWNER
    with pytest.raises(NotFound):
        sharing.open_mailbox(store, "bob", "Shared/Announcements", "")
    store.grants.set(box.id, "anyone", frozenset("lr"))
    mailbox, rights = sharing.open_mailbox(store, "carol", "Shared/Announcements", "r")
    assert rights == frozenset("lr")
    assert "Shared/Announcements" in {m.name for m, _ in sharing.visible_mailboxes(store, "bob")}
    store.check_quota(SHARED_OWNER, 10**12, 10**9)  # no limits, no account
    assert [name for name, _ in sharing.acl_entries(mailbox)] == ["anyone"]


def test_own_names_only_by_the_personal_namespace(store):
    """RFC 2342: one's own mailboxes are not reached through ``Other Users/<self>/``, and the
    namespace roots are no mailboxes."""
    for name in ("Other Users/bob/INBOX", "Other Users", "Other Users/alice", "Shared"):
        with pytest.raises(NotFound):
            sharing.open_mailbox(store, "bob", name)


def test_fsck_repairs_the_grant_index_both_ways(store):
    """Decision 0018: the index is denormalised, so fsck checks it against the mailbox rows.
    A stale index row (a crash between a revocation's two writes) is removed; an entry the
    index lacks (LIST would miss the mailbox) is indexed again."""
    from mailstore.fsck import Fsck
    grant(store, "lr")
    team = store.mailbox("alice", "Team")
    index = store.backend.table(ACL_INDEX.name)
    index.delete(store.user_keys.acl_index_key("bob", team.id))          # lost index row
    secret = store.mailbox("alice", "Secret")
    index.put(store.user_keys.acl_index_key("carol", secret.id), {b"g:r": b"1"})  # stale index row
    assert OTHER not in {m.name for m, _ in sharing.visible_mailboxes(store, "bob")}
    report = Fsck(store).run()
    assert sorted(p.detail for p in report.problems) == [
        "ACL entry of bob missing from the index", "index row of carol without its ACL entry"]
    Fsck(store, repair=True).run()
    assert Fsck(store).run().ok
    assert OTHER in {m.name for m, _ in sharing.visible_mailboxes(store, "bob")}
    assert store.grants.candidates("carol") == []


def test_no_account_may_be_called_anyone(store):
    """RFC 4314 2: ``anyone`` is the identifier of every user."""
    with pytest.raises(InvalidName):
        store.create_user("Anyone", "pw")
