"""ManageSieve (RFC 5804) transcript tests against a real ``imapserver`` on ``--sieve-port auto``.

Each test starts its own server on a fresh store; the conversation is raw bytes over a socket
(tests/sieveclient.py) and the answers are compared as the server wrote them.
"""

from __future__ import annotations

import base64
import ssl
import time

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.imapproc import ServerProcess, make_users
from tests.sieveclient import SieveClient, capabilities
from tests.tlscert import make_cert

KEEP = b'require "fileinto";\r\nif header :contains "subject" "x" {\r\n  fileinto "INBOX";\r\n}\r\n'
LIMITS = ("[managesieve]\nmax_scripts = 3\nmax_script_size = 200\nmax_total_size = 500\n"
          "max_line_length = 1024\nmax_connections_per_user = 3\n")


@pytest.fixture
def server(tmp_path):
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("alice", "alice-pw"), ("bob", "bob-pw"))
    conf = tmp_path / "c.conf"
    conf.write_text("[store]\nsynchronous = NORMAL\n[imap]\nauth_failure_delay = 0.1\n" + LIMITS)
    with ServerProcess(data_dir, "--sieve-port", "auto", config=str(conf)) as proc:
        proc.clients = []
        try:
            yield proc
        finally:
            for client in proc.clients:
                client.close()


def connect(server) -> SieveClient:
    """A client, closed when the test ends."""
    if not hasattr(server, "clients"):
        server.clients = []
    server.clients.append(SieveClient(server.ports["managesieve"]))
    return server.clients[-1]


def literal(data: bytes, plus: bool = True) -> bytes:
    return b"{%d%s}\r\n" % (len(data), b"+" if plus else b"") + data


def stored(server, user: str) -> list[tuple[str, bool]]:
    """The user's scripts as the store has them (read through a second connection)."""
    store = MailStore(EmbeddedBackend(server.data_dir), create_tables=False)
    try:
        return store.sieve_scripts.list(user)
    finally:
        store.close()


def test_greeting_lists_the_capabilities(server):
    """RFC 5804 1.7: the greeting is the capability listing then OK; IMPLEMENTATION, SASL,
    SIEVE and VERSION "1.0" are required; no STARTTLS without a certificate; NOTIFY is not
    offered (no enotify); CAPABILITY repeats them, with OWNER once authenticated."""
    c = connect(server)
    assert c.greeting[-1].startswith(b"OK")
    caps = capabilities(c.greeting[:-1])
    assert caps["IMPLEMENTATION"] and caps["VERSION"] == "1.0" and caps["MAXREDIRECTS"] == "4"
    assert caps["SASL"].split() == ["PLAIN", "LOGIN"]     # loopback: plaintext allowed
    assert {"fileinto", "vacation", "imap4flags", "envelope"} <= set(caps["SIEVE"].split())
    assert "STARTTLS" not in caps and "NOTIFY" not in caps and "OWNER" not in caps
    assert c.cmd("CAPABILITY") == c.greeting[:-1] + [b'OK "Capability completed"']
    assert c.login("alice", "alice-pw") == [b'OK "Logged in"']
    assert capabilities(c.cmd("CAPABILITY"))["OWNER"] == "alice"
    c.close()


def test_commands_before_authentication_are_refused(server):
    """RFC 5804 2: script commands need the authenticated state; an unknown command is NO
    (ManageSieve has no BAD); NOOP and CAPABILITY work in every state.  The third refused
    command before login ends the connection with BYE (as Dovecot's managesieve-login)."""
    for command in ("LISTSCRIPTS", 'GETSCRIPT "a"', 'SETACTIVE "a"', 'DELETESCRIPT "a"',
                    'HAVESPACE "a" 10', 'RENAMESCRIPT "a" "b"', "UNAUTHENTICATE"):
        c = connect(server)
        assert c.cmd(command) == [b'NO "Authenticate first"'], command
    assert c.cmd(b'PUTSCRIPT "a" ' + literal(b"keep;")) == [b'NO "Authenticate first"']
    assert c.cmd('NOOP "t1"') == [b'OK (TAG "t1") "Done"']
    assert c.cmd("FROBNICATE") == [b'BYE "Too many invalid commands"']
    assert c.closed_by_peer()
    c = connect(server)
    assert c.cmd("FROBNICATE") == [b'NO "Unknown command FROBNICATE"']
    assert c.cmd("LOGOUT") == [b'OK "Logout completed"']
    assert c.closed_by_peer()
    assert stored(server, "alice") == []


