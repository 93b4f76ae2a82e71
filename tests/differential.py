"""Differential IMAP tests: the same conversation with our server and with Dovecot.

A :class:`Script` is a list of steps ``(client, action)``: ``"A"``, ``"B"``, ... name
sessions, each opened on first use and logged in as the script's own fresh account (the same
name and password on both servers; clients listed in ``anonymous`` stay unauthenticated).  An
action is a command -- text, or a tuple of text and :func:`lit`/:func:`plus` literals -- or one
of :class:`Pipelined`, :class:`Idle`, :class:`WaitFor`, :class:`Done`, :class:`Raw`.  The
runner plays the script against both servers (in two threads), records every response, parses
it (tagged status, response code, untagged data with literals captured octet for octet) and
normalises what RFC 3501 leaves to the server:

* the text after a status word (response codes are kept), the greeting's text, the text of a
  ``+`` continuation;
* capability lists (``* CAPABILITY`` becomes ``<capabilities>``; ``[CAPABILITY ...]`` codes,
  optional in greeting and LOGIN, are dropped) and the ``* ID`` answer;
* UIDVALIDITY values (each distinct value becomes ``<uidvalidity-N>`` in order of first
  appearance, so both servers must still be consistent);
* INTERNALDATE values within a day of the run (APPEND without a date: the server's clock);
* the order of items inside one FETCH response (RFC 3501 7.4.2 fixes none);
* a FETCH sent before an EXPUNGE in the same reply goes after it, renumbered
  (:func:`expunges_first`: RFC 3501 7.4.1 and 5.2 leave the order to the server);
* quoted vs literal vs atom form of a string (RFC 3501 4.3: the server's choice).

Anything else is a difference: :meth:`Differential.run` fails with a unified diff of the two
normalised transcripts.  Where we deliberately differ, the script names an entry of
:data:`DELIBERATE` (reason and hook); see docs/differential.md for the table and for how to
add a script.  :data:`KNOWN_DEFECTS` holds masks for defects being fixed elsewhere: each
refuses to apply once our server no longer shows the defect, so it cannot outlive the fix.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import difflib
import hashlib
import itertools
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dovecot import Dovecot
from imapproc import ServerProcess, make_users

TIMEOUT = 30.0
PASSWORD = "pw-differential"

# -- scripts -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Literal:
    """A literal argument: synchronizing ``{n}`` (wait for ``+``) or LITERAL+ ``{n+}``."""

    data: bytes
    plus: bool = False
    binary: bool = False
    """A literal8 (``~{n}``, RFC 3516 4.3): APPEND's message with binary content."""


def lit8(data: bytes, plus: bool = False) -> Literal:
    """A literal8 (RFC 3516): ``~{n}`` (synchronizing) or ``~{n+}`` (RFC 7888 with it)."""
    return Literal(data, plus=plus, binary=True)


def lit(data: bytes) -> Literal:
    """A synchronizing literal (RFC 3501 4.3): the client waits for the ``+`` continuation."""
    return Literal(data)


def plus(data: bytes) -> Literal:
    """A non-synchronizing literal (RFC 7888 LITERAL+): sent without waiting."""
    return Literal(data, plus=True)


@dataclass(frozen=True)
class Pipelined:
    """Several commands written in one go, then all their responses read (RFC 3501 5.5)."""

    commands: tuple

    def __init__(self, *commands):
        object.__setattr__(self, "commands", commands)


@dataclass(frozen=True)
class Idle:
    """``IDLE`` (RFC 2177): sent, then read up to the ``+`` continuation."""


@dataclass(frozen=True)
class WaitFor:
    """Read unsolicited responses (e.g. while idling) until one matches ``pattern``, a regex
    on the normalised text; both servers must send the same responses up to it."""

    pattern: str
    timeout: float = 10.0


@dataclass(frozen=True)
class Done:
    """``DONE`` ending an IDLE; reads up to IDLE's tagged response."""


@dataclass(frozen=True)
class Raw:
    """Octets sent as they are (no tag added); then ``responses`` responses are read."""

    data: bytes
    responses: int = 1


