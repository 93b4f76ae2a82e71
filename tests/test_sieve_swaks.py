"""End to end: a real ``imapserver`` process, scripts stored through the store's
``sieve_scripts`` (what ManageSieve writes), mail delivered by Debian's ``swaks`` over LMTP as
Postfix would, and the result read back over IMAP with stdlib ``imaplib``."""

from __future__ import annotations

import imaplib
import subprocess

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.imapproc import ServerProcess, make_users

PASSWORD = "secret"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("sieve-swaks")
    data = str(root / "store")
    make_users(data, ("alice", PASSWORD), ("bob", PASSWORD), ("carol", PASSWORD))
    store = MailStore(EmbeddedBackend(data))
    store.sieve_scripts.put("alice", "rules", 'require ["fileinto", "mailbox", "imap4flags"];\n'
                            'if header :contains "subject" "urgent" { addflag "\\\\Flagged"; }\n'
                            'if exists "list-id" { fileinto :create "Lists/dev"; stop; }\n')
    store.sieve_scripts.activate("alice", "rules")
    store.sieve_scripts.put("bob", "no", 'require "reject";\n'
                            'if header :contains "subject" "urgent" { reject "Not today."; }')
    store.sieve_scripts.activate("bob", "no")
    conf = root / "imapserver.conf"
    conf.write_text("[delivery]\ndomains = example.com\nhostname = mx.test\n")
    with ServerProcess(data, "--lmtp-port", "auto", config=str(conf)) as server:
        yield server
    store.close()


def swaks(server, *args: str) -> str:
    done = subprocess.run(["swaks", "--server", "127.0.0.1", "--port",
                           str(server.ports["lmtp"]), "--protocol", "LMTP", "--from",
                           "sender@example.org", "--timeout", "10", *args],
                          capture_output=True, timeout=60)
    return done.stdout.decode()


def imap_messages(server, user: str, mailbox: str) -> list[tuple[bytes, bytes]]:
    """(FLAGS response, Subject field) of every message in ``mailbox``."""
    with imaplib.IMAP4("127.0.0.1", server.ports["imap"], timeout=10) as client:
        client.login(user, PASSWORD)
        status, data = client.select(f'"{mailbox}"', readonly=True)
        assert status == "OK", data
        if data[0] == b"0":
            return []
        _, fetched = client.fetch("1:*", "(FLAGS BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
        return [(item[0], item[1].strip()) for item in fetched if isinstance(item, tuple)]


def test_lmtp_delivery_runs_each_recipients_script(env):
    """RFC 5228 at delivery over LMTP (RFC 2033 4.2): alice's script files the list message
    into a folder it creates (RFC 5490 :create) with \\Flagged (RFC 5232), bob's rejects it
    with 550 5.7.1 for him alone (RFC 5429), carol without a script gets it in INBOX; IMAP
    shows each where its script put it."""
    out = swaks(env, "--to", "alice@example.com,bob@example.com,carol@example.com",
                "--h-Subject", "urgent: build broken", "--add-header",
                "List-Id: Developers <dev.example.org>", "--body", "The build is red.")
    assert out.count("<-  250 2.0.0 <") == 2, out
    assert "<** 550 5.7.1 <bob@example.com> Not today." in out, out
    [(flags, subject)] = imap_messages(env, "alice", "Lists/dev")
    assert b"\\Flagged" in flags and b"urgent: build broken" in subject
    assert imap_messages(env, "alice", "INBOX") == []
    assert imap_messages(env, "bob", "INBOX") == []
    [(_flags, subject)] = imap_messages(env, "carol", "INBOX")
    assert b"urgent: build broken" in subject


def test_lmtp_delivery_without_match_is_kept(env):
    """RFC 5228 2.10.2: no action taken, the implicit keep files into INBOX."""
    out = swaks(env, "--to", "bob@example.com", "--h-Subject", "lunch?", "--body", "Hi")
    assert out.count("<-  250 2.0.0 <") == 1, out
    [(_flags, subject)] = imap_messages(env, "bob", "INBOX")
    assert b"lunch?" in subject
