"""End to end: a real ``imapserver`` process, scripts stored through the store's
``sieve_scripts`` (what ManageSieve writes) or uploaded with sieve-connect, mail delivered by
Debian's ``swaks`` over LMTP as Postfix would, and the result read back over IMAP with stdlib
``imaplib``; the last test also runs the relay (down, then up) to a local SMTP sink."""

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


def sieve_connect(server, tmp_path, user: str, *action: str) -> str:
    """Debian's sieve-connect against the ManageSieve listener (RFC 5804), as a user would
    upload and activate a script (loopback: plaintext allowed)."""
    proc = subprocess.run(
        ["sieve-connect", "--nosrv", "--server", "127.0.0.1", "--port",
         str(server.ports["managesieve"]), "--user", user, "--passwordfd", "0", "--authmech",
         "PLAIN", "--clearchan", *action],
        input=PASSWORD + "\n", capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, (action, proc.stdout, proc.stderr)
    return proc.stdout + proc.stderr


def upload(server, tmp_path, user: str, text: str) -> None:
    local = tmp_path / f"{user}.sieve"
    local.write_text(text)
    sieve_connect(server, tmp_path, user, "--upload", "--localsieve", str(local),
                  "--remotesieve", "main")
    sieve_connect(server, tmp_path, user, "--activate", "--remotesieve", "main")


def poll(condition, what: str, timeout: float = 30.0):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_issue_15_end_to_end_as_a_user_sees_it(tmp_path):
    """Issue 15 as a user meets it, every part real: scripts uploaded and activated with
    sieve-connect over ManageSieve (RFC 5804 2.6, 2.8), mail delivered by swaks over LMTP
    (RFC 2033) to a server whose relay is down at first.

    * reject (RFC 5429 2.1): 550 5.7.1 for erin alone, the others 250 (RFC 2033 4.2);
    * vacation (RFC 5230 4.2): two deliveries from one sender, one reply at the SMTP sink,
      from the null reverse-path (RFC 3834 3.3), sent after the relay came up;
    * redirect :copy (RFC 5228 4.2, RFC 3894): queued while the relay is down, retried with
      backoff, delivered once per message once it is up (RFC 5321 4.5.4.1);
    * a script failing at run time (RFC 5228 2.10.6): the message kept in INBOX and the error,
      with script and line, readable by the user with GETMETADATA (RFC 5464) and by the
      administrator with ``mailadmin sieve log``;
    * IMAP shows each message where the scripts put it."""
    from tests.admincli import run
    from tests.imapproc import Client
    from tests.smtpsink import Sink, reserve_port

    data = str(tmp_path / "store")
    make_users(data, ("dave", PASSWORD), ("erin", PASSWORD), ("frank", PASSWORD))
    relay = reserve_port()  # bound, not listening: the relay is down
    conf = tmp_path / "imapserver.conf"
    conf.write_text("[store]\nsynchronous = NORMAL\n[delivery]\ndomains = example.com\n"
                    "hostname = mx.test\nrelay_host = 127.0.0.1\n"
                    f"relay_port = {relay.getsockname()[1]}\nrelay_starttls = no\n"
                    "relay_backoff_base = 0.3\nrelay_backoff_max = 1\n"
                    "relay_poll_interval = 0.2\nrelay_timeout = 5\n")
    with ServerProcess(data, "--lmtp-port", "auto", "--sieve-port", "auto",
                       config=str(conf)) as server:
        upload(server, tmp_path, "dave", 'require ["vacation", "copy"];\n'
               'vacation :days 1 :subject "Out of office" "I am away until Monday.";\n'
               'redirect :copy "dave@elsewhere.example.net";\n')
        upload(server, tmp_path, "erin", 'require "reject";\n'
               'if header :contains "subject" "offer" { reject "No offers, thanks."; }\n')
        upload(server, tmp_path, "frank", 'require "fileinto";\nif true {\n'
               + "".join(f'  redirect "r{i}@example.net";\n' for i in range(6)) + "}\n")
        out = swaks(server, "--to", "dave@example.com,erin@example.com,frank@example.com",
                    "--h-Subject", "an offer", "--h-Message-Id", "<e2e-1@example.org>",
                    "--body", "Interested?")
        assert out.count("<-  250 2.0.0 <") == 2, out
        assert "<** 550 5.7.1 <erin@example.com> No offers, thanks." in out, out
        store = MailStore(EmbeddedBackend(data))
        try:
            # The relay refuses connections: both dave's mails are queued and deferred.
            poll(lambda: (e := store.outbox.entries()) and len(e) == 2
                 and all(x.attempts >= 1 for x in e), "two deferred entries")
            out = swaks(server, "--to", "dave@example.com", "--h-Subject", "an offer again",
                        "--h-Message-Id", "<e2e-2@example.org>", "--body", "Still?")
            assert out.count("<-  250 2.0.0 <") == 1, out
            with Sink(relay) as sink:
                poll(lambda: len(sink.messages()) >= 3 and not store.outbox.entries(),
                     "the queued mail at the relay after it came up")
                import time
                time.sleep(1.5)  # a few more polls and retries: nothing is sent again
                got = sink.messages()
        finally:
            store.close()
        replies = [m for m in got if m.mail_from == "<>"]
        redirects = [m for m in got if m.rcpt_tos == ["dave@elsewhere.example.net"]]
        assert len(got) == 3 and len(replies) == 1 and len(redirects) == 2, got
        assert replies[0].rcpt_tos == ["sender@example.org"]
        assert b"Subject: Out of office" in replies[0].data
        assert b"Auto-Submitted: auto-replied" in replies[0].data
        assert {m.mail_from for m in redirects} == {"sender@example.org"}
        assert [s for _f, s in imap_messages(server, "dave", "INBOX")] == [
            b"Subject: an offer", b"Subject: an offer again"]
        assert imap_messages(server, "erin", "INBOX") == []
        assert [s for _f, s in imap_messages(server, "frank", "INBOX")] == [b"Subject: an offer"]
        client = Client(server.ports["imap"])
        try:
            client.cmd("a", f"LOGIN frank {PASSWORD}")
            answer = b"\r\n".join(client.cmd(
                "b", 'GETMETADATA "" /private/vendor/hbase-imap/sieve/log'))
        finally:
            client.close()
        assert b"main: line 7: " in answer and b"b OK" in answer, answer
        log = run("sieve", "log", "frank", data_dir=data).stdout
        assert "main: line 7: " in log and "redirect" in log, log
