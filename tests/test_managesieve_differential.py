"""ManageSieve (RFC 5804): the same conversations with our server and with Dovecot's
managesieved (Debian's dovecot-managesieved, Pigeonhole), compared after the normalisation
of tests/managesieve_differential.py (text after OK/NO dropped, capability listings and
LISTSCRIPTS order left out); DELIBERATE there lists where we differ on purpose.
"""

from __future__ import annotations

import base64

import pytest

from tests.imapproc import ServerProcess, make_users
from tests.managesieve_differential import (
    capability_names,
    converse,
    dovecot_managesieve,
    normalise,
)
from tests.sieveclient import SieveClient

USER, PASSWORD = "diff", "diff-pw"
GOOD = b'require ["fileinto"];\r\nif header :is "x-list" "a" {\r\n  fileinto "INBOX";\r\n}\r\n'
BROKEN = b'require ["fileinto"];\r\nif true {\r\n  fileinto "A";\r\n'


def plain(user: str, password: str) -> bytes:
    return b'AUTHENTICATE "PLAIN" "' + base64.b64encode(f"\0{user}\0{password}".encode()) + b'"'


def lit(data: bytes, plus: bool = True) -> bytes:
    return b"{%d%s}\r\n" % (len(data), b"+" if plus else b"") + data


@pytest.fixture
def servers(tmp_path):
    """(our port, Dovecot's port), each with the account USER."""
    data_dir = str(tmp_path / "store")
    make_users(data_dir, (USER, PASSWORD))
    conf = tmp_path / "c.conf"
    conf.write_text("[store]\nsynchronous = NORMAL\n[imap]\nauth_failure_delay = 0\n")
    with ServerProcess(data_dir, "--sieve-port", "auto", config=str(conf)) as ours, \
            dovecot_managesieve(tmp_path / "dovecot", {USER: PASSWORD}) as dovecot:
        yield ours.ports["managesieve"], dovecot.sieve_port


def compare(servers, commands: list[bytes]) -> None:
    ours, theirs = (converse(port, commands) for port in servers)
    for mine, dovecot in zip(ours, theirs, strict=True):
        assert mine == dovecot, f"\n ours:    {mine}\n dovecot: {dovecot}"


def test_unauthenticated_state(servers):
    """RFC 5804 2: script commands before authentication, an unknown command, NOOP with a
    tag (2.13), a failed and a successful AUTHENTICATE PLAIN (2.1), LOGOUT (2.3)."""
    # A quoted script: DELIBERATE["literal-before-login"].
    compare(servers, [b"LISTSCRIPTS", b'PUTSCRIPT "x" "keep;"', b'NOOP "tag-1"',
                      b"NOOP", plain(USER, "wrong"), plain(USER, PASSWORD), b"LOGOUT"])


def test_invalid_commands_before_login_end_the_connection(servers):
    """The third command refused before authentication (unknown, or needing it) is answered
    BYE and the connection closed, as Dovecot does (RFC 5804 1.3 BYE)."""
    compare(servers, [b'GETSCRIPT "x"', b"FROBNICATE", b'SETACTIVE "x"'])


