"""The per-session switches of IMAP4rev2 (RFC 9051) and UTF8=ACCEPT (RFC 6855).

    enable  = "ENABLE" 1*(SP capability)          ; RFC 9051 6.3.1, RFC 5161
    capability =/ "IMAP4rev2" / "UTF8=ACCEPT"     ; RFC 9051 7.2.2, RFC 6855 3

Both are switched on by the one ENABLE handler (commands/basic.py) and kept in
``session.enabled``; the points that render differently ask these functions:

* IMAP4rev2 (RFC 9051 Appendix E): no ``RECENT`` response and no ``\\Recent`` flag (the session
  does not claim \\Recent at all, so an IMAP4rev1 session still sees those messages as recent),
  no ``OK [UNSEEN]`` at SELECT but an untagged ``LIST`` of the mailbox, ``ESEARCH`` answers to
  every SEARCH, no ``RECENT``/``NEW``/``OLD`` search keys or ``STATUS RECENT`` (gone from the
  grammar: BAD), LIST with LIST-EXTENDED's ``\\NonExistent``, ``OLDNAME`` after RENAME, and
  mailbox names in UTF-8.
* UTF8=ACCEPT (RFC 6855 3, 4): mailbox names in UTF-8, ``APPEND ... UTF8 (literal)`` accepted,
  ``SEARCH CHARSET`` refused with BAD, and SORT/THREAD with a charset other than UTF-8 too
  (erratum 4029).
"""

from __future__ import annotations

from .context import Bad
from .search_parse import RecentKey, walk

IMAP4REV2, UTF8_ACCEPT = "IMAP4rev2", "UTF8=ACCEPT"
ENABLEABLE = (IMAP4REV2, UTF8_ACCEPT)
"""What ENABLE switches on here besides CONDSTORE/QRESYNC, spelt as ENABLED echoes them."""


def _enabled(session) -> set[str]:
    return getattr(session, "enabled", None) or set()


def rev2(session) -> bool:
    """Whether the session has enabled IMAP4rev2 (RFC 9051 6.3.1)."""
    return IMAP4REV2 in _enabled(session)


def utf8_accept(session) -> bool:
    """Whether the session has enabled UTF8=ACCEPT (RFC 6855 3)."""
    return UTF8_ACCEPT in _enabled(session)


def utf8_names(session) -> bool:
    """Whether mailbox names go in UTF-8 rather than modified UTF-7: after ENABLE IMAP4rev2
    (RFC 9051 5.1) or ENABLE UTF8=ACCEPT (RFC 6855 3)."""
    return rev2(session) or utf8_accept(session)


def check_charset(session, tokens: list) -> None:
    """RFC 6855 3: once UTF8=ACCEPT is enabled, a SEARCH with ``CHARSET`` is BAD (every
    string is UTF-8).  ``tokens``: the search's arguments after any RETURN options.  Asked
    before the search is parsed, so an unknown charset is BAD here too, not NO [BADCHARSET]."""
    if utf8_accept(session) and tokens and isinstance(tokens[0], str) \
            and tokens[0].upper() == "CHARSET":
        raise Bad("SEARCH CHARSET is not allowed after ENABLE UTF8=ACCEPT (RFC 6855 3)")


def check_sort_charset(session, token) -> None:
    """RFC 6855 3 as corrected by its verified erratum 4029: once UTF8=ACCEPT is enabled, a
    command whose charset is mandatory (SORT, THREAD) SHOULD be BAD for any charset but
    UTF-8 (the strings are UTF-8 whatever the label says)."""
    if utf8_accept(session) and str(token).upper() != "UTF-8":
        raise Bad("Only the UTF-8 charset after ENABLE UTF8=ACCEPT (RFC 6855 3, erratum 4029)")


def check_keys(session, program) -> None:
    """RFC 9051 has no ``RECENT``, ``NEW`` or ``OLD`` search keys (section 9, search-key;
    Appendix E: \\Recent is gone): BAD once IMAP4rev2 is enabled, in SEARCH, SORT and THREAD
    criteria alike (NEW and OLD parse to trees holding RECENT)."""
    if rev2(session) and any(isinstance(k, RecentKey) for k in walk(program.key)):
        raise Bad("RECENT, NEW and OLD are not IMAP4rev2 search keys (RFC 9051 9)")
