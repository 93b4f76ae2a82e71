"""mailadmin import/export through the real console script: mbox and Maildir in, flags, dates
and folder trees kept, content byte-identical on the way back out, idempotent re-runs, bad input
reported while the good messages still go in, quota refusals."""

from __future__ import annotations

import json
import mailbox as stdlib_mailbox
import os
import pty
import subprocess

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.admincli import generate, mailadmin_cmd, mbox_bytes, run, write_maildir


@pytest.fixture
def data_dir(tmp_path):
    path = str(tmp_path / "store")
    out = run("user", "add", "bob", data_dir=path)
    assert out.returncode == 0, out.stderr
    return path


def stored(data_dir: str, user: str, name: str) -> list[tuple[bytes, set[str], int]]:
    """(content, flags, internal date) of every message of a mailbox, in UID order."""
    store = MailStore(EmbeddedBackend(data_dir))
    try:
        box = store.mailbox(user, name)
        return [(store.read_message(v), set(v.flags.names), int(v.record.internal_date))
                for v in store.iter_messages(box)]
    finally:
        store.close()


def expected(messages) -> list[tuple[bytes, set[str], int]]:
    """What the store holds for messages read from an mbox: CRLF line ends, and a final line
    end (mbox cannot tell a message without one)."""
    return [(m.stored if m.content.endswith(b"\n") else m.stored + b"\r\n", m.flags, m.date)
            for m in messages]


def test_mbox_import_keeps_flags_dates_and_content(data_dir, tmp_path):
    messages = generate(40, big=7)  # message 7 is 2 MiB: it goes through a temporary file
    path = tmp_path / "old.mbox"
    path.write_bytes(mbox_bytes(messages))
    out = run("import", "bob", str(path), "--mailbox", "Old/2020", "--json", data_dir=data_dir)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert (report["imported"], report["skipped"], report["failed"]) == (40, 0, 0)
    assert report["mailboxes"] == [{"mailbox": "Old/2020", "imported": 40, "skipped": 0,
                                    "failed": 0}]
    assert stored(data_dir, "bob", "Old/2020") == expected(messages)
    # The standard library finds the same messages, in the same order, with the same flags
    # (an independent check of the separators and of the metadata headers).
    theirs = stdlib_mailbox.mbox(str(path), create=False)
    try:
        their = [(m["Message-ID"], set(m.get_flags()) - {"O"}) for m in theirs]
    finally:
        theirs.close()
    letters = {"\\Seen": "R", "\\Answered": "A", "\\Flagged": "F", "\\Draft": "T",
               "\\Deleted": "D"}
    ours = [(content.split(b"Message-ID: ")[1].split(b"\r\n")[0].decode(),
             {letters[f] for f in flags if f in letters})
            for content, flags, _date in stored(data_dir, "bob", "Old/2020")]
    assert ours == their
    listed = json.loads(run("mailbox", "list", "bob", "--json", data_dir=data_dir).stdout)
    old = {r["name"]: r for r in listed}["Old/2020"]
    assert old["messages"] == 40
    assert old["unseen"] == sum(1 for m in messages if "\\Seen" not in m.flags)
    # The import left the mailbox's index checkpoint behind (docs/decisions/0009): the first
    # SELECT of any process starts from it, not from the message rows.
    store = MailStore(EmbeddedBackend(data_dir))
    try:
        box = store.mailbox("bob", "Old/2020")
        checkpoint = store.indexes.load_checkpoint(box.id)
        assert checkpoint is not None and len(checkpoint.uids) == 40
        assert len(checkpoint.unseen) == old["unseen"]
    finally:
        store.close()


def test_mbox_round_trip_is_byte_identical(data_dir, tmp_path):
    messages = generate(25, seed=2)
    original = mbox_bytes(messages)
    (tmp_path / "in.mbox").write_bytes(original)
    assert run("import", "bob", str(tmp_path / "in.mbox"), data_dir=data_dir).returncode == 0
    out = run("export", "bob", str(tmp_path / "out"), "--format", "mbox", "--mailbox", "INBOX",
              data_dir=data_dir)
    assert out.returncode == 0, out.stderr
    assert "exported 25 message(s)" in out.stdout
    assert (tmp_path / "out" / "INBOX.mbox").read_bytes() == original


def test_reimport_skips_what_is_there_and_restores_what_is_gone(data_dir, tmp_path):
    messages = generate(12, seed=3)
    path = tmp_path / "in.mbox"
    path.write_bytes(mbox_bytes(messages))
    assert run("import", "bob", str(path), data_dir=data_dir).returncode == 0
    again = run("import", "bob", str(path), "--json", data_dir=data_dir)
    assert again.returncode == 0
    assert (json.loads(again.stdout)["imported"], json.loads(again.stdout)["skipped"]) == (0, 12)
    store = MailStore(EmbeddedBackend(data_dir))
    inbox = store.mailbox("bob", "INBOX")
    store.expunge(inbox, [3, 4])
    store.close()
    third = json.loads(run("import", "bob", str(path), "--json", data_dir=data_dir).stdout)
    assert (third["imported"], third["skipped"]) == (2, 10)
    assert sorted(m[0] for m in stored(data_dir, "bob", "INBOX")) == \
        sorted(m[0] for m in expected(messages))
    # The same file into another mailbox is another import.
    other = json.loads(run("import", "bob", str(path), "--mailbox", "Copy", "--json",
                           data_dir=data_dir).stdout)
    assert other["imported"] == 12
    assert run("fsck", data_dir=data_dir).returncode == 0


