"""A ManageSieve session's state: who is logged in, whether TLS is on, what is announced."""

from __future__ import annotations

from mailstore.sieve.validate import EXTENSIONS

from .context import AUTH, NOT_AUTH

IMPLEMENTATION = "hbase-imap ManageSieve"
MAX_REDIRECTS = 4
"""Redirects one script run may make, announced as MAXREDIRECTS (RFC 5804 1.7), when the
configuration has no ``[sieve] max_redirects`` (the interpreter's limit, which wins)."""


def max_redirects(cfg) -> int:
    try:
        return int(cfg["sieve"]["max_redirects"])
    except KeyError:
        return MAX_REDIRECTS


class Session:
    def __init__(self, server, conn):
        self.server = server
        self.conn = conn
        self.user: str | None = None
        self.tls = False

    @property
    def state(self) -> str:
        return NOT_AUTH if self.user is None else AUTH

    def plaintext_allowed(self) -> bool:
        """PLAIN and LOGIN send the password in the clear: before TLS only as ``[imap]
        plaintext_auth`` allows the IMAP side (RFC 5804 2.1, RFC 8314)."""
        if self.tls:
            return True
        policy = self.server.cfg["imap"]["plaintext_auth"]
        if policy == "yes":
            return True
        if policy == "loopback":
            host = getattr(self.conn.transport.getPeer(), "host", "")
            return host.startswith("127.") or host == "::1"
        return False

    def capabilities(self) -> list[tuple[str, str | None]]:
        """RFC 5804 1.7: (name, value) pairs, in the order they are written."""
        caps: list[tuple[str, str | None]] = [
            ("IMPLEMENTATION", IMPLEMENTATION),
            # No mechanism is offered where none would be accepted (Dovecot does the same).
            ("SASL", "PLAIN LOGIN" if self.plaintext_allowed() else ""),
            ("SIEVE", " ".join(EXTENSIONS)),
        ]
        if not self.tls and self.server.tls_context is not None:
            caps.append(("STARTTLS", None))
        caps += [("MAXREDIRECTS", str(max_redirects(self.server.cfg))), ("UNAUTHENTICATE", None),
                 ("VERSION", "1.0")]
        if self.user is not None:
            caps.append(("OWNER", self.user))
        return caps
