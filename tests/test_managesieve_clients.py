"""Real ManageSieve clients (RFC 5804) against ``imapserver --sieve-port auto``, in the clear
and over STARTTLS: Debian's ``sieve-connect`` (Perl, verifies the certificate against the CA
file it is given) and sievelib's ``managesieve.Client`` (Python).

Each uploads a script, lists it, activates it, downloads it (compared byte for byte with what
was uploaded), deactivates and deletes it; what the store holds is checked along the way.  Over
STARTTLS the server refuses plaintext authentication before TLS (``plaintext_auth = no``), so
a client that skipped TLS would fail instead of passing.  The certificate is tests/tlscert.py's
throwaway one, trusted as a CA file, as the IMAP TLS tests do (tests/test_real_clients_tls.py).
"""

from __future__ import annotations

import os
import subprocess

import pytest
from sievelib.managesieve import Client

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.imapproc import ServerProcess, make_users
from tests.tlscert import make_cert

SCRIPT = ('require ["fileinto", "imap4flags"];\r\n'
          '# gr\u00fc\u00dfe\r\n'
          'if header :contains "subject" "[list]" {\r\n'
          '  addflag "\\\\Seen";\r\n  fileinto "Lists";\r\n  stop;\r\n}\r\n')
CLIENT_TIMEOUT = 60
USER, PASSWORD = "sieve-user", "sieve-pw"


@pytest.fixture(params=["plain", "starttls"])
def server(request, tmp_path):
    data_dir = str(tmp_path / "store")
    make_users(data_dir, (USER, PASSWORD))
    conf = tmp_path / "c.conf"
    text = "[store]\nsynchronous = NORMAL\n"
    cert = None
    if request.param == "starttls":
        cert, key = make_cert(str(tmp_path))
        text += f"[imap]\ntls_cert = {cert}\ntls_key = {key}\nplaintext_auth = no\n"
    conf.write_text(text)
    with ServerProcess(data_dir, "--sieve-port", "auto", config=str(conf)) as proc:
        proc.transport, proc.cert = request.param, cert
        yield proc


def stored(server) -> tuple[list[tuple[str, bool]], tuple[str, str] | None]:
    store = MailStore(EmbeddedBackend(server.data_dir), create_tables=False)
    try:
        return store.sieve_scripts.list(USER), store.sieve_scripts.active(USER)
    finally:
        store.close()


def sieve_connect(server, tmp_path, *action: str) -> str:
    args = ["sieve-connect", "--nosrv", "--server", "127.0.0.1",
            "--port", str(server.ports["managesieve"]), "--user", USER, "--passwordfd", "0",
            "--authmech", "PLAIN"]
    if server.transport == "starttls":
        # Verified against our CA file, for the name the certificate carries; no cleartext.
        args += ["--tlscafile", server.cert, "--tlshostname", "localhost", "--noclearauth",
                 "--noclearchan"]
    else:
        args += ["--clearchan"]
    proc = subprocess.run([*args, *action], input=PASSWORD + "\n", capture_output=True,
                          text=True, timeout=CLIENT_TIMEOUT, cwd=tmp_path,
                          env=dict(os.environ, HOME=str(tmp_path)))
    assert proc.returncode == 0, (action, proc.stdout, proc.stderr)
    return proc.stdout + proc.stderr


def test_sieve_connect(server, tmp_path):
    """RFC 5804 2.6-2.10 through sieve-connect: --upload, --list, --activate, --download,
    --deactivate, --delete (and over STARTTLS, 2.2, with the certificate verified)."""
    local = tmp_path / "rules.sieve"
    local.write_bytes(SCRIPT.encode())
    sieve_connect(server, tmp_path, "--upload", "--localsieve", str(local),
                  "--remotesieve", "rules")
    assert stored(server) == ([("rules", False)], None)
    sieve_connect(server, tmp_path, "--activate", "--remotesieve", "rules")
    assert stored(server) == ([("rules", True)], ("rules", SCRIPT))
    listing = sieve_connect(server, tmp_path, "--list")
    assert "rules" in listing and "ACTIVE" in listing.upper(), listing
    copy = tmp_path / "copy.sieve"
    sieve_connect(server, tmp_path, "--download", "--remotesieve", "rules",
                  "--localsieve", str(copy))
    assert copy.read_bytes() == SCRIPT.encode()
    sieve_connect(server, tmp_path, "--deactivate")
    assert stored(server) == ([("rules", False)], None)
    sieve_connect(server, tmp_path, "--delete", "--remotesieve", "rules")
    assert stored(server) == ([], None)


