"""The text index after crashes, and its repair (docs/decisions/0026): a message whose index
write died is scanned by SEARCH (RFC 3501 6.4.4 answers stay right), ``fsck`` finds it and
``--repair`` indexes it; ``mailadmin index rebuild`` indexes a mailbox stored before the
index, with progress, through the real console script."""

from __future__ import annotations

import json

import pytest

from imapserver.imap.search import evaluate
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.fsck import Fsck
from mailstore.store import MailStore
from tests.admincli import run
from tests.crashing import Crash, DieAt, DyingBackend
from tests.mailgen import message
from tests.test_text_index import ScanOnly, program

# Where an index write dies: before anything of it (FTS5's one statement, or the first batch
# of posting rows), or (posting rows) after the postings, before the marker.
DEATHS = {
    "first-index-write": lambda table, method, args: table in ("text_index",
                                                               "JAMES_TEXT_INDEX"),
    "before-marker": lambda table, method, args: (table == "JAMES_TEXT_INDEX"
                                                  and method == "put")
    or (table == "text_index" and method == "put"),
}


@pytest.mark.parametrize("death", sorted(DEATHS))
@pytest.mark.parametrize("big", [False, True], ids=["one-chunk", "streamed"])
def test_crash_during_indexing_is_scanned_then_repaired(backend, death, big):
    """A crash while indexing an appended message: SEARCH BODY still finds it (scanned,
    never a wrong answer), fsck reports it missing from the index, --repair indexes it.
    (Embedded, one chunk: the index write is in the append's transaction, so the append
    dies whole and nothing is missing.)"""
    store = MailStore(backend, chunk_size=65536)
    user = store.create_user("cy", "pw")
    store.append(user, "INBOX", message(1, body=b"ordinary words\r\n"))
    dying = MailStore(DyingBackend(backend, DieAt(DEATHS[death])), create_tables=False,
                      chunk_size=65536)
    body = b"the zebrafish needle\r\n" + (b"y" * 70 + b"\r\n") * (1500 if big else 1)
    with pytest.raises(Crash):
        dying.append(user, "INBOX", message(2, body=body))

    after = MailStore(backend, create_tables=False, chunk_size=65536)
    box = after.mailbox(user, "INBOX")
    uids = after.uids(box)
    search = program(b"BODY", "ZEBRAFISH")
    found = evaluate(search, after, box, uids)
    assert found == evaluate(search, ScanOnly(after), box, uids)
    committed = len(uids) == 2
    assert found == ([uids[1]] if committed else [])
    missing = after.text.check(box.id, uids)[0]
    if backend.name == "embedded" and not big:
        assert not committed  # rolled back with its index write
    else:
        assert committed and missing == [uids[1]]

    found_now = Fsck(after).run()
    assert found_now.checked["unindexed messages"] == len(missing)
    assert after.text.check(box.id, uids)[0] == missing  # only found, not repaired
    report = Fsck(after, repair=True).run()
    assert report.checked["messages indexed now"] == len(missing)
    assert after.text.check(box.id, uids) == ([], [])
    assert evaluate(search, after, box, uids) == found
    assert Fsck(after).run().checked["unindexed messages"] == 0


def test_fsck_removes_markers_of_gone_messages(backend):
    """Stale index rows: markers of messages no longer in the mailbox (an expunge whose
    index removal died) are reported and removed."""
    store = MailStore(backend)
    user = store.create_user("di", "pw")
    for n in range(3):
        store.append(user, "INBOX", message(n))
    box = store.mailbox(user, "INBOX")
    uid = store.uids(box)[0]
    store.transfers.expunge(box, [uid])  # below MailStore.expunge: the index not told
    assert store.text.check(box.id, store.uids(box)) == ([], [uid])
    report = Fsck(store, repair=True).run()
    assert report.ok and report.checked["stale index markers"] == 1
    assert store.text.check(box.id, store.uids(box)) == ([], [])


def test_mailadmin_index_rebuild_and_fsck(tmp_path):
    """``mailadmin index status/rebuild`` and ``fsck --repair`` on a store filled before the
    index existed (text_index off): SEARCH is right before (scan) and after (index)."""
    data_dir = str(tmp_path / "store")
    old = MailStore(EmbeddedBackend(data_dir), text_index=False)
    old.create_user("ed", "pw")
    for n in range(30):
        old.append("ed", "INBOX", message(n, subject=f"topic {n % 4}"))
    old.append("ed", "Archive", message(99, subject="archived topic"))
    old.close()

    out = run("index", "status", "ed", "--json", data_dir=data_dir)
    assert out.returncode == 0, out.stderr
    rows = {r["mailbox"]: r for r in json.loads(out.stdout)["mailboxes"]}
    assert rows["INBOX"]["missing"] == 30 and rows["INBOX"]["indexed"] == 0

    out = run("fsck", "--json", data_dir=data_dir)
    assert out.returncode == 0  # derived data: counted, not a problem
    assert json.loads(out.stdout)["checked"]["unindexed messages"] == 31

    out = run("index", "rebuild", "ed", "INBOX", data_dir=data_dir)
    assert out.returncode == 0, out.stderr
    assert "INBOX" in out.stdout and "30" in out.stdout
    assert "indexing INBOX" in out.stderr  # the progress line
    out = run("index", "status", "ed", "--json", data_dir=data_dir)
    rows = {r["mailbox"]: r for r in json.loads(out.stdout)["mailboxes"]}
    assert rows["INBOX"]["indexed"] == 30 and rows["Archive"]["missing"] == 1

    out = run("fsck", "--repair", "--json", data_dir=data_dir)
    assert json.loads(out.stdout)["checked"]["messages indexed now"] == 1  # the Archive one
    out = run("fsck", "--json", data_dir=data_dir)
    assert "unindexed messages" not in json.loads(out.stdout)["checked"], out.stdout

    store = MailStore(EmbeddedBackend(data_dir))
    box = store.mailbox("ed", "INBOX")
    uids = store.uids(box)
    search = program(b"SUBJECT", "TOPIC 3")
    assert evaluate(search, store, box, uids) == [u for u in uids if (u - 1) % 4 == 3]
    assert store.text_candidates(box, {"k": (("subject",), "topic 3", True)}, uids)["k"] \
        .matches == set(evaluate(search, store, box, uids))
