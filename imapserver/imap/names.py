"""Mailbox names on the wire: modified UTF-7 (RFC 3501 5.1.3), or UTF-8 once the session has
enabled IMAP4rev2 or UTF8=ACCEPT (RFC 9051 5.1, RFC 6855 3), and LIST patterns (6.3.8).

Names are stored in one form, as text (mailstore/names.py); only their spelling on the wire
depends on the session, so a name created by a UTF-8 client is listed to a modified UTF-7
client as modified UTF-7 and the other way round.
"""

from __future__ import annotations

import re
import unicodedata

import twisted.mail.imap4  # noqa: F401  (registers the "imap4-utf-7" codec)

from .context import Bad, No
from .wire import Atom, astring

DELIMITER = "/"


def decode_name(token, utf8: bool = False) -> str:
    """A mailbox name argument as text.

    Names in modified UTF-7 are decoded strictly (a name that does not survive the round trip is
    refused with NO, as Dovecot does: the command is well formed, RFC 3501 5.1.3 only makes
    such a name unusable); 8-bit names are taken as UTF-8, which some clients send without
    UTF8=ACCEPT.  With ``utf8`` (the session enabled IMAP4rev2 or UTF8=ACCEPT) names are UTF-8
    and ``&`` is an ordinary character (RFC 9051 5.1, RFC 6855 3: modified UTF-7 is not used
    once UTF-8 is); a name that is not valid UTF-8 is refused with NO.
    """
    name = _decode(token, utf8)
    if name is None:
        raise No("Mailbox name is not valid " + ("UTF-8" if utf8 else "modified UTF-7"))
    return name


def decode_pattern(token, utf8: bool = False) -> str | None:
    """A LIST/LSUB reference or pattern argument as text; ``None`` when it is not valid
    modified UTF-7 (or, with ``utf8``, UTF-8), so that no name can match it (Dovecot answers
    OK with no names)."""
    return _decode(token, utf8)


def _decode(token, utf8: bool = False) -> str | None:
    if isinstance(token, Atom):
        raw = str(token).encode("ascii")
    elif isinstance(token, bytes):
        raw = token
    else:
        raise Bad("expected a mailbox name")
    if not raw.isascii() or utf8:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    text = raw.decode("ascii")
    if "&" not in text:
        return text
    try:
        decoded = raw.decode("imap4-utf-7")
    except (UnicodeDecodeError, ValueError):
        return None
    if decoded.encode("imap4-utf-7") != raw:
        return None
    return decoded


def encode_name(name: str, utf8: bool = False) -> bytes:
    """A mailbox name for a response, as an astring: modified UTF-7, or with ``utf8`` (the
    session enabled IMAP4rev2 or UTF8=ACCEPT) UTF-8, quoted when it can be (RFC 9051 and
    RFC 6855 3 allow UTF-8 in quoted strings)."""
    if utf8:
        return astring(name.encode("utf-8"), utf8=True)
    return astring(name.encode("imap4-utf-7"))


def response_text(text: str, utf8: bool) -> bytes:
    """The human-readable text of a status response.  Mailbox names end up in it (``Mailbox
    does not exist: ...``, the store's error texts); a session that has not enabled UTF-8
    gets 7-bit text (RFC 3501 9: TEXT-CHAR), with non-ASCII text spelt in modified UTF-7 so
    a name reads as the client spells it.  UTF-8 sessions get UTF-8 (RFC 9051 9 ``text``,
    RFC 6855 3)."""
    if utf8 or text.isascii():
        return text.encode("utf-8", "replace")
    return text.encode("imap4-utf-7")


def normalize_new_name(name: str) -> str:
    """The name a UTF-8 session's CREATE or RENAME gives a new mailbox: its Unicode NFC form
    (RFC 9051 5.1: mailbox names comply with Net-Unicode, RFC 5198 2, which asks for NFC), so
    that a name typed on two systems that compose accents differently is one mailbox.  The
    caller reports a change with LIST's OLDNAME (RFC 9051 6.3.4, 6.3.6)."""
    return unicodedata.normalize("NFC", name)