def test_script_management(servers):
    """RFC 5804 2.5-2.12: the whole life of two scripts, with every refusal the RFC gives a
    response code to (NONEXISTENT, ACTIVE, ALREADYEXISTS, QUOTA/MAXSIZE), {n+} and {n}
    literals, an unparseable script (NO, nothing stored) and a UTF-8 script name."""
    compare(servers, [
        plain(USER, PASSWORD),
        b"LISTSCRIPTS",
        b'HAVESPACE "rules" 100',
        b'HAVESPACE "rules" 4000000000',
        b'PUTSCRIPT "rules" ' + lit(GOOD),
        b'PUTSCRIPT "other" ' + lit(b"keep;\r\n", plus=False),
        b'PUTSCRIPT "bad" ' + lit(BROKEN),
        b'CHECKSCRIPT ' + lit(GOOD),
        b'CHECKSCRIPT ' + lit(BROKEN),
        b'PUTSCRIPT "r\xc3\xa9gles" "keep;"',
        b"LISTSCRIPTS",
        b'SETACTIVE "rules"',
        b'SETACTIVE "nope"',
        b"LISTSCRIPTS",
        b'GETSCRIPT "rules"',
        b'GETSCRIPT "nope"',
        b'DELETESCRIPT "rules"',
        b'RENAMESCRIPT "rules" "other"',
        b'RENAMESCRIPT "nope" "x"',
        b'RENAMESCRIPT "rules" "main"',
        b"LISTSCRIPTS",
        b'PUTSCRIPT "main" ' + lit(b"discard;\r\n"),
        b'GETSCRIPT "main"',
        b"LISTSCRIPTS",
        b'SETACTIVE ""',
        b"LISTSCRIPTS",
        b'DELETESCRIPT "main"',
        b'DELETESCRIPT "main"',
        b"LISTSCRIPTS",
        b"LOGOUT",
    ])


def test_capabilities_agree_on_what_rfc_5804_requires(servers):
    """RFC 5804 1.7: both greet with IMPLEMENTATION, SASL, SIEVE, VERSION (and Dovecot's
    NOTIFY, which we do not offer: no enotify); after authentication the listing drops SASL
    on both.  The values differ by design and are not compared."""
    ours, theirs = (SieveClient(port) for port in servers)
    try:
        required = {"IMPLEMENTATION", "SASL", "SIEVE", "VERSION"}
        assert required <= capability_names(ours.greeting)
        assert required <= capability_names(theirs.greeting)
        assert normalise(b"CAPABILITY", ours.greeting) == \
            normalise(b"CAPABILITY", theirs.greeting)
    finally:
        ours.close()
        theirs.close()


def test_unauthenticate_is_a_deliberate_difference(servers):
    """DELIBERATE["unauthenticate"]: RFC 5804 2.14.1 makes UNAUTHENTICATE optional; ours
    answers OK and returns to the non-authenticated state, Dovecot 2.3 answers NO."""
    ours, theirs = (converse(port, [plain(USER, PASSWORD), b"UNAUTHENTICATE", b"LISTSCRIPTS"])
                    for port in servers)
    assert ours[2][2] == b"OK" and ours[3][2] == b"NO"
    assert theirs[2][2] == b"NO" and theirs[3][2] == b"OK"


def test_warnings_where_pigeonhole_warns(servers):
    """RFC 5804 1.3 WARNINGS: a vacation :days under the minimum (RFC 5230 4.1) and a hash
    comment ending the script (RFC 5228 2.3) are valid; PUTSCRIPT and CHECKSCRIPT answer
    OK (WARNINGS) on both, and the script is stored."""
    script = b'require "vacation";\r\nvacation :days 0 "away";\r\nkeep;\r\n# last line'
    compare(servers, [plain(USER, PASSWORD), b'PUTSCRIPT "w" ' + lit(script),
                      b"CHECKSCRIPT " + lit(script), b"LISTSCRIPTS"])
    ours = converse(servers[0], [plain(USER, PASSWORD), b"CHECKSCRIPT " + lit(script)])
    assert ours[2][2:] == (b"OK", b"WARNINGS"), ours


def test_extra_warnings_are_a_deliberate_difference(servers):
    """DELIBERATE["extra-warnings"]: a fileinto into a mailbox that does not exist (no
    :create) is accepted by both, with WARNINGS by us only."""
    script = b'require "fileinto";\r\nfileinto "Nope";\r\n'
    ours, theirs = (converse(port, [plain(USER, PASSWORD), b"CHECKSCRIPT " + lit(script)])
                    for port in servers)
    assert ours[2][2:] == (b"OK", b"WARNINGS") and theirs[2][2:] == (b"OK", None), \
        (ours, theirs)