@dataclass(frozen=True)
class Recall:
    """A command built from what *this* server answered before, for values each server
    chooses (UIDVALIDITY, MOD-SEQUENCEs): ``Recall("SELECT INBOX (QRESYNC ({UIDVALIDITY}
    {HIGHESTMODSEQ}))")``.  Each ``{NAME}`` is group 1 of the last match of ``patterns[NAME]``
    (by default ``[UIDVALIDITY n]`` and ``HIGHESTMODSEQ n``; ``{FIRSTMODSEQ}`` the first
    HIGHESTMODSEQ) in the raw responses so far of the whole conversation; a pattern given
    as ``(name, regex, k)`` takes the k-th match instead (0 the first, -1 the last)."""

    template: str
    patterns: tuple[tuple, ...] = ()

    DEFAULTS = (("UIDVALIDITY", r"\[UIDVALIDITY (\d+)\]"),
                ("HIGHESTMODSEQ", r"HIGHESTMODSEQ (\d+)"),
                ("FIRSTMODSEQ", r"HIGHESTMODSEQ (\d+)", 0))

    def render(self, events: list) -> str:
        values = {}
        for name, pattern, *which in (*self.DEFAULTS, *self.patterns):
            found = [m.group(1).decode() for e in events for r in e.responses
                     for m in re.finditer(pattern.encode(), r.raw)]
            if found:
                values[name] = found[which[0] if which else -1]
        return self.template.format(**values)


@dataclass
class Script:
    """A conversation.  ``deliberate`` and ``defects`` name entries of :data:`DELIBERATE` and
    :data:`KNOWN_DEFECTS` applied to it."""

    name: str
    steps: list
    anonymous: tuple[str, ...] = ()
    deliberate: tuple[str, ...] = ()
    defects: tuple[str, ...] = ()
    doc: str = ""


def append(mailbox: str, message: bytes, flags: str = "", date: str | None = None,
           literal: Callable[[bytes], Literal] = plus) -> tuple:
    """An APPEND command (RFC 3501 6.3.11) as a step action."""
    head = f"APPEND {mailbox}"
    if flags is not None and flags != "":
        head += f" ({flags})"
    if date is not None:
        head += f' "{date}"'
    return (head + " ", literal(message))


def date(n: int) -> str:
    """A fixed INTERNALDATE for seeding the n-th message: distinct, in a +0100 zone."""
    when = datetime.datetime(2026, 2, 1, 3, 0, 0) + datetime.timedelta(days=n, seconds=61 * n)
    return when.strftime("%d-%b-%Y %H:%M:%S +0100")


# -- responses ---------------------------------------------------------------------------------

STATUS_WORDS = {b"OK", b"NO", b"BAD", b"BYE", b"PREAUTH"}


@dataclass
class Response:
    """One parsed response.  ``kind`` is ``tagged``, ``status`` (untagged OK/NO/BAD/BYE/
    PREAUTH), ``data`` (other untagged), ``cont`` (``+``) or ``greeting``; ``code`` the
    tokens inside ``[...]``, ``data`` the tokens after ``*``.  Tokens: bytes for atoms and
    strings, None for NIL, lists for parenthesised lists."""

    kind: str
    tag: bytes = b""
    status: bytes = b""
    code: list | None = None
    data: list = field(default_factory=list)
    raw: bytes = b""


def tokenize(data: bytes, i: int = 0, closing: bytes = b"") -> tuple[list, int]:
    """Tokens of ``data`` from ``i`` up to the end or the ``closing`` character."""
    out: list = []
    n = len(data)
    while i < n:
        c = data[i:i + 1]
        if c == b" ":
            i += 1
        elif closing and c == closing:
            return out, i + 1
        elif c == b"(":
            sub, i = tokenize(data, i + 1, b")")
            out.append(sub)
        elif c == b'"':
            value = bytearray()
            i += 1
            while i < n and data[i:i + 1] != b'"':
                if data[i:i + 1] == b"\\":
                    i += 1
                value += data[i:i + 1]
                i += 1
            out.append(bytes(value))
            i += 1
        elif c in b"{~" and (m := re.compile(rb"~?\{(\d+)\+?\}\r\n").match(data, i)):
            # A literal8 (RFC 3516) is a literal here: when the octets hold no NUL either form
            # is the server's choice (Dovecot uses ~{n} for any decoded part); the octets,
            # NUL included, are compared.
            size = int(m.group(1))
            out.append(bytes(data[m.end():m.end() + size]))
            i = m.end() + size
        else:
            j = i
            while j < n and data[j:j + 1] not in (b" ", b"(", b")", b'"', b"\r", b"\n"):
                if data[j:j + 1] == b"[" and data.find(b"]", j) > 0:
                    # BODY[HEADER.FIELDS (A B)]<0>: one atom (a lone '[' is an atom-char)
                    depth = 0
                    while j < n:
                        if data[j:j + 1] == b"[":
                            depth += 1
                        elif data[j:j + 1] == b"]":
                            depth -= 1
                            if depth == 0:
                                break
                        j += 1
                if closing and data[j:j + 1] == closing:
                    break
                j += 1
            j = max(j, i + 1)  # a stray CR or LF (a malformed response) is kept as an atom
            atom = bytes(data[i:j])
            out.append(None if atom.upper() == b"NIL" else atom)
            i = j
    return out, i


