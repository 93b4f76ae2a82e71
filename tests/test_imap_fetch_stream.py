"""FETCH of large sections, byte for byte, over plain TCP, STARTTLS and implicit TLS.

A section over ``STREAM_ABOVE`` (1 MiB) octets is streamed chunk by chunk instead of being
built in memory (``imapserver/imap/commands/fetch.py``).  The responses must be the same as for
a small section: ``NAME {n}`` CRLF, then exactly n octets (RFC 3501 4.3 literal, RFC 9051 4.3),
then the next item after one SP, or ``)`` (RFC 3501 7.4.2 msg-att, RFC 9051 7.5.2).  The client
here parses literals by their count only, so one octet out of place fails.

Both sides of every size threshold on the way are covered: the streaming threshold itself
(1,048,576 and 1,048,577 octets, and a multi-MB message), the store's content chunk size
(262,144, the configured default), ``STREAM_HOP`` (the octets a streamed literal reads per
thread-pool round trip, with the next read in flight while they drain: 1 MiB, so 2 MiB - 1,
2 MiB and 2 MiB + 1 end inside, at and just past a hop), the ``CONTENT_BATCH`` of 16
messages per batch, and the MOB threshold of the content table (100 KiB: a chunk over it is
kept in a file by the embedded store, decision 0028), for a one-chunk message and for the last
chunk of a longer one (the rest of which is in the file).
"""

from __future__ import annotations

import re
import socket
import ssl

import pytest

from imapserver.imap.commands.fetch import CONTENT_BATCH, STREAM_ABOVE, STREAM_HOP
from imapserver.imap.protocol import SPOOL_ABOVE
from mailstore.content import DEFAULT_CHUNK
from mailstore.schema import Layout
from tests.imapproc import Client, ServerProcess, make_users
from tests.tlscert import make_cert

MIB = 1024 * 1024
TRANSPORTS = ["plain", "starttls", "imaps"]
MOB = Layout().mob_threshold


def filler(n: int, seed: int) -> bytes:
    """n octets of CRLF-terminated lines that differ from line to line (and from one message to
    the next), so that data moved by even one octet cannot compare equal."""
    lines = []
    total = 0
    k = 0
    while total < n:
        line = b"%d/%07d " % (seed, k) + b"abcdefghijklmnopqrstuvwxyz0123456789" * 2 + b"\r\n"
        lines.append(line)
        total += len(line)
        k += 1
    return b"".join(lines)[:n]


def header(n: int, extra: bytes = b"") -> bytes:
    return (b"From: t@x\r\nTo: u@x\r\nSubject: stream %d\r\nMessage-ID: <s%d@test>\r\n"
            b"Date: Sat, 21 Nov 2026 12:00:00 +0000\r\nMIME-Version: 1.0\r\n" % (n, n)
            + extra)


def of_size(n: int, total: int) -> bytes:
    """A text/plain message of exactly ``total`` octets."""
    head = header(n, b"Content-Type: text/plain; charset=us-ascii\r\n\r\n")
    return head + filler(total - len(head), n)


def with_text(n: int, text_size: int) -> tuple[bytes, bytes]:
    """A message whose TEXT (the body after the blank line) is exactly ``text_size`` octets."""
    head = header(n, b"Content-Type: text/plain; charset=us-ascii\r\n\r\n")
    text = filler(text_size, n)
    return head + text, text


def multipart(n: int, first: int, second: int) -> tuple[bytes, bytes, bytes]:
    """multipart/mixed with two parts whose bodies (BODY[1], BODY[2]) have exactly these sizes."""
    one, two = filler(first, n), filler(second, n + 1000)
    msg = (header(n, b'Content-Type: multipart/mixed; boundary="=-=b=-="\r\n\r\n')
           + b"--=-=b=-=\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n" + one
           + b"\r\n--=-=b=-=\r\nContent-Type: application/octet-stream\r\n\r\n" + two
           + b"\r\n--=-=b=-=--\r\n")
    return msg, one, two


