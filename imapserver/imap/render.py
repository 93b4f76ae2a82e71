"""FETCH response data: ENVELOPE, BODY/BODYSTRUCTURE, INTERNALDATE, and the FETCH item list.

Grammar (RFC 3501 section 9)::

    fetch           = "FETCH" SP sequence-set SP ("ALL" / "FULL" / "FAST" /
                      fetch-att / "(" fetch-att *(SP fetch-att) ")")
    fetch-att       = "ENVELOPE" / "FLAGS" / "INTERNALDATE" /
                      "RFC822" [".HEADER" / ".SIZE" / ".TEXT"] /
                      "BODY" ["STRUCTURE"] / "UID" /
                      "BODY" section ["<" number "." nz-number ">"] /
                      "BODY.PEEK" section ["<" number "." nz-number ">"]

    envelope        = "(" env-date SP env-subject SP env-from SP env-sender SP env-reply-to SP
                      env-to SP env-cc SP env-bcc SP env-in-reply-to SP env-message-id ")"
    env-from        = "(" 1*address ")" / nil            ; and likewise the other lists
    address         = "(" addr-name SP addr-adl SP addr-mailbox SP addr-host ")"

    body            = "(" (body-type-1part / body-type-mpart) ")"
    body-type-1part = (body-type-basic / body-type-msg / body-type-text) [SP body-ext-1part]
    body-type-basic = media-basic SP body-fields
    body-type-msg   = media-message SP body-fields SP envelope SP body SP body-fld-lines
    body-type-text  = media-text SP body-fields SP body-fld-lines
    body-fields     = body-fld-param SP body-fld-id SP body-fld-desc SP body-fld-enc SP
                      body-fld-octets
    body-fld-param  = "(" string SP string *(SP string SP string) ")" / nil
    body-ext-1part  = body-fld-md5 [SP body-fld-dsp [SP body-fld-lang [SP body-fld-loc]]]
    body-type-mpart = 1*body SP media-subtype [SP body-ext-mpart]
    body-ext-mpart  = body-fld-param [SP body-fld-dsp [SP body-fld-lang [SP body-fld-loc]]]
    body-fld-dsp    = "(" string SP body-fld-param ")" / nil
    body-fld-lang   = nstring / "(" string *(SP string) ")"

    date-time       = DQUOTE date-day-fixed "-" date-month "-" date-year SP time SP zone DQUOTE

Everything here is rendered from the metadata the store keeps (see :mod:`mailstore.mime` for
its JSON encoding: text values are the raw octets decoded as latin-1).  Where RFC 3501 leaves
a choice the output follows Dovecot, which a differential test checks octet for octet
(``tests/test_imap_render_dovecot.py``): type, subtype, parameter names and values, encodings
and dispositions as written in the message; a part without Content-Transfer-Encoding gets
``"7bit"``; ``text/*`` parts get ``("charset" "us-ascii")`` appended when they name no
charset; body-fld-lines counts line feeds; all four extension fields are written for
BODYSTRUCTURE; RFC 2231 parameter continuations are joined; a subject and display names are
cleaned up "for humans" (runs of white space become one space, NUL becomes 0x80).  Strings go
through :func:`imapserver.imap.wire.nstring`, so whether a value is quoted or sent as a
literal is our choice (8-bit and quotes give literals), not Dovecot's.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from .sections import Section, parse_section
from .wire import Atom, nstring, quoted_or_literal

_NIL = b"NIL"
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _bytes(value: str) -> bytes:
    """A stored (latin-1) text value as the message's octets; NUL is not allowed in IMAP
    strings, so it becomes 0x80 as Dovecot does."""
    return value.encode("latin-1").replace(b"\x00", b"\x80")


def _nstring(value: str | None) -> bytes:
    return _NIL if value is None else nstring(_bytes(value))


def _string(value: str) -> bytes:
    return quoted_or_literal(_bytes(value))


_HUMAN_SPACE = re.compile(r"[ \t\r\n]+")


def _for_humans(value: str | None) -> bytes:
    """A subject or display name cleaned up as Dovecot's ``imap_append_string_for_humans``
    does: each run of white space (CR and LF included) becomes one space, and leading and
    trailing white space goes."""
    if value is None:
        return _NIL
    return nstring(_bytes(_HUMAN_SPACE.sub(" ", value).strip(" ")))


# -- ENVELOPE ------------------------------------------------------------------------------------

def _addresses(addrs: list | None) -> bytes:
    """An address list, ``NIL`` when empty; group markers are already in the stored list."""
    if not addrs:
        return _NIL
    out = [b"("]
    for name, adl, mailbox, host in addrs:
        out += [b"(", _for_humans(name), b" ", _nstring(adl), b" ", _nstring(mailbox), b" ",
                _nstring(host), b")"]
    out.append(b")")
    return b"".join(out)


def envelope(env: dict | None) -> bytes:
    """The ENVELOPE of a message (RFC 3501 section 7.4.2), parenthesis included.

    :param env: ``MessageView.envelope`` (the JSON of :class:`~mailstore.mime.Envelope`, whose
                sender and reply-to already default to from), or ``None`` for a message
                without one: all ten fields are then NIL
    """
    env = env or {}
    fields = [
        _nstring(env.get("date")), _for_humans(env.get("subject")),
        _addresses(env.get("from")), _addresses(env.get("sender")),
        _addresses(env.get("reply_to")), _addresses(env.get("to")), _addresses(env.get("cc")),
        _addresses(env.get("bcc")), _nstring(env.get("in_reply_to")),
        _nstring(env.get("message_id")),
    ]
    return b"(" + b" ".join(fields) + b")"


class Rendered:
    """ENVELOPE and BODY/BODYSTRUCTURE as rendered, by content id: a message's content never
    changes (content rows are written once, decision 0001), so neither does what is derived
    from it, and a client that lists a mailbox asks for the same envelopes again and again.
    Rendering one took ~27 us of Python (a FETCH of 25 envelopes ~0.7 ms, bench/RESULTS.md,
    issue 14); a hit is a dict lookup.  At most ``limit`` entries (~0.5 KiB each), the oldest
    dropped first; shared by the worker threads."""

    def __init__(self, limit: int = 20_000):
        self.limit = limit
        self._items: dict[tuple, bytes] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple, render, *args) -> bytes:
        found = self._items.get(key)
        if found is None:
            found = render(*args)
            with self._lock:
                if len(self._items) >= self.limit:
                    del self._items[next(iter(self._items))]
                self._items[key] = found
        return found


RENDERED = Rendered()


def cached_envelope(content: bytes, env: dict | None) -> bytes:
    """:func:`envelope` of the message whose content id is ``content``."""
    return RENDERED.get((content, "E"), envelope, env)


def cached_bodystructure(content: bytes, body: dict, extended: bool) -> bytes:
    """:func:`bodystructure` of the message whose content id is ``content``."""
    return RENDERED.get((content, extended), bodystructure, body, extended)


# -- BODY / BODYSTRUCTURE ------------------------------------------------------------------------

def join_rfc2231(params: list) -> list[tuple[str, str]]:
    """Parameters with RFC 2231 continuations joined, as Dovecot's ``rfc2231_parse`` does.

    ``name*0``, ``name*1*``, ... become one parameter, ``name*`` if any segment is extended
    (charset'language'%-encoded; plain segments then get their ``%`` escaped, and a leading
    plain segment an empty ``''`` prefix) or ``name`` otherwise; a lone ``name*`` stays as
    it is.  Plain parameters keep their order and come first, then the joined ones sorted by
    name.  A set with a missing index is left as separate ``name*N[*]`` parameters.  Values
    are not decoded: RFC 3501 returns them raw.

    Names are as written, so segments are sorted by name as written, then index, and a run
    of names equal but for ASCII case is one set, written with its first segment's name;
    this is Dovecot 2.3's grouping, odd cases (``Name*1`` and ``name*0``) included.
    """
    plain: list[tuple[str, str]] = []
    segments: list[tuple[str, int, bool, str]] = []
    for name, value in params:
        m = re.fullmatch(r"(.*?)\*(?:([0-9]+)(\*)?)?", name, re.S)
        if m is None:
            plain.append((name, value))
            continue
        extended = m.group(2) is None or m.group(3) is not None
        segments.append((m.group(1), int(m.group(2) or 0), extended, value))
    segments.sort(key=lambda s: (s[0], s[1]))
    i = 0
    while i < len(segments):
        key = segments[i][0]
        folded = _ascii_lower(key)
        j = i + 1
        while j < len(segments) and _ascii_lower(segments[j][0]) == folded:
            j += 1
        parts = segments[i:j]
        i = j
        if [index for _, index, _, _ in parts] != list(range(len(parts))):
            plain += [(f"{k}*{n}*" if ext else f"{k}*{n}", v) for k, n, ext, v in parts]
            continue
        have_extended = any(ext for _, _, ext, _ in parts)
        text = "''" if have_extended and not parts[0][2] else ""
        for _key, _index, ext, value in parts:
            text += value.replace("%", "%25") if have_extended and not ext else value
        plain.append((key + "*" if have_extended else key, text))
    return plain


def _ascii_lower(name: str) -> bytes:
    """``name`` folded as C's strcasecmp folds it: ASCII letters only."""
    return name.encode("latin-1", "replace").lower()


