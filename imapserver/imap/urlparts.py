"""What an IMAP URL names, for whom: the message data of CATENATE (RFC 4469) and URLFETCH (RFC
4467), checked and then read in chunks.

Who may read what (RFC 4469 3 and 5, RFC 4467 3.3, 6, 7.3):

* a URL **without URLAUTH** is read with the session's own rights: a relative URL names a
  mailbox by the user's own name for it (``Other Users/alice/Team`` for one shared with
  them), an absolute one must name the session's user (RFC 4469 5: the server MUST NOT take
  a plain URL to another user's mail); the user needs ``r`` on the mailbox (RFC 4314 4).
  Only CATENATE takes these.
* a URL **with URLAUTH** (``;URLAUTH=access:INTERNAL:verifier``) is read with the rights its
  verifier grants: the named user's mailbox, if the verifier is the HMAC of the URL's rump
  under that user's current key for the mailbox, ``;EXPIRE=`` has not passed, and the access
  identifier admits the session's user (``anonymous``, ``authuser``: anyone logged in;
  ``user+name``: that user; ``submit+name``: a submission server's login listed in
  ``[imap] urlauth_submit_users``), and the URL's user still has ``r`` on the mailbox the
  URL names by their own name for it (checked at every fetch: a right taken away kills the
  URL, as a RESETKEY does).

Everything a URL could fail on -- syntax, the mailbox, UIDVALIDITY, an expunged UID, a section
the message does not have, the verifier -- is one :class:`BadUrl` with no more detail, so a
URL is no oracle for another user's mailboxes (CATENATE answers ``[BADURL url]``, URLFETCH
``NIL``).  All functions here call the store: run them in the thread pool.
"""

from __future__ import annotations

import datetime
import hmac
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

from mailstore import names, sharing
from mailstore.errors import InvalidName, NotFound, PermissionDenied
from mailstore.mailboxes import Mailbox
from mailstore.messages import BODY, HEADER, SUMMARY, MessageView
from mailstore.urlauth import internal_verifier

from .imapurl import ImapUrl
from .sections import find_part, iter_section, parse_section, resolve

_COLUMNS = [*SUMMARY, BODY, HEADER]
_MESSAGE_TEXTS = ("HEADER", "HEADER.FIELDS", "HEADER.FIELDS.NOT", "TEXT")


class BadUrl(Exception):
    """The URL names nothing this session may read (the text says why, for the log only)."""


@dataclass
class UrlPart:
    """A checked URL: the message it names and the octets of its section.

    ``length`` is exact; :meth:`chunks` reads them from the content store, ``chunk`` octets
    at most at a time, and closes its reader at the end."""

    url: ImapUrl
    mailbox: Mailbox
    view: MessageView
    length: int
    _store: object
    _plan: object

    def chunks(self, raw: bool, chunk: int = 65536) -> Iterator[bytes]:
        reader = self._store.open_message(self.view) if self._plan.needs_content else None
        try:
            _count, data = iter_section(self._plan, reader, self._partial(), chunk, raw=raw)
            yield from data
        finally:
            if reader is not None and hasattr(reader, "close"):
                reader.close()

    def _partial(self) -> tuple[int, int] | None:
        if self.url.partial is None:
            return None
        origin, length = self.url.partial
        return origin, length if length is not None else 2**63


def check_urlauth(store, url: ImapUrl, session_user: str, submit_users: list[str],
                  now: float) -> Mailbox:
    """The mailbox a URLAUTH-authorized URL opens to ``session_user`` (RFC 4467 3.3, 6, 3.4.1);
    BadUrl when it opens nothing."""
    if not (url.absolute and url.user and url.has_urlauth and url.verifier):
        raise BadUrl("not a URLAUTH-authorized URL")
    if (url.mechanism or "").upper() != "INTERNAL":
        raise BadUrl("unknown URLAUTH mechanism")
    if url.expire is not None and expired(url.expire, now):
        raise BadUrl("URL expired")
    if not _admits(url.access, session_user, submit_users):
        raise BadUrl("access identifier does not admit this user")
    owner = _user(url.user)
    # The URL's user must still have r on its mailbox now (RFC 4467 6 with RFC 4314 4:
    # the URL reads with its owner's rights, as they stand at fetch time).
    mailbox = _mailbox(store, owner, url.mailbox)
    key = store.urlauth_key(owner, mailbox)
    if key is None or not hmac.compare_digest(internal_verifier(key, url.rump),
                                              url.verifier.lower()):
        raise BadUrl("verifier does not match")
    return mailbox


