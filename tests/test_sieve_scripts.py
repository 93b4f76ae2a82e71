"""Contract tests of the Sieve script storage (mailstore/sievescripts.py) on both backends.

The operations are those of ManageSieve (RFC 5804 2.6-2.11); the storage layout is
docs/decisions/0023-sieve-scripts-storage.md.
"""

from __future__ import annotations

import threading

import pytest

from mailstore.errors import AlreadyExists, InvalidName, NotFound, OverQuota, TooLarge
from mailstore.schema import SIEVE_SCRIPTS
from mailstore.sievescripts import ScriptActive, ScriptLimits, TooManyScripts
from mailstore.store import MailStore

KEEP = 'require "fileinto";\r\nfileinto "INBOX";\r\n'


@pytest.fixture
def store(backend):
    s = MailStore(backend, sieve_limits=ScriptLimits(max_scripts=3, max_script_size=100,
                                                      max_total_size=200))
    s.create_user("alice", "pw", default_folders=False)
    yield s


def test_put_get_list_and_replace(store):
    """RFC 5804 2.6/2.7/2.9: PUTSCRIPT stores (and replaces) by name, LISTSCRIPTS lists every
    script, GETSCRIPT returns the text as stored."""
    scripts = store.sieve_scripts
    assert scripts.list("alice") == [] and scripts.active("alice") is None
    scripts.put("alice", "b", "keep;")
    scripts.put("Alice", "a", KEEP)
    assert scripts.list("alice") == [("a", False), ("b", False)]
    assert scripts.get("alice", "a") == KEEP
    assert scripts.get("alice", "missing") is None
    scripts.put("alice", "a", "discard;")
    assert scripts.get("alice", "a") == "discard;"
    # The replaced text's cell is gone: one text cell per script.
    row = store.backend.table(SIEVE_SCRIPTS.name).row(store.user_keys.user_key("alice"))
    assert len([c for c in row if c.startswith(b"s:")]) == 2


def test_activation_is_exclusive_and_follows_rename_and_replace(store):
    """RFC 5804 2.8: at most one active script, SETACTIVE "" deactivates; 2.11.1: renaming the
    active script keeps it active; 2.6: replacing the active script keeps it active."""
    scripts = store.sieve_scripts
    scripts.put("alice", "one", "keep;")
    scripts.put("alice", "two", "discard;")
    scripts.activate("alice", "one")
    scripts.activate("alice", "two")
    assert scripts.list("alice") == [("one", False), ("two", True)]
    assert scripts.active("alice") == ("two", "discard;")
    scripts.put("alice", "two", "stop;")
    assert scripts.active("alice") == ("two", "stop;")
    scripts.rename("alice", "two", "deux")
    assert scripts.active("alice") == ("deux", "stop;")
    assert scripts.list("alice") == [("deux", True), ("one", False)]
    scripts.activate("alice", None)
    assert scripts.active("alice") is None
    assert scripts.list("alice") == [("deux", False), ("one", False)]
    with pytest.raises(NotFound):
        scripts.activate("alice", "nope")


def test_the_active_script_cannot_be_deleted(store):
    """RFC 5804 2.10: DELETESCRIPT of the active script fails (NO (ACTIVE)); after
    deactivation it succeeds, and deleting a missing script is NotFound (NONEXISTENT)."""
    scripts = store.sieve_scripts
    scripts.put("alice", "s", "keep;")
    scripts.activate("alice", "s")
    with pytest.raises(ScriptActive):
        scripts.delete("alice", "s")
    assert scripts.active("alice") == ("s", "keep;")
    scripts.activate("alice", None)
    scripts.delete("alice", "s")
    assert scripts.list("alice") == []
    with pytest.raises(NotFound):
        scripts.delete("alice", "s")
    row = store.backend.table(SIEVE_SCRIPTS.name).row(store.user_keys.user_key("alice"))
    assert not [c for c in row if c.startswith(b"s:")]


def test_rename_refuses_a_taken_name_and_a_missing_script(store):
    """RFC 5804 2.11.1: RENAMESCRIPT to an existing name is ALREADYEXISTS, of a missing script
    NONEXISTENT."""
    scripts = store.sieve_scripts
    scripts.put("alice", "a", "keep;")
    scripts.put("alice", "b", "keep;")
    with pytest.raises(AlreadyExists):
        scripts.rename("alice", "a", "b")
    with pytest.raises(NotFound):
        scripts.rename("alice", "zz", "c")
    assert scripts.list("alice") == [("a", False), ("b", False)]