def _status(rest: bytes) -> tuple[list | None]:
    """The response code of the text after a status word (None if there is none)."""
    if rest.startswith(b"["):
        depth = 0
        for end, ch in enumerate(rest):
            if ch == 0x5B:
                depth += 1
            elif ch == 0x5D:
                depth -= 1
                if depth == 0:
                    return tokenize(rest[1:end])[0]
        return tokenize(rest[1:])[0]
    return None


def parse_response(raw: bytes) -> Response:
    """A response as read (literals folded in, final CRLF removed)."""
    if raw.startswith(b"+"):
        return Response("cont", raw=raw)
    head, _, rest = raw.partition(b" ")
    if head == b"*":
        word, _, after = rest.partition(b" ")
        if word.upper() in STATUS_WORDS:
            return Response("status", status=word.upper(), code=_status(after), raw=raw)
        return Response("data", data=tokenize(rest)[0], raw=raw)
    word, _, after = rest.partition(b" ")
    return Response("tagged", tag=head, status=word.upper(), code=_status(after), raw=raw)


# -- connections -------------------------------------------------------------------------------


_SOURCES = itertools.count(1)


def _source_address() -> str:
    """A loopback address of its own for each connection: Dovecot's auth penalty (up to 15 s
    per failed login, by client address; not configurable in 2.3) then never delays a
    script, as long as each failed login comes from a session of its own."""
    n = next(_SOURCES)
    return f"127.{1 + n // 62500 % 250}.{n // 250 % 250}.{1 + n % 250}"


