"""Security of the IMAP server: plaintext policy, TLS, failed logins, mailbox-name isolation.

RFC 3501 6.2.1 (STARTTLS), 6.2.3 and 7.2.1 (LOGINDISABLED), RFC 8314 (implicit TLS), RFC 5530
response codes (PRIVACYREQUIRED, AUTHENTICATIONFAILED), RFC 4616 (PLAIN and its authzid), and
RFC 3501 5.1 / 5.1.3 for mailbox names.  Each test drives a real ``imapserver`` process.
"""

from __future__ import annotations

import base64
import re
import ssl
import time

import pytest
import twisted.mail.imap4  # noqa: F401  (registers the imap4-utf-7 codec)

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message
from tests.tlscert import make_cert

DELAY = 0.5
FAILED = b"NO [AUTHENTICATIONFAILED] Authentication failed"


def write_config(path, **imap: str) -> str:
    path.write_text("[imap]\n" + "".join(f"{k} = {v}\n" for k, v in imap.items()))
    return str(path)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_cert(str(tmp_path_factory.mktemp("cert")))


@pytest.fixture(scope="module")
def strict(tmp_path_factory, certs):
    """A server that refuses plaintext authentication before TLS (plaintext_auth = no)."""
    base = tmp_path_factory.mktemp("strict")
    cert, key = certs
    conf = write_config(base / "imapserver.conf", tls_cert=cert, tls_key=key,
                        plaintext_auth="no", auth_failure_delay=str(DELAY))
    data_dir = str(base / "store")
    make_users(data_dir, ("alice", "wonderland"))
    with ServerProcess(data_dir, "--imaps-port", "auto", config=conf) as proc:
        yield proc


@pytest.fixture(scope="module")
def loopback(tmp_path_factory, certs):
    """The default policy (plaintext allowed on loopback), with STARTTLS available."""
    base = tmp_path_factory.mktemp("loopback")
    cert, key = certs
    conf = write_config(base / "imapserver.conf", tls_cert=cert, tls_key=key,
                        auth_failure_delay=str(DELAY))
    data_dir = str(base / "store")
    make_users(data_dir, ("alice", "wonderland"), ("bob", "builder"))
    with ServerProcess(data_dir, config=conf) as proc:
        proc.data_dir = data_dir
        yield proc


def tls_context(certs) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=certs[0])


def start_tls(c: Client, certs) -> None:
    """Send STARTTLS and switch the raw client's socket to TLS."""
    assert c.cmd("tls", "STARTTLS")[-1] == b"tls OK Begin TLS negotiation now"
    assert c.buffer == b""
    c.sock = tls_context(certs).wrap_socket(c.sock, server_hostname="localhost")


def capabilities(c: Client) -> list[bytes]:
    lines = c.cmd("cap", "CAPABILITY")
    assert lines[-1] == b"cap OK CAPABILITY completed"
    return lines[0].split()[2:]


def read_output(proc: ServerProcess, pattern: bytes, timeout: float = 5.0) -> bytes:
    """Server output (stdout and stderr) once ``pattern`` appears in it."""
    return proc.wait_output(pattern, timeout)


# -- plaintext policy and TLS ----------------------------------------------------------------

def test_plaintext_login_refused_before_starttls(strict):
    """RFC 3501 6.2.3 / 7.2.1: LOGINDISABLED is advertised and LOGIN is refused; RFC 5530
    PRIVACYREQUIRED on LOGIN and AUTHENTICATE (with and without an initial response)."""
    c = Client(strict.port)
    try:
        caps = c.greeting.split(b"]")[0].split()
        assert b"LOGINDISABLED" in caps and b"STARTTLS" in caps
        assert not [cap for cap in caps if cap.startswith(b"AUTH=")]
        assert capabilities(c) == caps[3:]
        refused = b"NO [PRIVACYREQUIRED] Plaintext authentication is disabled until TLS is active"
        assert c.cmd("a1", "LOGIN alice wonderland") == [b"a1 " + refused]
        plain = base64.b64encode(b"\0alice\0wonderland").decode()
        assert c.cmd("a2", f"AUTHENTICATE PLAIN {plain}") == [b"a2 " + refused]
        # No SASL challenge is sent either: the password never has to cross in the clear.
        assert c.cmd("a3", "authenticate login") == [b"a3 " + refused]
        assert c.cmd("a4", "SELECT INBOX")[-1].startswith(b"a4 BAD")
    finally:
        c.close()


