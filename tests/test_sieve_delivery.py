"""Sieve at LMTP/SMTP delivery (RFC 5228 and extensions; docs/sieve.md): scripts stored with
``store.sieve_scripts``, messages sent with stdlib ``smtplib`` to the real listeners, results
read back from the store and the outgoing queue."""

from __future__ import annotations

import smtplib

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.messages import SUMMARY
from mailstore.store import MailStore
from tests.deliveryserver import InProcess, lmtp_send

SENDER = "sender@example.org"


def msg(subject: str = "hello", extra: str = "", message_id: str = "<m1@example.org>",
        to: str = "alice@example.com") -> bytes:
    return (f"From: Sender <{SENDER}>\r\nTo: {to}\r\nSubject: {subject}\r\n"
            f"Message-ID: {message_id}\r\n{extra}\r\nbody text\r\n").encode()


def open_store(backend) -> MailStore:
    store = MailStore(backend, max_message_size=1 << 20)
    for user in ("alice", "bob", "carol"):
        store.create_user(user, None)
    return store


@pytest.fixture
def store(tmp_path):
    store = open_store(EmbeddedBackend(str(tmp_path / "store")))
    yield store
    store.close()


@pytest.fixture
def server(store):
    with InProcess(store) as server:
        yield server


def activate(store, user: str, text: str, name: str = "main") -> None:
    store.sieve_scripts.put(user, name, text)
    store.sieve_scripts.activate(user, name)


def lmtp(server, recipients, data, sender=SENDER):
    with smtplib.LMTP("127.0.0.1", server.ports["lmtp"], timeout=10) as client:
        return lmtp_send(client, sender, recipients, data)


def messages(store, user: str, mailbox: str):
    box = store.mailbox(user, mailbox)
    return list(store.scan(box, columns=SUMMARY))


def outgoing(store):
    return [(e.mail_from, e.rcpt_tos, e.reason, store.outbox.message(e))
            for e in store.outbox.entries()]


def test_fileinto_flags_reject_and_no_script_in_one_lmtp_transaction(backend):
    """RFC 5228 4.1 fileinto (+ RFC 5490 :create, RFC 5232 :flags), RFC 5429 reject as a
    per-recipient 550 (LMTP, RFC 2033 4.2), and a recipient without a script: one content."""
    store = open_store(backend)
    activate(store, "alice", 'require ["fileinto", "mailbox", "imap4flags"];\n'
             'if header :contains "subject" "report" {\n'
             '  fileinto :create :flags ["\\\\Flagged", "$Report"] "Reports/2020";\n}\n')
    activate(store, "carol", 'require "reject";\nreject "I do not take reports.";\n')
    with InProcess(store) as server:
        _, answers = lmtp(server, ["alice@example.com", "bob@example.com",
                                   "carol@example.com"], msg("monthly report"))
    assert [code for code, _ in answers] == [250, 250, 550]
    assert answers[2][1].startswith(b"5.7.1 <carol@example.com> I do not take reports.")
    [filed] = messages(store, "alice", "Reports/2020")
    assert {"\\Flagged", "$Report"} <= set(filed.flags.names)
    assert messages(store, "alice", "INBOX") == []
    [plain] = messages(store, "bob", "INBOX")
    assert filed.record.content == plain.record.content  # stored once
    assert messages(store, "carol", "INBOX") == []


def test_discard_and_implicit_keep_with_flags(store, server):
    """RFC 5228 4.4 discard cancels the implicit keep; RFC 5232 3 the implicit keep takes
    the flags the internal variable holds at the end."""
    activate(store, "alice", 'if header :is "subject" "spam" { discard; }')
    activate(store, "bob", 'require "imap4flags";\naddflag "\\\\Seen";\naddflag "$Auto";')
    _, answers = lmtp(server, ["alice@example.com", "bob@example.com"], msg("spam"))
    assert [code for code, _ in answers] == [250, 250]
    assert messages(store, "alice", "INBOX") == []
    [kept] = messages(store, "bob", "INBOX")
    assert {"\\Seen", "$Auto"} <= set(kept.flags.names)


def test_runtime_error_keeps_in_inbox(store, server):
    """RFC 5228 2.10.6: a script that fails at run time (here: over the redirect limit)
    leaves the message in INBOX, and nothing is sent."""
    activate(store, "alice", "".join(f'redirect "r{i}@example.net";\n' for i in range(9)))
    _, answers = lmtp(server, ["alice@example.com"], msg())
    assert [code for code, _ in answers] == [250]
    assert len(messages(store, "alice", "INBOX")) == 1
    assert outgoing(store) == []