def pattern_regex(reference: str, pattern: str) -> re.Pattern:
    """LIST matching: ``*`` matches anything, ``%`` anything but the delimiter (6.3.8).

    INBOX is case-insensitive (RFC 3501 5.1), also where wildcards match it: ``*box`` and
    ``in%`` list INBOX, as in Dovecot.  Other names match case-sensitively; a pattern that
    starts with INBOX in any case reaches INBOX's children too.
    """
    full = reference + pattern
    out = []
    for ch in full:
        if ch == "*":
            out.append(".*")
        elif ch == "%":
            out.append("[^" + re.escape(DELIMITER) + "]*")
        else:
            out.append(re.escape(ch))
    regex = "".join(out)
    # INBOX is case-insensitive, also as a pattern prefix.
    if full[:5].upper() == "INBOX" and (len(full) == 5 or full[5] in (DELIMITER, "*", "%")):
        regex = "(?i:INBOX)" + "".join(out[5:])
    return re.compile("^(?:(?=INBOX$)(?i:" + regex + ")|" + regex + ")$", re.DOTALL)


def lsub_names(subscribed, reference: str, pattern: str) -> list[tuple[str, bool]]:
    """The names LSUB answers (RFC 3501 6.3.9), each with whether it is only there as the
    parent of subscribed names (to be flagged ``\\Noselect``).

    A subscribed name is answered when it matches.  When the pattern ends with ``%``, a
    subscribed name it does not match makes its nearest ancestor that does match answered
    instead ("foo/bar" subscribed, "foo" not: ``LSUB "" %`` returns foo, not foo/bar); a
    subscribed ancestor is answered as itself.  Dovecot decides the same way: only a ``%``
    that stopped at a hierarchy delimiter lifts a name to its parent, so ``*A`` or ``%/A``
    add no parents.

    :param subscribed: the subscribed names (any iterable)
    :return: ``(name, parent_only)`` pairs, INBOX first, then by name
    """
    subscribed = set(subscribed)
    regex = pattern_regex(reference, pattern)
    lift = (reference + pattern).endswith("%")
    out: dict[str, bool] = {}
    for name in subscribed:
        if regex.match(name):
            out[name] = False
            continue
        parent = nearest_matching_ancestor(name, [regex]) if lift else None
        if parent is not None and parent not in subscribed:
            out.setdefault(parent, True)
    return sorted(out.items(), key=lambda item: (item[0] != "INBOX", item[0]))


def nearest_matching_ancestor(name: str, regexes) -> str | None:
    """The closest ancestor of ``name`` (``a/b`` for ``a/b/c``, then ``a``) that one of the
    compiled patterns matches, or None."""
    parent = name
    while DELIMITER in parent:
        parent = parent.rsplit(DELIMITER, 1)[0]
        if any(r.match(parent) for r in regexes):
            return parent
    return None


def recursive_match_parents(subscribed, regexes) -> set[str]:
    """The names LIST (SUBSCRIBED RECURSIVEMATCH) answers with ``CHILDINFO ("SUBSCRIBED")``
    because of a subscribed descendant that is not answered itself (RFC 5258 sections 3.5 and
    4, example 9: ``baz2`` is left out when all its subscribed children match ``*2``).

    Each subscribed name that matches none of the patterns makes its nearest matching ancestor
    answered -- only the nearest, as Dovecot does: with ``("F" "F/B")`` and ``F/B/c``
    subscribed, ``F/B`` carries the CHILDINFO and ``F`` is not listed.
    """
    out = set()
    for name in subscribed:
        if not any(r.match(name) for r in regexes):
            parent = nearest_matching_ancestor(name, regexes)
            if parent is not None:
                out.add(parent)
    return out
