"""mailadmin fsck finding and repairing injected damage, through the real console script:
counters off by some, a UID counter below the highest UID, an orphaned content row, a move
that died half-way, import records of a deleted mailbox."""

from __future__ import annotations

import json
import time

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.mailboxes import SIZE, UID, UNSEEN
from mailstore.store import MailStore
from tests.admincli import run
from tests.mailgen import message


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "store")


def open_store(data_dir: str) -> MailStore:
    return MailStore(EmbeddedBackend(data_dir))


def fsck(data_dir: str, *args: str) -> tuple[int, dict]:
    out = run("fsck", "--json", *args, data_dir=data_dir)
    return out.returncode, json.loads(out.stdout)


def test_counters_off_by_some_and_a_uid_counter_behind(data_dir):
    store = open_store(data_dir)
    store.create_user("ann", "pw")
    for n in range(5):
        store.append("ann", "INBOX", message(n), flags=["\\Seen"] if n % 2 else [])
    inbox = store.mailbox("ann", "INBOX")
    store.mailboxes.rows.increment_many(inbox.id, {UNSEEN: 2, SIZE: -100})
    store.mailboxes.rows.increment(inbox.id, UID, -2)
    store.close()
    status, report = fsck(data_dir, "ann")
    assert status == 1
    assert sorted(p["detail"] for p in report["problems"]) == [
        f"size counter {inbox.size - 100}, actual {inbox.size}",
        "uid counter 3 below highest uid 5",
        "unseen counter 5, actual 3"]
    text = run("fsck", data_dir=data_dir)
    assert text.returncode == 1
    assert "found: counter: ann:INBOX: unseen counter 5, actual 3" in text.stdout
    assert "3 problem(s) (3 counter)" in text.stdout
    assert text.stdout.rstrip().endswith("run again with --repair to repair them")
    repaired = run("fsck", "--repair", data_dir=data_dir)
    assert repaired.returncode == 1 and repaired.stdout.count("repaired: counter") == 3
    assert fsck(data_dir)[0] == 0
    store = open_store(data_dir)
    inbox = store.mailbox("ann", "INBOX")
    assert (inbox.unseen, inbox.uidnext) == (3, 6)
    # The UID counter was moved up, never down: the next message gets a fresh UID.
    assert store.append("ann", "INBOX", message(9))[1] == 6
    store.close()


def test_an_orphaned_content_row_is_found_and_removed(data_dir):
    store = open_store(data_dir)
    store.create_user("ben", "pw")
    store.append("ben", "INBOX", message(1))
    orphan = store.ingest(message(2))  # content no message row refers to
    store.close()
    status, report = fsck(data_dir)
    assert status == 1
    assert report["problems"] == [{"kind": "content", "where": f"content {orphan.content_id.hex()}",
                                   "detail": "no message refers to it (refs 1)",
                                   "repaired": False}]
    assert json.loads(run("stats", "--json", data_dir=data_dir).stdout)["contents"] == 2
    status, report = fsck(data_dir, "--repair")
    assert status == 1 and report["problems"][0]["repaired"] is True
    assert fsck(data_dir)[0] == 0
    assert json.loads(run("stats", "--json", data_dir=data_dir).stdout)["contents"] == 1


class Crash(Exception):
    pass


def test_a_half_done_move_is_rolled_forward(data_dir):
    store = open_store(data_dir)
    store.create_user("cat", "pw")
    for n in range(3):
        store.append("cat", "INBOX", message(n))
    inbox, archive = store.mailbox("cat", "INBOX"), store.mailbox("cat", "Archive")

    def die(*_args, **_kwargs):
        raise Crash("process died after writing the target rows")
    store.transfers._finish_move = die
    with pytest.raises(Crash):
        store.move(inbox, [1, 2], archive)
    store.close()

    status, report = fsck(data_dir)
    assert status == 1
    kinds = {(p["kind"], p["where"]): p for p in report["problems"]}
    assert kinds[("intent", "cat:INBOX")]["detail"] == "unfinished move/expunge"
    assert kinds[("content", "all")]["detail"].startswith("references not checked")
    text = run("fsck", data_dir=data_dir).stdout
    assert "found: intent: cat:INBOX: unfinished move/expunge" in text

    status, report = fsck(data_dir, "--repair")
    assert status == 1
    assert {"kind": "intent", "where": "cat:INBOX",
            "detail": "1 unfinished move/expunge rolled forward",
            "repaired": True} in report["problems"]
    status, report = fsck(data_dir)
    assert status == 0, report
    store = open_store(data_dir)
    inbox, archive = store.mailbox("cat", "INBOX"), store.mailbox("cat", "Archive")
    assert store.uids(inbox) == [3] and len(store.uids(archive)) == 2
    assert (inbox.messages, archive.messages) == (1, 2)
    moved = {store.read_message(v) for v in store.iter_messages(archive)}
    assert moved == {message(0), message(1)}
    store.close()


