"""SASL PLAIN (RFC 4616) responses, read the same way by IMAP and ManageSieve.

    message = [authzid] UTF8NUL authcid UTF8NUL passwd
"""

from __future__ import annotations


class MalformedResponse(ValueError):
    """Not three NUL-separated fields."""


class ProxyRefused(ValueError):
    """An authorization identity other than the authentication one: no proxy logins here."""


def parse_plain(data: bytes) -> tuple[str, str]:
    """(user, password) of a PLAIN response; undecodable octets become U+FFFD (the login
    then fails like any wrong name or password)."""
    parts = data.split(b"\x00")
    if len(parts) != 3:
        raise MalformedResponse("Malformed PLAIN response")
    authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
    if authzid and authzid.lower() != user.lower():
        raise ProxyRefused("Proxy authorization is not supported")
    return user, password