def _params(params: list, default_charset: bool = False) -> bytes:
    """body-fld-param: ``("name" "value" ...)`` or NIL."""
    pairs = join_rfc2231(params)
    if default_charset and not any(name.lower() == "charset" for name, _ in pairs):
        pairs.append(("charset", "us-ascii"))
    if not pairs:
        return _NIL
    return b"(" + b" ".join(_string(n) + b" " + _string(v) for n, v in pairs) + b")"


def _extension(part: dict[str, Any]) -> bytes:
    """body-fld-dsp SP body-fld-lang SP body-fld-loc: the part shared by both extensions."""
    disposition = part.get("disposition")
    dsp = _NIL if disposition is None else (
        b"(" + _string(disposition[0]) + b" " + _params(disposition[1]) + b")")
    language = part.get("language")
    lang = _NIL if not language else b"(" + b" ".join(_string(t) for t in language) + b")"
    return dsp + b" " + lang + b" " + _nstring(part.get("location"))


_EMPTY_TEXT: dict[str, Any] = {"type": "text", "subtype": "plain", "params": [], "size": 0,
                               "lines": 0}
"""What a multipart without parts, or an unparsed message/rfc822, is shown to contain:
RFC 3501's grammar needs at least one body there, and this is Dovecot's choice."""


def bodystructure(body: dict, extended: bool) -> bytes:
    """BODY (``extended=False``) or BODYSTRUCTURE (``extended=True``) of a stored body part.

    :param body: ``MessageView.body``, the JSON of the root :class:`~mailstore.mime.BodyPart`
    :return: the parenthesised structure (RFC 3501 section 7.4.2)
    """
    out = bytearray()
    _write_part(out, body, extended)
    return bytes(out)