def test_maildir_tree_import_and_export_round_trip(data_dir, tmp_path):
    root = tmp_path / "Maildir"
    keywords = ["$Label1", "work"]
    folders = {"INBOX": (str(root), generate(8, seed=4)),
               "Sent": (str(root / ".Sent"), generate(3, seed=5)),
               "Lists/Python": (str(root / ".Lists.Python"), generate(5, seed=6, big=2)),
               "Entwürfe/v1.0": (str(root / ".Entw&APw-rfe.v1&AC4-0"), generate(2, seed=7)),
               "Empty": (str(root / ".Empty"), [])}
    for folder, msgs in folders.values():
        write_maildir(folder, msgs, keywords)
    out = run("import", "bob", str(root), "--json", data_dir=data_dir)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["imported"] == 18
    for name, (_folder, msgs) in folders.items():
        # new/ (no flags) comes before cur/; within each, by file name (= date here).
        order = sorted(msgs, key=lambda m: (bool(m.flags), m.date))
        assert stored(data_dir, "bob", name) == [(m.stored, m.flags, m.date) for m in order], \
            name

    export = tmp_path / "export"
    out = run("export", "bob", str(export), "--format", "maildir", data_dir=data_dir)
    assert out.returncode == 0, out.stderr
    for name, (folder, msgs) in folders.items():
        rel = os.path.relpath(folder, root)
        target = export / rel if rel != "." else export
        files = sorted(os.listdir(target / "cur"))
        assert len(files) == len(msgs), name
        contents = sorted((target / "cur" / f).read_bytes() for f in files)
        assert contents == sorted(m.content for m in msgs), name
        for f in files:
            assert f.split(":2,")[0].startswith(str(int(os.stat(target / "cur" / f).st_mtime)))
    # And back again into another user: the same messages, flags and dates.
    run("user", "add", "carl", data_dir=data_dir)
    again = run("import", "carl", str(export), "--json", data_dir=data_dir)
    assert json.loads(again.stdout)["imported"] == 18
    for name in folders:
        assert sorted(stored(data_dir, "carl", name)) == sorted(stored(data_dir, "bob", name))


def test_line_ends_crlf_in_the_store_lf_in_files_unless_asked(data_dir, tmp_path):
    root = tmp_path / "Maildir"
    lf, crlf = generate(2, seed=15), generate(2, seed=16, crlf=True)
    write_maildir(str(root), lf + crlf, [])
    assert run("import", "bob", str(root), data_dir=data_dir).returncode == 0
    assert sorted(m[0] for m in stored(data_dir, "bob", "INBOX")) == \
        sorted(m.stored for m in lf + crlf)
    assert all(m.stored == m.content for m in crlf)  # already CRLF: kept as it is

    def exported(*option: str) -> list[bytes]:
        out = tmp_path / ("export" + "".join(option))
        assert run("export", "bob", str(out), "--mailbox", "INBOX", *option,
                   data_dir=data_dir).returncode == 0
        return sorted((out / "cur" / f).read_bytes() for f in os.listdir(out / "cur"))
    # LF on disk by default: the LF files come back byte for byte, the CRLF ones as LF.
    assert exported() == sorted([m.content for m in lf] +
                                [m.content.replace(b"\r\n", b"\n") for m in crlf])
    assert exported("--crlf") == sorted(m.stored for m in lf + crlf)


def test_mbox_directory_export_and_import(data_dir, tmp_path):
    (tmp_path / "a.mbox").write_bytes(mbox_bytes(generate(4, seed=8)))
    run("import", "bob", str(tmp_path / "a.mbox"), "--mailbox", "Work/Projects",
        data_dir=data_dir)
    out = run("export", "bob", str(tmp_path / "out"), "--format", "mbox", data_dir=data_dir)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "out" / "Work" / "Projects.mbox").exists()
    assert (tmp_path / "out" / "Drafts.mbox").read_bytes() == b""
    run("user", "add", "dora", "--no-folders", data_dir=data_dir)
    back = run("import", "dora", str(tmp_path / "out"), "--json", data_dir=data_dir)
    assert back.returncode == 0, back.stderr
    names = [r["name"] for r in json.loads(run("mailbox", "list", "dora", "--json",
                                                    data_dir=data_dir).stdout)]
    assert names == ["Archive", "Drafts", "INBOX", "Junk", "Sent", "Trash", "Work",
                     "Work/Projects"]
    assert stored(data_dir, "dora", "Work/Projects") == stored(data_dir, "bob", "Work/Projects")