# Messages, in mailbox order (UID k+1 is MESSAGES[k]).
SIZES_AROUND = [64 * 1024 - 1, 64 * 1024, 64 * 1024 + 1, DEFAULT_CHUNK - 1, DEFAULT_CHUNK,
                DEFAULT_CHUNK + 1, 2 * DEFAULT_CHUNK, 2 * DEFAULT_CHUNK + 1, MIB - 1,
                2 * STREAM_HOP - 1, 2 * STREAM_HOP, 2 * STREAM_HOP + 1, 300, 5000,
                MOB - 1, MOB, MOB + 1, DEFAULT_CHUNK + MOB, DEFAULT_CHUNK + MOB + 1]


def build_messages() -> dict[str, bytes]:
    msgs: dict[str, bytes] = {}
    msgs["at"] = of_size(1, STREAM_ABOVE)                 # 1,048,576: not streamed
    msgs["over"] = of_size(2, STREAM_ABOVE + 1)           # 1,048,577: streamed
    msgs["big"] = of_size(3, 3 * MIB + 7)                 # several MB, several store chunks
    msgs["text_at"], msgs["text_at.TEXT"] = with_text(4, STREAM_ABOVE)
    msgs["text_over"], msgs["text_over.TEXT"] = with_text(5, STREAM_ABOVE + 1)
    msgs["mixed"], msgs["mixed.1"], msgs["mixed.2"] = multipart(6, STREAM_ABOVE + 1,
                                                                STREAM_ABOVE)
    for k, size in enumerate(SIZES_AROUND):
        msgs[f"small{k}"] = of_size(10 + k, size)
    return msgs


MESSAGES = build_messages()
NAMES = [name for name in MESSAGES if "." not in name]
UID = {name: k + 1 for k, name in enumerate(NAMES)}


def test_the_thresholds_are_what_this_file_assumes():
    assert STREAM_ABOVE == MIB
    assert STREAM_HOP == MIB and DEFAULT_CHUNK == 256 * 1024  # a hop is four store chunks
    assert len(NAMES) > CONTENT_BATCH  # FETCH 1:* below spans two content batches
    assert MOB == 100 * 1024  # a chunk over it goes to a file (embedded store, decision 0028)
    assert len(MESSAGES["at"]) == MIB and len(MESSAGES["over"]) == MIB + 1
    assert len(MESSAGES["text_over.TEXT"]) == MIB + 1 and len(MESSAGES["mixed.1"]) == MIB + 1


# -- a client that parses literals by their count -------------------------------------------------

class Wire:
    """Reads IMAP responses exactly: a literal is its announced count of octets, nothing else."""

    def __init__(self, sock: socket.socket, buffered: bytes = b""):
        self.sock = sock
        self.buf = bytearray(buffered)
        self.pos = 0

    def _fill(self, n: int) -> None:
        while len(self.buf) - self.pos < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"closed; unread: {bytes(self.buf[self.pos:][:200])!r}")
            if self.pos > (4 << 20):
                del self.buf[:self.pos]
                self.pos = 0
            self.buf += chunk

    def peek(self) -> int:
        self._fill(1)
        return self.buf[self.pos]

    def take(self, n: int) -> bytes:
        self._fill(n)
        data = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return data

    def expect(self, data: bytes) -> None:
        got = self.take(len(data))
        assert got == data, f"expected {data!r}, got {got!r} followed by " \
                            f"{bytes(self.buf[self.pos:self.pos + 60])!r}"

    def line(self) -> bytes:
        while True:
            end = self.buf.find(b"\r\n", self.pos)
            if end >= 0:
                data = bytes(self.buf[self.pos:end])
                self.pos = end + 2
                return data
            self._fill(len(self.buf) - self.pos + 1)

    def word(self, stops: bytes = b" )\r") -> bytes:
        out = bytearray()
        depth = 0
        while True:
            c = self.peek()
            if depth == 0 and c in stops:
                return bytes(out)
            depth += c == ord("[")
            depth -= c == ord("]")
            out.append(c)
            self.pos += 1

    def value(self):
        c = self.peek()
        if c == ord("{"):
            head = self.word(b"}")
            self.expect(b"}\r\n")
            return self.take(int(head[1:]))
        if c == ord("("):
            self.take(1)
            items = []
            while self.peek() != ord(")"):
                if items:
                    self.expect(b" ")
                items.append(self.value())
            self.take(1)
            return items
        if c == ord('"'):
            self.take(1)
            out = bytearray()
            while (c := self.take(1)) != b'"':
                out += self.take(1) if c == b"\\" else c
            return bytes(out)
        return self.word()

    def response(self):
        """("FETCH", seq, [(name, value), ...]) or ("line", text) for anything else."""
        if self.peek() != ord("*"):
            return "line", self.line()
        self.expect(b"* ")
        first = self.word(b" \r")
        if not first.isdigit() or self.take(1) != b" ":
            return "line", b"* " + first + self.line()
        kind = self.word(b" \r")
        if kind != b"FETCH":
            return "line", b"* " + first + b" " + kind + self.line()
        self.expect(b" (")
        items = []
        while True:
            name = self.word(b" ")
            self.expect(b" ")
            items.append((name.decode(), self.value()))
            sep = self.take(1)
            if sep == b")":
                self.expect(b"\r\n")
                return "FETCH", int(first), items
            assert sep == b" ", f"after {name!r}: {sep!r}"

    def command(self, tag: str, text: str) -> tuple[list, bytes]:
        """Send a command; (FETCH responses, the tagged line)."""
        self.sock.sendall(f"{tag} {text}\r\n".encode())
        fetches = []
        while True:
            kind, *rest = self.response()
            if kind == "FETCH":
                fetches.append((rest[0], rest[1]))
            elif rest[0].startswith(tag.encode() + b" "):
                return fetches, rest[0]


