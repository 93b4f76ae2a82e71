"""ManageSieve's wire format (RFC 5804 4): arguments in, strings and responses out.

    command     = command-name *(SP argument) CRLF
    argument    = string / number
    string      = quoted / literal-c2s
    quoted      = DQUOTE *QUOTED-CHAR DQUOTE      ; at most 1024 octets (RFC 5804 4)
    QUOTED-CHAR = SAFE-UTF8-CHAR / "\\" QUOTED-SPECIALS
    literal-c2s = "{" number "+}" CRLF *OCTET     ; the protocol module reads literals
    number      = 1*DIGIT                         ; 0 .. 4294967295
    response    = ("OK" / "NO" / "BYE") [SP "(" resp-code ")"] [SP string] CRLF

A command arrives as *segments*: the text of its line(s) and, between them, the octets of each
literal (protocol.py takes them off the wire).  :func:`tokenize` turns those into arguments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_QUOTED = 1024
"""Octets a quoted string may hold (RFC 5804 4: longer ones must be sent as literals)."""
MAX_NUMBER = 4294967295

_ATOM = re.compile(rb"[A-Za-z][A-Za-z0-9_\-]*")
_NUMBER = re.compile(rb"[0-9]+")


class SyntaxFault(ValueError):
    """The command cannot be parsed; the text says why (answered NO, RFC 5804 has no BAD)."""


@dataclass(frozen=True)
class Literal:
    """A literal argument's octets (protocol.py reads them)."""

    data: bytes


@dataclass(frozen=True)
class Argument:
    """One argument: a string (``text`` is None for a number), or a number."""

    data: bytes
    number: int | None = None

    @property
    def is_string(self) -> bool:
        return self.number is None


def tokenize(segments: list[bytes | Literal]) -> tuple[str, list[Argument]]:
    """The command name (upper case) and its arguments; SyntaxFault for anything else."""
    args: list[Argument] = []
    name: str | None = None
    for segment in segments:
        if isinstance(segment, Literal):
            if name is None:
                raise SyntaxFault("Expected a command name")
            args.append(Argument(segment.data))
            continue
        pos = 0
        while pos < len(segment):
            if segment[pos:pos + 1] == b" ":
                pos += 1
                continue
            if name is None:
                atom = _ATOM.match(segment, pos)
                if atom is None:
                    raise SyntaxFault("Expected a command name")
                name = atom.group().decode().upper()
                pos = atom.end()
                continue
            char = segment[pos:pos + 1]
            if char == b'"':
                value, pos = _quoted(segment, pos)
                args.append(Argument(value))
            elif char.isdigit():
                number = _NUMBER.match(segment, pos)
                value = int(number.group())
                if value > MAX_NUMBER:
                    raise SyntaxFault("Number too large")
                args.append(Argument(number.group(), value))
                pos = number.end()
            else:
                raise SyntaxFault("Expected a string or a number")
            if pos < len(segment) and segment[pos:pos + 1] != b" ":
                raise SyntaxFault("Expected a space between arguments")
    if name is None:
        raise SyntaxFault("Empty command")
    return name, args


def _quoted(segment: bytes, pos: int) -> tuple[bytes, int]:
    out = bytearray()
    pos += 1
    while pos < len(segment):
        char = segment[pos]
        if char == 0x22:    # "
            if len(out) > MAX_QUOTED:
                raise SyntaxFault(f"Quoted string longer than {MAX_QUOTED} octets")
            return bytes(out), pos + 1
        if char == 0x5C:    # backslash: only \" and \\ (QUOTED-SPECIALS)
            pos += 1
            if pos >= len(segment) or segment[pos] not in (0x22, 0x5C):
                raise SyntaxFault("Invalid escape in quoted string")
            char = segment[pos]
        elif char in (0x00, 0x0D, 0x0A):
            raise SyntaxFault("Invalid character in quoted string")
        out.append(char)
        pos += 1
    raise SyntaxFault("Unterminated quoted string")


def text(arg: Argument, what: str) -> str:
    """A string argument as text: UTF-8 (RFC 5804 4: strings are UTF-8)."""
    if not arg.is_string:
        raise SyntaxFault(f"Expected a string for the {what}")
    try:
        return arg.data.decode("utf-8")
    except UnicodeDecodeError:
        raise SyntaxFault(f"The {what} is not UTF-8") from None


def string(value: str | bytes) -> bytes:
    """``value`` as a string on the wire: quoted when it can be, else a literal
    ``{n}CRLF...`` (RFC 5804 4, literal-s2c)."""
    data = value.encode("utf-8") if isinstance(value, str) else value
    if len(data) <= MAX_QUOTED and not any(c in data for c in b"\r\n\x00"):
        return b'"' + data.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'
    return b"{%d}\r\n" % len(data) + data


def response(status: bytes, text: str | None = None, code: str | bytes | None = None) -> bytes:
    """``OK``/``NO``/``BYE`` with an optional response code and human-readable text."""
    out = status
    if code:
        out += b" (" + (code.encode() if isinstance(code, str) else code) + b")"
    if text:
        out += b" " + string(text)
    return out


def lone_string(segments: list[bytes | Literal]) -> bytes:
    """The one string a line holds: a SASL response (RFC 5804 2.1), quoted or a literal."""
    parts = [s for s in segments if isinstance(s, Literal) or s.strip(b" ")]
    if len(parts) != 1:
        raise SyntaxFault("Expected one string")
    part = parts[0]
    if isinstance(part, Literal):
        return part.data
    part = part.strip(b" ")
    if not part.startswith(b'"'):
        raise SyntaxFault("Expected a string")
    value, end = _quoted(part, 0)
    if end != len(part):
        raise SyntaxFault("Expected one string")
    return value
