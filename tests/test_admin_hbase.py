"""The same mailadmin session on the embedded store and on HBase (over the Thrift wire, against
the session's Thrift1 server, tests/hbasetarget.py): the same answers, command for command."""

from __future__ import annotations

import json
import os

import pytest

from tests.admincli import generate, mbox_bytes, run, write_maildir


def session(where: tuple[str, ...], tmp_path, tag: str) -> list[object]:
    """Run a provisioning, import, export, repair session; the JSON of every step."""
    def admin(*args: str, stdin: str | None = None, ok: tuple[int, ...] = (0,)) -> object:
        out = run(*args, "--json", data_dir=None, stdin=stdin, extra=where)
        assert out.returncode in ok, (args, out.stderr)
        return json.loads(out.stdout) if out.stdout else None

    def without_ids(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in ("id", "uidvalidity")} for r in rows]

    source = tmp_path / f"source-{tag}"
    source.mkdir()
    (source / "a.mbox").write_bytes(mbox_bytes(generate(7, seed=30)))
    write_maildir(str(source / "Maildir"), generate(4, seed=31), ["work"])
    write_maildir(str(source / "Maildir" / ".Lists.Python"), generate(3, seed=32), ["work"])
    steps = [
        admin("init-schema")["created"] == [],  # MailStore creates tables on first use too
        admin("user", "add", "gus", "--password-stdin", stdin="pw\n"),
        admin("mailbox", "create", "gus", "Work/Projects", "--special-use",
              "\\Archive")["created"],
        admin("quota", "set", "gus", "--storage", "10M", "--messages", "100"),
        admin("import", "gus", str(source / "a.mbox"), "--mailbox", "Old"),
        admin("import", "gus", str(source / "Maildir")),
        admin("import", "gus", str(source / "a.mbox"), "--mailbox", "Old"),
        without_ids(admin("mailbox", "list", "gus")),
        admin("user", "list"),
        admin("quota", "show", "gus"),
        admin("stats"),
        admin("fsck"),
        admin("mailbox", "rename", "gus", "Lists", "Archive/Lists"),
        admin("mailbox", "delete", "gus", "Old", "--yes"),
        admin("fsck"),  # the deletion took Old's import records along
    ]
    export = tmp_path / f"export-{tag}"
    exported = admin("export", "gus", str(export))
    for row in exported.pop("mailboxes"):
        steps.append((row["mailbox"], row["messages"], os.path.relpath(row["path"], export)))
    steps.append({k: v for k, v in exported.items() if k != "dir"})
    files = []
    for folder, _, names in os.walk(export):
        if os.path.basename(folder) == "cur":
            for name in names:
                with open(os.path.join(folder, name), "rb") as f:
                    # The file name holds the UIDVALIDITY; keep the folder and the flags.
                    files.append((os.path.relpath(folder, export), name.split(":2,")[1],
                                  f.read()))
    steps.append(sorted(files))
    steps.append(admin("user", "del", "gus", "--yes"))
    steps.append(admin("stats"))
    return steps


@pytest.mark.slow  # ~10 s; tests/test_hbase_wire_e2e.py always runs a session over the wire
def test_the_same_session_on_the_embedded_store_and_on_hbase(tmp_path, hbase_store):
    # The HBase prefix comes with the schema's tables (tests/hbasetarget.py): so does the
    # embedded store, and init-schema then finds nothing to create on either.
    where = ("--data-dir", str(tmp_path / "embedded"))
    assert run("init-schema", data_dir=None, extra=where).returncode == 0
    embedded = session(where, tmp_path, "embedded")
    hbase = session(tuple(hbase_store.args()), tmp_path, "hbase")
    assert len(embedded) == len(hbase)
    for number, (ours, theirs) in enumerate(zip(embedded, hbase, strict=True)):
        assert ours == theirs, number
    assert embedded[-1] == {"users": 0, "mailboxes": 0, "messages": 0, "message_bytes": 0,
                            "contents": 0, "content_bytes": 0, "bytes_saved": 0}