def test_starttls_then_login_works(strict, certs):
    """RFC 3501 6.2.1: after STARTTLS the capabilities change (no STARTTLS, no LOGINDISABLED,
    AUTH= mechanisms), LOGIN and AUTHENTICATE work, and a second STARTTLS is refused."""
    c = Client(strict.port)
    try:
        start_tls(c, certs)
        caps = capabilities(c)
        assert b"STARTTLS" not in caps and b"LOGINDISABLED" not in caps
        assert b"AUTH=PLAIN" in caps
        assert c.cmd("a1", "STARTTLS")[-1].startswith(b"a1 BAD")
        assert c.cmd("a2", "LOGIN alice wonderland")[-1].startswith(b"a2 OK")
        assert c.cmd("a3", "SELECT INBOX")[-1] == b"a3 OK [READ-WRITE] SELECT completed"
        assert c.cmd("a4", "LOGOUT")[-1] == b"a4 OK LOGOUT completed"
    finally:
        c.close()
    c = Client(strict.port)
    try:
        start_tls(c, certs)
        plain = base64.b64encode(b"\0alice\0wonderland").decode()
        assert c.cmd("b1", f"AUTHENTICATE PLAIN {plain}")[-1].startswith(b"b1 OK")
    finally:
        c.close()


def test_command_in_the_segment_of_the_tls_finished_is_answered(strict, certs):
    """RFC 3501 6.2.1, RFC 8446 4.6.1: under TLS 1.3 the client's handshake ends with its
    Finished, and it may send its first command at once, while the server's post-handshake
    NewSessionTicket messages are still on their way.  Here the CAPABILITY command travels in
    the same TCP segment as the client's Finished and the tickets are not read before it is
    sent (what imaplib2, and so offlineimap, does after STARTTLS): the server must take the
    command and answer it, with the post-STARTTLS capabilities, inside TLS."""
    c = Client(strict.port)
    try:
        assert c.cmd("tls", "STARTTLS")[-1] == b"tls OK Begin TLS negotiation now"
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        context = tls_context(certs)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
        with pytest.raises(ssl.SSLWantReadError):
            tls.do_handshake()
        c.send(outgoing.read())  # ClientHello
        while True:  # the server's flight, up to its Finished
            data = c.sock.recv(65536)
            assert data, "server closed during the handshake"
            incoming.write(data)
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                continue
        assert tls.version() == "TLSv1.3"
        tls.write(b"cap CAPABILITY\r\n")
        c.send(outgoing.read())  # Finished and the command, in one write
        plain = b""
        while not plain.endswith(b"cap OK CAPABILITY completed\r\n"):
            data = c.sock.recv(65536)
            assert data, f"connection closed; got {plain!r}"
            incoming.write(data)
            try:
                while True:
                    plain += tls.read(65536)
            except ssl.SSLWantReadError:
                pass
        caps = plain.split(b"\r\n")[0].split()
        assert caps[:2] == [b"*", b"CAPABILITY"] and b"AUTH=PLAIN" in caps, plain
        assert b"STARTTLS" not in caps and b"LOGINDISABLED" not in caps
    finally:
        c.close()


def test_implicit_tls_port(strict, certs):
    """RFC 8314 3.2: IMAP over implicit TLS; the session starts protected, so no STARTTLS and
    no LOGINDISABLED are offered, and LOGIN works at once."""
    import imaplib
    with imaplib.IMAP4_SSL("127.0.0.1", strict.ports["imaps"],
                           ssl_context=tls_context(certs)) as imap:
        assert "STARTTLS" not in imap.capabilities
        assert "LOGINDISABLED" not in imap.capabilities
        assert "AUTH=PLAIN" in imap.capabilities
        assert imap.login("alice", "wonderland")[0] == "OK"
        assert imap.select("INBOX")[0] == "OK"
        imap.logout()


