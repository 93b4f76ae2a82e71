"""mailadmin sieve list|get|put|activate|deactivate|delete (docs/mailadmin.md, "Sieve"): the
real console script against an embedded store; the scripts are those ManageSieve manages
(RFC 5804), with the same rules: validated before storing, the active one not deletable
(2.10), the per-user limits of [managesieve]."""

from __future__ import annotations

import json

import pytest

from tests.admincli import run

SCRIPT = 'require "fileinto";\nif address :is "from" "boss@example.com" {\n  fileinto "Boss";\n}\n'


@pytest.fixture
def data_dir(tmp_path):
    path = str(tmp_path / "store")
    assert run("user", "add", "alice", "--password-stdin", data_dir=path,
               stdin="pw\n").returncode == 0
    return path


def test_put_list_get_activate_deactivate_delete(data_dir, tmp_path):
    """The whole cycle, with --json for list: what ManageSieve's LISTSCRIPTS shows (2.7)."""
    source = tmp_path / "boss.sieve"
    source.write_text(SCRIPT)
    out = run("sieve", "put", "alice", "boss", str(source), data_dir=data_dir)
    assert out.returncode == 0 and out.stdout == f"stored script boss of alice " \
        f"({len(SCRIPT)} octets)\n", out.stderr
    out = run("sieve", "put", "Alice", "other", data_dir=data_dir, stdin="keep;\n")
    assert out.returncode == 0, out.stderr
    assert run("sieve", "activate", "alice", "boss", data_dir=data_dir).stdout == \
        "script boss of alice is active\n"
    out = run("sieve", "list", "alice", "--json", data_dir=data_dir)
    assert json.loads(out.stdout) == [{"name": "boss", "active": True},
                                      {"name": "other", "active": False}]
    listing = run("sieve", "list", "alice", data_dir=data_dir).stdout.splitlines()
    assert listing[0].split() == ["NAME", "ACTIVE"] and listing[1].split() == ["boss", "yes"]
    assert run("sieve", "get", "alice", "boss", data_dir=data_dir).stdout == SCRIPT
    copy = tmp_path / "copy.sieve"
    assert run("sieve", "get", "alice", "boss", str(copy), data_dir=data_dir).returncode == 0
    assert copy.read_text() == SCRIPT
    out = run("sieve", "delete", "alice", "boss", data_dir=data_dir)
    assert out.returncode == 1
    assert out.stderr == "mailadmin: script boss is active: deactivate it first\n"
    assert run("sieve", "deactivate", "alice", data_dir=data_dir).stdout == \
        "no script of alice is active\n"
    assert run("sieve", "delete", "alice", "boss", data_dir=data_dir).returncode == 0
    assert json.loads(run("sieve", "list", "alice", "--json", data_dir=data_dir).stdout) == \
        [{"name": "other", "active": False}]


def test_put_refuses_a_script_that_does_not_parse(data_dir):
    """RFC 5228 8 grammar, checked before storing: exit 1, the error with its line, nothing
    stored."""
    out = run("sieve", "put", "alice", "bad", data_dir=data_dir,
              stdin='keep;\nif true {\n  fileinto "x";\n')
    assert out.returncode == 1 and out.stderr.startswith("mailadmin: script bad not stored: "
                                                         "line "), out.stderr
    out = run("sieve", "put", "alice", "ext", data_dir=data_dir, stdin='require "nope";\n')
    # The wording is the validator's (mailstore/sieve/validate.py); the line and the name
    # are what the user needs.
    assert out.returncode == 1 and "line 1:" in out.stderr and "'nope'" in out.stderr
    assert json.loads(run("sieve", "list", "alice", "--json", data_dir=data_dir).stdout) == []


def test_errors_are_named_with_exit_codes(data_dir, tmp_path):
    """Unknown user, unknown script, unreadable or non-UTF-8 file: exit 1 naming the thing;
    a missing argument: exit 2; the size limit of [managesieve] (RFC 5804 QUOTA/MAXSIZE)."""
    for args in (["list", "bob"], ["get", "bob", "x"], ["activate", "bob", "x"],
                 ["deactivate", "bob"], ["delete", "bob", "x"]):
        out = run("sieve", *args, data_dir=data_dir, stdin="keep;\n")
        assert (out.returncode, out.stderr) == (1, "mailadmin: no such user: bob\n"), args
    out = run("sieve", "put", "bob", "x", data_dir=data_dir, stdin="keep;\n")
    assert (out.returncode, out.stderr) == (1, "mailadmin: no such user: bob\n")
    assert run("sieve", "get", "alice", "x", data_dir=data_dir).stderr == \
        "mailadmin: no such script: x (user alice)\n"
    assert run("sieve", "activate", "alice", "x", data_dir=data_dir).stderr == \
        "mailadmin: no such script: x\n"
    out = run("sieve", "put", "alice", "x", str(tmp_path / "missing"), data_dir=data_dir)
    assert out.returncode == 1 and "cannot read" in out.stderr
    latin = tmp_path / "latin1.sieve"
    latin.write_bytes(b"# gr\xfc\xdfe\nkeep;\n")
    out = run("sieve", "put", "alice", "x", str(latin), data_dir=data_dir)
    assert out.returncode == 1 and "is not UTF-8" in out.stderr
    assert run("sieve", "put", "alice", data_dir=data_dir).returncode == 2
    conf = tmp_path / "c.conf"
    conf.write_text("[managesieve]\nmax_script_size = 10\n")
    out = run("sieve", "put", "alice", "big", "--config", str(conf), data_dir=data_dir,
              stdin="# a long comment\nkeep;\n")
    assert out.returncode == 1 and "over the limit of 10" in out.stderr, out.stderr