def _write_part(out: bytearray, part: dict[str, Any], extended: bool) -> None:
    # Recursion is bounded: the parser caps nesting at mailstore.mime.MAX_DEPTH entities.
    children = part.get("parts")
    if children is not None:
        out += b"("
        for child in children or [_EMPTY_TEXT]:
            _write_part(out, child, extended)
        out += b" " + _string(part["subtype"])
        if extended:
            out += b" " + _params(part.get("params") or []) + b" " + _extension(part)
        out += b")"
        return
    type_, subtype = part["type"], part["subtype"]
    is_text = type_.lower() == "text"
    is_message = type_.lower() == "message" and subtype.lower() == "rfc822"
    out += b"(" + _string(type_) + b" " + _string(subtype) + b" "
    out += _params(part.get("params") or [], default_charset=is_text)
    out += b" " + _nstring(part.get("id")) + b" " + _nstring(part.get("description"))
    # No encoding stored means none was given: Dovecot writes RFC 2045's default as "7bit".
    # (Metadata stored by earlier versions has "7BIT" for it, which is written as it is.)
    out += b" " + _string(part.get("encoding") or "7bit")
    out += b" %d" % part.get("size", 0)
    if is_message:
        inner = part.get("message")
        out += b" " + envelope(inner and inner.get("envelope")) + b" "
        _write_part(out, inner["body"] if inner else _EMPTY_TEXT, extended)
    if is_text or is_message:
        out += b" %d" % (part.get("lines") or 0)
    if extended:
        out += b" " + _nstring(part.get("md5")) + b" " + _extension(part)
    out += b")"


# -- INTERNALDATE, RFC822.SIZE -------------------------------------------------------------------

