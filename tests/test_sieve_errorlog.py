"""A script that fails at run time keeps the message (RFC 5228 2.10.6) and the user can learn
why: the last errors per user in the store (mailstore/sieve/errorlog.py), read by the user as
the METADATA server entry /private/vendor/hbase-imap/sieve/log (RFC 5464 3.2, read-only) and
by the administrator with ``mailadmin sieve log``.  Decision 0025."""

from __future__ import annotations

import json

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.metadata import DEFAULT_POLICY, SIEVE_LOG, ReadOnlyEntry
from mailstore.sieve import errorlog
from mailstore.store import MailStore
from tests.admincli import run
from tests.deliveryserver import InProcess
from tests.test_sieve_delivery import activate, lmtp, messages, msg

FAILING = ('require ["fileinto"];\n'
           'if header :contains "subject" "x" { keep; }\n'
           + "".join(f'redirect "r{i}@example.net";\n' for i in range(6)))


def server_entry(store, user):
    _, found = store.annotations.get(user, None, [SIEVE_LOG], None, DEFAULT_POLICY)
    return dict(found).get(SIEVE_LOG)


def test_runtime_error_is_recorded_for_the_user_with_script_and_line(tmp_path):
    """RFC 5228 2.10.6: the message is kept in INBOX; the error -- script, line of the
    command that failed (the fifth redirect, line 7), message -- is recorded for the user
    and shown to them through GETMETADATA's server entry (RFC 5464 4.2), which they cannot
    set (RFC 5464 3.2: the server may make entries read-only)."""
    store = MailStore(EmbeddedBackend(str(tmp_path / "store")), max_message_size=1 << 20)
    store.create_user("alice", None)
    store.create_user("bob", None)
    activate(store, "alice", FAILING, name="rules")
    assert server_entry(store, "alice") is None  # no error yet: the entry is absent
    with InProcess(store) as server:
        _, answers = lmtp(server, ["alice@example.com", "bob@example.com"], msg())
    assert [code for code, _ in answers] == [250, 250]
    assert len(messages(store, "alice", "INBOX")) == 1
    [entry] = store.sieve_errors.entries("alice")
    assert (entry.script, entry.line) == ("rules", 7)
    assert "redirect" in entry.message
    text = server_entry(store, "alice").decode()
    assert text.endswith("\r\n") and " rules: line 7: " in text
    assert server_entry(store, "bob") is None and store.sieve_errors.entries("bob") == []
    with pytest.raises(ReadOnlyEntry):
        store.annotations.set("alice", None, [(SIEVE_LOG, b"forged")], DEFAULT_POLICY)
    store.close()


def test_error_in_an_included_script_names_that_script(tmp_path):
    """RFC 6609 3.2: a failure inside an included script is that script's, at its line."""
    store = MailStore(EmbeddedBackend(str(tmp_path / "store")), max_message_size=1 << 20)
    store.create_user("alice", None)
    store.sieve_scripts.put("alice", "helper",
                            'require "relational";\nkeep;\nif header :value "zz" '
                            ':comparator "i;unknown" "a" "b" { keep; }\n')
    activate(store, "alice", 'require "include";\ninclude :personal "helper";\n')
    with InProcess(store) as server:
        lmtp(server, ["alice@example.com"], msg())
    [entry] = store.sieve_errors.entries("alice")
    assert (entry.script, entry.line) == ("helper", 3), entry
    store.close()


def test_log_is_bounded_and_mailadmin_reads_it(tmp_path):
    """Only the last MAX_ENTRIES errors are kept (a script failing on every message must not
    grow the store); ``mailadmin sieve log USER`` lists them oldest first, ``--json`` as
    records, ``--clear`` forgets them."""
    data = str(tmp_path / "store")
    assert run("user", "add", "alice", "--password-stdin", data_dir=data,
               stdin="pw\n").returncode == 0
    store = MailStore(EmbeddedBackend(data))
    for i in range(errorlog.MAX_ENTRIES + 5):
        store.sieve_errors.add("alice", "rules", i + 1, f"error number {i}\r\nInjected: x")
    kept = store.sieve_errors.entries("alice")
    assert len(kept) == errorlog.MAX_ENTRIES
    assert kept[0].message == "error number 5 Injected: x"  # one line, oldest dropped
    store.close()
    out = run("sieve", "log", "alice", data_dir=data)
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert len(lines) == errorlog.MAX_ENTRIES and "rules: line 25: error number 24" in lines[-1]
    records = json.loads(run("sieve", "log", "alice", "--json", "--clear",
                             data_dir=data).stdout)
    assert records[-1]["line"] == 25 and records[-1]["script"] == "rules"
    assert "no Sieve errors" in run("sieve", "log", "alice", data_dir=data).stdout