def test_corrupt_mbox_imports_the_good_messages_and_reports_the_bad(data_dir, tmp_path):
    good = generate(6, seed=9)
    parts = mbox_bytes(good).split(b"\nFrom sender")
    damaged = (b"garbage before the first message\n" + parts[0] +
               b"\nFrom x Sat Nov 21 12:00:00 2026\n\x00\x01binary \xff junk, no header\n" +
               b"\nFrom sender" + parts[1] +
               b"\nFrom y Sat Nov 21 12:00:00 2026\n" +  # empty message
               b"\nFrom sender" + b"\nFrom sender".join(parts[2:]))
    path = tmp_path / "bad.mbox"
    path.write_bytes(damaged)
    out = run("import", "bob", str(path), data_dir=data_dir)
    assert out.returncode == 1
    assert f"{path}: message 2 (byte " in out.stderr
    assert "not a mail message: its first line is not a header field" in out.stderr
    assert "message 4 (byte" in out.stderr and "empty message" in out.stderr
    assert "33 byte(s) before the first 'From ' line are not a message" in out.stderr
    assert "imported 6 message(s) for bob, skipped 0 already there, 3 failed" in out.stdout
    assert stored(data_dir, "bob", "INBOX") == expected(good)


def test_bad_input_is_named(data_dir, tmp_path):
    missing = run("import", "bob", str(tmp_path / "nope.mbox"), data_dir=data_dir)
    assert missing.returncode == 1
    assert f"cannot read {tmp_path / 'nope.mbox'}: No such file or directory" in missing.stderr
    text = tmp_path / "notes.txt"
    text.write_text("just some text\n")
    plain = run("import", "bob", str(text), data_dir=data_dir)
    assert plain.returncode == 1 and "not an mbox file: no line starts with 'From '" in \
        plain.stderr
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    nothing = run("import", "bob", str(empty_dir), data_dir=data_dir)
    assert nothing.returncode == 1 and "nothing to import in" in nothing.stderr
    # A Maildir whose files cannot all be read: the rest still goes in.
    root = tmp_path / "Maildir"
    write_maildir(str(root), generate(3, seed=10), [])
    os.symlink(str(tmp_path / "gone"), root / "cur" / "9999999999.dangling:2,S")
    out = run("import", "bob", str(root), "--json", data_dir=data_dir)
    assert out.returncode == 1
    report = json.loads(out.stdout)
    assert report["imported"] == 3 and report["failed"] == 1
    assert "No such file or directory" in report["errors"][0]["error"]
    bad_name = tmp_path / "tree"
    write_maildir(str(bad_name / ".Bad*Name"), generate(1, seed=11), [])
    write_maildir(str(bad_name), generate(1, seed=12), [])
    out = run("import", "bob", str(bad_name), "--mailbox", "T", data_dir=data_dir)
    assert out.returncode == 1 and "cannot import into 'T/Bad*Name'" in out.stderr
    assert "forbidden character" in out.stderr
    occupied = run("export", "bob", str(root), data_dir=data_dir)
    assert occupied.returncode == 1 and f"export directory is not empty: {root}" in \
        occupied.stderr


def test_import_over_quota_stops_with_a_clear_message(data_dir, tmp_path):
    messages = generate(10, seed=13)
    path = tmp_path / "in.mbox"
    path.write_bytes(mbox_bytes(messages))
    run("quota", "set", "bob", "--messages", "4", data_dir=data_dir)
    out = run("import", "bob", str(path), data_dir=data_dir)
    assert out.returncode == 1
    assert "import stopped: message quota exceeded for bob" in out.stderr
    assert len(stored(data_dir, "bob", "INBOX")) == 4
    limit = sum(len(m.stored) for m in messages[:6]) + 10
    run("quota", "set", "bob", "--messages", "unlimited", "--storage", str(limit),
        data_dir=data_dir)
    out = run("import", "bob", str(path), "--json", data_dir=data_dir)
    report = json.loads(out.stdout)
    assert (report["imported"], report["skipped"]) == (2, 4)
    assert report["stopped"] == "import stopped: storage quota exceeded for bob"


def test_progress_on_a_terminal_and_in_a_log(data_dir, tmp_path):
    path = tmp_path / "in.mbox"
    path.write_bytes(mbox_bytes(generate(300, seed=14)))
    logged = run("import", "bob", str(path), data_dir=data_dir)
    (line,) = logged.stderr.splitlines()
    assert line.startswith("importing  100%  300 msgs  ") and " msgs/s  " in line
    assert "\r" not in logged.stderr and "[" not in line

    run("user", "add", "tty", data_dir=data_dir)
    leader, follower = pty.openpty()
    proc = subprocess.Popen([*mailadmin_cmd(), "import", "tty", str(path),
                             "--data-dir", data_dir], stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    stdout, _ = proc.communicate(timeout=120)
    screen = b""
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:
            break
        if not data:
            break
        screen += data
    os.close(leader)
    assert proc.returncode == 0 and b"imported 300 message(s)" in stdout
    assert screen.startswith(b"\rimporting  [") and b"]  100%  300 msgs" in screen
    assert b"msgs/s" in screen
    assert screen.endswith(b"\r\n")