def open_url(store, url: ImapUrl, session_user: str, submit_users: list[str], now: float,
             *, plain_allowed: bool) -> UrlPart:
    """Check ``url`` and work out its octets (RFC 4469 3 for CATENATE, RFC 4467 7.3 for
    URLFETCH).  ``plain_allowed``: a URL without URLAUTH may name the session's own mail
    (CATENATE); URLFETCH takes only URLAUTH-authorized URLs."""
    if url.has_urlauth:
        mailbox = check_urlauth(store, url, session_user, submit_users, now)
    else:
        if not plain_allowed:
            raise BadUrl("URLFETCH takes URLAUTH-authorized URLs only")
        if url.absolute and (url.user is None or _user(url.user) != session_user):
            raise BadUrl("URL names another user")  # RFC 4469 5
        mailbox = _mailbox(store, session_user, url.mailbox)
    if url.uidvalidity is not None and url.uidvalidity != mailbox.uidvalidity:
        raise BadUrl("UIDVALIDITY does not match")
    views = [v for v in store.fetch(mailbox, [url.uid], _COLUMNS) if v.uid == url.uid]
    if not views:
        raise BadUrl("no such message (expunged?)")
    view = views[0]
    plan = _plan(url.section, view)
    reader = store.open_message(view) if plan.needs_content else None
    try:
        part = UrlPart(url, mailbox, view, 0, store, plan)
        length, _data = iter_section(plan, reader, part._partial())
    finally:
        if reader is not None and hasattr(reader, "close"):
            reader.close()
    part.length = length
    return part


def _plan(section: str, view: MessageView):
    """The section's plan; BadUrl for a malformed section or one the message does not have
    (FETCH answers such a section with an empty string; a URL to it is a broken reference)."""
    try:
        spec = parse_section(section)
    except ValueError:
        raise BadUrl("malformed section") from None
    if spec.part:
        part = find_part(view.body or {}, spec.part) if view.body else None
        if part is None:
            raise BadUrl("no such section")
        if spec.text in _MESSAGE_TEXTS and not (
                part["type"].lower() == "message" and part["subtype"].lower() == "rfc822"
                and part.get("message") is not None):
            raise BadUrl("section is not an encapsulated message")
    try:
        return resolve(spec, view.body, view.header, view.record.size, view.record.header_size)
    except ValueError:
        raise BadUrl("section cannot be resolved") from None


def _mailbox(store, user: str, name: str | None) -> Mailbox:
    """The mailbox ``user`` calls ``name`` (``Other Users/alice/Team`` included, RFC 2342),
    if ``user`` may read it (RFC 4314 4: ``r``); BadUrl otherwise, the same for a mailbox
    hidden, unreadable or missing (RFC 4314 6: no oracle)."""
    if not name:
        raise BadUrl("no mailbox")
    try:
        return sharing.open_mailbox(store, user, name, "r")[0]
    except (NotFound, PermissionDenied, InvalidName):
        raise BadUrl("no such mailbox") from None


def _user(name: str) -> str:
    try:
        return names.normalize_user(name)
    except InvalidName:
        raise BadUrl("invalid user") from None


def _admits(access: str | None, session_user: str, submit_users: list[str]) -> bool:
    """RFC 4467 3's access identifiers."""
    kind, _, who = (access or "").partition("+")
    kind = kind.lower()
    if kind in ("anonymous", "authuser"):
        return True  # every session here is authenticated; there are no anonymous logins
    if kind == "user":
        return _same_user(who, session_user)
    if kind == "submit":
        return session_user in submit_users
    return False


def _same_user(name: str, session_user: str) -> bool:
    try:
        return names.normalize_user(urllib.parse.unquote(name)) == session_user
    except InvalidName:
        return False


def expired(stamp: str, now: float) -> bool:
    """RFC 4467 3: a URL is not valid at or after its ``;EXPIRE=`` (an RFC 3339 date-time)."""
    try:
        when = datetime.datetime.fromisoformat(stamp.upper().replace("Z", "+00:00"))
    except ValueError:
        return True
    if when.tzinfo is None:
        return True
    return when.timestamp() <= now
