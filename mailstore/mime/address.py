"""Address lists, parsed into the shape RFC 3501's ENVELOPE wants.

RFC 3501 section 7.4.2 describes an address as a four-item list ``(name adl mailbox host)`` and
a group as a start marker ``(NIL NIL groupname NIL)``, its members, then an end marker
``(NIL NIL NIL NIL)``.  This module turns the raw value of a ``From:``/``To:``/... field
(RFC 5322 section 3.4, obsolete syntax included) into a list of such 4-tuples, with ``None``
standing for NIL.

Why not :func:`email.utils.getaddresses`?  It loses what IMAP must return: it drops source
routes and group markers, re-joins display names with its own spacing and does not
distinguish "no host" from a group.  Mail in the wild is also often malformed, and a parser
that raises would make a message undeliverable, so everything here is best effort and never
raises: unterminated quotes, comments and brackets simply run to the end of the value.

Values are ``str`` holding raw octets decoded as latin-1 (see :mod:`mailstore.mime`), so
encoded words (RFC 2047) and 8-bit text come through untouched; encode with latin-1 to get the
original bytes back.
"""

from __future__ import annotations

import re

Address = tuple[str | None, str | None, str | None, str | None]
"""``(name, adl, mailbox, host)`` as in RFC 3501 section 7.4.2; ``None`` is NIL."""

GROUP_END: Address = (None, None, None, None)
"""The marker RFC 3501 puts after the last member of a group."""

_TOKEN = re.compile(
    r"""
      (?P<ws>[ \t\r\n]+)
    | (?P<q>"(?P<qbody>(?:[^"\\]|\\.)*)(?:"|\\?\Z))
    | (?P<d>\[(?:[^\]\\]|\\.)*(?:\]|\\?\Z))
    | (?P<c>\()
    | (?P<s>[<>@,;:])
    | (?P<a>[^ \t\r\n()<>@,;:"\[]+)
    | (?P<x>.)
    """,
    re.S | re.X,
)
# The shapes most addresses have -- ``Display Name <local@domain>``, ``<local@domain>`` and
# ``local@domain``, all of plain atoms -- are read by one regular expression; anything else
# (quotes, comments, groups, routes, lists, other characters) goes through the tokenizer, which
# gives the same result for what the expression accepts (tests/test_mime.py compares them).
# Possessive quantifiers keep it linear on long values that almost match.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]++"
_SIMPLE = re.compile(
    rf"[ \t]*+(?:(?P<name>{_ATEXT}(?:[ \t]++{_ATEXT})*+)[ \t]*+)?"
    rf"<(?P<local>{_ATEXT})@(?P<host>{_ATEXT})>[ \t]*+"
    rf"|[ \t]*+(?P<bare>{_ATEXT})@(?P<bare_host>{_ATEXT})[ \t]*+")
_COMMENT_SPECIAL = re.compile(r"[()\\]")
_QUOTED_PAIR = re.compile(r"\\(.)", re.S)

# Token kinds.  Dots are atom characters here: it keeps "john.doe" and "Q." whole, and an
# address with spaces around its dots (obsolete syntax) still comes out right because address
# parts are re-joined without spaces.
_ATOM, _QUOTED, _LITERAL, _COMMENT, _SPECIAL, _OTHER = "a", "q", "d", "c", "s", "x"


class _Tok:
    """One lexical token: its kind, its raw text, its meaning and whether space preceded it."""

    __slots__ = ("kind", "raw", "text", "sp")

    def __init__(self, kind: str, raw: str, text: str, sp: bool):
        self.kind = kind
        self.raw = raw
        self.text = text
        self.sp = sp


def _unquote_pairs(text: str) -> str:
    return _QUOTED_PAIR.sub(r"\1", text) if "\\" in text else text


def skip_comment(value: str, start: int) -> tuple[int, str]:
    """Find the end of the (possibly nested) comment opening at ``value[start]``.

    Comments nest and may hold quoted pairs (RFC 5322 section 3.2.2), which a regular
    expression cannot follow, hence the small scanner.  An unterminated comment runs to the
    end of the value.

    :return: the index just past the comment, and its content with quoted pairs resolved
    """
    depth = 0
    pos = start
    n = len(value)
    while True:
        m = _COMMENT_SPECIAL.search(value, pos)
        if m is None:
            return n, _unquote_pairs(value[start + 1:])
        ch = m.group()
        at = m.start()
        if ch == "\\":
            pos = at + 2
            continue
        pos = at + 1
        if ch == "(":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return pos, _unquote_pairs(value[start + 1:at])


