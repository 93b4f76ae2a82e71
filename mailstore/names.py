"""Validation and normalisation of user and mailbox names.

Names reach the store from IMAP clients, SMTP envelopes and admin scripts; they become row keys
(``user NUL name``), so anything that could break a key layout or confuse a listing is refused
here, before any row is touched.  The hierarchy delimiter is ``/``.
"""

from __future__ import annotations

import functools
import re

from .errors import InvalidName

DELIMITER = "/"
MAX_USER_LEN = 255
MAX_MAILBOX_BYTES = 1000
MAX_DEPTH = 64

_USER_RE = re.compile(r"^[a-z0-9][a-z0-9._+@-]*$")
# IMAP list wildcards and NUL/controls can never be part of a stored name (RFC 3501 5.1).
_BAD_MAILBOX_CHARS = re.compile(r"[\x00-\x1f\x7f*%]")


def normalize_user(name: str) -> str:
    """User names are case-insensitive; stored lower case.  Raise InvalidName if unusable."""
    if not isinstance(name, str):
        raise InvalidName("user name must be text")
    try:
        return _normalize_user(name.strip())  # the cache keeps names, not their padding
    except InvalidName:
        raise InvalidName(f"invalid user name: {name!r}") from None


# Both normalisations are pure and run on every delivery and APPEND (twice each): the names a
# process sees repeat, so their results are kept (a failure raises and is not kept).
@functools.lru_cache(maxsize=8192)
def _normalize_user(name: str) -> str:
    user = name.lower()
    if not user or len(user) > MAX_USER_LEN or not _USER_RE.match(user):
        raise InvalidName(f"invalid user name: {name!r}")
    return user


def normalize_mailbox(name: str) -> str:
    """Canonical form of a mailbox name; raise InvalidName if the store cannot hold it.

    ``INBOX`` is case-insensitive (RFC 3501 5.1), also as the first level of a hierarchy, so
    ``inbox/x`` is stored as ``INBOX/x``.  Other names keep their case.  Empty levels, leading or
    trailing delimiters, ``.``/``..`` levels, wildcards and control characters are refused.
    """
    if not isinstance(name, str) or not name:
        raise InvalidName("mailbox name is empty")
    return _normalize_mailbox(name)


@functools.lru_cache(maxsize=8192)
def _normalize_mailbox(name: str) -> str:
    if _BAD_MAILBOX_CHARS.search(name):
        raise InvalidName(f"mailbox name has a forbidden character: {name!r}")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidName(f"mailbox name is not valid text: {name!r}") from None
    if len(encoded) > MAX_MAILBOX_BYTES:
        raise InvalidName("mailbox name is too long")
    levels = name.split(DELIMITER)
    if len(levels) > MAX_DEPTH:
        raise InvalidName("mailbox name is nested too deeply")
    for level in levels:
        if not level.strip():
            raise InvalidName(f"mailbox name has an empty level: {name!r}")
        if level in (".", ".."):
            raise InvalidName(f"mailbox name has a '{level}' level: {name!r}")
    if levels[0].upper() == "INBOX":
        levels[0] = "INBOX"
    return DELIMITER.join(levels)


def parent_names(name: str) -> list[str]:
    """The names of every ancestor of ``name``, outermost first (``a/b/c`` -> ``a``, ``a/b``)."""
    levels = name.split(DELIMITER)
    return [DELIMITER.join(levels[:i]) for i in range(1, len(levels))]