# -- the server ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_cert(str(tmp_path_factory.mktemp("cert")))


@pytest.fixture(scope="module")
def server(tmp_path_factory, certs):
    base = tmp_path_factory.mktemp("stream")
    conf = base / "imapserver.conf"
    conf.write_text(f"[store]\nsynchronous = NORMAL\n[imap]\ntls_cert = {certs[0]}\n"
                    f"tls_key = {certs[1]}\n")
    data_dir = str(base / "store")
    make_users(data_dir, ("sam", "streams"))
    with ServerProcess(data_dir, "--imaps-port", "auto", config=str(conf)) as proc:
        c = Client(proc.port)
        assert c.cmd("l", "LOGIN sam streams")[-1].startswith(b"l OK")
        for name in NAMES:
            data = MESSAGES[name]
            c.send(b"a APPEND INBOX {%d+}\r\n" % len(data))
            c.send(data + b"\r\n")
            last = c.until_tagged("a")[-1]
            assert re.match(rb"a OK \[APPENDUID \d+ %d\]" % UID[name], last), last
        c.cmd("o", "LOGOUT")
        c.close()
        yield proc


def connect(server, certs, transport: str) -> Wire:
    """A logged-in session with INBOX selected, over ``transport``."""
    context = ssl.create_default_context(cafile=certs[0])
    port = server.ports["imaps" if transport == "imaps" else "imap"]
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    if transport == "imaps":
        sock = context.wrap_socket(sock, server_hostname="localhost")
    wire = Wire(sock)
    assert wire.line().startswith(b"* OK")
    if transport == "starttls":
        assert wire.command("t", "STARTTLS")[1] == b"t OK Begin TLS negotiation now"
        assert wire.pos == len(wire.buf)
        wire.sock = context.wrap_socket(sock, server_hostname="localhost")
    assert wire.command("l", "LOGIN sam streams")[1].startswith(b"l OK")
    assert wire.command("s", "SELECT INBOX")[1].startswith(b"s OK")
    return wire


@pytest.fixture(params=TRANSPORTS)
def wire(request, server, certs):
    w = connect(server, certs, request.param)
    yield w
    w.sock.close()


def same(got, expected: bytes) -> bool:
    """Exact equality; on a difference, an error naming the first differing offset (not a
    dump of megabytes)."""
    if got == expected:
        return True
    assert isinstance(got, bytes), got
    at = next((k for k, (a, b) in enumerate(zip(got, expected, strict=False))
               if a != b),
              min(len(got), len(expected)))
    raise AssertionError(f"{len(got)} octets, expected {len(expected)}; first difference at "
                         f"{at}: {got[max(0, at - 20):at + 20]!r} vs "
                         f"{expected[max(0, at - 20):at + 20]!r}")