def test_plaintext_allowed_on_loopback_by_default(loopback):
    """The default policy (``plaintext_auth = loopback``): LOGIN from 127.0.0.1 without TLS."""
    c = Client(loopback.port)
    try:
        caps = c.greeting.split(b"]")[0].split()
        assert b"STARTTLS" in caps and b"AUTH=PLAIN" in caps and b"LOGINDISABLED" not in caps
        assert c.cmd("a1", "LOGIN alice wonderland")[-1].startswith(b"a1 OK")
    finally:
        c.close()


def test_starttls_discards_commands_pipelined_in_the_clear(loopback, certs):
    """RFC 3501 6.2.1, RFC 2595 3.1 (CVE-2011-0411): commands sent in the clear behind
    STARTTLS -- injected by a man in the middle -- are not run inside the TLS session, even when
    they were already queued behind a slow command."""
    c = Client(loopback.port)
    try:
        # The failed LOGIN takes DELAY seconds: STARTTLS and the injected LOGIN wait in the
        # command queue meanwhile.
        c.send(b"x LOGIN alice wrong\r\ntls STARTTLS\r\ninj LOGIN alice wonderland\r\n")
        assert c.read_line() == b"x " + FAILED
        assert c.read_line() == b"tls OK Begin TLS negotiation now"
        assert c.buffer == b""
        c.sock = tls_context(certs).wrap_socket(c.sock, server_hostname="localhost")
        lines = c.cmd("a1", "CAPABILITY")
        assert lines[0].startswith(b"* CAPABILITY ") and b"AUTH=PLAIN" in lines[0]
        assert lines[-1] == b"a1 OK CAPABILITY completed"
        assert c.cmd("a2", "SELECT INBOX")[-1] == \
            b"a2 BAD SELECT requires authentication first"
    finally:
        c.close()


# -- failed logins -----------------------------------------------------------------------------

def test_failed_logins_are_delayed_identical_and_logged(loopback):
    """RFC 3501 6.2.3 / RFC 5530: every failure is the same tagged NO [AUTHENTICATIONFAILED],
    after ``auth_failure_delay`` -- wrong password, unknown user, a name that is not even a valid
    user name, LOGIN or AUTHENTICATE alike -- so nothing tells whether the user exists.  Each
    failure is logged with the user name and the peer, never the password."""
    c = Client(loopback.port)
    try:
        attempts = [
            ("LOGIN alice wrong-password-1", "LOGIN"),
            ("LOGIN nobody wrong-password-2", "LOGIN"),
            ('LOGIN "no such user!" wrong-password-3', "LOGIN"),
            ('LOGIN "" wrong-password-4', "LOGIN"),
            ("LOGIN " + "x" * 300 + " wrong-password-5", "LOGIN"),
            ("AUTHENTICATE PLAIN " + base64.b64encode(b"\0nobody\0wrong-password-6").decode(),
             "PLAIN"),
            ("AUTHENTICATE PLAIN " + base64.b64encode(b"\0alice\0wrong-password-7").decode(),
             "PLAIN"),
        ]
        for i, (command, _mechanism) in enumerate(attempts):
            tag = f"f{i}"
            start = time.monotonic()
            assert c.cmd(tag, command) == [tag.encode() + b" " + FAILED], command
            assert time.monotonic() - start >= DELAY * 0.9, command
        # AUTHENTICATE LOGIN answers the same, after its two challenges.
        c.send(b"f9 AUTHENTICATE LOGIN\r\n")
        assert c.read_line() == b"+ " + base64.b64encode(b"Username:")
        c.send(base64.b64encode(b"nobody") + b"\r\n")
        assert c.read_line() == b"+ " + base64.b64encode(b"Password:")
        c.send(base64.b64encode(b"wrong-password-9") + b"\r\n")
        assert c.read_line() == b"f9 " + FAILED
        # The session is still usable: the right password works afterwards.
        assert c.cmd("ok", "LOGIN alice wonderland")[-1].startswith(b"ok OK")
    finally:
        c.close()
    log = read_output(loopback, rb"user=nobody mechanism=LOGIN")
    assert re.search(rb"login_failed user=alice mechanism=LOGIN remote=127\.0\.0\.1",
                     log), log
    assert b"user=nobody mechanism=PLAIN" in log
    assert b"user=nobody mechanism=LOGIN" in log
    assert b"wrong-password" not in log


