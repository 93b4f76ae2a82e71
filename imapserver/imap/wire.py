"""IMAP wire format: splitting a command into tokens, and writing strings back.

Grammar (RFC 3501 section 9, RFC 7888 for LITERAL+, RFC 3516 for literal8)::

    command    = tag SP command-name *(SP argument) CRLF
    argument   = atom / quoted / literal / "(" [argument *(SP argument)] ")"
    quoted     = DQUOTE *(QUOTED-CHAR / "\\" quoted-specials) DQUOTE
    literal    = "{" number ["+"] "}" CRLF *OCTET      ; literal8: "~{" number ["+"] "}"

A command arrives as *segments*: the text of each line and the literals between them (the
receiver in protocol.py collects them, honouring literals anywhere, not only where a mailbox
name or a message is expected).  :func:`tokenize` turns segments into Python values:

* ``Atom`` (a ``str`` subclass) for atoms, including FETCH items such as
  ``BODY.PEEK[HEADER.FIELDS (FROM TO)]<0.100>`` -- after a fetch-att name (``BODY``,
  ``BODY.PEEK``, ``BINARY``...) the section in brackets and the partial suffix belong to the
  atom, spaces and parentheses inside brackets included.  Anywhere else ``[`` and ``]`` are
  ordinary characters: RFC 3501's atom-specials do not include ``[``, and ``]`` (a
  resp-special) is an ASTRING-CHAR, so ``SELECT a[b`` and ``CREATE ]x`` name mailboxes;
* ``bytes`` for quoted strings (escapes resolved), ``Literal`` (a ``bytes`` subclass) for
  literals;
* a file object for a literal the receiver spooled to disk (large APPEND messages);
* ``list`` for a parenthesised list.
"""

from __future__ import annotations

import re


class ParseError(ValueError):
    """A malformed command; the message says what was wrong (sent in a tagged BAD)."""


class Literal(bytes):
    """A literal's value (as opposed to a quoted string): APPEND tells its message by this."""

    __slots__ = ()