def as_int(value) -> int:
    assert isinstance(value, bytes) and value.isdigit(), value
    return int(value)


# -- tests ---------------------------------------------------------------------------------------

# (message, FETCH item, the item's name in the response, the expected octets)
SECTIONS = [
    ("at", "BODY.PEEK[]", "BODY[]", MESSAGES["at"]),
    ("over", "BODY.PEEK[]", "BODY[]", MESSAGES["over"]),
    ("big", "BODY.PEEK[]", "BODY[]", MESSAGES["big"]),
    ("over", "RFC822", "RFC822", MESSAGES["over"]),
    ("big", "RFC822", "RFC822", MESSAGES["big"]),
    ("text_at", "BODY.PEEK[TEXT]", "BODY[TEXT]", MESSAGES["text_at.TEXT"]),
    ("text_over", "BODY.PEEK[TEXT]", "BODY[TEXT]", MESSAGES["text_over.TEXT"]),
    ("mixed", "BODY.PEEK[1]", "BODY[1]", MESSAGES["mixed.1"]),
    ("mixed", "BODY.PEEK[2]", "BODY[2]", MESSAGES["mixed.2"]),
    ("big", "BODY.PEEK[]<0.1048576>", "BODY[]<0>", MESSAGES["big"][:MIB]),
    ("big", "BODY.PEEK[]<0.1048577>", "BODY[]<0>", MESSAGES["big"][:MIB + 1]),
    ("big", "BODY.PEEK[]<7.2097152>", "BODY[]<7>", MESSAGES["big"][7:7 + 2 * MIB]),
    ("big", "BODY.PEEK[]<1048575.9999999>", "BODY[]<1048575>", MESSAGES["big"][MIB - 1:]),
] + [(f"small{k}", "BODY.PEEK[]", "BODY[]", MESSAGES[f"small{k}"])
     for k in range(len(SIZES_AROUND))]


@pytest.mark.parametrize("name,item,answer,expected", SECTIONS,
                         ids=[f"{n}-{i}" for n, i, _, _ in SECTIONS])
def test_section_with_items_before_and_after_is_exact(wire, name, item, answer, expected):
    """RFC 3501 6.4.5 / 7.4.2 (RFC 9051 6.4.5 / 7.5.2): ``(UID RFC822.SIZE <section> FLAGS)``
    answers the four items in order, one SP apart, the section as a literal of exactly its
    octets (RFC 3501 4.3: the n octets follow the CRLF of ``{n}``) -- on both sides of the
    1 MiB streaming threshold, for whole messages, RFC822, TEXT, a MIME part and partials."""
    uid = UID[name]
    fetches, tagged = wire.command("f", f"UID FETCH {uid} (UID RFC822.SIZE {item} FLAGS)")
    assert tagged == b"f OK UID completed"
    assert len(fetches) == 1
    seq, items = fetches[0]
    assert seq == uid
    assert [n for n, _ in items] == ["UID", "RFC822.SIZE", answer, "FLAGS"]
    assert as_int(items[0][1]) == uid
    assert as_int(items[1][1]) == len(MESSAGES[name])
    got = items[2][1]
    assert len(got) == len(expected)
    assert same(got, expected)
    assert isinstance(items[3][1], list)


@pytest.mark.parametrize("name", ["over", "big", "at"])
def test_body_without_peek_then_the_flags_it_set(wire, name):
    """RFC 3501 6.4.5: BODY[] sets \\Seen, and the FLAGS the server adds (7.4.2) follow the
    streamed literal after exactly one SP."""
    fetches, tagged = wire.command("f", f"UID FETCH {UID[name]} (BODY[])")
    assert tagged == b"f OK UID completed"
    (_seq, items), = fetches
    names = [n for n, _ in items]
    assert names[:2] == ["UID", "BODY[]"]
    assert same(items[1][1], MESSAGES[name])
    if len(items) > 2:  # FLAGS only when \Seen was not set yet (another transport's run)
        assert names[2:] == ["FLAGS"] and b"\\Seen" in items[2][1]