def test_authzid_cannot_reach_another_user(loopback):
    """RFC 4616 2: PLAIN with an authorization identity other than the user's own is refused,
    so alice's password never opens bob's mailboxes."""
    c = Client(loopback.port)
    try:
        plain = base64.b64encode(b"bob\0alice\0wonderland").decode()
        assert c.cmd("a1", f"AUTHENTICATE PLAIN {plain}")[-1].startswith(b"a1 NO")
        assert c.cmd("a2", "SELECT INBOX")[-1].startswith(b"a2 BAD")
    finally:
        c.close()


# -- mailbox-name isolation ---------------------------------------------------------------------

SECRET = b"bob-secret-marker-7f3a"

# Names a hostile client might hope would leave its own namespace.  Given as the exact bytes sent
# (sent as literals, so quotes, CR/LF, NUL and 8-bit bytes arrive as they are).
HOSTILE_NAMES = [
    b"..", b"../bob", b"../bob/Secret", b"../../bob/Secret", b"INBOX/../../bob/Secret",
    b"Secret/../../bob/Secret", b"/bob/Secret", b"bob/Secret", b"bob", b"~bob/Secret",
    b"#shared/bob/Secret", b"Other Users/bob/Secret", b".", b"./Secret", b"a//b", b"//",
    b"%", b"*", b"Secr%", b"Secr*", b"%/Secret", b"*/Secret", b"bob%", b"bob*",
    b"INBOX", b"inbox", b"iNbOx", b"INBOX/Secret", b"inbox/../bob", b"\xc4\xb1nbox",
    b"&AGIAbwBi-", b"&AGIAbwBi-/Secret", b"&AC4ALg-/bob", b"&AC8-bob", b"&", b"&-", b"&ZeVnLIqe-",
    b"&Jjo-/&AGI", b"Caf\xc3\xa9", b"\xc0\xae\xc0\xae/bob", b"\xff\xfe",
    b"bob\x00Secret", b"Secret\x00", b"a\r\nb", b"\\bob\\Secret", b'"bob"/Secret',
    b"x" * 2000, b"bob/" + b"y" * 2000, b"/".join([b"z"] * 200),
    b"Secret", b"SECRET", b"secret",
]


def literal(name: bytes) -> bytes:
    return b"{%d+}\r\n" % len(name) + name


def run(c: Client, tag: str, command: bytes) -> list[bytes]:
    c.send(tag.encode() + b" " + command + b"\r\n")
    lines = c.until_tagged(tag)
    status = lines[-1].split(b" ", 2)[1]
    assert status in (b"OK", b"NO", b"BAD"), lines
    return lines


def bob_state(data_dir: str) -> list:
    """bob's mailboxes, their messages and subscriptions, read straight from the store."""
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"))
    try:
        boxes = []
        for mailbox in sorted(store.list_mailboxes("bob"), key=lambda m: m.name):
            views = store.fetch(mailbox, store.uids(mailbox))
            boxes.append((mailbox.name, mailbox.uidvalidity,
                          [(v.uid, sorted(v.flags.names)) for v in views]))
        return [boxes, sorted(store.subscriptions("bob"))]
    finally:
        store.close()


def alice_names(data_dir: str, subscribed: bool = False) -> set[str]:
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"))
    try:
        names = {m.name for m in store.list_mailboxes("alice")}
        return names | set(store.subscriptions("alice")) if subscribed else names
    finally:
        store.close()


def listed_name(line: bytes) -> str:
    """The mailbox name of a LIST or LSUB response line, decoded from modified UTF-7."""
    raw = line.split(b'"/" ', 1)[1]
    if raw.startswith(b"{"):
        raw = raw.split(b"\r\n", 1)[1]
    elif raw.startswith(b'"'):
        raw = raw[1:-1].replace(b'\\"', b'"').replace(b"\\\\", b"\\")
    return raw.decode("imap4-utf-7")