class Connection:
    """One session's socket, reading whole responses (lines with their literals)."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT,
                                             source_address=(_source_address(), 0))
        self.buffer = bytearray()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("connection closed by the server; unread: "
                                  + repr(bytes(self.buffer[:200])))
        self.buffer += chunk

    def read_response(self, timeout: float = TIMEOUT) -> bytes:
        """One response: a line and, while it ends announcing a literal, the literal and the
        line after it.  The final CRLF is removed."""
        self.sock.settimeout(timeout)
        out = bytearray()
        start = 0
        while True:
            end = self.buffer.find(b"\r\n", start)
            while end < 0:
                start = max(0, len(self.buffer) - 1)
                self._fill()
                end = self.buffer.find(b"\r\n", start)
            line = bytes(self.buffer[:end + 2])
            del self.buffer[:end + 2]
            start = 0
            m = re.search(rb"\{(\d+)\}\r\n$", line)
            if m is None:
                out += line[:-2]
                return bytes(out)
            size = int(m.group(1))
            while len(self.buffer) < size:
                self._fill()
            out += line + self.buffer[:size]
            del self.buffer[:size]


@dataclass
class Event:
    """What one step did on one session: what was sent (for reading) and what came back."""

    client: str
    sent: str
    responses: list[Response]


def _show(data: bytes) -> str:
    return data.decode("latin-1").encode("unicode_escape").decode("ascii")


def command_parts(action) -> tuple:
    return action if isinstance(action, tuple) else (action,)


class Session:
    """A client playing its steps on one server; tags are ``<client><n>``."""

    def __init__(self, label: str, port: int):
        self.label = label
        self.conn = Connection(port)
        self.counter = 0
        self.idle_tag: bytes | None = None

    def next_tag(self) -> bytes:
        self.counter += 1
        return f"{self.label}{self.counter}".encode()

    def until_tagged(self, tags: list[bytes], out: list[Response]) -> None:
        left = set(tags)
        while left:
            r = parse_response(self.conn.read_response())
            out.append(r)
            if r.kind == "tagged":
                left.discard(r.tag)

    def write_command(self, tag: bytes, action, out: list[Response], wait: bool) -> str:
        """Send one command; with ``wait`` synchronizing literals wait for ``+``."""
        data = bytearray(tag + b" ")
        shown = [tag.decode() + " "]
        for part in command_parts(action):
            if isinstance(part, Literal):
                data += b"%s{%d%s}\r\n" % (b"~" if part.binary else b"", len(part.data),
                                             b"+" if part.plus else b"")
                if not part.plus:
                    if not wait:
                        raise ValueError("a synchronizing literal cannot be pipelined")
                    self.conn.send(bytes(data))
                    data = bytearray()
                    while True:  # a server may send untagged data before the continuation
                        r = parse_response(self.conn.read_response())
                        out.append(r)
                        if r.kind == "cont":
                            break
                        if r.kind == "tagged" and r.tag == tag:
                            return "".join(shown)  # refused before the literal was sent
                data += part.data
                shown.append(f"{'~' if part.binary else ''}{{{len(part.data)}"
                             f"{'+' if part.plus else ''}}}")
            else:
                text = part.encode("latin-1") if isinstance(part, str) else part
                data += text
                shown.append(_show(text))
        self.conn.send(bytes(data) + b"\r\n")
        return "".join(shown)

    def play(self, action) -> Event:
        out: list[Response] = []
        if isinstance(action, Pipelined):
            tags = [self.next_tag() for _ in action.commands]
            batch = Session.__new__(Session)  # collect the whole write first
            batch.conn = _Collect()
            shown = [batch.write_command(t, c, out, wait=False)
                     for t, c in zip(tags, action.commands, strict=True)]
            self.conn.send(batch.conn.data)
            self.until_tagged(tags, out)
            return Event(self.label, PIPELINE_SEPARATOR.join(shown), out)
        if isinstance(action, Idle):
            self.idle_tag = self.next_tag()
            self.conn.send(self.idle_tag + b" IDLE\r\n")
            while True:
                r = parse_response(self.conn.read_response())
                out.append(r)
                if r.kind in ("cont", "tagged"):
                    break
            return Event(self.label, f"{self.idle_tag.decode()} IDLE", out)
        if isinstance(action, WaitFor):
            deadline = time.monotonic() + action.timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.label}: nothing matched {action.pattern!r}")
                r = parse_response(self.conn.read_response(timeout=left))
                out.append(r)
                if any(re.search(action.pattern, line) for line in render(normalise(r, {}))):
                    return Event(self.label, f"(wait for {action.pattern})", out)
        if isinstance(action, Done):
            self.conn.send(b"DONE\r\n")
            self.until_tagged([self.idle_tag], out)
            return Event(self.label, "DONE", out)
        if isinstance(action, Raw):
            self.conn.send(action.data)
            for _ in range(action.responses):
                out.append(parse_response(self.conn.read_response()))
            return Event(self.label, _show(action.data), out)
        tag = self.next_tag()
        shown = self.write_command(tag, action, out, wait=True)
        # Up to the tagged response, or a continuation request (AUTHENTICATE without an
        # initial response): a Raw step then sends what the server asked for.
        if out and out[-1].kind == "tagged" and out[-1].tag == tag:
            return Event(self.label, shown, out)  # refused before a literal was sent
        while True:
            r = parse_response(self.conn.read_response())
            out.append(r)
            if r.kind == "cont" or (r.kind == "tagged" and r.tag == tag):
                return Event(self.label, shown, out)


class _Collect:
    """Stands in for a connection while a pipelined write is assembled."""

    def __init__(self):
        self.data = bytearray()

    def send(self, data: bytes) -> None:
        self.data += data


# -- normalising -------------------------------------------------------------------------------

def word(token) -> bytes:
    """An atom or string token upper-cased; b"" for NIL and lists."""
    return token.upper() if isinstance(token, bytes) else b""


PIPELINE_SEPARATOR = " || "


def unordered(responses: list[Response]) -> list[Response]:
    """The responses to pipelined commands, untagged ones sorted by their text, then the
    tagged ones by tag: RFC 3501 5.5 lets a server run pipelined commands that do not depend
    on each other concurrently, so their untagged responses may come in any order."""
    untagged = sorted((r for r in responses if r.kind != "tagged"), key=render)
    return untagged + sorted((r for r in responses if r.kind == "tagged"),
                             key=lambda r: (len(r.tag), r.tag))


def sort_listings(responses: list[Response]) -> list[Response]:
    """LIST/LSUB responses in mailbox-name order, each with the STATUS that follows it
    (LIST-STATUS, RFC 5819): RFC 3501 6.3.8 leaves their order to the server."""
    out: list[Response] = []
    group: list[list[Response]] = []

    def flush():
        group.sort(key=lambda g: g[0].data[3] if len(g[0].data) > 3 else b"")
        out.extend(r for g in group for r in g)
        group.clear()

    for r in responses:
        kind = word(r.data[0]) if r.kind == "data" and r.data else b""
        if kind in (b"LIST", b"LSUB"):
            group.append([r])
        elif kind == b"STATUS" and group:
            group[-1].append(r)
        else:
            flush()
            out.append(r)
    flush()
    return out


def expunges_first(responses: list[Response]) -> list[Response]:
    """``responses`` with every untagged FETCH that came before an EXPUNGE of the same
    response put after the last EXPUNGE, renumbered as the EXPUNGEs shift it (and dropped if
    its own message is expunged).

    RFC 3501 7.4.1 and 5.2 leave it to the server whether a flag change another session made
    is reported before or after an expunge reported at the same time: Dovecot sends the FETCH
    first, numbered before the EXPUNGE, we send the EXPUNGEs first.  Both tell the client the
    same state; this is the common form.
    """
    def kind(r: Response) -> bytes:
        return word(r.data[1]) if r.kind == "data" and len(r.data) > 1 else b""

    kinds = [kind(r) for r in responses]
    if b"EXPUNGE" not in kinds:
        return responses
    last = max(i for i, k in enumerate(kinds) if k == b"EXPUNGE")
    if b"FETCH" not in kinds[:last]:
        return responses
    moved: list[Response] = []
    out: list[Response] = []
    for r, k in zip(responses[:last + 1], kinds, strict=False):
        if k == b"FETCH" and isinstance(r.data[0], bytes) and r.data[0].isdigit():
            moved.append(r)
            continue
        if k == b"EXPUNGE" and r.data[0].isdigit():
            gone = int(r.data[0])
            moved = [f if int(f.data[0]) < gone else
                     dataclasses.replace(f, data=[b"%d" % (int(f.data[0]) - 1), *f.data[1:]])
                     for f in moved if int(f.data[0]) != gone]
        out.append(r)
    return out + moved + responses[last + 1:]


_INTERNALDATE = re.compile(rb"\d{1,2}-[A-Z][a-z]{2}-\d{4} \d\d:\d\d:\d\d [+-]\d{4}")


def _near_now(value: bytes) -> bool:
    try:
        when = datetime.datetime.strptime(value.decode(), "%d-%b-%Y %H:%M:%S %z")
    except ValueError:
        return False
    return abs(when.timestamp() - time.time()) < 86400


def _uidvalidity(value, seen: dict) -> bytes:
    if value not in seen:
        seen[value] = b"<uidvalidity-%d>" % (len(seen) + 1)
    return seen[value]


def _server_chosen(r: Response) -> bool:
    """An untagged ``OK [MAILBOXID (id)]`` (RFC 8474 4.1, on SELECT/EXAMINE): nothing in it
    to compare, the id being the server's choice, and Dovecot 2.3.19 sends none."""
    return r.kind == "status" and bool(r.code) and word(r.code[0]) == b"MAILBOXID"