def test_fileinto_missing_mailbox_goes_to_inbox(store, server):
    """RFC 5228 4.1: fileinto a mailbox that does not exist (no :create) must not lose the
    message: it is kept in INBOX (Pigeonhole does the same)."""
    activate(store, "alice", 'require "fileinto";\nfileinto "Nowhere";')
    _, answers = lmtp(server, ["alice@example.com"], msg())
    assert [code for code, _ in answers] == [250]
    assert len(messages(store, "alice", "INBOX")) == 1


def test_smtp_reject_single_recipient_is_550(store, server):
    """RFC 5429 2.1: with one recipient the SMTP reply to DATA can carry the refusal; the
    reason's line breaks cannot end the reply early."""
    activate(store, "alice", 'require "reject";\nreject "go away\r\n250 fake";')
    with smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=10) as client:
        with pytest.raises(smtplib.SMTPDataError) as refused:
            client.sendmail(SENDER, ["alice@example.com"], msg())
    assert refused.value.smtp_code == 550
    assert refused.value.smtp_error == b"5.7.1 <alice@example.com> go away 250 fake"
    assert messages(store, "alice", "INBOX") == []


def test_smtp_reject_among_several_recipients_sends_a_dsn(store, server):
    """RFC 5429 2.1: SMTP has one reply for all recipients, so a reject of one becomes a
    DSN to the sender (queued durably) while the others get the message."""
    activate(store, "alice", 'require "reject";\nreject "not for me";')
    with smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=10) as client:
        refused = client.sendmail(SENDER, ["alice@example.com", "bob@example.com"], msg())
    assert refused == {}
    assert messages(store, "alice", "INBOX") == []
    assert len(messages(store, "bob", "INBOX")) == 1
    [(mail_from, rcpts, reason, body)] = outgoing(store)
    assert (mail_from, rcpts, reason) == ("", [SENDER], "reject")
    assert b"not for me" in body and b"alice@example.com" in body


def test_vacation_once_per_sender_and_never_to_lists(store, server):
    """RFC 5230 4.2 one reply per sender per period; 4.5 / RFC 3834 no reply to list mail;
    the reply has a null sender, Auto-Submitted and In-Reply-To, and a :subject cannot
    inject a header field."""
    activate(store, "alice", 'require "vacation";\n'
             'vacation :days 7 :subject "Away\r\nBcc: victim@example.net" "Back Monday.";')
    lmtp(server, ["alice@example.com"], msg())
    lmtp(server, ["alice@example.com"], msg(message_id="<m2@example.org>"))
    lmtp(server, ["alice@example.com"], msg(extra="List-Id: <dev.example.org>\r\n",
                                            message_id="<m3@example.org>"),
         sender="other@example.org")
    assert len(messages(store, "alice", "INBOX")) == 3
    [(mail_from, rcpts, reason, reply)] = outgoing(store)
    assert (mail_from, rcpts, reason) == ("", [SENDER], "vacation")
    head = reply.split(b"\r\n\r\n")[0].split(b"\r\n")
    assert b"Auto-Submitted: auto-replied (vacation)" in head
    assert b"In-Reply-To: <m1@example.org>" in head
    assert b"Subject: Away Bcc: victim@example.net" in head
    assert not any(line.startswith(b"Bcc:") for line in head)


def test_redirect_queued_and_loop_refused(store, server):
    """RFC 5228 4.2 redirect goes through the outgoing queue with Delivered-To added; a
    message that already went through this recipient is not redirected again (loop) and
    is kept instead."""
    activate(store, "alice", 'redirect "alice@elsewhere.example";')
    lmtp(server, ["alice@example.com"], msg())
    [(mail_from, rcpts, reason, body)] = outgoing(store)
    assert (mail_from, rcpts, reason) == (SENDER, ["alice@elsewhere.example"], "redirect")
    assert body.startswith(b"Delivered-To: alice@example.com\r\n")
    assert messages(store, "alice", "INBOX") == []
    lmtp(server, ["alice@example.com"], b"Delivered-To: alice@example.com\r\n" + msg())
    assert len(outgoing(store)) == 1
    assert len(messages(store, "alice", "INBOX")) == 1


def test_editheader_changes_only_that_recipients_copy(store, server):
    """RFC 5293: addheader/deleteheader change the copy delivered to the script's owner,
    not the other recipients' copies."""
    activate(store, "alice", 'require "editheader";\naddheader "X-Filtered" "yes";\n'
             'deleteheader "X-Secret";')
    lmtp(server, ["alice@example.com", "bob@example.com"], msg(extra="X-Secret: 1\r\n"))
    [mine] = messages(store, "alice", "INBOX")
    [theirs] = messages(store, "bob", "INBOX")
    mine_raw = store.read_message(mine)
    theirs_raw = store.read_message(theirs)
    assert mine_raw.startswith(b"X-Filtered: yes\r\n") and b"X-Secret" not in mine_raw
    assert b"X-Filtered" not in theirs_raw and b"X-Secret: 1" in theirs_raw