@pytest.fixture(scope="module")
def bob_has_secrets(loopback):
    bob = Client(loopback.port)
    try:
        assert bob.cmd("l", "LOGIN bob builder")[-1].startswith(b"l OK")
        for name in ("Secret", "Secret/Deeper", "INBOX/Secret"):
            assert bob.cmd("c", f'CREATE "{name}"')[-1].startswith(b"c OK")
            bob.send(b"ap APPEND \"" + name.encode() + b"\" " +
                     literal(message(1, subject=SECRET.decode(), body=SECRET + b"\r\n")) +
                     b"\r\n")
            assert bob.until_tagged("ap")[-1].startswith(b"ap OK")
        bob.send(b"ap APPEND INBOX " + literal(message(2, body=SECRET + b"\r\n")) + b"\r\n")
        assert bob.until_tagged("ap")[-1].startswith(b"ap OK")
        assert bob.cmd("s", "SUBSCRIBE Secret")[-1].startswith(b"s OK")
    finally:
        bob.close()
    return bob_state(loopback.data_dir)


@pytest.fixture
def alice(loopback):
    c = Client(loopback.port)
    assert c.cmd("l", "LOGIN alice wonderland")[-1].startswith(b"l OK")
    yield c
    c.close()


def assert_isolated(loopback, before, transcript: list[bytes]) -> None:
    assert bob_state(loopback.data_dir) == before
    for line in transcript:
        assert SECRET not in line, line


def test_hostile_names_stay_in_the_users_namespace(loopback, bob_has_secrets, alice):
    """RFC 3501 5.1: names are the user's own; whatever the name (``..``, wildcards, INBOX case
    games, modified UTF-7 that spells another name, NUL, CR/LF, 8-bit, 2000 octets, 200 levels),
    CREATE, SELECT, EXAMINE, STATUS, APPEND, SUBSCRIBE and DELETE either fail (NO/BAD) or act on a
    mailbox of the logged-in user: bob's mailboxes, messages and subscriptions never change and
    nothing of bob's is ever shown to alice."""
    transcript: list[bytes] = []
    for i, name in enumerate(HOSTILE_NAMES):
        before_alice = alice_names(loopback.data_dir)
        lines = run(alice, f"c{i}", b"CREATE " + literal(name))
        transcript += lines
        created = alice_names(loopback.data_dir) - before_alice
        if lines[-1].split()[1] == b"OK":
            assert created or name.upper() in (b"INBOX",), name
        else:
            assert not created, (name, created)
        for verb in (b"SELECT", b"EXAMINE"):
            transcript += run(alice, f"s{i}", verb + b" " + literal(name))
            transcript += run(alice, f"f{i}", b"FETCH 1:* (BODY.PEEK[] ENVELOPE)") \
                if transcript[-1].startswith(f"s{i} OK".encode()) else []
        transcript += run(alice, f"u{i}", b"UNSELECT")
        transcript += run(alice, f"t{i}", b"STATUS " + literal(name) +
                          b" (MESSAGES UIDNEXT UNSEEN)")
        transcript += run(alice, f"a{i}", b"APPEND " + literal(name) + b" " +
                          literal(message(100 + i)))
        transcript += run(alice, f"b{i}", b"SUBSCRIBE " + literal(name))
        transcript += run(alice, f"l{i}", b'LIST "" ' + literal(name))
        transcript += run(alice, f"m{i}", b"LSUB " + literal(name) + b' "*"')
        assert_isolated(loopback, bob_has_secrets, transcript)
    # Whatever alice now has, it is hers: deleting all of it leaves bob untouched.
    lines = run(alice, "all", b'LIST "" "*"')
    transcript += lines
    for j, line in enumerate(sorted(lines[:-1], key=len, reverse=True)):
        name = listed_name(line).encode("imap4-utf-7")
        transcript += run(alice, f"d{j}", b"DELETE " + literal(name))
    assert_isolated(loopback, bob_has_secrets, transcript)