def test_authenticate_plain_login_continuations_cancel_and_failure(server):
    """RFC 5804 2.1: PLAIN with an initial response (SASL-IR) or after an empty challenge,
    LOGIN's two challenges, ``"*"`` cancels (NO), a wrong password is NO; after
    UNAUTHENTICATE (2.14.1) another user may log in."""
    c = connect(server)
    assert c.login("alice", "wrong") == [b'NO "Authentication failed"']
    c.send('AUTHENTICATE "PLAIN"\r\n')
    assert c.line() == b'""'
    token = base64.b64encode(b"\0alice\0alice-pw")
    c.send(b"{%d+}\r\n" % len(token) + token + b"\r\n")
    assert c.response() == [b'OK "Logged in"']
    assert c.cmd("AUTHENTICATE \"PLAIN\"") == [b'NO "Already authenticated"']
    assert c.cmd("UNAUTHENTICATE") == [b'OK "Unauthenticate completed"']
    assert c.cmd("LISTSCRIPTS") == [b'NO "Authenticate first"']
    c.send('AUTHENTICATE "LOGIN"\r\n')
    assert base64.b64decode(c.line().strip(b'"')) == b"Username:"
    c.send('"' + base64.b64encode(b"bob").decode() + '"\r\n')
    assert base64.b64decode(c.line().strip(b'"')) == b"Password:"
    c.send('"*"\r\n')
    assert c.response() == [b'NO "Authentication cancelled"']
    assert c.cmd('AUTHENTICATE "DIGEST-MD5"')[-1].startswith(b"NO")
    assert c.login("bob", "bob-pw") == [b'OK "Logged in"']
    assert capabilities(c.cmd("CAPABILITY"))["OWNER"] == "bob"
    c.close()


def test_script_lifecycle(server):
    """RFC 5804 2.5-2.12: HAVESPACE, PUTSCRIPT (literal, quoted), LISTSCRIPTS with ACTIVE,
    SETACTIVE and SETACTIVE "" (deactivate), GETSCRIPT (a literal), DELETESCRIPT of the
    active script refused (ACTIVE), RENAMESCRIPT (ALREADYEXISTS, NONEXISTENT), CHECKSCRIPT."""
    c = connect(server)
    c.login("alice", "alice-pw")
    assert c.cmd('HAVESPACE "rules" 100') == [b'OK "Putscript would succeed"']
    assert c.cmd(b'PUTSCRIPT "rules" ' + literal(KEEP)) == [b'OK "Putscript completed"']
    assert c.cmd('PUTSCRIPT "other" "keep;"') == [b'OK "Putscript completed"']
    assert c.cmd("LISTSCRIPTS") == [b'"other"', b'"rules"', b'OK "Listscripts completed"']
    assert c.cmd('SETACTIVE "rules"') == [b'OK "Setactive completed"']
    assert c.cmd("LISTSCRIPTS") == [b'"other"', b'"rules" ACTIVE',
                                    b'OK "Listscripts completed"']
    assert c.cmd('GETSCRIPT "rules"') == [b"{%d}\r\n" % len(KEEP) + KEEP,
                                          b'OK "Getscript completed"']
    assert c.cmd('GETSCRIPT "nope"') == [b'NO (NONEXISTENT) "Script does not exist"']
    assert c.cmd('DELETESCRIPT "rules"')[0].startswith(b"NO (ACTIVE)")
    assert c.cmd('RENAMESCRIPT "rules" "other"')[0].startswith(b"NO (ALREADYEXISTS)")
    assert c.cmd('RENAMESCRIPT "nope" "x"')[0].startswith(b"NO (NONEXISTENT)")
    assert c.cmd('RENAMESCRIPT "rules" "main"') == [b'OK "Renamescript completed"']
    assert stored(server, "alice") == [("main", True), ("other", False)]
    assert c.cmd('SETACTIVE "nope"')[0].startswith(b"NO (NONEXISTENT)")
    assert c.cmd('SETACTIVE ""') == [b'OK "Script deactivated"']
    assert c.cmd('DELETESCRIPT "main"') == [b'OK "Deletescript completed"']
    assert c.cmd('DELETESCRIPT "main"')[0].startswith(b"NO (NONEXISTENT)")
    assert c.cmd(b"CHECKSCRIPT " + literal(KEEP)) == [b'OK "Script is valid"']
    assert stored(server, "alice") == [("other", False)]
    assert c.cmd("LOGOUT") == [b'OK "Logout completed"']


