"""URLAUTH mailbox access keys in the store (RFC 4467 3.2, 7.1, 3.4.1), on both backends.

A URL is honoured only while the key it was made with exists: RESETKEY of a mailbox replaces
the key, RESETKEY without one removes them all, and a mailbox deleted and created again has
no key (docs/decisions/0020-urlauth-keys.md).
"""

from __future__ import annotations

import pytest

from mailstore.errors import NotFound
from mailstore.store import MailStore
from mailstore.urlauth import internal_verifier


@pytest.fixture
def store(backend):
    s = MailStore(backend)
    s.create_user("joe", "pw")
    s.create_user("fred", "pw")
    s.create_mailbox("joe", "Notes")
    return s


def test_key_made_once_and_kept(store):
    """RFC 4467 7.2: GENURLAUTH makes the mailbox key when there is none; later calls and
    other readers see the same key (a URL verifies until RESETKEY)."""
    inbox = store.mailbox("joe", "INBOX")
    assert store.urlauth_key("joe", inbox) is None
    key = store.urlauth_key("joe", inbox, create=True)
    assert len(key) >= 16  # RFC 4467 3.4.1: at least 128 bits
    assert store.urlauth_key("joe", inbox, create=True) == key
    assert store.urlauth_key("joe", inbox) == key
    # Per user and per mailbox.
    assert store.urlauth_key("joe", store.mailbox("joe", "Notes")) is None
    assert store.urlauth_key("fred", inbox) is None


def test_resetkey_mailbox_replaces_only_that_key(store):
    """RFC 4467 7.1: RESETKEY mailbox gives the mailbox a new key (old URLs die)."""
    inbox, drafts = store.mailbox("joe", "INBOX"), store.mailbox("joe", "Notes")
    k1 = store.urlauth_key("joe", inbox, create=True)
    k2 = store.urlauth_key("joe", drafts, create=True)
    store.reset_urlauth_keys("joe", "INBOX")
    new = store.urlauth_key("joe", inbox)
    assert new is not None and new != k1
    assert store.urlauth_key("joe", drafts) == k2
    with pytest.raises(NotFound):
        store.reset_urlauth_keys("joe", "Nope")


def test_resetkey_all_removes_every_key_of_the_user_only(store):
    """RFC 4467 7.1: RESETKEY without arguments removes all of the user's keys."""
    store.create_mailbox("fred", "Stuff")
    store.urlauth_key("joe", store.mailbox("joe", "INBOX"), create=True)
    store.urlauth_key("joe", store.mailbox("joe", "Notes"), create=True)
    fred_key = store.urlauth_key("fred", store.mailbox("fred", "Stuff"), create=True)
    store.reset_urlauth_keys("joe")
    assert store.urlauth_key("joe", store.mailbox("joe", "INBOX")) is None
    assert store.urlauth_key("joe", store.mailbox("joe", "Notes")) is None
    assert store.urlauth_key("fred", store.mailbox("fred", "Stuff")) == fred_key


def test_deleted_and_recreated_mailbox_has_no_key(store):
    """A URL names a mailbox by name; one deleted and created again is another mailbox, and
    URLs made for the old one must not verify (RFC 4467 3: the key is the mailbox's)."""
    old = store.mailbox("joe", "Notes")
    store.urlauth_key("joe", old, create=True)
    store.delete_mailbox("joe", "Notes")
    assert store.urlauth_key("joe", old) is None  # dropped with the mailbox
    again = store.create_mailbox("joe", "Notes")
    assert store.urlauth_key("joe", again) is None


def test_delete_user_drops_keys(store):
    inbox = store.mailbox("fred", "INBOX")
    store.urlauth_key("fred", inbox, create=True)
    store.delete_user("fred")
    assert store.urlauth_key("fred", inbox) is None


def test_internal_verifier_is_hmac_sha1():
    """RFC 4467 3.4.1 recommends HMAC-SHA1 (RFC 2104) for INTERNAL: checked against RFC 2202's
    test case 2 (key "Jefe")."""
    assert internal_verifier(b"Jefe", "what do ya want for nothing?") == \
        "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
