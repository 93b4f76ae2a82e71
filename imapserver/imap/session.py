"""Per-connection state: who is logged in, what is selected, what was enabled."""

from __future__ import annotations

from .context import AUTH, NOT_AUTH, SELECTED

QUOTA_CAPABILITIES = ("QUOTA", "QUOTA=RES-STORAGE", "QUOTA=RES-MESSAGE")
"""RFC 9208 1, 5.1, 5.2: QUOTA and its resources (STATUS DELETED and DELETED-STORAGE come
with them); not QUOTASET, since SETQUOTA is refused."""


class Session:
    def __init__(self, server, conn):
        self.server = server
        self.conn = conn
        self.user: str | None = None
        self.selected = None  # SelectedMailbox
        self.enabled: set[str] = set()
        self.notify = None  # NotifyState while NOTIFY SET is in force (RFC 5465)
        self.tls = getattr(server, "implicit_tls", False)

    @property
    def state(self) -> str:
        if self.user is None:
            return NOT_AUTH
        return SELECTED if self.selected is not None else AUTH

    def plaintext_allowed(self) -> bool:
        """RFC 3501 6.2.3 / RFC 8314: no cleartext passwords before TLS unless configured."""
        if self.tls:
            return True
        policy = self.server.cfg["imap"]["plaintext_auth"]
        if policy == "yes":
            return True
        if policy == "loopback":
            peer = self.conn.transport.getPeer()
            host = getattr(peer, "host", "")
            return host.startswith("127.") or host == "::1"
        return False

    def append_limit(self) -> int:
        """RFC 7889: the largest message APPEND accepts, the smaller of the literal limit and
        the store's message size limit (announcing more would promise what APPEND refuses)."""
        limit = self.server.cfg["imap"]["max_literal_size"]
        return min(limit, getattr(self.server.store, "max_message_size", limit))

    def capabilities(self) -> list[str]:
        # RFC 9051 7.2.2: a server speaking both lists both; ENABLE IMAP4rev2 switches.
        caps = ["IMAP4rev1", "IMAP4rev2", "LITERAL+", "SASL-IR", "ID", "ENABLE", "IDLE",
                "NAMESPACE", "UIDPLUS", "MOVE", "UNSELECT", "CHILDREN", "SPECIAL-USE",
                "LIST-EXTENDED", "LIST-STATUS", "MULTIAPPEND", "ESEARCH", "SEARCHRES", "WITHIN",
                "CONTEXT=SEARCH", "CONTEXT=SORT", "SORT", "SORT=DISPLAY", "THREAD=ORDEREDSUBJECT",
                "THREAD=REFERENCES", "ESORT", f"APPENDLIMIT={self.append_limit()}",
                "STATUS=SIZE", "OBJECTID", "SAVEDATE", "PREVIEW", "BINARY"]
        caps += ["CREATE-SPECIAL-USE", *QUOTA_CAPABILITIES]  # RFC 6154 3, RFC 9208
        caps += ["CONDSTORE", "QRESYNC"]  # RFC 7162
        caps.append("REPLACE")  # RFC 8508 3.1
        caps += ["METADATA", "METADATA-SERVER"]  # RFC 5464 1
        caps.append("CATENATE")  # RFC 4469 2
        caps += ["URLAUTH", "URL-PARTIAL"]  # RFC 4467 2; RFC 5550: ;PARTIAL= in URLs
        caps.append("COMPRESS=DEFLATE")  # RFC 4978 3 (the command needs a login)
        caps.append("NOTIFY")  # RFC 5465
        caps += ["ACL", "RIGHTS=texk", "LIST-MYRIGHTS"]  # RFC 4314 2.1.1, 3; RFC 8440
        caps.append("UTF8=ACCEPT")  # RFC 6855 3 (switched on by ENABLE)
        if self.user is None:
            if not self.tls and self.server.tls_context is not None:
                caps.append("STARTTLS")
            if self.plaintext_allowed():
                caps += ["AUTH=PLAIN", "AUTH=LOGIN"]
            else:
                caps.append("LOGINDISABLED")
        if self.user is not None:
            caps.append("UNAUTHENTICATE")  # once there is a login to undo (RFC 8437 3 MAY)
        return caps

    def close(self) -> None:
        self.server.watchers.unwatch(self)
        if self.notify is not None:
            self.notify.stop()
        if self.user is not None:
            self.server.user_logged_out(self.user)
            self.user = None
        self.selected = None

    def unauthenticate(self) -> None:
        """RFC 8437 3: back to the not authenticated state, keeping only TLS.  The selected
        mailbox is closed without expunging, IDLE's watch dropped, ENABLEd extensions forgotten
        (4.1), the user's session count given back."""
        self.close()
        self.enabled = set()