def test_import_records_of_a_deleted_mailbox_are_cleared(data_dir, tmp_path):
    run("user", "add", "dan", data_dir=data_dir)
    mbox = tmp_path / "in.mbox"
    mbox.write_bytes(b"".join(b"From a Sat Nov 21 12:00:00 2026\n" + message(n).replace(
        b"\r\n", b"\n") + b"\n" for n in range(3)))
    assert run("import", "dan", str(mbox), "--mailbox", "Old", data_dir=data_dir).returncode == 0
    assert run("mailbox", "delete", "dan", "Old", "--yes", data_dir=data_dir).returncode == 0
    # Deleting the mailbox took its import records along.
    assert fsck(data_dir)[0] == 0
    # Records left behind anyway (a crash in the middle of a deletion) are found and cleared.
    from mailstore import keys
    from mailstore.backends.embedded import EmbeddedBackend
    backend = EmbeddedBackend(data_dir)
    records = backend.table("JAMES_IMPORTS")
    for n in range(3):
        records.put(keys.import_key(b"\x42" * 16, bytes([n]) * 32), {b"i:uid": b"\x00" * 8})
    backend.close()
    status, report = fsck(data_dir)
    assert status == 1
    (problem,) = report["problems"]
    assert problem["kind"] == "import"
    assert problem["detail"] == "3 import record(s) of a mailbox that no longer exists"
    assert fsck(data_dir, "--repair")[0] == 1
    assert fsck(data_dir)[0] == 0
    # Importing again into a new mailbox of the same name imports everything again.
    again = run("import", "dan", str(mbox), "--mailbox", "Old", "--json", data_dir=data_dir)
    assert json.loads(again.stdout)["imported"] == 3


def test_mail_appended_into_a_mailbox_deleted_meanwhile_is_found_and_removed(data_dir):
    """A session that looked a mailbox up just before another deleted it can still append:
    its increments bring back a mailbox row holding only counters, and its message row with
    them.  fsck finds that row (no owner, no name reaches it) and removes it with its
    message, its content reference and its change log."""
    store = open_store(data_dir)
    store.create_user("ann", "pw", default_folders=False)
    store.create_mailbox("ann", "Gone")
    gone = store.mailbox("ann", "Gone")
    store.delete_mailbox("ann", "Gone")
    store.append("ann", gone, message(1))          # the racing APPEND
    assert store.mailboxes.rows.row(gone.id)        # counters only
    store.close()
    status, report = fsck(data_dir)
    assert status == 1
    assert [(p["kind"], p["detail"]) for p in report["problems"]] == [
        ("mailbox", "mailbox row that no name reaches")]
    assert fsck(data_dir, "--repair")[0] == 1
    assert fsck(data_dir)[0] == 0
    store = open_store(data_dir)
    assert store.mailboxes.rows.row(gone.id) == {}
    assert list(store.messages.table.scan(prefix=gone.id)) == []
    assert store.stats()["contents"] == 0
    store.close()


def test_sieve_rows_checked_and_repaired(data_dir):
    """Sieve scripts (decision 0023): a directory naming a text cell that is gone (an active
    script delivery could never read, RFC 5228 2.10.6), an old text cell no directory names,
    scripts and tracking rows of a user deleted behind the store's back are found, and
    repaired through the directory's check-and-put; expired tracking rows (RFC 5230 4.2
    periods over) are no problem but --repair sweeps them."""
    from mailstore.sieve import tracking
    from mailstore.sievescripts import DIRECTORY, SCRIPT_FAMILY

    store = open_store(data_dir)
    for user in ("cat", "dan"):
        store.create_user(user, "pw")
    store.sieve_scripts.put("cat", "main", "keep;\n")
    store.sieve_scripts.put("cat", "spare", "discard;\n")
    store.sieve_scripts.activate("cat", "main")
    table = store.sieve_scripts.table
    row = store.user_keys.user_key("cat")
    cells = table.row(row)
    main_cell = [c for c in cells if c.startswith(SCRIPT_FAMILY + b":")
                 and cells[c] == b"keep;\n"][0]
    table.delete(row, [main_cell])                          # the active script's text gone
    table.put(row, {SCRIPT_FAMILY + b":000000000001" + b"0" * 16: b"stray"})  # 1970: old
    store.sieve_scripts.put("dan", "x", "keep;\n")
    store.sieve_tracking.claim("dan", tracking.VACATION, "k", 86400)
    store.sieve_tracking.claim("cat", tracking.VACATION, "old", 1)
    store.users.table.delete(store.user_keys.user_key("dan"))          # dan gone, his rows left
    store.close()
    status, report = fsck(data_dir)
    assert status == 1
    found = sorted((p["kind"], p["where"], p["detail"]) for p in report["problems"])
    assert found == [
        ("sieve", "cat", "1 script text cell(s) no directory names"),
        ("sieve", "cat", "script 'main' has no text cell"),
        ("sieve", "dan", "scripts of a user that does not exist"),
        ("sieve_tracking", "dan", "1 tracking row(s) of a user that does not exist")]
    time.sleep(1.1)  # cat's one-second claim expires
    status, report = fsck(data_dir, "--repair")
    assert all(p["repaired"] for p in report["problems"])
    assert fsck(data_dir)[0] == 0
    store = open_store(data_dir)
    assert store.sieve_scripts.list("cat") == [("spare", False)]
    assert store.sieve_scripts.active("cat") is None
    assert [c for c in store.sieve_scripts.table.row(row) if c != DIRECTORY] != []
    assert list(store.sieve_tracking.table.scan(start=b"")) == []
    store.close()
