"""BINARY (RFC 3516) over a real socket: FETCH BINARY[], BINARY.PEEK[], BINARY.SIZE[],
literal8 in responses and in APPEND, UNKNOWN-CTE.

RFC 3516 has no worked examples beyond its grammar, so each test is a transcript of what a
section requires, with the section cited; decoded octets are compared with Python's
``base64``/``quopri`` decoding of the same part.  The client here reads literals (``{n}``
and ``~{n}``) by their count only, so one octet out of place fails.
"""

from __future__ import annotations

import base64
import quopri
import random
import re

import pytest

from imapserver.imap.commands.fetch import STREAM_ABOVE
from tests.imapproc import Client, ServerProcess, make_users

MIB = 1024 * 1024
_LITERAL = re.compile(rb"(~?)\{(\d+)\}$")


class BinClient(Client):
    """Responses as lists of (line, [(literal8?, octets), ...])."""

    def read_exact(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed inside a literal")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def response(self) -> tuple[bytes, list[tuple[bool, bytes]]]:
        text = self.read_line()
        literals = []
        while (m := _LITERAL.search(text)) is not None:
            literals.append((m.group(1) == b"~", self.read_exact(int(m.group(2)))))
            text += b"<lit>" + self.read_line()
        return text, literals

    def run(self, tag: str, command: bytes) -> tuple[list, bytes]:
        self.send(tag.encode() + b" " + command + b"\r\n")
        untagged = []
        while True:
            text, literals = self.response()
            if text.startswith(tag.encode() + b" "):
                return untagged, text
            untagged.append((text, literals))

    def append(self, tag: str, message: bytes, literal8: bool = False) -> bytes:
        mark = b"~" if literal8 else b""
        self.send(tag.encode() + b" APPEND INBOX %s{%d}\r\n" % (mark, len(message)))
        assert self.read_line().startswith(b"+")
        self.send(message + b"\r\n")
        return self.until_tagged(tag)[-1]


def rnd_bytes(n: int, seed: int, nul: bool = True) -> bytes:
    data = random.Random(seed).randbytes(n)
    return data if nul else data.replace(b"\x00", b"\x01")


def b64_message(payload: bytes, subject: str = "b64") -> bytes:
    return (f"Subject: {subject}\r\nMIME-Version: 1.0\r\n"
            "Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n"
            ).encode() + base64.encodebytes(payload).replace(b"\n", b"\r\n")


QP_TEXT = "Caf\xe9 au lait, na\xefve =\r\nd\xe9j\xe0 vu\r\n".encode("latin-1") * 3 + b"\x00end"
MIXED = (b"Subject: mixed\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n"
         b"\r\n--b\r\nContent-Type: text/plain; charset=iso-8859-1\r\n"
         b"Content-Transfer-Encoding: quoted-printable\r\n\r\n"
         + quopri.encodestring(QP_TEXT).replace(b"\n", b"\r\n") +
         b"\r\n--b\r\nContent-Type: application/octet-stream\r\n"
         b"Content-Transfer-Encoding: Base64\r\n\r\n"
         + base64.encodebytes(rnd_bytes(3000, 7)).replace(b"\n", b"\r\n") +
         b"\r\n--b\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
         b"gr\xfc\xdfe\r\n--b\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: x-uuencode"
         b"\r\n\r\nbegin 644 x\r\n--b--\r\n")
UNKNOWN = (b"Subject: uu\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: x-uuencode\r\n"
           b"\r\nbegin 644 x\r\n")


def part_body(message: bytes, n: int) -> bytes:
    """The encoded body of part n of MIXED, as BODY[n] is (CRLF before a boundary excluded)."""
    chunks = message.split(b"\r\n--b")
    return chunks[n].split(b"\r\n\r\n", 1)[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = str(tmp_path_factory.mktemp("binary"))
    make_users(data, ("alice", "pw"))
    with ServerProcess(data) as proc:
        client = BinClient(proc.port)
        client.cmd("l", "LOGIN alice pw")
        for raw in (MIXED, UNKNOWN, b64_message(rnd_bytes(STREAM_ABOVE, 1), "exact"),
                    b64_message(rnd_bytes(STREAM_ABOVE + 1, 2), "over"),
                    b64_message(rnd_bytes(STREAM_ABOVE + 1, 3, nul=False), "no-nul")):
            assert b"OK" in client.append("a", raw)
        client.cmd("s", "SELECT INBOX")
        yield client, proc
        client.close()


def fetch(client, command: bytes) -> tuple[list, bytes]:
    untagged, tagged = client.run("f", b"FETCH " + command)
    return [u for u in untagged if b" FETCH " in u[0]], tagged


def test_capability_advertised(server):
    """RFC 3516 section 4.1: a server with the extension lists BINARY."""
    client, _ = server
    assert b" BINARY" in client.cmd("c", "CAPABILITY")[0]


def test_binary_decodes_parts_like_python(server):
    """RFC 3516 4.2: BINARY[n] is part n with its CTE undone: quoted-printable and base64
    decoded (compared with quopri/base64 of the same part), 8bit passed through; literal8
    exactly when the octets hold NUL; BINARY.SIZE is the decoded size."""
    client, _ = server
    responses, tagged = fetch(client, b"1 (BINARY.PEEK[1] BINARY.PEEK[2] BINARY.PEEK[3] "
                                      b"BINARY.SIZE[1] BINARY.SIZE[2] BINARY.SIZE[3])")
    assert tagged.startswith(b"f OK"), tagged
    (text, literals), = responses
    assert literals[0] == (True, quopri.decodestring(part_body(MIXED, 1)))
    assert literals[1] == (True, base64.b64decode(part_body(MIXED, 2)))
    assert literals[2] == (False, b"gr\xfc\xdfe")
    sizes = [int(n) for n in re.findall(rb"BINARY\.SIZE\[\d\] (\d+)", text)]
    assert sizes == [len(literals[0][1]), 3000, 5]
    assert b"BINARY[1] ~{" in text and b"BINARY[3] {5}" in text


def test_partial_applies_to_decoded_octets(server):
    """RFC 3516 4.2: <origin.length> counts decoded octets; the response names the origin."""
    client, _ = server
    decoded = base64.b64decode(part_body(MIXED, 2))
    responses, _ = fetch(client, b"1 (BINARY.PEEK[2]<1000.77> BINARY.PEEK[2]<2990.100> "
                                 b"BINARY.PEEK[2]<5000.1>)")
    (text, literals), = responses
    assert [data for _, data in literals] == [decoded[1000:1077], decoded[2990:], b""]
    assert b"BINARY[2]<1000> " in text and b"BINARY[2]<5000> {0}" in text


def test_whole_message_and_missing_part(server):
    """BINARY[] (section-binary may be empty, RFC 3516 section 8) of a multipart message:
    every encoded leaf decoded and relabelled binary, as Dovecot answers; a part that does not
    exist is the empty string, as for BODY[]."""
    client, _ = server
    responses, tagged = fetch(client, b"2 (BINARY.PEEK[7])")
    assert responses[0][1] == [(False, b"")]
    # Message 1 has an x-uuencode part: its whole is not decodable (UNKNOWN-CTE, below).
    _, tagged = fetch(client, b"1 BINARY.PEEK[]")
    assert b"[UNKNOWN-CTE]" in tagged
    responses, tagged = fetch(client, b"3 BINARY.PEEK[]")
    assert tagged.startswith(b"f OK")
    body = responses[0][1][0][1]
    assert body.startswith(b"Subject: exact\r\nMIME-Version: 1.0\r\n"
                           b"Content-Type: application/octet-stream\r\n"
                           b"Content-Transfer-Encoding: binary\r\n\r\n")
    assert body.endswith(rnd_bytes(STREAM_ABOVE, 1))


def test_unknown_cte(server):
    """RFC 3516 4.2: an encoding the server cannot decode fails with NO [UNKNOWN-CTE]; the
    other messages of the same FETCH are still answered."""
    client, _ = server
    responses, tagged = fetch(client, b"1:2 (BINARY.PEEK[4])")
    assert re.match(rb"f NO \[UNKNOWN-CTE\]", tagged), tagged
    assert [t for t, _ in responses] == [b"* 2 FETCH (BINARY[4] {0}<lit>)"]  # no such part
    responses, tagged = fetch(client, b"1:2 (BINARY.PEEK[1])")
    assert re.match(rb"f NO \[UNKNOWN-CTE\]", tagged), tagged
    assert [t[:17] for t, _ in responses] == [b"* 1 FETCH (BINARY"]
    responses, tagged = fetch(client, b"1:2 BINARY.SIZE[1]")
    assert re.match(rb"f NO \[UNKNOWN-CTE\]", tagged), tagged
    assert [t for t, _ in responses] == [b"* 1 FETCH (BINARY.SIZE[1] %d)" % len(
        quopri.decodestring(part_body(MIXED, 1)))]


@pytest.mark.parametrize("seq,seed,size,nul", [(3, 1, STREAM_ABOVE, True),
                                               (4, 2, STREAM_ABOVE + 1, True),
                                               (5, 3, STREAM_ABOVE + 1, False)])
def test_streaming_threshold(server, seq, seed, size, nul):
    """Both sides of the 1 MiB streaming threshold for a decoded part (1,048,576 octets held,
    1,048,577 counted then streamed): the same octets, count and literal form (RFC 3516 4.2:
    literal8 when the data holds NUL), partial included."""
    client, _ = server
    payload = rnd_bytes(size, seed, nul)
    assert (b"\x00" in payload) == nul
    responses, tagged = fetch(client, b"%d (BINARY.SIZE[1] BINARY.PEEK[1] BINARY.PEEK[1]<1.%d>)"
                              % (seq, size))
    assert tagged.startswith(b"f OK"), tagged
    (text, literals), = responses
    assert b"BINARY.SIZE[1] %d" % size in text
    assert literals[0] == (nul, payload)
    assert literals[1] == (b"\x00" in payload[1:], payload[1:])
    assert (b"BINARY[1] ~{%d}" % size in text) == nul


def test_seen(server):
    """RFC 3516 4.2: BINARY sets \\Seen as BODY[] does; BINARY.PEEK and BINARY.SIZE do not."""
    client, _ = server
    client.cmd("x", "STORE 5 -FLAGS (\\Seen)")
    responses, _ = fetch(client, b"5 (BINARY.SIZE[1] BINARY.PEEK[1]<0.10>)")
    assert b"\\Seen" not in responses[0][0]
    responses, _ = fetch(client, b"5 BINARY[1]<0.10>")
    assert b"FLAGS (\\Seen" in responses[0][0]


def test_append_literal8_with_nul_and_8bit(server):
    """RFC 3516 4.3: APPEND takes the message as a literal8 (binary content, NUL included);
    BINARY[] gives the octets back as they were sent, and BODY[] too, its NUL sent as 0x80
    (a literal cannot carry NUL, RFC 3501 section 9 CHAR8)."""
    client, _ = server
    raw = (b"Subject: bin\r\nContent-Type: application/octet-stream\r\n"
           b"Content-Transfer-Encoding: binary\r\n\r\nab\x00cd\xff\xfe\x80\r\n")
    assert re.match(rb"a OK \[APPENDUID \d+ \d+\]", client.append("a", raw, literal8=True))
    client.cmd("n", "NOOP")
    responses, tagged = fetch(client, b"6 (BINARY.PEEK[] BODY.PEEK[] BINARY.PEEK[1] "
                                      b"BINARY.SIZE[])")
    (text, literals), = responses
    assert literals == [(True, raw), (False, raw.replace(b"\x00", b"\x80")),
                        (True, b"ab\x00cd\xff\xfe\x80\r\n")]
    assert b"BINARY.SIZE[] %d" % len(raw) in text


@pytest.mark.parametrize("command", [b"SEARCH TEXT ~{1}", b'LIST "" ~{1}',
                                     b"APPEND ~{5}"])
def test_literal8_only_for_append_messages(server, command):
    """RFC 3516 4.3 and section 8 (RFC 4466 2.3): literal8 is the APPEND message's form
    only; anywhere else (a mailbox name included) the command is BAD."""
    client, _ = server
    client.send(b"z " + command + b"\r\n")
    assert client.read_line().startswith(b"+")
    client.send(b"INBOX\r\n"[:int(command[-2:-1])] + b"\r\n")
    line = client.read_line()
    assert re.match(rb"z BAD .*literal8", line), line


@pytest.mark.parametrize("item", [b"BINARY[1.MIME]", b"BINARY[HEADER]", b"BINARY[TEXT]",
                                  b"BINARY.SIZE[1]<0.2>", b"BINARY[0]"])
def test_bad_binary_sections(server, item):
    """RFC 3516 section 8: section-binary is a part number only; BINARY.SIZE has no partial."""
    client, _ = server
    _, tagged = client.run("b", b"FETCH 1 " + item)
    assert tagged.startswith(b"b BAD"), tagged