def test_several_streamed_literals_in_one_response(wire):
    """RFC 3501 7.4.2: several sections of one message in one response, streamed (over 1 MiB)
    and not, each literal exact and the items one SP apart."""
    uid = UID["mixed"]
    fetches, tagged = wire.command(
        "f", f"UID FETCH {uid} (BODY.PEEK[1] UID BODY.PEEK[2] BODY.PEEK[] RFC822.SIZE "
             f"BODY.PEEK[1]<1.1048576>)")
    assert tagged == b"f OK UID completed"
    (_seq, items), = fetches
    assert [n for n, _ in items] == ["BODY[1]", "UID", "BODY[2]", "BODY[]", "RFC822.SIZE",
                                     "BODY[1]<1>"]
    assert same(items[0][1], MESSAGES["mixed.1"])
    assert as_int(items[1][1]) == uid
    assert same(items[2][1], MESSAGES["mixed.2"])
    assert same(items[3][1], MESSAGES["mixed"])
    assert as_int(items[4][1]) == len(MESSAGES["mixed"])
    assert same(items[5][1], MESSAGES["mixed.1"][1:])


def test_one_fetch_of_every_message_mixing_streamed_and_not(wire):
    """RFC 3501 6.4.5 / 7.4.2: ``FETCH 1:*`` over messages below and above 1 MiB (and more than
    one content batch of them) answers each message once, in order, each body exact."""
    fetches, tagged = wire.command("f", "FETCH 1:* (UID BODY.PEEK[] RFC822.SIZE)")
    assert tagged == b"f OK FETCH completed"
    assert [seq for seq, _ in fetches] == list(range(1, len(NAMES) + 1))
    for (_seq, items), name in zip(fetches, NAMES, strict=True):
        assert [n for n, _ in items] == ["UID", "BODY[]", "RFC822.SIZE"], name
        assert as_int(items[0][1]) == UID[name]
        assert same(items[1][1], MESSAGES[name]), name
        assert as_int(items[2][1]) == len(MESSAGES[name])
    # The session is still in step: a command after the stream gets its own answer.
    assert wire.command("n", "NOOP")[1] == b"n OK NOOP completed"


@pytest.mark.parametrize("sync", [False, True], ids=["literal+", "synchronizing"])
@pytest.mark.parametrize("size", [SPOOL_ABOVE, SPOOL_ABOVE + 1, 5 * SPOOL_ABOVE + 3],
                         ids=["at-spool", "over-spool", "several-hand-offs"])
def test_append_at_and_over_the_spool_threshold_then_fetch_is_exact(wire, size, sync):
    """RFC 3501 6.3.11 APPEND and 4.3 literals: the octets of a literal go from the socket
    straight to its sink (not through the line buffer), and one over ``SPOOL_ABOVE`` octets is
    read 1 MiB at a time and stored as it arrives, 1 MiB per store call, reading paused while
    2 MiB wait (imapserver/imap/literal_stream.py, issue 14).  The command the client
    pipelined behind it in the same write is still parsed, and the message FETCHes back
    byte for byte (through the MOB file of the embedded store)."""
    box = f"lit{size}{'s' if sync else 'p'}"
    assert wire.command("c", f"CREATE {box}")[1].startswith(b"c OK")
    msg = of_size(90 + sync, size)
    if sync:
        wire.sock.sendall(b"a APPEND %s {%d}\r\n" % (box.encode(), size))
        assert wire.line().startswith(b"+ ")
        wire.sock.sendall(msg + b"\r\nn NOOP\r\n")
    else:
        wire.sock.sendall(b"a APPEND %s {%d+}\r\n" % (box.encode(), size) + msg
                          + b"\r\nn NOOP\r\n")
    for tag in ("a", "n"):
        while not (line := wire.response()[-1]).startswith(tag.encode() + b" "):
            pass
        assert line.startswith(tag.encode() + b" OK"), line
    assert wire.command("s", f"SELECT {box}")[1].startswith(b"s OK")
    fetches, tagged = wire.command("f", "FETCH 1 BODY.PEEK[]")
    assert tagged == b"f OK FETCH completed"
    (_seq, [(name, body)]), = fetches
    assert name == "BODY[]" and same(body, msg)
    assert wire.command("d", f"DELETE {box}")[1].startswith(b"d OK")
    assert wire.command("s", "SELECT INBOX")[1].startswith(b"s OK")
