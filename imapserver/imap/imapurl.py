"""IMAP URLs (RFC 5092) as CATENATE (RFC 4469) and URLAUTH (RFC 4467) take them.

The part of RFC 5092's grammar that names message data, which is all these commands use::

    imapurl        = "imap://" iserver "/" imessagepart [iurlauth]      ; 3, absolute
    iserver        = [iuserinfo "@"] host [":" port]
    iuserinfo      = enc-user [iauth] / [enc-user] iauth                ; iauth is ignored
    imessagepart   = imailbox-ref iuid [isection] [ipartial]
    imailbox-ref   = enc-mailbox [uidvalidity]
    uidvalidity    = ";UIDVALIDITY=" nz-number
    iuid           = "/" ";UID=" nz-number
    isection       = "/" ";SECTION=" enc-section
    ipartial       = "/" ";PARTIAL=" number ["." nz-number]
    iurlauth       = iurlauth-rump [iua-verifier]                       ; RFC 5092 3
    iurlauth-rump  = [";EXPIRE=" date-time] ";URLAUTH=" access
    access         = ("submit+" enc-user) / ("user+" enc-user) / "authuser" / "anonymous"
    iua-verifier   = ":" uauth-mechanism ":" enc-urlauth                ; 32*HEXDIG

Relative forms (RFC 5092 7.2, resolved against ``imap://user@host/`` or, when a mailbox is
selected, against that mailbox's URL ``imap://user@host/mailbox;UIDVALIDITY=n/``, as Dovecot's
``imap_msgpart_url_parse`` does)::

    "/" imessagepart                 ; a message of any of the user's mailboxes
    iuid [isection] [ipartial]       ; ";UID=20/;SECTION=1": a message of the selected mailbox

Parameter names are case-insensitive; the mailbox name and the section are %-encoded UTF-8
(RFC 5092 3.1; we keep mailbox names as Unicode text, so no modified UTF-7 step is needed).
Malformed URLs raise :class:`UrlError`; what the URL names is checked elsewhere
(:mod:`imapserver.imap.urlparts`).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

__all__ = ["ImapUrl", "UrlError", "parse_url"]


class UrlError(ValueError):
    """A URL that does not follow RFC 5092's grammar (or names no message part)."""


@dataclass(frozen=True)
class ImapUrl:
    """One parsed URL naming a message or a part of one.

    ``user`` is the URL's userid (None in a relative URL: the session's user), ``absolute``
    whether it began with ``imap://``.  ``rump`` is the URL up to and including the URLAUTH
    access identifier (RFC 4467 3), exactly as sent: the text its verifier is computed over.
    ``mechanism``/``verifier`` are the iua-verifier's, when present.
    """

    text: str
    absolute: bool
    user: str | None
    host: str | None
    mailbox: str | None       # None: the selected mailbox (a ";UID=" relative URL)
    uidvalidity: int | None
    uid: int
    section: str = ""
    partial: tuple[int, int | None] | None = None
    expire: str | None = None
    access: str | None = None
    mechanism: str | None = None
    verifier: str | None = None
    rump: str | None = None

    @property
    def has_urlauth(self) -> bool:
        return self.access is not None


_NZ = re.compile(r"[1-9][0-9]{0,9}\Z")
_PARAM = re.compile(r"(/?);([A-Za-z]+)=([^;/]*)")
_ACCESS = re.compile(r"(?:(submit|user)\+([^:;/]+)|(authuser)|(anonymous))\Z", re.IGNORECASE)
_VERIFIER = re.compile(r":([A-Za-z0-9.-]+):([0-9A-Fa-f]{32,})\Z")
# RFC 3339 date-time (RFC 4467 3 uses it for ;EXPIRE=).
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})\Z",
                        re.IGNORECASE)
# Order of the parameters after the mailbox (RFC 5092 3), with the "/" each is preceded by.
_ORDER = {"UIDVALIDITY": (0, ""), "UID": (1, "/"), "SECTION": (2, "/"), "PARTIAL": (3, "/"),
          "EXPIRE": (4, ""), "URLAUTH": (5, "")}


def _number(text: str, what: str) -> int:
    if not _NZ.match(text) or int(text) > 2**32 - 1:
        raise UrlError(f"invalid {what}: {text!r}")
    return int(text)