def normalise(r: Response, uidvalidities: dict) -> Response:
    """A copy of ``r`` without what the servers may legitimately choose differently."""
    code = r.code
    if code:
        name = word(code[0])
        if name in (b"CAPABILITY", b"MAILBOXID"):
            # MAILBOXID (RFC 8474 4.1): the id is the server's choice, and Debian's Dovecot
            # (2.3.19) has no OBJECTID to send one; see _server_chosen.
            code = None
        elif name == b"PERMANENTFLAGS" and len(code) == 2 and isinstance(code[1], list):
            code = [code[0], sorted(code[1], key=word)]
        elif name in (b"UIDVALIDITY", b"COPYUID", b"APPENDUID") and len(code) > 1:
            code = [code[0], _uidvalidity(code[1], uidvalidities), *code[2:]]
    data = r.data
    if r.kind == "data" and data:
        first = word(data[0])
        if first == b"CAPABILITY":
            data = [b"CAPABILITY", b"<capabilities>"]
        elif first in (b"LIST", b"LSUB") and len(data) > 1 and isinstance(data[1], list):
            data = [data[0], sorted(data[1], key=word), *data[2:]]  # a set (RFC 3501 7.2.2)
        elif first == b"FLAGS" and len(data) == 2 and isinstance(data[1], list):
            data = [data[0], sorted(data[1], key=word)]  # a set (RFC 3501 7.2.6)
        elif first == b"ID":
            data = [b"ID", b"<server id>"]
        elif first == b"STATUS" and len(data) > 2 and isinstance(data[2], list):
            pairs = [[data[2][k], data[2][k + 1]] for k in range(0, len(data[2]) - 1, 2)]
            for pair in pairs:
                if word(pair[0]) == b"UIDVALIDITY":
                    pair[1] = _uidvalidity(pair[1], uidvalidities)
            pairs.sort(key=lambda p: word(p[0]))  # RFC 3501 7.2.4 fixes no order
            data = [data[0], data[1], [x for p in pairs for x in p]]
        elif len(data) == 3 and word(data[1]) == b"FETCH" \
                and isinstance(data[2], list):
            items = data[2]
            pairs = [[items[k], items[k + 1] if k + 1 < len(items) else b"<missing>"]
                     for k in range(0, len(items), 2)]
            for pair in pairs:
                # SAVEDATE (RFC 8514) is the server's clock when it saved the message.
                if word(pair[0]) in (b"INTERNALDATE", b"SAVEDATE") \
                        and isinstance(pair[1], bytes) \
                        and _INTERNALDATE.fullmatch(pair[1]) and _near_now(pair[1]):
                    pair[1] = b"<now>"
            for pair in pairs:
                if word(pair[0]) == b"FLAGS" and isinstance(pair[1], list):
                    pair[1] = sorted(pair[1], key=word)
            pairs.sort(key=lambda p: word(p[0]))
            data = [data[0], data[1], [x for p in pairs for x in p]]
    return Response(r.kind, r.tag, r.status, code, data, r.raw)