def _tokenize(value: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    n = len(value)
    sp = False
    while pos < n:
        m = _TOKEN.match(value, pos)
        kind = m.lastgroup
        raw = m.group()
        if kind == "ws":
            sp = True
            pos = m.end()
            continue
        if kind == "c":
            pos, text = skip_comment(value, pos)
            toks.append(_Tok(_COMMENT, value[m.start():pos], text, sp))
            sp = True
            continue
        if kind == "q":
            toks.append(_Tok(_QUOTED, raw, _unquote_pairs(m.group("qbody")), sp))
        else:
            toks.append(_Tok(kind, raw, raw, sp))
        sp = False
        pos = m.end()
    return toks


def _phrase(toks: list[_Tok]) -> str | None:
    """A display name: words joined as written, quotes removed, quoted pairs resolved."""
    out: list[str] = []
    for tok in toks:
        if out and tok.sp:
            out.append(" ")
        out.append(tok.text)
    return "".join(out) or None


def _raw(toks: list[_Tok]) -> str:
    """A local part or domain: tokens as written (quotes kept), whitespace dropped."""
    return "".join(tok.raw for tok in toks)


def _is(tok: _Tok, chars: str) -> bool:
    return tok.kind == _SPECIAL and tok.raw in chars


def parse_address_list(value: str | None) -> list[Address]:
    """Parse an address-list field value into RFC 3501 ENVELOPE addresses.

    * ``name`` is the display name as written, with its quotes removed and quoted pairs
      resolved but encoded words left encoded; when there is no display name, the content of a
      comment in or after a bare addr-spec (``user@host (Real Name)``, the old style) is used,
      as Dovecot and UW-IMAP do -- not one before it.  ``None`` when there is neither.
    * ``adl`` is a source route (``@a.example,@b.example``) or ``None``.
    * ``mailbox`` and ``host`` are the local part and domain as written (a quoted local part
      keeps its quotes so that ``mailbox@host`` is still an address).  An address without a
      domain gets ``host == ""``, never ``None``: RFC 3501 reserves a NIL host for group
      markers.
    * Groups come out as ``(None, None, name, None)``, the members, then :data:`GROUP_END`;
      a group left open at the end of the value is closed.

    Never raises; malformed input yields whatever could be made of it.

    :param value: the unfolded field value (latin-1 ``str``), or ``None``
    :return: the addresses in order (empty when there are none)
    """
    if not value:
        return []
    simple = _SIMPLE.fullmatch(value)
    if simple is not None:
        # The profile of a 10 KiB append spent a sixth of its parsing in the tokenizer below.
        name, local, host, bare, bare_host = simple.groups()
        if local is not None:
            return [(" ".join(name.split()) if name else None, None, local, host)]
        return [(None, None, bare, bare_host)]
    return _parse_tokens(value)


def _parse_tokens(value: str) -> list[Address]:
    """:func:`parse_address_list` for any value, through the tokenizer."""
    toks = _tokenize(value)
    n = len(toks)
    out: list[Address] = []
    in_group = False
    i = 0
    while i < n:
        phrase: list[_Tok] = []
        comments: list[str] = []
        while i < n and toks[i].kind != _SPECIAL:
            if toks[i].kind == _COMMENT:
                # Only a comment within or after an addr-spec names it ("a@b (Name)"); one
                # before it ("(note) a@b") does not, as in Dovecot.
                if phrase:
                    comments.append(toks[i].text)
            else:
                phrase.append(toks[i])
            i += 1
        sep = toks[i].raw if i < n else ""
        if sep == "<":
            i, adl, mailbox, host = _angle_addr(toks, i + 1)
            out.append((_phrase(phrase), adl, mailbox, host))
            while i < n and not _is(toks[i], ",;"):
                i += 1  # junk after the angle address
        elif sep == ":":
            if in_group:  # groups do not nest; keep the words as an address instead
                if phrase:
                    out.append((_comment_name(comments), None, _phrase(phrase) or "", ""))
            else:
                out.append((None, None, _phrase(phrase) or "", None))
                in_group = True
            i += 1
        elif sep == "@":
            i += 1
            domain: list[_Tok] = []
            while i < n and toks[i].kind != _SPECIAL:
                tok = toks[i]
                if tok.kind == _COMMENT:
                    comments.append(tok.text)
                elif domain and tok.sp and not (domain[-1].raw.endswith(".")
                                                or tok.raw.startswith(".")):
                    break  # a missing comma: "a@b c@d" is two addresses
                else:
                    domain.append(tok)
                i += 1
            out.append((_comment_name(comments), None, _raw(phrase), _raw(domain)))
        else:  # ",", ";", ">" or the end: a lone word is a mailbox without a domain
            mailbox = _phrase(phrase)
            if mailbox:
                out.append((_comment_name(comments), None, mailbox, ""))
            if sep == ";" and in_group:
                out.append(GROUP_END)
                in_group = False
            i += 1
    if in_group:
        out.append(GROUP_END)
    return out


def _comment_name(comments: list[str]) -> str | None:
    for text in reversed(comments):
        text = text.strip()
        if text:
            return text
    return None


def _angle_addr(toks: list[_Tok], i: int) -> tuple[int, str | None, str, str]:
    """Parse what follows ``<``: an optional source route, then ``local@domain``, then ``>``.

    :return: the index after ``>`` (or the end), the route, the mailbox and the host
    """
    n = len(toks)
    adl = None
    if i < n and _is(toks[i], "@"):
        # A source route runs to the ":" -- if there is one before the ">".
        j = i
        while j < n and not _is(toks[j], ":>"):
            j += 1
        if j < n and _is(toks[j], ":"):
            adl = _raw([t for t in toks[i:j] if t.kind != _COMMENT])
            i = j + 1
    local: list[_Tok] = []
    domain: list[_Tok] = []
    part = local
    while i < n and not _is(toks[i], ">"):
        tok = toks[i]
        i += 1
        if tok.kind == _COMMENT:
            continue
        if part is local and _is(tok, "@"):
            part = domain
            continue
        part.append(tok)
    return i + 1, adl, _raw(local), _raw(domain)
