"""What SORT and THREAD need of a message, computed once at delivery (RFC 5256, RFC 5957).

SORT compares messages by the first address of From/To/Cc, the sent date, the base subject,
size and arrival; THREAD by the base subject, the sent date and the Message-ID, References and
In-Reply-To fields.  Deriving these from the envelope and header of 100,000 messages on every
command would cost seconds, so :func:`compute` runs at append time (from the parsed envelope
and the raw header block the store already has) and its result is kept beside the envelope in
the message row's ``m:sk`` cell (:func:`encode` / :func:`decode`).  Messages stored before that
cell existed get the same keys computed from their ``m:env`` and ``m:hdr`` cells when first
read (see :mod:`mailstore.sortcache`).

Comparison forms, where RFC 5256 leaves a choice:

* Strings (addresses, display names, base subject) are kept in i;unicode-casemap form (RFC
  5051: each character titlecased, then NFKD-decomposed), as Dovecot compares them; for ASCII
  that is upper case, the order of RFC 5256 3's i;ascii-casemap.
* FROM/TO/CC use the addr-mailbox of the first address (RFC 5256 3), empty when there is none;
  the first entry of a group is its start marker, whose mailbox is the group's name (Dovecot
  sorts ``To: undisclosed-recipients:;`` under U the same way).
* DISPLAYFROM/DISPLAYTO (RFC 5957 3) use the first address's display name, RFC 2047 decoded,
  or, when it has none, its ``mailbox@host`` (a group's name alone).
* The sent date (RFC 5256 2.2) is the Date field in seconds since the epoch, in UTC; ``None``
  when missing or unreadable (the caller then uses the INTERNALDATE).
"""

from __future__ import annotations

import email.utils
import re
import unicodedata
from typing import NamedTuple

import orjson

from .mime import header_fields
from .mime.encoded import decode_bytes, decode_header_text
from .mime.headers import field_value

CELL_VERSION = 1
MAX_REFERENCES = 128
"""More References than this are cut from the front: threading needs the nearest ones, and a
pathological header must not make a row (or the thread table) huge."""


class SortKeys(NamedTuple):
    """One message's sort and thread keys (see the module docstring for each form)."""

    from_: str
    to: str
    cc: str
    display_from: str
    display_to: str
    date: float | None
    subject: str        # base subject, in casemap() form
    reply: bool         # the subject had a "re:"/"fwd:" leader or "(fwd)" trailer (5256 2.1)
    message_id: str | None
    references: tuple[str, ...]  # References' msg-ids, else In-Reply-To's first


# -- base subject (RFC 5256 2.1) -----------------------------------------------------------------

_WSP = re.compile(r"[ \t\r\n]+")
_TRAILER = re.compile(r"(?:[ \t]|\(fwd\))+\Z", re.I)
_BLOB = r"\[[^\[\]]*\][ \t]*"
_REFWD = re.compile(rf"(?:{_BLOB})*(?:re|fwd?)[ \t]*(?:{_BLOB})?:", re.I)
_BLOB_RE = re.compile(_BLOB)


MAX_SUBJECT = 2048
"""Characters of a Subject the base subject is taken from: the steps below rescan what is left
after each removal, so a pathological subject ("[a]" ten thousand times) would cost seconds of
CPU at delivery; real subjects are far shorter (RFC 5322 2.1.1 wants lines under 998)."""


def base_subject(subject: str) -> tuple[str, bool]:
    """RFC 5256 2.1's base subject of a decoded Subject value, and whether the subject marked
    a reply or forward (its "re:", "fwd:", "[fwd: ...]" or "(fwd)").  Not yet upper-cased.
    Only the first :data:`MAX_SUBJECT` characters count."""
    # (1) encoded words are decoded by the caller; folding and tabs become one space each.
    text = _WSP.sub(" ", subject[:MAX_SUBJECT])
    reply = False
    while True:
        # (2) trailing "(fwd)" and white space.
        m = _TRAILER.search(text)
        if m:
            if "(" in m.group():
                reply = True
            text = text[:m.start()]
        # (3)-(5) leading "re:"/"fw:"/"fwd:" (with blobs), white space, and a blob that does
        # not leave the subject empty, until none is left.
        while True:
            before = text
            while True:
                if text[:1] in (" ", "\t"):
                    text = text.lstrip(" \t")
                    continue
                m = _REFWD.match(text)
                if m:
                    reply = True
                    text = text[m.end():]
                    continue
                break
            m = _BLOB_RE.match(text)
            if m and text[m.end():]:
                text = text[m.end():]
            if text == before:
                break
        # (6) "[fwd: ...]": unwrap and start again.
        if text[:5].lower() == "[fwd:" and text.endswith("]"):
            text = text[5:-1]
            reply = True
            continue
        return text, reply


