"""Random messages and needles for the text index's differential tests (RFC 3501 6.4.4).

Messages mix what the scan decodes: RFC 2047 encoded words (B and Q, UTF-8 and ISO-8859-1,
adjacent words, folded), address fields with display names and comments, folded header
lines, base64 and quoted-printable parts in several charsets, multipart/alternative, an
attachment BODY must not search, an attached message/rfc822, and non-ASCII text whose case
folding is not one-to-one (``ß``/``SS``, ``İ``, ``ﬁ``, Greek final sigma).
"""

from __future__ import annotations

import base64
import quopri
import random

WORDS = ["lunch", "friday", "report", "quarterly", "Straße", "STRASSE", "naïve", "café",
         "Ωmega", "İstanbul", "ﬁnance", "ὈΔΥΣΣΕΎΣ", "σοφός", "日本語", "données", "Zürich",
         "meeting", "budget", "x-ray", "a", "of", "to", "né", "€uro", "😀ok", "PDF",
         "tab\tbed", "ünïcödé", "Fußball", "MASSE", "Maße"]


SIMPLE_WORDS = [w for w in WORDS if w.casefold() == w.lower() and not any(
    c in w for c in "İΩΣσς日😀€\t")]
"""Words whose case folding Dovecot 2.3 (i;unicode-casemap) and Python's casefold agree on:
the Dovecot differential uses these (docs/search.md lists where the two differ)."""

_words = WORDS


def phrase(rng: random.Random, low: int = 1, high: int = 6) -> str:
    return " ".join(rng.choice(_words) for _ in range(rng.randint(low, high)))


def encoded_words(rng: random.Random, text: str) -> str:
    """``text`` as one or two RFC 2047 encoded words, or as written (8-bit UTF-8)."""
    how = rng.randrange(4)
    if how == 0:
        return text
    charset = "utf-8"
    if how == 3 and _words is not SIMPLE_WORDS:
        try:
            raw = text.encode("iso-8859-1")
            charset = "iso-8859-1"
        except UnicodeEncodeError:
            raw = text.encode("utf-8")
    else:
        raw = text.encode("utf-8")
    cut = rng.randint(0, len(raw))
    if charset == "utf-8" or _words is SIMPLE_WORDS:
        cut = len(raw)  # a UTF-8 word may not split a character
    words = []
    for piece in (raw[:cut], raw[cut:]):
        if not piece:
            continue
        if how == 1:
            words.append(f"=?{charset}?B?{base64.b64encode(piece).decode()}?=")
        else:
            q = quopri.encodestring(piece, header=True).decode().replace("=\n", "")
            q = q.replace("?", "=3F")
            words.append(f"=?{charset}?Q?{q}?=")
    return rng.choice([" ", "\r\n "]).join(words)


def _fold(rng: random.Random, value: str) -> str:
    """Fold a header value at some spaces (RFC 5322 2.2.3)."""
    out = []
    for word in value.split(" "):
        out.append(word)
        out.append("\r\n " if rng.random() < 0.2 else " ")
    return "".join(out[:-1])


def _address(rng: random.Random) -> str:
    local = rng.choice(["alice", "bob", "carol", "dave", "eve", "frank"]) + str(rng.randrange(9))
    host = rng.choice(["example.com", "example.org"] if _words is SIMPLE_WORDS
                      else ["example.com", "example.org", "exämple.net"])
    kind = rng.randrange(4)
    if kind == 0:
        return f"{local}@{host}"
    name = phrase(rng, 1, 3)
    if kind == 1:
        return f"{encoded_words(rng, name)} <{local}@{host}>"
    if kind == 2:
        return f'"{name}" <{local}@{host}>'
    return f"{local}@{host} ({name})"


def _part_body(rng: random.Random, text: str) -> tuple[str, bytes]:
    """A text part's headers (type, charset, encoding) and its encoded body."""
    charset = rng.choice(["utf-8", "iso-8859-1", None, "us-ascii"])
    try:
        raw = text.encode(charset or "utf-8")
    except UnicodeEncodeError:
        charset, raw = "utf-8", text.encode("utf-8")
    enc = rng.choice(["7bit", "8bit", "base64", "quoted-printable"])
    if enc == "base64":
        body = base64.encodebytes(raw).replace(b"\n", b"\r\n")
    elif enc == "quoted-printable":
        body = quopri.encodestring(raw).replace(b"\n", b"\r\n")
    else:
        body = raw.replace(b"\n", b"\r\n")
    ctype = f"text/{rng.choice(['plain', 'html'])}" + (f"; charset={charset}" if charset else "")
    return f"Content-Type: {ctype}\r\nContent-Transfer-Encoding: {enc}\r\n", body


