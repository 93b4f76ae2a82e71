"""Scripted IMAP conversations of several sessions, played against our server and Dovecot.

A script is a list of steps ``(session, command)``; sessions are opened (and logged in as
:data:`dovecot.USER`) on first use.  ``APPEND ... MSG`` sends :data:`MSG` as a literal,
``IDLE`` starts IDLE, ``DONE n`` waits until ``n`` untagged responses were pushed and then ends
IDLE.  :func:`play` returns every step's responses exactly as sent; :func:`normalise` keeps what
must agree between servers: each response, in order, without what may legitimately differ --

* tags, UIDVALIDITY values, and the human-readable text after a status word or response code;
* the order of flags inside a list (Dovecot lists keywords in the order they were first used
  in the mailbox, we sort them; RFC 3501 gives no order);
* ``\\Recent`` and ``* n RECENT`` (RFC 3501 2.3.2: which session a message is recent to is the
  server's choice; checked by its own tests);
* ``UID n`` in FETCH responses to commands other than UID commands: we name the UID in every
  unsolicited FETCH, Dovecot only when asked (RFC 3501 7.4.2 allows either);
* ``* OK [CLOSED]`` (RFC 7162 3.2.11), which both servers send on SELECT with a mailbox
  already selected (compared in tests/test_differential_condstore.py);
* ``* OK [HIGHESTMODSEQ n]`` at SELECT/EXAMINE: RFC 7162 3.1.2.1 wants it on every one, and
  we send it; Dovecot only once some client used CONDSTORE on the mailbox (and its values are
  its own).

:func:`unannounced_keywords` checks RFC 3501 7.2.6 on a transcript: a FETCH may show only
keywords an earlier untagged FLAGS of the same session listed.
"""

from __future__ import annotations

import re
import select
import socket
import time

from dovecot import _LITERAL, PASSWORD, USER, RawImap

MSG = b"From: a@example.com\r\nSubject: hi\r\nMessage-ID: <k@example.com>\r\n\r\nbody\r\n"


class Session(RawImap):
    """RawImap reading from its own buffer, so that a wait for IDLE pushes can time out and
    the session still be used (a socket file object cannot be read after a timeout)."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""
        self.counter = 0
        greeting = self._response()
        assert greeting.startswith(b"* OK"), greeting

    def _fill(self, deadline: float | None) -> None:
        if deadline is not None:
            ready, _, _ = select.select([self.sock], [], [], max(0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buffer += chunk

    def _response(self, deadline: float | None = None) -> bytes:
        out = b""
        while True:
            while b"\r\n" not in self.buffer:
                self._fill(deadline)
            line, self.buffer = self.buffer.split(b"\r\n", 1)
            out += line + b"\r\n"
            m = _LITERAL.search(out)
            if m is None:
                return out
            size = int(m.group(1))
            while len(self.buffer) < size:
                self._fill(deadline)
            out += self.buffer[:size]
            self.buffer = self.buffer[size:]

    def idle(self) -> None:
        self.counter += 1
        self.idle_tag = b"t%d" % self.counter
        self.sock.sendall(self.idle_tag + b" IDLE\r\n")
        line = self._response()
        assert line.startswith(b"+ "), line

    def done(self, pushed: int, timeout: float = 5.0) -> tuple[list[bytes], bytes]:
        """Wait (up to ``timeout``) for ``pushed`` untagged responses, then end IDLE; return
        all that IDLE brought and the tagged response."""
        untagged = []
        deadline = time.monotonic() + timeout
        try:
            while len(untagged) < pushed:
                untagged.append(self._response(deadline))
        except TimeoutError:
            pass
        self.sock.sendall(b"DONE\r\n")
        while True:
            response = self._response()
            if response.startswith(self.idle_tag + b" "):
                return untagged, response
            untagged.append(response)


def play(ports: dict[str, int] | int, script: list[tuple[str, str]],
         deadline: float | None = None) -> list[tuple[str, str, list[bytes], bytes]]:
    """Run ``script`` (its steps up to ``deadline``, a ``time.monotonic()`` value, if given);
    ``ports`` is one port, or one per session name.  Returns for each step run (session,
    command, untagged responses, tagged response) -- for ``IDLE``, empty ones."""
    sessions: dict[str, Session] = {}
    out = []
    try:
        for who, command in script:
            if deadline is not None and out and time.monotonic() > deadline:
                break
            if who not in sessions:
                port = ports if isinstance(ports, int) else ports[who]
                sessions[who] = Session(port)
                sessions[who].command(f"LOGIN {USER} {PASSWORD}".encode())
            session = sessions[who]
            if command == "IDLE":
                session.idle()
                out.append((who, command, [], b""))
                continue
            if command.startswith("DONE"):
                untagged, tagged = session.done(int(command.split()[1]))
            else:
                literal = None
                if command.endswith(" MSG"):
                    command, literal = command[:-4], MSG
                untagged, tagged = session.run(command.encode(), literal)
            out.append((who, command, untagged, tagged))
    finally:
        for session in sessions.values():
            session.sock.close()
    return out


_SORTED_LIST = re.compile(rb"(FLAGS|PERMANENTFLAGS) \(([^()]*)\)")
_UIDVALIDITY = re.compile(rb"\[(UIDVALIDITY|APPENDUID|COPYUID) \d+")


def _flag_list(m: re.Match) -> bytes:
    flags = sorted(f for f in m.group(2).split() if f.lower() != b"\\recent")
    return m.group(1) + b" (" + b" ".join(flags) + b")"


def normalise_response(response: bytes, uid_command: bool) -> bytes | None:
    """One response as compared (None: not compared at all); see the module docstring."""
    line = response.rstrip(b"\r\n")
    tagged = not line.startswith(b"* ")
    if tagged:
        line = b"T" + line[line.index(b" "):]
    if re.match(rb"\* \d+ RECENT$", line) or line.startswith(
            (b"* OK [CLOSED]", b"* OK [HIGHESTMODSEQ ")):
        return None
    m = re.match(rb"(\S+ (?:OK|NO|BAD|BYE|PREAUTH))( \[[^\]]*\])?", line)
    if m:
        line = m.group(1) + (m.group(2) or b"")
    line = _UIDVALIDITY.sub(lambda m: b"[" + m.group(1) + b" V", line)
    if not uid_command and re.match(rb"\* \d+ FETCH ", line):
        line = re.sub(rb"(\(| )UID \d+ ?", rb"\1", line).replace(b" )", b")")
    return _SORTED_LIST.sub(_flag_list, line)


def normalise(transcript) -> list[tuple[str, str, list[bytes]]]:
    out = []
    for who, command, untagged, tagged in transcript:
        uid_command = command.upper().startswith("UID ")
        lines = [normalise_response(r, uid_command) for r in [*untagged, tagged] if r]
        out.append((who, command, [x for x in lines if x is not None]))
    return out


def unannounced_keywords(transcript) -> list[tuple[str, str, bytes]]:
    """Each FETCH response that shows a keyword its session was not told of by an earlier
    untagged FLAGS (RFC 3501 7.2.6): (session, command, response)."""
    known: dict[str, set[bytes]] = {}
    bad = []
    for who, command, untagged, _tagged in transcript:
        for response in untagged:
            m = re.match(rb"\* FLAGS \(([^)]*)\)", response)
            if m:
                known[who] = set(m.group(1).split())
                continue
            m = re.match(rb"\* \d+ FETCH .*FLAGS \(([^)]*)\)", response)
            if m and any(not f.startswith(b"\\") and f not in known.get(who, set())
                         for f in m.group(1).split()):
                bad.append((who, command, response))
    return bad