# -- message ids ----------------------------------------------------------------------------------

_MSGID = re.compile(r"<([^<>@]*@[^<>]*)>")
_COMMENT = re.compile(r"\((?:[^()\\]|\\.)*\)")


def message_ids(value: str | None) -> list[str]:
    """The msg-ids (RFC 5322 3.6.4) in a field value, without their angle brackets, white space
    and comments removed; ids without an "@" are skipped (RFC 5256 4 treats a message whose
    Message-ID is not valid as having none)."""
    if not value or "<" not in value:
        return []
    if "(" in value:
        value = _COMMENT.sub("", value)
    return [_WSP.sub("", m) for m in _MSGID.findall(value)]


# -- the keys --------------------------------------------------------------------------------------

def casemap(text: str) -> str:
    """RFC 5051's i;unicode-casemap form: titlecase, then NFKD."""
    if text.isascii():
        return text.upper()
    return unicodedata.normalize("NFKD", "".join(map(str.title, text)))


def _first_address(addrs) -> tuple | None:
    return addrs[0] if addrs else None


def _text(latin1: str | None) -> str:
    return decode_header_text(decode_bytes(latin1.encode("latin-1"))) if latin1 else ""


_QUOTED_PAIR = re.compile(r"\\(.)", re.S)


def _local_part(latin1: str | None) -> str:
    """An address's mailbox as text, a quoted local part unquoted (Dovecot sorts
    ``"q u"@x`` under Q)."""
    text = _text(latin1)
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        text = _QUOTED_PAIR.sub(r"\1", text[1:-1])
    return text


def _mailbox(addrs) -> str:
    addr = _first_address(addrs)
    return casemap(_local_part(addr[2])) if addr else ""


def _display(addrs) -> str:
    addr = _first_address(addrs)
    if addr is None:
        return ""
    name = _text(addr[0]).strip()
    if name:
        return casemap(name)
    if addr[3] is None:  # a group's start marker: its name
        return casemap(_text(addr[2]))
    return casemap(_local_part(addr[2]) + "@" + _text(addr[3]))


def sent_date(value: str | None) -> float | None:
    """A Date field value in seconds since the epoch (UTC), or None when unreadable."""
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_tz(value)
        return float(email.utils.mktime_tz(parsed)) if parsed else None
    except (TypeError, ValueError, OverflowError, IndexError):
        return None


def compute(envelope: dict | None, header: bytes | None) -> SortKeys:
    """The keys of a message from its stored envelope (JSON form, see
    :class:`~mailstore.mime.Envelope`) and raw top-level header block.  Never raises."""
    env = envelope or {}
    subject_raw = env.get("subject")
    subject, reply = base_subject(_text(subject_raw))
    ids = message_ids(env.get("message_id"))
    refs: list[str] = []
    for name, raw in header_fields(header or b""):
        if name and name.lower() == "references":
            refs = message_ids(field_value(raw))
            break
    if not refs:
        refs = message_ids(env.get("in_reply_to"))[:1]
    return SortKeys(
        _mailbox(env.get("from")), _mailbox(env.get("to")), _mailbox(env.get("cc")),
        _display(env.get("from")), _display(env.get("to")), sent_date(env.get("date")),
        casemap(subject), reply, ids[0] if ids else None,
        tuple(refs[-MAX_REFERENCES:]))


def encode(keys: SortKeys) -> bytes:
    """The ``m:sk`` cell: a versioned JSON list."""
    return orjson.dumps([CELL_VERSION, *keys])


def decode(raw: bytes) -> SortKeys | None:
    """The keys in an ``m:sk`` cell, or None if it is not one this version reads."""
    try:
        data = orjson.loads(raw)
        if not isinstance(data, list) or data[0] != CELL_VERSION or len(data) != 11:
            return None
        data[10] = tuple(data[10])
        return SortKeys(*data[1:])
    except (orjson.JSONDecodeError, IndexError, TypeError):
        return None


__all__ = ["SortKeys", "base_subject", "compute", "decode", "encode", "message_ids",
           "sent_date"]