# -- rendering ---------------------------------------------------------------------------------

_PLAIN = re.compile(rb"[!#-'*-~]+")  # shown without quotes: no space, ", (, ), controls
_SECTION = re.compile(rb"[A-Z0-9.]+\[[^\]\r\n\"]*\](<\d+>)?")  # BODY[HEADER.FIELDS (A B)]<0>
BIG = 4096


def _token(t, lines: list[str]) -> str:
    if t is None:
        return "NIL"
    if isinstance(t, list):
        return "(" + " ".join(_token(x, lines) for x in t) + ")"
    if (_PLAIN.fullmatch(t) or _SECTION.fullmatch(t)) and len(t) < 200:
        return t.decode("latin-1")
    if len(t) > BIG:
        digest = hashlib.sha256(t).hexdigest()[:16]
        lines.append(f"    | {len(t)} octets sha256:{digest}")
        lines.append(f"    | head: {_show(t[:160])}")
        lines.append(f"    | tail: {_show(t[-160:])}")
        return f"{{{len(t)}}}"
    if b"\n" in t or len(t) >= 200:
        lines.extend("    | " + _show(line) for line in t.splitlines(keepends=True))
        return f"{{{len(t)}}}"
    return '"' + _show(t) + '"'


def render(r: Response) -> list[str]:
    """Text lines for one normalised response: the line, then any long strings below it."""
    extra: list[str] = []
    if r.kind == "cont":
        head = "+"
    elif r.kind == "greeting":
        head = f"* {r.status.decode()}"
    elif r.kind in ("tagged", "status"):
        head = (r.tag.decode() if r.kind == "tagged" else "*") + " " + r.status.decode()
        if r.code is not None:
            head += " [" + " ".join(_token(t, extra) for t in r.code) + "]"
    else:
        head = "* " + " ".join(_token(t, extra) for t in r.data)
    return [head, *extra]


def transcript_lines(events: list[Event]) -> list[str]:
    lines = []
    for e in events:
        lines.append(f"{e.client}: >> {e.sent}")
        for r in e.responses:
            lines.extend(f"{e.client}: {line}" for line in render(r))
    return lines