class Atom(str):
    """An atom as sent (case preserved).  Compare with ``.upper()`` for keywords."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Atom({str(self)!r})"


_ATOM_SPECIALS = set(b'(){ %*"\\]') | set(range(0, 32)) | {127}
_QUOTABLE = re.compile(rb'^[^\r\n\x00"\\]*$')


def tokenize(segments: list) -> list:
    """Tokens of a whole command (tag and name included), from its line and literal segments.

    ``segments`` alternates line text (bytes, without the literal announcement's CRLF) and
    literal values (bytes or file objects), starting and ending with line text.  Raises
    ParseError for malformed input.
    """
    stack: list[list] = [[]]
    folded = _fold_section_literals(segments)
    for index, segment in enumerate(folded):
        if index % 2 == 1:  # a literal
            if folded[index - 1].endswith(b"}") and _LITERAL8.search(folded[index - 1]) \
                    and not _message_literal(stack):
                raise ParseError("literal8 not allowed here")
            stack[-1].append(Literal(segment) if isinstance(segment, bytes) else segment)
            continue
        _scan_line(segment, stack, literal_follows=index + 1 < len(segments))
    if len(stack) != 1:
        raise ParseError("unbalanced parentheses")
    return stack[0]


_ANNOUNCEMENT = re.compile(rb"~?\{[0-9]+\+?\}\Z")
_LITERAL8 = re.compile(rb"~\{[0-9]+\+?\}\Z")


def _message_literal(stack: list[list]) -> bool:
    """Whether a literal arriving now may be a literal8: an APPEND message (RFC 3516 4.3, and
    RFC 4466's append-data; the mailbox name, the first argument, may not be one), a CATENATE
    TEXT part (RFC 4469 5: message data too, taken as a literal8 as Dovecot's does), the
    message inside ``UTF8 (...)`` (RFC 6855 4), which REPLACE takes too (RFC 8508 5:
    append-message), or a SETMETADATA value (RFC 5464 5: ``value = nstring / literal8``, the
    second of each entry and value pair in the list; never the entry name)."""
    top = stack[0]
    command = top[1].upper() if len(top) >= 2 and isinstance(top[1], str) else ""
    if command == "SETMETADATA":
        return len(stack) == 2 and len(top) == 4 and len(stack[1]) % 2 == 1
    if len(stack) == 2 and len(top) >= 4 and isinstance(top[-2], str) \
            and top[-2].upper() == "UTF8" and top[-1] is stack[1] and not stack[1]:
        # RFC 6855 4: append-data =/ "UTF8" SP "(" literal8 ")" (APPEND and REPLACE)
        verb = [str(t).upper() for t in top[1:3] if isinstance(t, str)]
        return verb[:1] in (["APPEND"], ["REPLACE"]) or verb == ["UID", "REPLACE"]
    if not (len(top) >= 3 and command == "APPEND"):
        return False
    if len(stack) == 1:
        return True
    inner = stack[-1]
    return (len(stack) == 2 and top[-1] is inner and isinstance(top[-2], Atom)
            and top[-2].upper() == "CATENATE" and bool(inner) and isinstance(inner[-1], Atom)
            and inner[-1].upper() == "TEXT")


def _fold_section_literals(segments: list) -> list:
    """``segments`` with each literal that stands inside a section's brackets written into its
    line as a quoted string.

    RFC 3501 section 9: ``header-fld-name = astring``, so ``BODY[HEADER.FIELDS ({7}`` CRLF
    ``Subject)]`` names the field Subject.  A section is one atom here (see the module
    docstring), so its literal joins the line, quoted as Dovecot echoes it
    (``BODY[HEADER.FIELDS ("SUBJECT")]``).  A field name cannot hold CR, LF, NUL or 8-bit
    octets (RFC 5322 2.2: printable US-ASCII), so such a literal is a ParseError.
    """
    out = [segments[0]] if segments else []
    for index in range(1, len(segments), 2):
        literal, after = segments[index], segments[index + 1]
        head = _ANNOUNCEMENT.sub(b"", out[-1])
        if isinstance(literal, bytes) and _unclosed_section(head):
            if not re.fullmatch(rb"[\x21-\x7e]*", literal):
                raise ParseError("a header field name holds only printable US-ASCII")
            quoted = b'"' + literal.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'
            out[-1] = head + quoted + after
        else:
            out += [literal, after]
    return out


_HEADER_LIST = re.compile(rb"(?:[0-9]+\.)*HEADER\.FIELDS(?:\.NOT)? \(", re.IGNORECASE)


def _unclosed_section(line: bytes) -> bool:
    """Whether ``line`` ends inside the header list of a section (``BODY[HEADER.FIELDS (``);
    ``APPEND body[x {5}`` names a mailbox and its literal is a message."""
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == 0x22:
            try:
                _, i = _quoted(line, i)
            except ParseError:
                return False
        elif c in (0x20, 0x28, 0x29):
            i += 1
        else:
            start = i
            while i < n and line[i] not in (0x20, 0x28, 0x29, 0x22, 0x5B):
                i += 1
            if i < n and line[i] == 0x5B:
                if line[start:i].upper().decode("latin-1") in _SECTION_OWNERS:
                    end = _section_end(line, i)
                    if end < 0:
                        return _HEADER_LIST.match(line, i + 1) is not None
                    i = end
                i += 1
    return False


def _scan_line(line: bytes, stack: list[list], literal_follows: bool) -> None:
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == 0x20:
            i += 1
        elif c == 0x28:  # (
            new: list = []
            stack[-1].append(new)
            stack.append(new)
            i += 1
        elif c == 0x29:  # )
            if len(stack) == 1:
                raise ParseError("unexpected ')'")
            stack.pop()
            i += 1
        elif c == 0x22:  # "
            value, i = _quoted(line, i)
            stack[-1].append(value)
        elif c == 0x7B or (c == 0x7E and i + 1 < n and line[i + 1] == 0x7B):  # { or ~{
            end = line.find(b"}", i)
            if end != n - 1 or not literal_follows:
                raise ParseError("literal announcement must end the line")
            i = n  # the literal itself is the next segment
        else:
            value, i = _atom(line, i)
            stack[-1].append(value)


def _quoted(line: bytes, i: int) -> tuple[bytes, int]:
    out = bytearray()
    i += 1
    n = len(line)
    while i < n:
        c = line[i]
        if c == 0x5C:  # backslash: only \" and \\ are allowed (RFC 3501 quoted-specials)
            if i + 1 >= n or line[i + 1] not in (0x22, 0x5C):
                raise ParseError("bad escape in quoted string")
            out.append(line[i + 1])
            i += 2
        elif c == 0x22:
            return bytes(out), i + 1
        elif c in (0x0D, 0x0A):
            raise ParseError("line break in quoted string")
        else:
            out.append(c)
            i += 1
    raise ParseError("unterminated quoted string")


_SECTION_OWNERS = frozenset({"BODY", "BODY.PEEK", "BINARY", "BINARY.PEEK", "BINARY.SIZE"})
"""The fetch-att names that take a ``[section]`` (RFC 3501 section 9, RFC 3516 section 4)."""


def _atom(line: bytes, i: int) -> tuple[Atom, int]:
    start = i
    n = len(line)
    while i < n:
        c = line[i]
        if c == 0x5B and line[start:i].upper().decode("latin-1") in _SECTION_OWNERS:
            end = _section_end(line, i)
            if end >= 0:
                i = end + 1
                continue
        if c in _ATOM_SPECIALS and c not in (0x25, 0x2A, 0x5C, 0x5D):
            # % and * are list wildcards, \ starts flags, ] is an ASTRING-CHAR: all allowed
            # inside our atoms (RFC 3501 section 9: list-char, flag, ASTRING-CHAR).
            break
        i += 1
    if i == start:
        raise ParseError(f"unexpected character {chr(line[i])!r}")
    try:
        text = line[start:i].decode("ascii")
    except UnicodeDecodeError:
        raise ParseError("8-bit characters in an atom") from None
    return Atom(text), i


def _section_end(line: bytes, i: int) -> int:
    """The index of the ``]`` closing the section opened at ``line[i]``, or -1 if the line has
    none (then the ``[`` is an ordinary atom character: ``SELECT body[`` names a mailbox)."""
    depth = 0
    for j in range(i, len(line)):
        c = line[j]
        if c == 0x5B:
            depth += 1
        elif c == 0x5D:
            depth -= 1
            if depth == 0:
                return j
    return -1


# -- writing ---------------------------------------------------------------------------------

def quoted_or_literal(value: bytes | str, utf8: bool = False) -> bytes:
    """An IMAP string: quoted when it can be, a literal otherwise (8-bit, CR/LF, quotes...).
    With ``utf8`` (a session that enabled IMAP4rev2 or UTF8=ACCEPT) valid UTF-8 may be quoted
    too (RFC 9051 9 ``QUOTED-CHAR =/ UTF8-2 / UTF8-3 / UTF8-4``, RFC 6855 3)."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    if len(value) < 1024 and _QUOTABLE.match(value) and (value.isascii() or (
            utf8 and _valid_utf8(value))):
        return b'"' + value + b'"'
    return b"{%d}\r\n" % len(value) + value


def _valid_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def nstring(value: bytes | str | None) -> bytes:
    return b"NIL" if value is None else quoted_or_literal(value)


def astring(value: bytes | str, utf8: bool = False) -> bytes:
    """An astring: a bare atom when it is one, else a string (``utf8``: see
    :func:`quoted_or_literal`)."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    if value and value.isascii() and not any(c in _ATOM_SPECIALS for c in value) \
            and value.upper() != b"NIL":
        return value
    return quoted_or_literal(value, utf8)


def as_text(token, what: str = "argument") -> str:
    """An astring argument as text (atoms, quoted strings and literals alike)."""
    if isinstance(token, Atom):
        return str(token)
    if isinstance(token, bytes):
        try:
            return token.decode("utf-8")
        except UnicodeDecodeError:
            raise ParseError(f"{what} is not valid UTF-8") from None
    raise ParseError(f"expected a string for {what}")