def test_sieve_connect_sees_a_broken_script_refused(server, tmp_path):
    """RFC 5804 2.6: sieve-connect reports the server's NO (with the line) and exits
    non-zero; nothing is stored."""
    local = tmp_path / "broken.sieve"
    local.write_text('require "fileinto";\nif true {\n  fileinto "X";\n')
    args = ["sieve-connect", "--nosrv", "--server", "127.0.0.1",
            "--port", str(server.ports["managesieve"]), "--user", USER, "--passwordfd", "0",
            "--authmech", "PLAIN", "--upload", "--localsieve", str(local)]
    args += (["--tlscafile", server.cert, "--tlshostname", "localhost"]
             if server.transport == "starttls" else ["--clearchan"])
    proc = subprocess.run(args, input=PASSWORD + "\n", capture_output=True, text=True,
                          timeout=CLIENT_TIMEOUT, cwd=tmp_path)
    assert proc.returncode != 0 and "line 4" in proc.stdout + proc.stderr, proc
    assert stored(server) == ([], None)


def test_sievelib_client(server, monkeypatch):
    """The same cycle with sievelib's managesieve client, which also exercises HAVESPACE
    (2.5), RENAMESCRIPT (2.11.1) and CHECKSCRIPT (2.12)."""
    if server.transport == "starttls":
        # sievelib verifies against the default CA store, which OpenSSL takes from here.
        monkeypatch.setenv("SSL_CERT_FILE", server.cert)
    client = Client("127.0.0.1", server.ports["managesieve"], srvhostname="localhost")
    if server.transport == "plain":
        with pytest.warns(UserWarning, match="unencrypted"):
            assert client.connect(USER, PASSWORD, authmech="PLAIN")
    else:
        assert client.connect(USER, PASSWORD, starttls=True, authmech="PLAIN")
    try:
        assert "fileinto" in client.get_sieve_capabilities()
        assert client.havespace("rules", len(SCRIPT.encode()))
        assert client.checkscript(SCRIPT)
        assert not client.checkscript("if true {")
        assert client.putscript("draft", SCRIPT)
        assert client.renamescript("draft", "rules")
        assert client.setactive("rules")
        assert client.listscripts() == ("rules", [])
        # sievelib splits what it gets into lines and joins them with LF (its choice): the
        # octets themselves are compared through the store.
        assert client.getscript("rules") == "\n".join(SCRIPT.splitlines())
        assert stored(server)[1] == ("rules", SCRIPT)
        assert not client.deletescript("rules")     # active: NO (ACTIVE)
        assert client.setactive("")
        assert client.listscripts() == (None, ["rules"])
        assert client.deletescript("rules")
        assert client.listscripts() == (None, [])
    finally:
        client.logout()
        client.sock.close()
        client.sock = None


def test_clients_take_warnings_as_success(server, tmp_path, monkeypatch):
    """RFC 5804 1.3: OK (WARNINGS) with the warnings as a literal is a success: sieve-connect
    uploads (exit 0) and sievelib's putscript/checkscript return True; the script is
    stored."""
    script = 'require ["vacation", "envelope"];\nvacation :days 0 "away";\n'
    local = tmp_path / "away.sieve"
    local.write_text(script)
    out = sieve_connect(server, tmp_path, "--upload", "--localsieve", str(local),
                        "--remotesieve", "away")
    assert stored(server)[0] == [("away", False)], out
    if server.transport == "starttls":
        monkeypatch.setenv("SSL_CERT_FILE", server.cert)
    client = Client("127.0.0.1", server.ports["managesieve"], srvhostname="localhost")
    if server.transport == "plain":
        with pytest.warns(UserWarning, match="unencrypted"):
            assert client.connect(USER, PASSWORD, authmech="PLAIN")
    else:
        assert client.connect(USER, PASSWORD, starttls=True, authmech="PLAIN")
    try:
        assert client.checkscript(script)
        assert client.putscript("away2", script)
    finally:
        client.logout()
    assert ("away2", False) in stored(server)[0]