# -- deliberate differences and known defects --------------------------------------------------

Hook = Callable[[Event, Event], bool]
"""Called with our event and Dovecot's for the same step (normalised); edits them in place and
returns True when it changed something (a named difference that never applies is stale)."""


@dataclass(frozen=True)
class Difference:
    reason: str
    hook: Hook


class DefectFixed(AssertionError):
    """A known-defect mask met our server behaving correctly: remove the mask."""


DELIBERATE: dict[str, Difference] = {}
"""Differences we keep on purpose, by name: the reason, and the hook that brings both answers
to a common form.  Registered in tests/differential_known.py; docs/differential.md has the
table."""

ALWAYS: list[str] = []
"""Deliberate differences applied to every script (not checked for staleness): those that
any script may meet without asking for the feature (Dovecot's lazy HIGHESTMODSEQ at SELECT)."""

KNOWN_DEFECTS: dict[str, Difference] = {}
"""Masks for defects being fixed on other branches; each raises :class:`DefectFixed` once
our server behaves, so that it is removed with the fix."""


def deliberate(name: str, reason: str) -> Callable[[Hook], Hook]:
    """Register a deliberate difference: ``@deliberate("name", "why")`` above its hook."""
    def register(hook: Hook) -> Hook:
        DELIBERATE[name] = Difference(reason, hook)
        return hook
    return register


def known_defect(name: str, reason: str) -> Callable[[Hook], Hook]:
    def register(hook: Hook) -> Hook:
        KNOWN_DEFECTS[name] = Difference(reason, hook)
        return hook
    return register


def command_text(event: Event) -> str:
    """What an event sent, without its tag."""
    return event.sent.split(" ", 1)[1] if " " in event.sent else event.sent


def response_lines(event: Event) -> list[str]:
    """The normalised responses of an event as text, the tag written ``tag``."""
    lines = []
    for r in event.responses:
        text = render(r)
        if r.kind == "tagged":
            text[0] = "tag" + text[0][len(r.tag):]
        lines.extend(text)
    return lines


def answers(name: str, reason: str, table: dict[str, tuple[list[str], list[str]]]) -> None:
    """A deliberate difference given as a table ``{command: (our lines, Dovecot's lines)}``
    (command without tag; response lines as :func:`response_lines` writes them).  Where both
    servers answer exactly as listed, Dovecot's answer is replaced by ours; any other answer
    is left to show in the diff."""
    def hook(ours: Event, dovecot: Event) -> bool:
        expected = table.get(command_text(ours))
        if expected is None or command_text(dovecot) != command_text(ours):
            return False
        if response_lines(ours) == expected[0] and response_lines(dovecot) == expected[1]:
            dovecot.responses[:] = ours.responses
            return True
        return False
    DELIBERATE[name] = Difference(reason, hook)


# -- the runner --------------------------------------------------------------------------------


@dataclass
class Target:
    """One server: its IMAP port and how to give it a fresh account."""

    name: str
    port: int
    add_user: Callable[[str, str], None]
    ports: dict[str, int] = field(default_factory=dict)
    """Sessions served on another port than ``port`` (a second process on the same store)."""


