"""Envelope recipients: which local user (and folder) an RCPT address names.

Pure functions; the store lookups are the handler's.  Every accepted domain shares one name
space of users: ``alice@a.example`` and ``alice@b.example`` are both the user ``alice``.
"""

from __future__ import annotations

from dataclasses import dataclass


class BadAddress(ValueError):
    """An address that is not ``local@domain`` (RFC 5321 4.1.2 Mailbox)."""


class ForeignDomain(ValueError):
    """An address in a domain this server does not accept mail for."""


@dataclass(frozen=True)
class Address:
    """A recipient address split for lookup.

    ``local`` is the local part lower-cased (user names are case-insensitive); ``user`` and
    ``detail`` are its split at the first ``+`` when plus-addressing is on (``detail`` keeps its
    case: it names a folder), else ``user`` is ``local`` and ``detail`` None.
    """

    text: str
    local: str
    domain: str
    user: str
    detail: str | None


def parse_recipient(text: str, domains: list[str], plus_addressing: bool) -> Address:
    """Split an RCPT address; raise BadAddress or ForeignDomain.

    ``domains`` are the accepted domains, lower case.  A quoted local part (``"a b"@x``) is
    refused as malformed: no user name can hold what it quotes.
    """
    local, at, domain = text.rpartition("@")
    if not at or not local or not domain or local.startswith('"'):
        raise BadAddress(text)
    domain = domain.lower().rstrip(".")
    if domain not in domains:
        raise ForeignDomain(text)
    folded = local.lower()
    user, detail = folded, None
    if plus_addressing and "+" in local:
        head, _, tail = local.partition("+")
        if head and tail:
            user, detail = head.lower(), tail
    return Address(text, folded, domain, user, detail)
