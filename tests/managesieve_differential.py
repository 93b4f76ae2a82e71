"""Differential ManageSieve (RFC 5804): one conversation with our server and with Dovecot's
managesieved (Pigeonhole), compared after normalising what the RFC leaves to the server.

A conversation is a list of commands (bytes, sent as they are, CRLF added).  Each answer is
parsed into (data lines, status, response code) and normalised:

* the human-readable text after OK/NO/BYE is dropped (RFC 5804 1.3 leaves it free: Dovecot
  writes a literal of several lines for a script error, we a quoted line with the same facts);
* a capability listing (CAPABILITY, and the greeting) becomes ``<capabilities>``: its
  contents are compared separately (:func:`capability_names`), since the extension lists of
  two implementations differ by design;
* the lines of LISTSCRIPTS are sorted (RFC 5804 2.7 fixes no order);
* a string's form -- quoted or literal -- is not compared, its octets are.

Anything else is a difference.  Deliberate differences are listed in :data:`DELIBERATE`
with the reason; a test names the one it relies on.  The Dovecot side is
:func:`dovecot_managesieve`: tests/dovecot.py's ``Dovecot`` with ``protocols = imap sieve``
and a managesieve-login listener.
"""

from __future__ import annotations

import contextlib
import re
import socket
import time
from pathlib import Path

from tests.dovecot import Dovecot, _free_port
from tests.sieveclient import SieveClient

_STATUS = re.compile(rb"^(OK|NO|BYE)(?: \(((?:[^)\"]|\"(?:[^\"\\]|\\.)*\")*)\))?")
_QUOTED = re.compile(rb'"((?:[^"\\]|\\.)*)"')

DELIBERATE = {
    "unauthenticate": "RFC 5804 2.14.1 UNAUTHENTICATE is optional; we implement it (and "
                      "announce it), Dovecot 2.3 answers NO (unknown command).",
    "literal-before-login": "A command refused before authentication that carries a "
                            "literal: we read the literal as its argument (RFC 5804 4); "
                            "Dovecot's managesieve-login drops the line and reads the "
                            "literal's octets as the next command, which then counts as "
                            "invalid too.",
    "extra-warnings": "WARNINGS (RFC 5804 1.3) where Pigeonhole 0.5.19 gives none: fileinto "
                      "a mailbox that does not exist without :create, an extension "
                      "required but not used, vacation :days over the maximum.  Where "
                      "Pigeonhole warns (:days under the minimum, a hash comment ending "
                      "the script) both answer OK (WARNINGS).",
    "sasl-login": "We also offer SASL LOGIN (for old clients, as the IMAP side does); "
                  "Dovecot's test configuration offers PLAIN only.",
}


def _unquote(data: bytes) -> bytes:
    """A string's octets, whether it came quoted or as a literal (sieveclient keeps literals
    as ``{n}`` CRLF octets)."""
    literal = re.fullmatch(rb"\{(\d+)\}\r\n(.*)", data, re.S)
    if literal:
        return literal.group(2)
    quoted = _QUOTED.fullmatch(data)
    if quoted:
        return re.sub(rb"\\(.)", rb"\1", quoted.group(1))
    return data


def normalise(command: bytes, lines: list[bytes]) -> tuple:
    """(data lines, status, code) of one answer, normalised as the module docstring says."""
    final = _STATUS.match(lines[-1])
    assert final, lines
    status, code = final.group(1), final.group(2)
    data = lines[:-1]
    name = command.split(b" ", 1)[0].upper()
    if name in (b"CAPABILITY", b"STARTTLS") and data:
        data = [b"<capabilities>"]
    elif name == b"LISTSCRIPTS":
        data = sorted(b" ".join([_unquote(line.rsplit(b" ", 1)[0] if line.endswith(b" ACTIVE")
                                          else line)] + ([b"ACTIVE"] if line.endswith(
                                              b" ACTIVE") else [])) for line in data)
    else:
        data = [_unquote(line) for line in data]
    return tuple(data), status, code


def capability_names(greeting: list[bytes]) -> set[str]:
    return {_QUOTED.match(line).group(1).decode().upper() for line in greeting[:-1]}


def converse(port: int, commands: list[bytes]) -> list[tuple]:
    """Play ``commands`` on one connection; the normalised answers, in order."""
    client = SieveClient(port)
    try:
        answers = [("greeting", *normalise(b"CAPABILITY", client.greeting)[1:])]
        for command in commands:
            answers.append((command, *normalise(command, client.cmd(command))))
        return answers
    finally:
        client.close()


@contextlib.contextmanager
def dovecot_managesieve(workdir: Path, users: dict[str, str]):
    """A Dovecot with ManageSieve on a port of its own (``.sieve_port``) and ``users``."""
    for _attempt in range(5):
        port = _free_port()
        extra = ("protocols = imap sieve\n"
                 "plugin {\n  sieve = file:~/sieve;active=~/.dovecot.sieve\n}\n"
                 "service managesieve-login {\n  inet_listener sieve {\n"
                 f"    address = 127.0.0.1\n    port = {port}\n  }}\n}}\n")
        with Dovecot(workdir, like_ours=True, extra_config=extra) as server:
            if not _listening(port):
                continue    # the port was taken in between: another try
            server.sieve_port = port
            for name, password in users.items():
                server.add_user(name, password)
            yield server
            return
    raise RuntimeError("Dovecot's managesieve did not start")


def _listening(port: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                if sock.recv(4096).startswith(b'"IMPLEMENTATION"'):
                    return True
        except OSError:
            time.sleep(0.05)
    return False