class Differential:
    """Plays scripts against our server and Dovecot and compares the transcripts."""

    _users = itertools.count(1)

    def __init__(self, ours: Target, dovecot: Target):
        self.ours = ours
        self.dovecot = dovecot

    def play(self, target: Target, script: Script, user: str) -> list[Event]:
        sessions: dict[str, Session] = {}
        events: list[Event] = []
        try:
            for label, action in script.steps:
                session = sessions.get(label)
                if session is None:
                    session = sessions[label] = Session(label,
                                                        target.ports.get(label, target.port))
                    greeting = parse_response(session.conn.read_response())
                    greeting = Response("greeting", status=greeting.status, raw=greeting.raw)
                    events.append(Event(label, "(connect)", [greeting]))
                    if label not in script.anonymous:
                        events.append(session.play(f"LOGIN {user} {PASSWORD}"))
                if callable(action):
                    action = action(user)
                if isinstance(action, Recall):
                    # The transcript shows the template: the values are each server's own.
                    rendered = action.render(events)
                    event = session.play(rendered)
                    event.sent = event.sent.replace(_show(rendered.encode()),
                                                    _show(action.template.encode()))
                    events.append(event)
                    continue
                events.append(session.play(action))
        except Exception as exc:
            events.append(Event("!", f"{type(exc).__name__}: {exc}", []))
        finally:
            for session in sessions.values():
                session.conn.close()
        return events

    def transcripts(self, script: Script) -> tuple[list[Event], list[Event]]:
        """Both raw transcripts, played at the same time on a fresh account each."""
        user = f"d{next(self._users)}"
        self.ours.add_user(user, PASSWORD)
        self.dovecot.add_user(user, PASSWORD)
        results: dict[str, list[Event]] = {}
        threads = [threading.Thread(target=lambda t=t: results.__setitem__(
            t.name, self.play(t, script, user))) for t in (self.ours, self.dovecot)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results[self.ours.name], results[self.dovecot.name]

    def normalised(self, script: Script, ours: list[Event],
                   dovecot: list[Event]) -> tuple[list[str], list[str]]:
        """Both transcripts normalised, with the script's deliberate differences and
        known-defect masks applied to each pair of events (step by step)."""
        def norm(events):
            seen: dict = {}
            out = []
            for e in events:
                responses = [normalise(r, seen)
                             for r in expunges_first(sort_listings(e.responses))
                             if not _server_chosen(r)]
                out.append(Event(e.client, e.sent, responses))
            return out
        a, b = norm(ours), norm(dovecot)
        hooks = [(n, KNOWN_DEFECTS[n]) for n in script.defects]
        hooks += [(n, DELIBERATE[n]) for n in script.deliberate]
        hooks += [(n, DELIBERATE[n]) for n in ALWAYS if n not in script.deliberate]
        # Only deliberate differences are checked for staleness; a defect mask goes with its
        # fix (it raises DefectFixed then).
        used = set()
        for x, y in zip(a, b, strict=False):
            if x.client != y.client:
                break
            for name, difference in hooks:
                if difference.hook(x, y):
                    used.add(name)
            if x.sent != y.sent:
                break  # the transcripts part here; the diff shows it
        for e in a + b:
            if PIPELINE_SEPARATOR in e.sent:
                e.responses[:] = unordered(e.responses)
        stale = [n for n in script.deliberate if n not in used]
        if stale and transcript_lines(a) == transcript_lines(b):
            raise AssertionError(f"script {script.name!r}: {stale} never applied: remove "
                                 "them from the script (or the difference is gone)")
        return transcript_lines(a), transcript_lines(b)

    def run(self, script: Script) -> list[str]:
        """Play ``script``; raise AssertionError with a diff unless both transcripts agree.
        Returns our normalised transcript."""
        ours, theirs = self.transcripts(script)
        return self.compare(script, ours, theirs)

    def compare(self, script: Script, ours: list[Event], theirs: list[Event]) -> list[str]:
        """Raise AssertionError with a diff unless the two transcripts agree once normalised;
        return ours normalised."""
        a, b = self.normalised(script, ours, theirs)
        if a != b:
            diff = "\n".join(difflib.unified_diff(b, a, "dovecot", "ours", n=4, lineterm=""))
            raise AssertionError(f"script {script.name!r}: the servers differ\n{diff}")
        return a


CONFIG = """\
[store]
synchronous = NORMAL

[imap]
auth_failure_delay = 0.2
"""


@contextlib.contextmanager
def servers(base: Path, dovecot_config: str = "", *server_args: str):
    """A :class:`Differential` over one ``imapserver`` and one Dovecot, for a whole module;
    every script gets fresh accounts on both.  ``dovecot_config`` is added to Dovecot's
    configuration and ``server_args`` to imapserver's command line."""
    conf = base / "imapserver.conf"
    conf.write_text(CONFIG)
    data_dir = str(base / "store")
    make_users(data_dir, ("setup", PASSWORD))  # creates the store before the server opens it
    with ServerProcess(data_dir, *server_args, config=str(conf)) as ours, \
            Dovecot(base / "dovecot", like_ours=True, extra_config=dovecot_config) as dovecot:
        yield Differential(
            Target("ours", ours.port, lambda name, pw: make_users(data_dir, (name, pw))),
            Target("dovecot", dovecot.port, dovecot.add_user))


# The deliberate differences and known-defect masks register themselves in these tables.
import differential_known  # noqa: E402, F401