def internaldate(ts: float) -> bytes:
    """INTERNALDATE as a quoted RFC 3501 date-time in UTC: ``"21-Nov-2026 12:00:00 +0000"``.

    The day has two digits (date-day-fixed allows that or a leading space; Dovecot writes a
    zero).  Fractions of a second are dropped.
    """
    t = time.gmtime(int(ts // 1))
    return b'"%02d-%s-%04d %02d:%02d:%02d +0000"' % (
        t.tm_mday, _MONTHS[t.tm_mon - 1].encode(), t.tm_year, t.tm_hour, t.tm_min, t.tm_sec)


def rfc822_size(size: int) -> bytes:
    """RFC822.SIZE: the message's octet count (``record.size``) as a number."""
    return b"%d" % size


# -- the FETCH item list -------------------------------------------------------------------------

ENVELOPE, BODY, HEADER, CONTENT = "envelope", "body", "header", "content"
"""What a FETCH item needs read: the stored envelope / body structure / top-level header
(``MessageView`` attributes) or the raw message (``MailStore.open_message``)."""
PREVIEW = "preview"
"""The stored RFC 8970 preview (``MessageView.preview``)."""


@dataclass(frozen=True, slots=True)
class FetchItem:
    """One fetch-att, parsed.

    ``kind`` is the attribute without its section: ``ENVELOPE``, ``FLAGS``, ``INTERNALDATE``,
    ``RFC822``, ``RFC822.HEADER``, ``RFC822.SIZE``, ``RFC822.TEXT``, ``BODY``,
    ``BODYSTRUCTURE``, ``UID``, ``EMAILID``, ``THREADID`` (RFC 8474), ``SAVEDATE`` (RFC
    8514), ``PREVIEW`` (RFC 8970; ``lazy`` for its LAZY modifier), or ``BODY[]`` for
    ``BODY[...]`` and ``BODY.PEEK[...]``.

    ``name`` is what the response is labelled with: ``BODY[...]`` even for BODY.PEEK, the
    section as :attr:`Section.name` spells it, and only the origin of a partial
    (``BODY[HEADER.FIELDS (FROM)]<0>``, RFC 3501 section 7.4.2).

    ``section`` (with ``partial``) is set for every item answered with message octets --
    BODY[...], RFC822 (``""``), RFC822.HEADER (``HEADER``), RFC822.TEXT (``TEXT``) -- and is
    what :func:`imapserver.imap.sections.resolve` takes.  ``sets_seen`` is true for the items
    that set ``\\Seen`` (RFC 3501 section 6.4.5).  ``needs`` says which of
    :data:`ENVELOPE`, :data:`BODY`, :data:`HEADER`, :data:`CONTENT` must be read to answer;
    for a top-level header subset it names :data:`HEADER` only, though the raw message is
    still read when the stored header turns out to be capped (``Plan.needs_content``).
    """

    kind: str
    name: str
    sets_seen: bool = False
    needs: frozenset[str] = frozenset()
    section: Section | None = None
    partial: tuple[int, int] | None = None
    lazy: bool = False


_SIMPLE = {
    "ENVELOPE": FetchItem("ENVELOPE", "ENVELOPE", needs=frozenset({ENVELOPE})),
    "FLAGS": FetchItem("FLAGS", "FLAGS"),
    "INTERNALDATE": FetchItem("INTERNALDATE", "INTERNALDATE"),
    "RFC822.SIZE": FetchItem("RFC822.SIZE", "RFC822.SIZE"),
    "UID": FetchItem("UID", "UID"),
    "MODSEQ": FetchItem("MODSEQ", "MODSEQ"),  # RFC 7162 3.1.4.2
    "BODY": FetchItem("BODY", "BODY", needs=frozenset({BODY})),
    "BODYSTRUCTURE": FetchItem("BODYSTRUCTURE", "BODYSTRUCTURE", needs=frozenset({BODY})),
    "RFC822": FetchItem("RFC822", "RFC822", True, frozenset({CONTENT}), Section((), "")),
    "RFC822.HEADER": FetchItem("RFC822.HEADER", "RFC822.HEADER", False, frozenset({HEADER}),
                               Section((), "HEADER", (), "HEADER")),
    "RFC822.TEXT": FetchItem("RFC822.TEXT", "RFC822.TEXT", True, frozenset({CONTENT}),
                             Section((), "TEXT", (), "TEXT")),
    "EMAILID": FetchItem("EMAILID", "EMAILID"),
    "THREADID": FetchItem("THREADID", "THREADID", needs=frozenset({HEADER})),
    "SAVEDATE": FetchItem("SAVEDATE", "SAVEDATE"),
    "PREVIEW": FetchItem("PREVIEW", "PREVIEW", needs=frozenset({PREVIEW})),
}
_LAZY_PREVIEW = FetchItem("PREVIEW", "PREVIEW", needs=frozenset({PREVIEW}), lazy=True)
_MACROS = {
    "ALL": ("FLAGS", "INTERNALDATE", "RFC822.SIZE", "ENVELOPE"),
    "FAST": ("FLAGS", "INTERNALDATE", "RFC822.SIZE"),
    "FULL": ("FLAGS", "INTERNALDATE", "RFC822.SIZE", "ENVELOPE", "BODY"),
}
_SECTION_ITEM = re.compile(r"(BODY(?:\.PEEK)?)\[(.*)\](.*)\Z", re.S | re.I)
_PARTIAL = re.compile(r"<([0-9]+)\.([0-9]+)>\Z")


def _needs(section: Section) -> frozenset[str]:
    if section.part:
        return frozenset({BODY, CONTENT})
    if section.text in ("HEADER", "HEADER.FIELDS", "HEADER.FIELDS.NOT"):
        return frozenset({HEADER})
    return frozenset({CONTENT})


def parse_fetch_item(text: str) -> FetchItem:
    """Parse one fetch-att (an atom such as ``BODY.PEEK[1.2.MIME]<0.100>``).

    :raises ValueError: with the reason, for an unknown item or a malformed section/partial
    """
    simple = _SIMPLE.get(text.upper())
    if simple is not None:
        return simple
    m = _SECTION_ITEM.match(text)
    if m is None:
        from .binary import parse_binary_item  # it builds on this module's FetchItem
        binary = parse_binary_item(text)
        if binary is None:
            raise ValueError(f"unknown FETCH item {text!r}")
        return binary
    section = parse_section(m.group(2))
    partial = None
    name = f"BODY[{section.name}]"
    if m.group(3):
        p = _PARTIAL.match(m.group(3))
        if p is None:
            raise ValueError(f"malformed partial {m.group(3)!r} (want <origin.length>)")
        origin, length = int(p.group(1)), int(p.group(2))
        if origin > 2**32 - 1 or length > 2**32 - 1:
            raise ValueError(f"partial range out of bounds in {text!r}")
        # RFC 3501 wants a nz-number for the length; Dovecot answers <n.0> with an empty
        # string rather than BAD, and so do we.
        partial = (origin, length)
        name += f"<{origin}>"
    peek = m.group(1).upper() == "BODY.PEEK"
    return FetchItem("BODY[]", name, not peek, _needs(section), section, partial)


def _once(items: list[FetchItem]) -> list[FetchItem]:
    """``items`` with each item that has a name of its own once, first position kept.

    ``BODY[section]`` and ``BINARY[section]`` items stay as asked, repeats included: like
    Dovecot, we answer each section asked for (``BODY[]<0.5>`` twice gives it twice); RFC
    3501 7.4.2 fixes neither.
    """
    seen: set[str] = set()
    out: list[FetchItem] = []
    for item in items:
        if item.kind not in ("BODY[]", "BINARY"):
            if item.name in seen:
                continue
            seen.add(item.name)
        out.append(item)
    return out


def parse_fetch_items(spec: Any) -> list[FetchItem]:
    """Parse the FETCH argument after the sequence set, as :func:`wire.tokenize` gives it.

    :param spec: an :class:`~imapserver.imap.wire.Atom` (one item, or the macro ``ALL``,
                 ``FAST`` or ``FULL``) or a ``list`` of atoms (macros are not allowed in a
                 list, RFC 3501 section 6.4.5)
    :return: the items in the order given, each once (RFC 3501 7.4.2: a FETCH response
             carries a data item once; Dovecot answers ``(UID FLAGS UID)`` with one UID),
             except ``BODY[section]`` items, answered as often as asked (as Dovecot does)
    :raises ValueError: with the reason, for anything malformed (a BAD response)
    """
    if isinstance(spec, Atom):
        macro = _MACROS.get(spec.upper())
        if macro is not None:
            return [_SIMPLE[name] for name in macro]
        return [parse_fetch_item(spec)]
    if isinstance(spec, list):
        if not spec:
            raise ValueError("empty FETCH item list")
        items = []
        for i, token in enumerate(spec):
            if isinstance(token, list) and items and items[-1].kind == "PREVIEW" \
                    and not isinstance(spec[i - 1], list):
                items[-1] = preview_item(token)  # its modifiers (RFC 8970 section 6)
                continue
            if not isinstance(token, Atom):
                raise ValueError("FETCH items must be atoms")
            if token.upper() in _MACROS:
                raise ValueError(f"{token} cannot be used inside a list")
            items.append(parse_fetch_item(token))
        return _once(items)
    raise ValueError("expected a FETCH item or a list of them")


def preview_item(modifiers: list) -> FetchItem:
    """PREVIEW with its modifier list (RFC 8970 section 6)::

        fetch-att   =/ "PREVIEW" [SP "(" preview-mod *(SP preview-mod) ")"]
        preview-mod =  "LAZY"

    :raises ValueError: for an empty list or a modifier other than LAZY
    """
    if not modifiers:
        raise ValueError("empty PREVIEW modifier list")
    for mod in modifiers:
        if not isinstance(mod, Atom) or mod.upper() != "LAZY":
            raise ValueError(f"{mod!s} is not a supported PREVIEW modifier")
    return _LAZY_PREVIEW