def test_an_unparseable_script_is_refused_with_its_line_and_nothing_changes(server):
    """RFC 5804 2.6/2.12: a script that does not parse is NO with the error (naming its line)
    and is neither stored nor activated; the active script stays as it was."""
    c = connect(server)
    c.login("alice", "alice-pw")
    c.cmd(b'PUTSCRIPT "good" ' + literal(KEEP))
    c.cmd('SETACTIVE "good"')
    broken = b'require "fileinto";\r\nif true {\r\n  fileinto "X";\r\n'
    answer = c.cmd(b'PUTSCRIPT "good" ' + literal(broken))
    assert answer[0].startswith(b'NO "line 4:') and len(answer) == 1, answer
    answer = c.cmd(b'PUTSCRIPT "new" ' + literal(b'keep;\r\nfrobnicate "x";\r\n'))
    assert answer[0].startswith(b'NO "line 2:'), answer
    answer = c.cmd(b'CHECKSCRIPT ' + literal(b'require "no-such-extension";\r\n'))
    assert answer[0].startswith(b'NO "line 1:') and b"no-such-extension" in answer[0]
    assert c.cmd('GETSCRIPT "good"')[0] == b"{%d}\r\n" % len(KEEP) + KEEP
    assert c.cmd(b'PUTSCRIPT "bin" ' + literal(b"keep; # \xff\r\n"))[0].startswith(b"NO")
    assert stored(server, "alice") == [("good", True)]


def test_limits_give_quota_codes_and_the_session_goes_on(server):
    """RFC 5804 2.5/2.6: over the script size QUOTA/MAXSIZE (a literal over the limit is read
    and dropped, announced {n+} or {n}), over the count QUOTA/MAXSCRIPTS, over the total
    QUOTA; the session continues after each."""
    c = connect(server)
    c.login("alice", "alice-pw")
    assert c.cmd('HAVESPACE "big" 201')[0].startswith(b"NO (QUOTA/MAXSIZE)")
    big = b"#" * 300 + b"\r\nkeep;\r\n"
    assert c.cmd(b'PUTSCRIPT "big" ' + literal(big))[0].startswith(b"NO (QUOTA/MAXSIZE)")
    assert c.cmd(b'PUTSCRIPT "big" ' + literal(big, plus=False))[0].startswith(
        b"NO (QUOTA/MAXSIZE)")
    script = b"#" * 150 + b"\r\nkeep;\r\n"
    for name in ("a", "b", "c"):
        assert c.cmd(b'PUTSCRIPT "%s" ' % name.encode() + literal(script))[0].startswith(
            b"OK"), name
    assert c.cmd('PUTSCRIPT "d" "keep;"')[0].startswith(b"NO (QUOTA/MAXSCRIPTS)")
    assert c.cmd('HAVESPACE "d" 1')[0].startswith(b"NO (QUOTA/MAXSCRIPTS)")
    c.cmd('DELETESCRIPT "c"')
    assert c.cmd(b'PUTSCRIPT "c" ' + literal(b"#" * 190 + b"\r\nkeep;\r\n"))[0].startswith(
        b"NO (QUOTA)")
    assert c.cmd('NOOP')[0].startswith(b"OK")
    assert [n for n, _ in stored(server, "alice")] == ["a", "b"]
    # Far over the limit: not worth reading to throw away.
    c.send(b'PUTSCRIPT "huge" {999999999+}\r\n')
    assert c.response()[0].startswith(b'BYE "Literal of 999999999 octets')
    assert c.closed_by_peer()


def test_a_line_over_the_limit_gets_bye(server):
    """A command line over ``max_line_length`` cannot be parsed safely: BYE and the
    connection is closed (RFC 5804 1.3 BYE)."""
    c = connect(server)
    c.send(b'NOOP "' + b"x" * 2000 + b'"\r\n')
    assert c.response()[0].startswith(b"BYE")
    assert c.closed_by_peer()


def test_quoted_strings_escapes_and_utf8_names(server):
    """RFC 5804 4: quoted strings escape only \\ and "; script names are UTF-8 (1.6) and come
    back in LISTSCRIPTS as sent; a name with a control character is refused."""
    c = connect(server)
    c.login("alice", "alice-pw")
    assert c.cmd('PUTSCRIPT "we\\"ird\\\\ n\u00e4me" "keep;"')[0].startswith(b"OK")
    assert c.cmd("LISTSCRIPTS")[0] == '"we\\"ird\\\\ n\u00e4me"'.encode()
    assert c.cmd(b'PUTSCRIPT ' + literal(b"a\tb") + b' "keep;"')[0].startswith(b"NO")
    assert c.cmd('PUTSCRIPT "x\\n" "keep;"')[0].startswith(b"NO")   # \n is no escape