def test_duplicate_remembers_delivered_message_ids(store, server):
    """RFC 7352 3: the second delivery of a Message-ID is a duplicate (recorded only once
    the first was delivered)."""
    activate(store, "alice", 'require ["duplicate", "fileinto", "mailbox"];\n'
             'if duplicate { fileinto :create "Dups"; }')
    lmtp(server, ["alice@example.com"], msg())
    lmtp(server, ["alice@example.com"], msg())
    assert len(messages(store, "alice", "INBOX")) == 1
    assert len(messages(store, "alice", "Dups")) == 1


def test_include_personal_script(store, server):
    """RFC 6609 3.2: include runs another of the user's scripts; :optional skips a
    missing one; global variables are shared."""
    store.sieve_scripts.put("alice", "lib", 'require ["variables", "include"];\n'
                            'global "box";\nset "box" "Included";')
    activate(store, "alice", 'require ["include", "variables", "fileinto", "mailbox"];\n'
             'global "box";\ninclude :optional "missing";\ninclude :personal "lib";\n'
             'fileinto :create "${box}";')
    lmtp(server, ["alice@example.com"], msg())
    assert len(messages(store, "alice", "Included")) == 1


def test_outbox_failure_answers_451_and_keeps_no_copy(store, server, monkeypatch):
    """The 2xx means the redirect is queued (RFC 5321 4.2.5 and 6.1: an accepted message
    is the server's responsibility): when the queue cannot take it, the recipient is told
    to retry (451) and the copy kept by :copy is taken back, so the retry does not
    deliver it twice."""
    from mailstore.errors import BackendUnavailable

    def down(*_args, **_kwargs):
        raise BackendUnavailable("outbox down")

    activate(store, "alice", 'require "copy";\nredirect :copy "elsewhere@example.net";')
    monkeypatch.setattr(store.outbox, "enqueue", down)
    _, answers = lmtp(server, ["alice@example.com", "bob@example.com"], msg())
    assert [code for code, _ in answers] == [451, 250]
    assert messages(store, "alice", "INBOX") == []
    assert len(messages(store, "bob", "INBOX")) == 1


def test_vacation_reaches_the_relay_once_per_sender_and_never_for_a_list(tmp_path):
    """RFC 5230 4.2 and 4.5 end to end: three LMTP deliveries (twice the same sender, once a
    list message) give exactly one reply at a real SMTP server behind the relay, sent with
    the null reverse-path (RFC 3834 3.3); a list message gets none."""
    import time

    from tests.deliveryserver import config
    from tests.smtpsink import Sink

    store = open_store(EmbeddedBackend(str(tmp_path / "store")))
    activate(store, "alice", 'require "vacation";\nvacation :subject "Away" "Back soon.";')
    with Sink() as sink, InProcess(store, config(
            relay_host="127.0.0.1", relay_port=sink.port, relay_starttls="no",
            relay_poll_interval=0.2, hostname="mx.test")) as server:
        lmtp(server, ["alice@example.com"], msg())
        lmtp(server, ["alice@example.com"], msg(message_id="<m2@example.org>"))
        lmtp(server, ["alice@example.com"], msg(extra="List-Id: <l.example.org>\r\n",
                                                message_id="<m3@example.org>"),
             sender="list-bounces@example.org")
        deadline = time.monotonic() + 20
        while store.outbox.entries() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.outbox.entries() == []
        [got] = sink.messages()
    store.close()
    assert (got.mail_from, got.rcpt_tos) == ("<>", [SENDER])  # the null reverse-path
    assert b"Subject: Away\r\n" in got.data and b"In-Reply-To: <m1@example.org>" in got.data


def test_interpreter_bug_delivers_as_without_a_script(store, server, monkeypatch):
    """A filter must not cost mail (RFC 5228 2.10.6 keeps on errors): if running the script
    fails unexpectedly, the message is delivered to INBOX as if there were no script."""
    from mailstore.sieve import executor

    def broken(*_args, **_kwargs):
        raise RuntimeError("interpreter bug")

    activate(store, "alice", "discard;")
    monkeypatch.setattr(executor, "run", broken)
    _, answers = lmtp(server, ["alice@example.com"], msg())
    assert [code for code, _ in answers] == [250]
    assert len(messages(store, "alice", "INBOX")) == 1