def test_list_patterns_never_show_another_users_mailboxes(loopback, bob_has_secrets, alice):
    """RFC 3501 6.3.8 / 6.3.9: LIST and LSUB with hostile references and patterns list only the
    user's own mailboxes (every listed name exists in alice's store or is a parent of one)."""
    pairs = [(b"", b"*"), (b"", b"%"), (b"..", b"*"), (b"../", b"*"), (b"/", b"*"),
             (b"~bob/", b"*"), (b"#shared/", b"*"), (b"", b"../*"), (b"", b"../bob/*"),
             (b"", b"*/../*"), (b"bob/", b"%"), (b"", b"&AGIAbwBi-*"), (b"", b"*Secret*"),
             (b"", b"%/%/%"), (b"INBOX/", b"*"), (b"inbox", b"*"), (b"", b"\x00*"),
             (b"", b"*" * 500), (b"", b"%*" * 200)]
    transcript = []
    for name in (b"Mine", b"Mine/Secret", b"bob/Secret", b"&ZeVnLIqe-/x"):
        run(alice, "c", b"CREATE " + literal(name))
        run(alice, "s", b"SUBSCRIBE " + literal(name))
    own = alice_names(loopback.data_dir, subscribed=True)
    for i, (reference, pattern) in enumerate(pairs):
        for verb in (b"LIST", b"LSUB"):
            lines = run(alice, f"l{i}", verb + b" " + literal(reference) + b" " +
                        literal(pattern))
            transcript += lines
            for line in lines[:-1]:
                name = listed_name(line)
                assert any(n == name or n.startswith(name + "/") for n in own) or \
                    name == "", (reference, pattern, line)
    assert_isolated(loopback, bob_has_secrets, transcript)


def test_rename_copy_move_cannot_reach_another_user(loopback, bob_has_secrets, alice):
    """RFC 3501 6.3.5, 6.4.7, RFC 6851: RENAME to or from hostile names, and COPY / MOVE into
    them, act within alice's mailboxes or fail; bob's mailboxes are never renamed, deleted or
    appended to."""
    transcript = []
    for i, name in enumerate(HOSTILE_NAMES):
        transcript += run(alice, f"c{i}", b'CREATE "Mine"')
        transcript += run(alice, f"a{i}", b"APPEND Mine " + literal(message(i)))
        transcript += run(alice, f"r{i}", b"RENAME Mine " + literal(name))
        renamed = transcript[-1].split()[1] == b"OK"
        transcript += run(alice, f"s{i}", b"SELECT " + literal(name if renamed else b"Mine"))
        transcript += run(alice, f"y{i}", b"COPY 1 " + literal(name))
        transcript += run(alice, f"v{i}", b"MOVE 1 " + literal(name))
        transcript += run(alice, f"x{i}", b"UNSELECT")
        transcript += run(alice, f"b{i}", b"RENAME " + literal(name) + b" Back")
        for tag, victim in ((f"d{i}", b"Back"), (f"e{i}", b"Mine"), (f"g{i}", name)):
            transcript += run(alice, tag, b"DELETE " + literal(victim))
        assert_isolated(loopback, bob_has_secrets, transcript)
    # RENAME INBOX (RFC 3501 6.3.5: moves INBOX's messages) to a hostile name stays alice's.
    transcript += run(alice, "ri", b"RENAME INBOX " + literal(b"../bob/INBOX"))
    transcript += run(alice, "rj", b"RENAME INBOX " + literal(b"bob/INBOX"))
    assert_isolated(loopback, bob_has_secrets, transcript)


def test_bob_still_sees_exactly_his_own(loopback, bob_has_secrets):
    """After alice's attempts, bob's session sees his mailboxes and messages as he left them."""
    bob = Client(loopback.port)
    try:
        assert bob.cmd("l", "LOGIN bob builder")[-1].startswith(b"l OK")
        names = sorted(ln.split(b'"/" ')[1] for ln in bob.cmd("a", 'LIST "" "*"')[:-1])
        assert names == sorted([b"INBOX", b"INBOX/Secret", b"Secret", b"Secret/Deeper",
                                b"Archive", b"Drafts", b"Junk", b"Sent", b"Trash"])
        assert b"* STATUS Secret (MESSAGES 1)" in bob.cmd("b", "STATUS Secret (MESSAGES)")
    finally:
        bob.close()
