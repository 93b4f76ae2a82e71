"""Running fuzz examples against a live ``imapserver`` and judging the server after each.

One server process serves IMAP, SMTP and LMTP for a whole run (:class:`FuzzServer`).  Per IMAP
example (:meth:`FuzzServer.imap`) a fresh connection is brought into the example's state (not
authenticated, authenticated, selected, IDLE, mid-AUTHENTICATE), the commands are sent the way
a client sends them -- after a synchronizing literal's announcement it waits for ``+`` and, if
the server refuses the literal instead (``NO [TOOBIG]``, ``BAD``), does not send it -- and then
after a line of IDLE or AUTHENTICATE it waits for ``+`` too (RFC 3501 7.5) -- and then
a probe ends whatever the session is in (the octets a literal still owes, ``*`` for a SASL
exchange, ``DONE`` for IDLE) and a ``NOOP`` must be answered within :data:`HANG_SECONDS`.

After every example the server is judged (:meth:`FuzzServer.check`): the process is alive, its
output holds no traceback, "Unhandled" or "Internal server error", and a second session of the
same user, logged in and with INBOX selected since the start, answers ``NOOP`` within
:data:`HANG_SECONDS`.  A failure is a list of findings (strings); an empty list is a pass.

Known defects fixed on other branches are filtered by :data:`KNOWN` (a precise signature each).
"""

from __future__ import annotations

import re
import select
import socket
import time
from collections import Counter

from tests.fuzzgen import MAILBOXES, PASSWORD, USER
from tests.imapproc import ServerProcess, make_users

HANG_SECONDS = 5.0
CONFIG = """\
[store]
synchronous = NORMAL
max_message_size = 1000000
[imap]
auth_failure_delay = 0
max_line_length = 8192
max_literal_size = 1000000
max_command_size = 4000000
[delivery]
domains = example.com, localhost
"""
LITERAL = re.compile(rb"\{(\d{1,18})(\+?)\}$")
WAITS_FOR_CLIENT = re.compile(rb"(\S+) (?i:IDLE|AUTHENTICATE)(?: |$)")
OUTPUT_ALARMS = re.compile(rb"Traceback|Unhandled|Internal server error|Internal error|"
                           rb"SMTP session exception|Exception in handle_exception")
REPLY_ALARMS = re.compile(rb"Internal server error|\* BYE Internal error|^500 Error: \(")
KNOWN: dict[str, re.Pattern] = {}
"""Findings already being fixed elsewhere, by name: a regex over the finding's text.  Empty:
of the defects known when this was written, ``[`` in an atom (answered BAD) is not judged
here, and the corrupt FETCH of more than 1 MiB cannot happen (messages stay under
``max_message_size`` = 1,000,000)."""
SEED_MESSAGE = (b"From: Fuzz <fuzz@example.com>\r\nTo: fuzz@example.com\r\n"
                b"Subject: seed %d\r\nMessage-ID: <%d@fuzz>\r\n"
                b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n"
                b"Content-Type: text/plain\r\n\r\npart one\r\n--b\r\n"
                b"Content-Type: message/rfc822\r\n\r\nSubject: inner\r\n\r\ninner\r\n--b--\r\n")


class Closed(Exception):
    """The peer closed the connection."""