def test_starttls_reissues_capabilities_and_plaintext_needs_tls(tmp_path):
    """RFC 5804 2.2: STARTTLS is offered with a certificate; after the handshake the server
    sends the capabilities again (without STARTTLS) and OK.  With ``plaintext_auth = no``
    the SASL list is empty before TLS and AUTHENTICATE is NO (ENCRYPT-NEEDED)."""
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("alice", "alice-pw"))
    cert, key = make_cert(str(tmp_path))
    conf = tmp_path / "c.conf"
    conf.write_text(f"[imap]\ntls_cert = {cert}\ntls_key = {key}\nplaintext_auth = no\n")
    with ServerProcess(data_dir, "--sieve-port", "auto", config=str(conf)) as server:
        c = connect(server)
        caps = capabilities(c.greeting[:-1])
        assert "STARTTLS" in caps and caps["SASL"] == ""
        assert c.login("alice", "alice-pw")[0].startswith(b"NO (ENCRYPT-NEEDED)")
        # A command pipelined in the clear behind STARTTLS (a man in the middle's, RFC 2595
        # 3.1) must not run inside TLS.
        c.send("STARTTLS\r\nNOOP \"injected\"\r\n")
        assert c.response()[-1].startswith(b"OK")
        c.sock = ssl.create_default_context(cafile=cert).wrap_socket(
            c.sock, server_hostname="localhost")
        after = c.response()
        assert c.cmd('NOOP "mine"') == [b'OK (TAG "mine") "Done"']
        assert after[-1].startswith(b"OK")
        caps = capabilities(after[:-1])
        assert "STARTTLS" not in caps and caps["SASL"].split() == ["PLAIN", "LOGIN"]
        assert c.cmd("STARTTLS")[0].startswith(b"NO")
        assert c.login("alice", "alice-pw") == [b'OK "Logged in"']
        assert c.cmd('PUTSCRIPT "s" "keep;"')[0].startswith(b"OK")
        assert c.cmd("LOGOUT")[0].startswith(b"OK")
        c.close()


def test_pipelined_commands_are_answered_in_order(server):
    """RFC 5804 4: a client may send commands without waiting; each is answered in turn."""
    c = connect(server)
    token = base64.b64encode(b"\0alice\0alice-pw").decode()
    c.send(f'AUTHENTICATE "PLAIN" "{token}"\r\nPUTSCRIPT "p" {{5+}}\r\nkeep;\r\n'
           'SETACTIVE "p"\r\nLISTSCRIPTS\r\nPUTSCRIPT "e" {0+}\r\n\r\nNOOP "end"\r\n')
    assert c.response() == [b'OK "Logged in"']
    assert c.response() == [b'OK "Putscript completed"']
    assert c.response() == [b'OK "Setactive completed"']
    assert c.response() == [b'"p" ACTIVE', b'OK "Listscripts completed"']
    assert c.response() == [b'OK "Putscript completed"']      # an empty script is valid
    assert c.response() == [b'OK (TAG "end") "Done"']
    # More than the queue holds (MAX_QUEUED) behind commands that wait for the store:
    # reading pauses and resumes, nothing is lost or reordered.
    c.send("".join(f'HAVESPACE "s" {i}\r\nNOOP "n{i}"\r\n' for i in range(80)))
    for i in range(80):
        assert c.response() == [b'OK "Putscript would succeed"']
        assert c.response() == [f'OK (TAG "n{i}") "Done"'.encode()]


def test_an_idle_session_is_closed_with_bye(tmp_path):
    """A session idle for ``[managesieve] idle_timeout`` seconds gets BYE and is closed."""
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("alice", "alice-pw"))
    conf = tmp_path / "c.conf"
    conf.write_text("[managesieve]\nidle_timeout = 1\n")
    with ServerProcess(data_dir, "--sieve-port", "auto", config=str(conf)) as proc:
        # Before connecting: the server's timer starts when it accepts, and the greeting
        # may take a while to be read on a busy machine (the lower bound would then fail).
        started = time.monotonic()
        c = connect(proc)
        assert c.response() == [b'BYE "Disconnected for inactivity"']
        assert 0.9 < time.monotonic() - started < 10
        assert c.closed_by_peer()
        c.close()