def test_mboxmetadata_and_servermetadata_read_the_users_annotations(store, server):
    """RFC 5490 3.2-3.5: metadata/metadataexists read a mailbox's annotations as the user
    sees them (RFC 5464: /private their own, /shared the mailbox's), servermetadata the
    server's; a missing entry has no value."""
    from mailstore.metadata import DEFAULT_POLICY

    store.create_mailbox("alice", "Projects")
    store.annotations.set("alice", "Projects", [("/private/comment", b"route-here")],
                          DEFAULT_POLICY)
    store.annotations.set("alice", None, [("/private/vendor/test/mode", b"away")],
                          DEFAULT_POLICY)
    activate(store, "alice", 'require ["mboxmetadata", "servermetadata", "fileinto", '
             '"variables"];\n'
             'if allof (metadata :is "Projects" "/private/comment" "route-here",\n'
             '          metadataexists "Projects" "/private/comment",\n'
             '          not metadataexists "Projects" "/shared/comment",\n'
             '          servermetadata :matches "/private/vendor/test/mode" "a*",\n'
             '          not servermetadataexists "/shared/nothing") {\n'
             '  fileinto "Projects";\n}\n')
    _, answers = lmtp(server, ["alice@example.com"], msg())
    assert [code for code, _ in answers] == [250]
    assert len(messages(store, "alice", "Projects")) == 1


def test_smtp_failure_of_one_recipient_sends_no_redirect(store, server):
    """RFC 5321 4.1.1.4: SMTP's one reply covers every recipient, so when one cannot take
    the message none keeps it -- and the script of another sends nothing either, or the
    sender's retry would redirect it twice."""
    store.users.set_quota("bob", 10, None)
    activate(store, "alice", 'require "copy";\nredirect :copy "elsewhere@example.net";')
    # bob's copy is edited, so stored after alice's (its own content): his failure comes
    # once alice's copy is in.
    activate(store, "bob", 'require "editheader";\naddheader "X-Bob" "1";')
    with smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=10) as client:
        with pytest.raises(smtplib.SMTPException):
            client.sendmail(SENDER, ["alice@example.com", "bob@example.com"], msg())
    assert outgoing(store) == []
    assert messages(store, "alice", "INBOX") == []


def test_same_recipient_twice_runs_the_script_once(store, server):
    """RFC 5321 3.3 lets a client give the same RCPT twice; the message is delivered once
    (as without Sieve) and its script's mail is sent once."""
    activate(store, "alice", 'require "copy";\nredirect :copy "elsewhere@example.net";')
    _, answers = lmtp(server, ["alice@example.com", "alice@example.com"], msg())
    assert [code for code, _ in answers] == [250, 250]
    assert len(messages(store, "alice", "INBOX")) == 1
    assert len(outgoing(store)) == 1


def test_include_global_reads_the_configured_account(tmp_path):
    """RFC 6609 3.2: include :global runs a script shared by every user, here the scripts
    of [sieve] global_scripts_user."""
    from mailstore import config as configmod
    from tests.deliveryserver import config

    store = open_store(EmbeddedBackend(str(tmp_path / "store")))
    store.create_user("sieve-global", None)
    store.sieve_scripts.put("sieve-global", "spam", 'require ["fileinto", "mailbox"];\n'
                            'if header :contains "subject" "viagra" '
                            '{ fileinto :create "Junk-Global"; stop; }')
    activate(store, "alice", 'require "include";\ninclude :global "spam";')
    cfg = config()
    cfg.values["sieve"]["global_scripts_user"] = "sieve-global"
    assert isinstance(cfg, configmod.Config)
    with InProcess(store, cfg) as server:
        lmtp(server, ["alice@example.com"], msg("cheap viagra"))
    assert len(messages(store, "alice", "Junk-Global")) == 1
    store.close()


def test_redirect_refused_when_x_loop_names_the_recipient_or_the_target(store, server):
    """RFC 5228 4.2 (implementations SHOULD detect loops): an ``X-Loop`` field naming this
    recipient, or the redirect's target, marks a loop as a ``Delivered-To`` does; the message
    is kept in INBOX and nothing is queued."""
    activate(store, "alice", 'redirect "alice@elsewhere.example";')
    lmtp(server, ["alice@example.com"], b"X-Loop: <alice@example.com>\r\n" + msg())
    lmtp(server, ["alice@example.com"], b"X-Loop: alice@elsewhere.example\r\n" + msg())
    assert outgoing(store) == []
    assert len(messages(store, "alice", "INBOX")) == 2