class Conn:
    """A raw socket with a response reader that never blocks past a deadline."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=HANG_SECONDS)
        self.sock.setblocking(False)
        self.buffer = b""
        self.closed = False
        self.seen: list[bytes] = []  # every response line, for the report

    def close(self) -> None:
        self.sock.close()

    def _fill(self, deadline: float) -> bool:
        """Read what is there (waiting until ``deadline``); False on timeout."""
        if self.closed:
            raise Closed
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([self.sock], [], [], wait)[0]:
            return False
        try:
            chunk = self.sock.recv(262144)
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        if not chunk:
            self.closed = True
            raise Closed
        self.buffer += chunk
        return True

    def send(self, data: bytes) -> None:
        """Send everything, reading responses meanwhile (they are kept in the buffer)."""
        view = memoryview(data)
        deadline = time.monotonic() + HANG_SECONDS * 2
        while view:
            readable, writable, _ = select.select([self.sock], [self.sock], [], 1.0)
            if readable:
                self._fill(time.monotonic())
            if writable:
                try:
                    view = view[self.sock.send(view[:65536]):]
                except (BrokenPipeError, ConnectionResetError):
                    self.closed = True
                    raise Closed from None
            if time.monotonic() > deadline:
                raise TimeoutError("the server stopped reading")

    def line(self, deadline: float) -> bytes | None:
        """One response line, literals folded in; None at ``deadline``."""
        start = 0
        while True:
            end = self.buffer.find(b"\r\n", start)
            if end < 0:
                if not self._fill(deadline):
                    return None
                continue
            m = LITERAL.search(self.buffer, start, end)
            if m:  # the literal's octets and the rest of its line belong to this line
                need = end + 2 + int(m.group(1))
                while len(self.buffer) < need:
                    if not self._fill(deadline):
                        return None
                start = need
                continue
            line, self.buffer = self.buffer[:end], self.buffer[end + 2:]
            self.seen.append(line)
            return line

    def until(self, pred, seconds: float = HANG_SECONDS) -> bytes | None:
        """The first response line for which ``pred`` holds, or None after ``seconds``."""
        deadline = time.monotonic() + seconds
        while True:
            line = self.line(deadline)
            if line is None or pred(line):
                return line

    def command(self, tag: bytes, text: bytes, seconds: float = HANG_SECONDS) -> bytes | None:
        """Send a command; its tagged answer (None after ``seconds``)."""
        self.send(tag + b" " + text + b"\r\n")
        return self.until(_tagged(tag), seconds)

    def lines(self, tag: bytes, text: bytes) -> list[bytes]:
        """Send a command; all its response lines, the tagged one last."""
        first = len(self.seen)
        assert self.command(tag, text) is not None, f"no answer to {text!r}"
        return self.seen[first:]


def _tagged(tag: bytes):
    return lambda line: line.startswith(tag + b" ")


class FuzzServer:
    """One ``imapserver`` (IMAP, SMTP, LMTP) on ``base`` and a control IMAP session."""

    def __init__(self, base):
        self.base = base
        self.data_dir = str(base / "store")
        self.config = base / "imapserver.conf"
        self.config.write_text(CONFIG)
        make_users(self.data_dir, (USER, PASSWORD))
        self.proc: ServerProcess | None = None
        self.control: Conn | None = None
        self.examples = 0
        self.counter = 0
        self.tally: Counter = Counter()  # (protocol, answer) -> count: what the input got

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> FuzzServer:
        self.proc = ServerProcess(self.data_dir, "--smtp-port", "auto", "--lmtp-port", "auto",
                                  config=str(self.config)).start()
        self.output_seen = len(self.proc.captured)
        self.control = self._login()
        self.reset_mailboxes()
        assert self.control.command(b"cs", b"SELECT INBOX").startswith(b"cs OK")
        return self

    def stop(self) -> None:
        if self.control is not None:
            self.control.close()
        if self.proc is not None:
            self.proc.stop()

    def restart_if_dead(self) -> None:
        if self.proc is None or self.proc.proc is None or self.proc.proc.poll() is not None:
            if self.proc is not None:
                self.proc.stop()
            self.start()

    def _login(self) -> Conn:
        conn = Conn(self.proc.port)
        conn.line(time.monotonic() + HANG_SECONDS)
        reply = conn.command(b"l", f"LOGIN {USER} {PASSWORD}".encode())
        assert reply and reply.startswith(b"l OK"), reply
        return conn

    def reset_mailboxes(self) -> None:
        """Back to the starting mailboxes (INBOX with a few messages), so that the account does
        not grow without bound (COPY 1:* doubles a mailbox)."""
        c = self.control
        for line in c.lines(b"rl", b'LIST "" *')[:-1]:
            if not line.startswith(b"* LIST "):
                continue
            name = line.rsplit(b" ", 1)[-1]
            # Literal names (8-bit, CR/LF) are left: they do not grow with the run.
            if name.strip(b'"').upper() != b"INBOX" and not name.endswith(b"}"):
                c.command(b"rd", b"DELETE " + name)
        status = b" ".join(c.lines(b"rs", b"STATUS INBOX (MESSAGES)"))
        m = re.search(rb"MESSAGES (\d+)", status)
        count = int(m.group(1)) if m else 0
        if count > 40:
            c.command(b"rx", b"SELECT INBOX")
            c.command(b"rf", b"STORE 1:* +FLAGS.SILENT (\\Deleted)")
            c.command(b"re", b"EXPUNGE")
            count = 0
        for name in MAILBOXES[1:]:
            c.command(b"rc", b"CREATE " + name.encode())
        for i in range(max(0, 6 - count)):
            msg = SEED_MESSAGE % (i, i)
            c.send(b"ra APPEND INBOX (\\Seen $Seed) {%d+}\r\n%s\r\n" % (len(msg), msg))
            c.until(_tagged(b"ra"))
        c.command(b"rx", b"SELECT INBOX")
        c.seen.clear()

    # -- judging ---------------------------------------------------------------------------

    def check(self) -> list[str]:
        """What is wrong with the server now: dead, traceback in its output, control stuck."""
        findings = []
        if self.proc.proc.poll() is not None:
            findings.append(f"server died with status {self.proc.proc.returncode}")
        out = self.proc.wait_output(b"$", timeout=0)[self.output_seen:]
        self.output_seen += len(out)
        for m in OUTPUT_ALARMS.finditer(out):
            start = out.rfind(b"\n", 0, m.start()) + 1
            findings.append("server output: " + out[start:start + 2000].decode(errors="replace"))
            break
        if not findings:
            self.counter += 1
            tag = b"c%d" % self.counter
            started = time.monotonic()
            try:
                reply = self.control.command(tag, b"NOOP")
            except (Closed, TimeoutError, OSError) as exc:
                reply = None
                findings.append(f"control session lost: {exc!r}")
            if reply is None and not findings:
                findings.append("control session: no answer to NOOP within "
                                f"{HANG_SECONDS:.0f} s")
            elif reply is not None and not reply.startswith(tag + b" OK"):
                findings.append(f"control session: {reply!r}")
            elif time.monotonic() - started > HANG_SECONDS:
                findings.append("control session slow")
            if not findings:
                exists = [int(m.group(1)) for line in self.control.seen
                          if (m := re.match(rb"\* (\d+) EXISTS", line))]
                self.control.seen.clear()
                self.examples += 1
                if (exists and exists[-1] > 40) or self.examples % 50 == 0:
                    self.reset_mailboxes()
        return [f for f in findings if not any(p.search(f) for p in KNOWN.values())]

    # -- IMAP ------------------------------------------------------------------------------

    def session(self, state: str) -> Conn:
        """A new connection in ``state`` (see tests.fuzzgen.STATES)."""
        conn = Conn(self.proc.port)
        assert conn.line(time.monotonic() + HANG_SECONDS) is not None, "no greeting"
        if state == "authenticate":
            conn.send(b"sa AUTHENTICATE PLAIN\r\n")
            assert conn.until(lambda line: line.startswith((b"+", b"sa "))) == b"+ "
            return conn
        if state == "not-auth":
            return conn
        assert conn.command(b"sl", f"LOGIN {USER} {PASSWORD}".encode()).startswith(b"sl OK")
        if state == "auth":
            return conn
        reply = conn.command(b"ss", b"SELECT INBOX")
        assert reply and reply.startswith(b"ss OK"), reply
        if state == "idle":
            conn.send(b"si IDLE\r\n")
            assert conn.until(lambda line: line.startswith((b"+", b"si "))) == b"+ idling"
        return conn

    def imap(self, state: str, commands: list[bytes]) -> list[str]:
        """Run one example; the findings (empty when the server behaved)."""
        findings: list[str] = []
        conn = self.session(state)
        try:
            findings += self._imap_exchange(conn, commands)
        except Closed:
            pass  # LOGOUT, BYE after a bad line...: a closed session is not a failure
        except TimeoutError as exc:
            findings.append(f"fuzz session: {exc}")
        finally:
            conn.close()
        alarms = [line for line in conn.seen if REPLY_ALARMS.search(line)]
        if alarms:
            findings.append(f"response: {alarms[0][:300]!r}")
        for line in conn.seen:
            m = re.match(rb"T\d+ (OK|NO|BAD)|\* (BAD|BYE)|(\+)", line)
            if m:
                self.tally["imap", (m.group(1) or m.group(2) or m.group(3)).decode()] += 1
        findings += self.check()
        if findings:
            findings.append(f"example: state={state} commands={commands!r}")
            findings.append(f"responses: {conn.seen[-12:]!r}")
        return findings

    def _imap_exchange(self, conn: Conn, commands: list[bytes]) -> list[str]:
        owed = skipped = 0
        for i, data in enumerate(commands):
            if owed:  # the last command's literal is short: complete it and end the command
                if owed > 4_000_000:
                    return []  # a client that owes megabytes may be made to wait: not judged
                conn.send(b"x" * owed + b"\r\n")
                owed = 0
            if data.startswith(b"T "):
                data = b"T%d" % i + data[1:]  # distinct tags, to tell answers apart
            owed, more = self._send_imap(conn, data)
            skipped += more
        # The probe: what a literal still owes, a line end, "*" (ends a SASL exchange), DONE
        # (ends IDLE), then NOOP, which must be answered.  Sent again when the server is
        # waiting for the client after all: the last thing it said was a continuation request
        # (the fuzz input's own lines went to a SASL exchange or IDLE that began later than
        # the sender expected), or a literal the sender took for refused was in fact accepted.
        filler = owed
        for attempt in range(3):
            if filler > 4_000_000:
                return []  # a client that owes megabytes may be made to wait: not judged
            conn.send(b"x" * filler + b"\r\n*\r\nDONE\r\nzp%d NOOP\r\n" % attempt)
            if conn.until(_tagged(b"zp%d" % attempt)) is not None:
                return []
            if conn.seen and conn.seen[-1].startswith(b"+"):
                filler = 0
            elif skipped:
                filler, skipped = skipped, 0
            else:
                break
        return [f"fuzz session: no answer to NOOP within {HANG_SECONDS:.0f} s"]

    def _send_imap(self, conn: Conn, data: bytes) -> tuple[int, int]:
        """Send ``data`` line by line as a client would; (octets a literal still owes at the
        end, octets of refused literals not sent)."""
        pos, n, skipped = 0, len(data), 0
        tag = None  # of the command being sent: the first word of its first line
        while pos < n:
            end = data.find(b"\n", pos)
            chunk = data[pos:] + b"\r\n" if end < 0 else data[pos:end + 1]
            pos = n if end < 0 else end + 1
            conn.send(chunk)
            line = chunk[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
            if tag is None:
                tag = line.split(b" ", 1)[0]
            m = LITERAL.search(line)
            if not m:
                tag = None  # the command is complete
                waits = WAITS_FOR_CLIENT.match(line)
                if waits:  # a client sends nothing more before the "+" (RFC 3501 7.5)
                    answers = (b"+", waits.group(1) + b" ", b"* BAD")
                    conn.until(lambda r, answers=answers: r.startswith(answers), 2.0)
                continue
            size = int(m.group(1))
            if not m.group(2):
                # Synchronizing: the server answers "+" or refuses with "<tag> NO" as soon as
                # it reads the line (other lines may be answers to earlier commands).  A line
                # too long is skipped, literal announcement and all.  IDLE's "* BAD", or
                # nothing (a SASL exchange took the line), means no literal either.
                refused = (tag + b" NO ", tag + b" BAD line too long", b"* BAD line too long",
                           b"* BAD Expected DONE")
                answer = conn.until(lambda r, refused=refused: r.startswith((b"+", *refused)),
                                    seconds=2.0)
                if answer is None or not answer.startswith(b"+"):
                    skipped += size
                    pos += size
                    tag = None
                    continue
            take = min(size, n - pos)
            conn.send(data[pos:pos + take])
            pos += take
            if pos >= n:
                return size - take, skipped
        return 0, skipped

    # -- SMTP / LMTP -----------------------------------------------------------------------

    def delivery(self, protocol: str, data: bytes) -> list[str]:
        """Send a session's lines to SMTP or LMTP; then end DATA or AUTH if still in one, and
        QUIT must be answered 221 within :data:`HANG_SECONDS`."""
        findings = []
        conn = Conn(self.proc.ports[protocol])
        try:
            conn.line(time.monotonic() + HANG_SECONDS)
            conn.send(data)
            conn.send(b"\r\n.\r\n*\r\nQUIT\r\n")
            if conn.until(lambda line: line.startswith(b"221")) is None:
                findings.append(f"{protocol}: no answer to QUIT within {HANG_SECONDS:.0f} s")
        except Closed:
            pass
        except TimeoutError as exc:
            findings.append(f"{protocol}: {exc}")
        finally:
            conn.close()
        alarms = [line for line in conn.seen if REPLY_ALARMS.search(line)]
        if alarms:
            findings.append(f"{protocol} reply: {alarms[0][:300]!r}")
        for line in conn.seen:
            self.tally[protocol, line[:3].decode(errors="replace")] += 1
        findings += self.check()
        if findings:
            findings.append(f"example: {protocol} {data!r}")
            findings.append(f"replies: {conn.seen[-12:]!r}")
        return findings