def test_the_server_over_hbase(tmp_path, hbase_store):
    """The same commands over the HBase backend (Thrift): scripts land in JAMES_SIEVE_SCRIPTS
    and activation, rename and the ACTIVE refusal behave as on the embedded store (RFC 5804
    2.6-2.11)."""
    store = MailStore(hbase_store.backend())
    store.create_user("alice", "alice-pw", default_folders=False)
    conf = tmp_path / "c.conf"
    conf.write_text("[imap]\nauth_failure_delay = 0.1\n")
    with ServerProcess(str(tmp_path / "unused"), *hbase_store.args(), "--sieve-port", "auto",
                       config=str(conf)) as proc:
        c = connect(proc)
        try:
            assert c.login("alice", "alice-pw") == [b'OK "Logged in"']
            assert c.cmd(b'PUTSCRIPT "rules" ' + literal(KEEP))[0].startswith(b"OK")
            assert c.cmd('SETACTIVE "rules"')[0].startswith(b"OK")
            assert c.cmd('DELETESCRIPT "rules"')[0].startswith(b"NO (ACTIVE)")
            assert c.cmd('RENAMESCRIPT "rules" "main"')[0].startswith(b"OK")
            assert store.sieve_scripts.active("alice") == ("main", KEEP.decode())
            assert c.cmd('GETSCRIPT "main"')[0] == b"{%d}\r\n" % len(KEEP) + KEEP
        finally:
            c.close()
            store.close()


def test_sigterm_says_bye_and_the_server_exits_0(server):
    """A graceful stop (SIGTERM) ends every ManageSieve session with BYE (RFC 5804 1.3) and
    the process exits 0."""
    c = connect(server)
    assert c.login("alice", "alice-pw") == [b'OK "Logged in"']
    server.proc.terminate()
    assert c.response() == [b'BYE "Server shutting down"']
    assert c.closed_by_peer()
    assert server.stop() == 0


def test_warnings_for_a_valid_but_suspicious_script(server):
    """RFC 5804 1.3 WARNINGS (2.6, 2.12): a valid script that probably does not do what its
    writer meant is stored (PUTSCRIPT) or accepted (CHECKSCRIPT) with ``OK (WARNINGS)`` and
    the warnings with their lines: vacation :days under [sieve] vacation_min_days (RFC 5230
    4.1, the minimum is used; Pigeonhole warns the same), fileinto a mailbox that does not
    exist without :create (RFC 5490 3.2), an extension required but not used (RFC 5228
    3.2), a hash comment ending the script (Pigeonhole's warning)."""
    c = connect(server)
    c.login("alice", "alice-pw")
    script = (b'require ["vacation", "fileinto", "envelope"];\r\n'
              b'vacation :days 0 "away";\r\nfileinto "Nope";\r\n# end')
    answer = c.cmd(b'PUTSCRIPT "w" ' + literal(script))
    assert len(answer) == 1 and answer[0].startswith(b'OK (WARNINGS) "'), answer
    text = answer[0][len(b'OK (WARNINGS) "'):-1].decode().replace("\\'", "'")
    assert text.split("; ") == [
        "line 1: warning: extension 'envelope' is required but not used",
        "line 2: warning: specified :days value '0' is under the minimum (1 is used).",
        "line 3: warning: mailbox 'Nope' does not exist: fileinto keeps the message in "
        "INBOX instead (add :create to make it, RFC 5490 3.2)",
        "line 4: warning: no newline (CRLF) at end of hash comment at end of file."]
    assert stored(server, "alice") == [("w", False)]
    assert c.cmd(b"CHECKSCRIPT " + literal(script))[0].startswith(b"OK (WARNINGS)")
    clean = b'require "fileinto";\r\nfileinto "INBOX";\r\n'
    assert c.cmd(b"CHECKSCRIPT " + literal(clean)) == [b'OK "Script is valid"']
    assert c.cmd(b'PUTSCRIPT "c" ' + literal(clean)) == [b'OK "Putscript completed"']


def test_logins_per_user_are_limited(server):
    """[managesieve] max_connections_per_user (3 here): one more session of the same user
    is refused NO (TRYLATER) (RFC 5804 1.3: try again later) and stays unauthenticated;
    another user is not affected; when one session ends, the user may log in again."""
    sessions = [connect(server) for _ in range(3)]
    for c in sessions:
        assert c.login("alice", "alice-pw") == [b'OK "Logged in"']
    extra = connect(server)
    answer = extra.login("alice", "alice-pw")
    assert answer[0].startswith(b'NO (TRYLATER) "Too many'), answer
    assert extra.cmd("LISTSCRIPTS") == [b'NO "Authenticate first"']
    assert connect(server).login("bob", "bob-pw") == [b'OK "Logged in"']
    assert sessions[0].cmd("LOGOUT") == [b'OK "Logout completed"']
    assert sessions[0].closed_by_peer()
    assert extra.login("alice", "alice-pw") == [b'OK "Logged in"']