def _decode(text: str, what: str) -> str:
    try:
        return urllib.parse.unquote(text, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise UrlError(f"{what} is not %-encoded UTF-8") from None


def parse_url(text: str, *, selected: str | None = None) -> ImapUrl:
    """Parse an IMAP URL naming a message or message part.

    :param text: the URL as the client sent it
    :param selected: the name of the selected mailbox, for ``;UID=`` relative URLs
    :raises UrlError: malformed, or not naming a message (no ``;UID=``)
    """
    if any(c in text for c in " \r\n\x00\"") or not text:
        raise UrlError("URL holds characters RFC 5092 does not allow")
    user = host = None
    absolute = text[:7].lower() == "imap://"
    if absolute:
        rest = text[7:]
        slash = rest.find("/")
        if slash < 0:
            raise UrlError("URL names no message")
        server, path = rest[:slash], rest[slash + 1:]
        if "@" in server:
            userinfo, host = server.rsplit("@", 1)
            userinfo = userinfo.split(";", 1)[0]  # ;AUTH=... is about logging in: ignored
            user = _decode(userinfo, "user") or None
        else:
            host = server
        if not host:
            raise UrlError("URL names no host")
        mailbox_text, params_text = _split_mailbox(path)
    elif text.startswith("//"):
        raise UrlError("network-path references are not supported")
    elif text.startswith("/"):
        mailbox_text, params_text = _split_mailbox(text[1:])
    elif text.startswith(";"):
        if selected is None:
            raise UrlError("a relative URL without a mailbox needs a selected mailbox")
        mailbox_text, params_text = None, "/" + text
    else:
        raise UrlError("not an IMAP URL")
    mailbox = None
    if mailbox_text is not None:
        mailbox = _decode(mailbox_text, "mailbox name")
        if not mailbox:
            raise UrlError("URL names no mailbox")
    values: dict[str, str] = {}
    last = -1
    pos = 0
    for match in _PARAM.finditer(params_text):
        if match.start() != pos:
            raise UrlError(f"unexpected text in URL: {params_text[pos:match.start()]!r}")
        slash, name, value = match.group(1), match.group(2).upper(), match.group(3)
        order = _ORDER.get(name)
        if order is None or order[0] <= last or slash != order[1]:
            raise UrlError(f"unexpected URL parameter ;{match.group(2)}=")
        last = order[0]
        values[name] = value
        pos = match.end()
        if name == "URLAUTH":
            break
    if params_text[pos:]:
        raise UrlError(f"unexpected text in URL: {params_text[pos:]!r}")
    if "UID" not in values:
        raise UrlError("URL names no message (;UID= missing)")
    if "UIDVALIDITY" in values and mailbox_text is None:
        raise UrlError("unexpected URL parameter ;UIDVALIDITY=")
    access = mechanism = verifier = rump = None
    if "URLAUTH" in values:
        value = values["URLAUTH"]
        found = _VERIFIER.search(value)
        if found is not None:
            mechanism, verifier = found.group(1), found.group(2).lower()
            value = value[:found.start()]
        elif ":" in value:
            raise UrlError("malformed URLAUTH verifier")
        if not _ACCESS.match(value):
            raise UrlError(f"unknown URLAUTH access identifier {value!r}")
        access = value
        rump = text[:len(text) - len(found.group(0))] if found is not None else text
    if "EXPIRE" in values and not _DATE_TIME.match(values["EXPIRE"]):
        raise UrlError("malformed ;EXPIRE= date-time (RFC 3339)")
    partial = None
    if "PARTIAL" in values:
        origin, _, length = values["PARTIAL"].partition(".")
        if not origin.isdigit() or (length and not _NZ.match(length)):
            raise UrlError("malformed ;PARTIAL=")
        partial = (int(origin), int(length) if length else None)
    return ImapUrl(
        text=text, absolute=absolute, user=user, host=host, mailbox=mailbox if mailbox
        is not None else selected,
        uidvalidity=_number(values["UIDVALIDITY"], "UIDVALIDITY") if "UIDVALIDITY" in values
        else None,
        uid=_number(values["UID"], "UID"),
        section=_decode(values.get("SECTION", ""), "section"),
        partial=partial, expire=values.get("EXPIRE"), access=access, mechanism=mechanism,
        verifier=verifier, rump=rump)


def _split_mailbox(path: str) -> tuple[str, str]:
    """``INBOX/sub;UIDVALIDITY=1/;UID=2`` -> (``INBOX/sub``, ``;UIDVALIDITY=1/;UID=2``).
    A ``;`` cannot be part of an encoded mailbox name (it is %3B there), so the first one ends
    it; the ``/`` before ``;UID=`` (when there is no UIDVALIDITY) is not part of the name."""
    semi = path.find(";")
    if semi < 0:
        raise UrlError("URL names no message")
    mailbox, params = path[:semi], path[semi:]
    if mailbox.endswith("/"):
        mailbox, params = mailbox[:-1], "/" + params
    return mailbox, params


def resp_text(url: str) -> str:
    """``url`` as BADURL's url-resp-text (RFC 4469 6): no CR, LF or ``]``."""
    return url.replace("]", "%5D").replace("\r", "").replace("\n", "")