def test_limits(store):
    """RFC 5804 2.3/2.6: per-user limits on the number of scripts (QUOTA/MAXSCRIPTS), a
    script's size (QUOTA/MAXSIZE) and the total (QUOTA); replacing counts the new size only."""
    scripts = store.sieve_scripts
    with pytest.raises(TooLarge):
        scripts.put("alice", "big", "#" * 101)
    with pytest.raises(TooLarge):
        scripts.check_space("alice", "big", 101)
    scripts.put("alice", "a", "#" * 100)
    scripts.put("alice", "b", "#" * 90)
    with pytest.raises(OverQuota) as over:
        scripts.put("alice", "c", "#" * 20)
    assert not isinstance(over.value, TooManyScripts)
    scripts.put("alice", "b", "#" * 100)       # replacing: 200 in total, at the limit
    scripts.put("alice", "b", "#")
    scripts.put("alice", "c", "#")
    with pytest.raises(TooManyScripts):
        scripts.put("alice", "d", "#")
    with pytest.raises(TooManyScripts):
        scripts.check_space("alice", "d", 1)
    scripts.check_space("alice", "c", 50)      # replacing an existing one is fine
    # Sizes are octets of UTF-8: 50 two-octet characters is 100 octets.
    scripts.put("alice", "a", "#")
    scripts.put("alice", "c", "é" * 50)
    with pytest.raises(TooLarge):
        scripts.put("alice", "c", "é" * 51)
    assert scripts.get("alice", "c") == "é" * 50


def test_names_and_users_are_checked(store):
    """RFC 5804 1.6: script names are Net-Unicode without control characters; at least 128
    characters are allowed.  Changes for an unknown user are NotFound."""
    scripts = store.sieve_scripts
    for bad in ("", "a\nb", "a\x00b", "a\u2028", "x" * 129, "\x7f"):
        with pytest.raises(InvalidName):
            scripts.put("alice", bad, "keep;")
    scripts.put("alice", "y" * 128, "keep;")
    scripts.put("alice", "cafe\u0301", "keep;")   # stored NFC
    assert ("caf\u00e9", False) in scripts.list("alice")
    with pytest.raises(NotFound):
        scripts.put("nobody", "a", "keep;")
    assert scripts.list("nobody") == []


def test_delete_user_removes_their_scripts(store):
    store.sieve_scripts.put("alice", "a", "keep;")
    store.delete_user("alice")
    assert store.backend.table(SIEVE_SCRIPTS.name).row(store.user_keys.user_key("alice")) == {}


def test_leftover_text_cells_of_a_dead_writer_are_swept(store):
    """A writer that died between writing a text and the directory's check-and-put leaves a
    cell nobody names; the next put removes it once it is old (decision 0023)."""
    table = store.backend.table(SIEVE_SCRIPTS.name)
    table.put(store.user_keys.user_key("alice"), {b"s:000000000001" + b"0" * 16: b"orphan",
                         b"s:" + b"f" * 28: b"in flight"})
    store.sieve_scripts.put("alice", "a", "keep;")
    cells = [c for c in table.row(store.user_keys.user_key("alice")) if c.startswith(b"s:")]
    assert len(cells) == 2 and b"s:" + b"f" * 28 in cells


def test_concurrent_switching_never_shows_no_active_script(connect):
    """Switching the active script between two (RFC 5804 2.8), and replacing the active one,
    while readers on other connections keep asking for it: every read gets one of the
    scripts, never none, and every change made it (one check-and-put per change)."""
    stores = [MailStore(connect()) for _ in range(3)]
    stores[0].create_user("bob", "pw", default_folders=False)
    writer = stores[0].sieve_scripts
    writer.put("bob", "a", "# a")
    writer.put("bob", "b", "# b")
    writer.activate("bob", "a")
    stop = threading.Event()
    seen: list[object] = []

    def read(scripts):
        while not stop.is_set():
            seen.append(scripts.active("bob"))

    readers = [threading.Thread(target=read, args=(s.sieve_scripts,)) for s in stores[1:]]
    for t in readers:
        t.start()
    try:
        for i in range(30):
            writer.activate("bob", "b" if i % 2 == 0 else "a")
            writer.put("bob", "b", f"# b {i}")
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert seen and None not in seen
    assert {name for name, _ in seen} <= {"a", "b"}
    assert writer.active("bob") == ("a", "# a")


def test_concurrent_uploads_keep_the_script_limit(connect):
    """Two sessions uploading at once cannot together pass max_scripts: the limit is checked
    against the directory the check-and-put replaces (RFC 5804 2.6 QUOTA/MAXSCRIPTS)."""
    limits = ScriptLimits(max_scripts=5, max_script_size=100, max_total_size=10000)
    stores = [MailStore(connect(), sieve_limits=limits) for _ in range(2)]
    stores[0].create_user("carol", "pw", default_folders=False)
    refused = []

    def upload(scripts, tag):
        for i in range(6):
            try:
                scripts.put("carol", f"{tag}{i}", "keep;")
            except TooManyScripts:
                refused.append(tag)

    threads = [threading.Thread(target=upload, args=(s.sieve_scripts, t))
               for s, t in zip(stores, "xy", strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(stores[0].sieve_scripts.list("carol")) == 5
    assert len(refused) == 7
    row = stores[0].backend.table(SIEVE_SCRIPTS.name).row(stores[0].user_keys.user_key("carol"))
    assert len([c for c in row if c.startswith(b"s:")]) == 5
