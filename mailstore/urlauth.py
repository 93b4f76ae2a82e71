"""URLAUTH mailbox access keys (RFC 4467 3.2, 3.4.1): one secret per user and mailbox.

A URLAUTH-authorized URL carries a verifier that the ``INTERNAL`` mechanism computes from the
URL's rump and the access key of the mailbox it names; a URL is only good while that key
exists, so ``RESETKEY`` (a new key, or none) revokes every URL made with the old one.  Keys
are rows of ``JAMES_URLAUTH_KEYS`` keyed by user and mailbox UUID (docs/decisions/0020): a
mailbox deleted and created again under the same name has a new UUID and so no key, and the
URLs made for the old one stay dead.

The verifier is HMAC-SHA1 (RFC 2104) of the rump's UTF-8 octets under the key, in lower-case
hex -- the mechanism RFC 4467 3.4.1 recommends and the one Dovecot's INTERNAL uses.
"""

from __future__ import annotations

import hashlib
import hmac
import os

from . import keys
from .backends.base import Backend, delete_rows
from .schema import URLAUTH_KEYS

KEY_COLUMN = b"k:internal"
KEY_BYTES = 32
"""256 random bits; RFC 4467 3.4.1 asks for at least 128."""


def internal_verifier(key: bytes, rump: str) -> str:
    """The ``INTERNAL`` mechanism's token for ``rump`` (RFC 4467 3.4.1): HMAC-SHA1, hex."""
    return hmac.new(key, rump.encode("utf-8"), hashlib.sha1).hexdigest()


class UrlauthKeys:
    """The access keys of every user, over one backend table."""

    def __init__(self, backend: Backend, user_keys: keys.UserKeys | None = None):
        self.rows = backend.table(URLAUTH_KEYS.name)
        self.keys = user_keys or keys.UserKeys()

    def get(self, user: str, mailbox_id: bytes) -> bytes | None:
        """``user``'s key for the mailbox, or None when there is none (never made, or reset)."""
        return self.rows.row(self.keys.urlauth_key(user, mailbox_id), [KEY_COLUMN]).get(KEY_COLUMN)

    def get_or_create(self, user: str, mailbox_id: bytes) -> bytes:
        """The key, made now if there is none (GENURLAUTH, RFC 4467 7.2).  Two sessions
        making one at once agree on one by check-and-put: the loser reads the winner's."""
        row = self.keys.urlauth_key(user, mailbox_id)
        key = self.get(user, mailbox_id)
        if key is not None:
            return key
        fresh = os.urandom(KEY_BYTES)
        if self.rows.check_and_put(row, KEY_COLUMN, None, KEY_COLUMN, fresh):
            return fresh
        key = self.get(user, mailbox_id)
        if key is None:  # reset between the two reads: try once more, from scratch
            return self.get_or_create(user, mailbox_id)
        return key

    def reset(self, user: str, mailbox_id: bytes) -> None:
        """RESETKEY mailbox (RFC 4467 7.1): a new key for the mailbox, revoking the old one."""
        self.rows.put(self.keys.urlauth_key(user, mailbox_id), {KEY_COLUMN: os.urandom(KEY_BYTES)})

    def drop(self, user: str, mailbox_id: bytes) -> None:
        """Forget the key of one mailbox (it is being deleted)."""
        self.rows.delete(self.keys.urlauth_key(user, mailbox_id))

    def reset_all(self, user: str) -> int:
        """RESETKEY without arguments (RFC 4467 7.1): remove every key of ``user``; how many."""
        return delete_rows(self.rows, prefix=self.keys.urlauth_user_prefix(user))
