"""Salted user-name keys (docs/decisions/0027-salted-user-keys.md, issue 16): the key functions,
how a store's format is decided and kept, a store made by the code before salting (on both
backends, the HBase one over the Thrift wire), and ``mailadmin migrate-keys``.

These are storage layout tests: no RFC governs row keys.  What they protect is what the IMAP
commands built on them promise: LIST (RFC 3501 6.3.8) finds exactly the user's mailboxes,
LSUB (6.3.9) the user's subscriptions, LOGIN (6.2.3) the user's password, ACL listings (RFC 4314
3.8) the grants, ManageSieve (RFC 5804) the scripts, whichever key format the store has.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from mailstore import keyformat, sharing
from mailstore.backends.base import Mutation
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.fsck import Fsck
from mailstore.keys import (
    MAX_USER_BUCKETS,
    PREFIX_KEYED,
    ROW_KEYED,
    STORE_ROW,
    USER_KEY_MARKER,
    UserKeys,
)
from mailstore.schema import MAILBOXES, TABLES, Layout, create_schema
from mailstore.sieve.tracking import VACATION
from mailstore.store import MailStore
from tests.admincli import run

LEGACY = os.path.join(os.path.dirname(__file__), "fixtures", "legacy-store-1fe4daf.json")
UUID = bytes(range(16))


# -- the keys: pure functions ------------------------------------------------------------------

@pytest.mark.parametrize("buckets", [16, 32, 7])
@pytest.mark.parametrize("pattern", ["user{:06d}", "{:d}", "user{:06d}@example.com"])
def test_sequential_account_names_spread_evenly_over_the_buckets(buckets, pattern):
    """10,000 sequential names (issue 16: ``user000001`` ...) land on every bucket about
    equally: chi-square below the 0.1 % critical value of its degrees of freedom, and every
    bucket within 20 % of the mean (over 3.5 standard deviations of a uniform draw at 32
    buckets).  Before salting they all began with the same byte: one region."""
    keys = UserKeys(buckets)
    counts = Counter(keys.user_key(pattern.format(i))[0] for i in range(1, 10_001))
    assert sorted(counts) == list(range(buckets))
    expected = 10_000 / buckets
    chi2 = sum((n - expected) ** 2 / expected for n in counts.values())
    # chi-square 0.999 quantiles for buckets - 1 degrees of freedom
    critical = {6: 22.46, 15: 37.70, 31: 61.10}[buckets - 1]
    assert chi2 < critical, (chi2, counts)
    assert all(abs(n - expected) < 0.2 * expected for n in counts.values()), counts
    assert len({UserKeys(0).user_key(pattern.format(i))[:1] for i in range(1, 10_001)}) <= 9
    # Every table keyed by user name takes the same salt, so one user's rows stay together.
    name = pattern.format(42)
    salt = keys.salt(name)
    for key in (keys.index_key(name, "INBOX"), keys.urlauth_key(name, UUID),
                keys.acl_index_key(name, UUID), keys.tracking_key(name, VACATION, UUID),
                keys.user_key(name)):
        assert key[:1] == salt


def test_unsalted_keys_are_the_old_layout_byte_for_byte():
    """A store made before salting is read with exactly the keys main wrote (its keys.py:
    ``user``, ``user NUL name``, ``grantee NUL uuid``, ``user NUL kind NUL digest``)."""
    old = UserKeys(0)
    assert old.user_key("alice") == b"alice"
    assert old.index_key("alice", "Work/a") == b"alice\x00Work/a"
    assert old.user_index_prefix("alice") == b"alice\x00"
    assert old.children_index_prefix("alice", "Work") == b"alice\x00Work/"
    assert old.acl_index_key("-bob", UUID) == b"-bob\x00" + UUID
    assert old.urlauth_key("alice", UUID) == b"alice\x00" + UUID
    assert old.tracking_key("bob", b"v", UUID) == b"bob\x00v\x00" + UUID
    assert old.bucket_ranges() == [(b"\x20", None)]
    assert old.index_key_name(b"alice\x00Work/a") == "Work/a"


def test_salted_keys_parse_back_and_never_equal_unsalted_ones():
    """The salt byte is below 0x20 and every unsalted key starts at '#' (0x23) or above, so the
    two formats can share a table during a migration; a salt of NUL does not confuse the
    NUL that separates the name."""
    names = ["alice", "bob", "#shared", "anyone", "-anyone", "-bob", "a", "ab", "0x"]
    for buckets in (1, 2, 16, MAX_USER_BUCKETS):
        keys = UserKeys(buckets)
        for name in names:
            for key, keyed in ((keys.user_key(name), ROW_KEYED),
                               (keys.index_key(name, "INBOX"), PREFIX_KEYED),
                               (keys.acl_index_key(name, UUID), PREFIX_KEYED)):
                assert key[0] < buckets
                assert keys.owner(key, keyed) == name
                assert UserKeys(0).owner(key, keyed) is None
                assert UserKeys(0).owner(UserKeys(0).user_key(name), ROW_KEYED) == name
                assert keys.owner(UserKeys(0).user_key(name), ROW_KEYED) is None
            assert keys.index_key_name(keys.index_key(name, "a/b")) == "a/b"
            assert keys.acl_index_grantee(keys.acl_index_key(name, UUID)) == name
        # A user's prefix reaches none of another's rows, salt or not.
        assert not keys.index_key("abc", "INBOX").startswith(keys.user_index_prefix("ab"))
    bucket0 = next(n for n in (f"u{i}" for i in range(500)) if UserKeys(8).salt(n) == b"\x00")
    assert UserKeys(8).index_key_name(UserKeys(8).index_key(bucket0, "X")) == "X"
    with pytest.raises(ValueError):
        UserKeys(MAX_USER_BUCKETS + 1)
    assert UserKeys.from_marker(UserKeys(12).marker()) == UserKeys(12)
    assert UserKeys.from_marker(b"plain") == UserKeys(0)
    with pytest.raises(ValueError):
        UserKeys.from_marker(b"salted:99")


# -- a store's format: decided once, recorded, kept ----------------------------------------------

def test_a_new_store_is_salted_and_keeps_its_bucket_count(backend):
    """The configured count applies to a new store only: reopening with another count (or an
    old one's absence of user rows later) never changes the recorded format."""
    store = MailStore(backend, layout=Layout(user_buckets=8))
    assert store.user_keys == UserKeys(8)
    store.create_user("alice", "pw")
    again = MailStore(backend, layout=Layout(user_buckets=32))
    assert again.user_keys == UserKeys(8)
    assert again.authenticate("alice", "pw") == "alice"
    assert [m.name for m in again.list_mailboxes("alice")][0] == "Archive"
    raw = backend.table(MAILBOXES.name).row(STORE_ROW, [USER_KEY_MARKER])
    assert raw == {USER_KEY_MARKER: b"salted:8"}
    again.delete_user("alice")      # no user rows left: still salted:8, never re-decided
    assert MailStore(backend, layout=Layout(user_buckets=2)).user_keys == UserKeys(8)


def test_two_processes_opening_a_new_store_agree(connect):
    """Each proposes its configured count by check-and-put from absent and uses what it reads
    back, so both use the first one's format."""
    first, second = connect(), connect()
    create_schema(first)
    a = keyformat.settle(first, UserKeys(4))
    b = keyformat.settle(second, UserKeys(16))
    assert a == b == UserKeys(4)


@pytest.mark.parametrize("buckets", [0, 1, 16, 32])
def test_every_user_keyed_operation_in_each_format(backend, buckets):
    """The same store operations through each key format, on both backends: accounts,
    mailboxes and their listing (RFC 3501 6.3.8), subscriptions (6.3.6), ACL grants (RFC 4314),
    Sieve scripts (RFC 5804), URLAUTH keys (RFC 4467), Sieve tracking (RFC 5230 4.2); `user
    list` merges the buckets in name order; deleting a user leaves none of its rows."""
    create_schema(backend)
    if buckets == 0:      # what a store made before salting records
        backend.table(MAILBOXES.name).put(STORE_ROW, {USER_KEY_MARKER: b"plain"})
    store = MailStore(backend, layout=Layout(user_buckets=buckets or 16))
    assert store.user_keys == UserKeys(buckets)
    users = [f"user{i:06d}" for i in range(1, 41)] + ["alice", "bob"]
    for user in users:
        store.create_user(user, "pw", default_folders=False)
    assert [u.name for u in store.list_users()] == sorted(users)
    store.create_mailbox("alice", "Work/Deep")
    store.create_mailbox("alice", "Work2")
    store.subscribe("alice", "Work/Deep")
    assert [m.name for m in store.list_mailboxes("alice")] == ["INBOX", "Work", "Work/Deep",
                                                                 "Work2"]
    assert [m.name for m in store.mailboxes.list("alice", under="Work")] == ["Work/Deep"]
    assert store.mailboxes.subscriptions("alice") == ["INBOX", "Work/Deep"]
    store.rename_mailbox("alice", "Work", "Play")
    assert [m.name for m in store.list_mailboxes("alice")] == ["INBOX", "Play", "Play/Deep",
                                                                 "Work2"]
    sharing.set_acl(store, "alice", "Play", "bob", "lr")
    assert "Other Users/alice/Play" in [m.name for m, _ in
                                        sharing.visible_mailboxes(store, "bob")]
    store.sieve_scripts.put("bob", "main", "keep;\r\n")
    store.sieve_scripts.activate("bob", "main")
    assert store.sieve_scripts.active("bob") == ("main", "keep;\r\n")
    store.sieve_tracking.record("bob", VACATION, "x@example.com", 3600)
    assert store.sieve_tracking.seen("bob", VACATION, "x@example.com")
    inbox = store.mailbox("bob", "INBOX")
    key = store.urlauth_key("bob", inbox, create=True)
    assert store.urlauth_key("bob", inbox) == key
    assert store.authenticate("user000007", "pw") == "user000007"
    assert Fsck(store).run().ok
    for user in ("bob", "user000001"):
        store.delete_user(user)
    assert "bob" not in [u.name for u in store.list_users()]
    keys = store.user_keys
    for table in keyformat.USER_KEYED:
        for key, _ in backend.table(table.name).scan(start=b"", stop=None):
            assert keys.owner(key, table.user_keyed) not in ("bob", "user000001", None), \
                (table.name, key)
    assert Fsck(store).run().ok


# -- a store made by the code before salting -------------------------------------------------------

def load_legacy(backend) -> None:
    """Write the rows of the store that main's code made (tests/fixtures) into ``backend``."""
    create_schema(backend)
    with open(LEGACY) as f:
        dump = json.load(f)
    for name, rows in dump["tables"].items():
        backend.table(name).mutate_rows([
            Mutation(bytes.fromhex(key), puts={c.encode(): bytes.fromhex(v)
                                               for c, v in cells.items()})
            for key, cells in rows])


def check_legacy_content(store: MailStore, stray: bool = False) -> None:
    """Everything main's code stored is there, through the store's API; fsck finds nothing
    (or, with ``stray``, only rows of the other key format)."""
    assert [u.name for u in store.list_users()] == ["alice", "bob", "user000001",
                                                    "user000002"]
    assert store.authenticate("bob", "secret") == "bob"
    assert store.authenticate("bob", "wrong") is None
    names = [m.name for m in store.list_mailboxes("alice")]
    assert "Work/Projects" in names and "INBOX" in names
    assert "Work/Projects" in store.mailboxes.subscriptions("alice")
    box = store.mailbox("alice", "Work/Projects")
    views = list(store.scan(box))
    assert len(views) == 1 and store.read_message(views[0]).startswith(b"Subject: hi")
    assert "Other Users/alice/Work" in [m.name for m, _ in
                                        sharing.visible_mailboxes(store, "bob")]
    assert [m.name for m in store.list_mailboxes("#shared")] == ["News"]
    assert store.sieve_scripts.active("bob") == ("main", "keep;\r\n")
    assert store.sieve_tracking.seen("bob", VACATION, "someone@example.com")
    assert store.urlauth_key("alice", store.mailbox("alice", "INBOX")) is not None
    report = Fsck(store).run()
    if stray:
        assert report.problems and {p.kind for p in report.problems} == {"keys"}
    else:
        assert report.ok, [p.as_dict() for p in report.problems]


def test_a_store_made_before_salting_keeps_working_unsalted(backend):
    """Opened by this code, the old store is recorded as unsalted (it has user rows) and reads
    and writes its old keys: nothing moves until migrate-keys."""
    load_legacy(backend)
    store = MailStore(backend, layout=Layout(user_buckets=16))
    assert store.user_keys == UserKeys(0)
    check_legacy_content(store)
    store.create_user("carol", "pw")
    assert backend.table("JAMES_USERS").row(b"carol")     # the old key layout
    assert MailStore(backend).user_keys == UserKeys(0)


def test_migrate_keys_converts_an_old_store_and_survives_interruption(backend):
    """migrate-keys copies, commits by the marker, then removes the old rows; a crash before
    the commit leaves the old store intact (and its half-made copies are not trusted), a crash
    after it is finished by running again; fsck sees the leftovers meanwhile."""
    load_legacy(backend)
    MailStore(backend)              # records "plain"
    # A crash before the commit: copies of three tables written (and then changed, as if
    # servers ran on the old keys in between), the marker still plain.
    old, target = UserKeys(0), UserKeys(4)
    for table in keyformat.USER_KEYED[:3]:
        rows = backend.table(table.name)
        for key, cells in list(rows.scan(start=b"", stop=None)):
            stale = {column: b"stale" for column in cells}
            rows.put(old.rekey(key, table.user_keyed, target), stale)
    store = MailStore(backend)
    assert store.user_keys == UserKeys(0)
    check_legacy_content(store, stray=True)
    # Now the real run, stopped after the commit (before removing the old rows).
    class Stop(Exception):
        pass

    def progress(phase, table, rows):
        if phase.startswith("removing"):
            raise Stop
    with pytest.raises(Stop):
        keyformat.migrate(backend, UserKeys(4), progress)
    store = MailStore(backend)
    assert store.user_keys == UserKeys(4)
    problems = Fsck(store).run().problems
    assert problems and {p.kind for p in problems} == {"keys"}
    done = keyformat.migrate(backend, UserKeys(4))
    assert done["from"] == done["to"] == "salted:4" and sum(done["deleted"].values()) > 0
    store = MailStore(backend)
    check_legacy_content(store)
    for table in keyformat.USER_KEYED:
        for key, _ in backend.table(table.name).scan(start=b"", stop=None):
            assert key[0] < 4, (table.name, key)
    # And on to another bucket count, the same way.
    keyformat.migrate(backend, UserKeys(32))
    store = MailStore(backend)
    check_legacy_content(store)
    # A row an old-format process wrote after the commit is moved, not dropped, by a re-run.
    users = backend.table("JAMES_USERS")
    users.put(b"zed", users.row(store.user_keys.user_key("alice")))
    assert "zed" not in [u.name for u in store.list_users()]
    assert keyformat.migrate(backend, UserKeys(32))["deleted"]["JAMES_USERS"] == 1
    assert MailStore(backend).authenticate("zed", "secret") == "zed"


def test_mailadmin_migrate_keys_with_progress(tmp_path):
    """The command an operator runs (servers stopped): progress on standard error, what was
    copied and removed on standard output; init-schema says a store keeps its format."""
    data_dir = str(tmp_path / "store")
    backend = EmbeddedBackend(data_dir)
    load_legacy(backend)
    backend.close()
    init = json.loads(run("init-schema", "--json", data_dir=data_dir).stdout)
    assert init["user_keys"] == "plain" and "migrate-keys --buckets 16" in init["notes"][-1]
    out = run("migrate-keys", "--buckets", "8", data_dir=data_dir)
    assert out.returncode == 0, out.stderr
    assert "user keys: plain -> salted:8" in out.stdout
    assert "JAMES_USERS: 4 copied, 4 old removed" in out.stdout
    assert "copying JAMES_MAILBOX_INDEX" in out.stderr and "rows" in out.stderr
    again = json.loads(run("migrate-keys", "--buckets", "8", "--json", data_dir=data_dir).stdout)
    assert again["copied"] == {} and not any(again["deleted"].values())
    bad = run("migrate-keys", "--buckets", "33", data_dir=data_dir)
    assert bad.returncode != 0 and "--buckets must be 1 to 32" in bad.stderr
    listed = run("user", "list", data_dir=data_dir)
    assert listed.returncode == 0 and "user000002" in listed.stdout
    fsck = run("fsck", data_dir=data_dir)
    assert fsck.returncode == 0, fsck.stdout
    assert len({t.name for t in TABLES if t.user_keyed}) == 7