def _body_text(rng: random.Random) -> str:
    return "\n".join(phrase(rng, 2, 12) for _ in range(rng.randint(1, 8)))


def message(rng: random.Random, n: int, simple: bool = False) -> bytes:
    """A random message; ``simple``: only :data:`SIMPLE_WORDS`, no encoded word split in
    two (what the Dovecot differential compares)."""
    global _words
    _words = SIMPLE_WORDS if simple else WORDS
    try:
        return _message(rng, n)
    finally:
        _words = WORDS


def _message(rng: random.Random, n: int) -> bytes:
    subject = _fold(rng, encoded_words(rng, phrase(rng)))
    head = [f"From: {_address(rng)}", f"To: {', '.join(_address(rng) for _ in range(2))}",
            f"Subject: {subject}", f"Message-ID: <t{n}@test>",
            "Date: Sat, 21 Nov 2026 12:00:00 +0000", f"X-Note: {_fold(rng, phrase(rng))}"]
    if rng.random() < 0.5:
        head.append(f"Cc: {_address(rng)}")
    if rng.random() < 0.3:
        head.append(f"Bcc: {_address(rng)}")
    head.append("MIME-Version: 1.0")
    shape = rng.randrange(4)
    if shape == 0:
        part_head, body = _part_body(rng, _body_text(rng))
        head.append(part_head.rstrip("\r\n"))
        raw_head = "\r\n".join(head) + "\r\n\r\n"
        return raw_head.encode("utf-8") + body
    boundary = f"b{n}x"
    parts = []
    for _ in range(rng.randint(1, 3)):
        part_head, body = _part_body(rng, _body_text(rng))
        parts.append(part_head.encode() + b"\r\n" + body)
    if shape >= 2:  # an attachment: neither BODY nor TEXT look inside it
        secret = base64.encodebytes(phrase(rng).encode()).replace(b"\n", b"\r\n")
        parts.append(b"Content-Type: application/octet-stream; name=\"f.bin\"\r\n"
                     b"Content-Transfer-Encoding: base64\r\n\r\n" + secret)
    if shape == 3:  # an attached message: its header is TEXT's, its body BODY's
        inner_head, inner_body = _part_body(rng, _body_text(rng))
        inner = (f"Subject: {encoded_words(rng, phrase(rng))}\r\nFrom: {_address(rng)}\r\n"
                 + inner_head + "\r\n").encode() + inner_body
        parts.append(b"Content-Type: message/rfc822\r\n\r\n" + inner)
    head.append(f'Content-Type: multipart/{rng.choice(["mixed", "alternative"])}; '
                f'boundary="{boundary}"')
    out = ("\r\n".join(head) + "\r\n\r\npreamble " + phrase(rng) + "\r\n").encode("utf-8")
    for part in parts:
        out += f"--{boundary}\r\n".encode() + part + b"\r\n"
    return out + f"--{boundary}--\r\nepilogue {phrase(rng)}\r\n".encode()


def needle(rng: random.Random, texts: list[str]) -> str:
    """A string to search for: mostly a slice of some message's decoded text (1 to 14 code
    points, sometimes across a line break or fold), case changed at random; else a word or
    a random non-ASCII string."""
    kind = rng.random()
    if kind < 0.7 and texts:
        text = rng.choice(texts)
        if text:
            length = rng.choice([1, 2, 3, 3, 4, 5, 7, 10, 14])
            start = rng.randrange(max(1, len(text) - length + 1))
            got = text[start:start + length]
            got = got.replace("\x00", "").replace("\uffff", "\n")
            if got:
                return _recase(rng, got)
    if kind < 0.9:
        return _recase(rng, rng.choice(WORDS))
    return "".join(rng.choice("ßẞİıﬁσςΣé€😀ab ") for _ in range(rng.randint(1, 5)))


def _recase(rng: random.Random, text: str) -> str:
    how = rng.randrange(3)
    return text if how == 0 else text.upper() if how == 1 else text.swapcase()
