"""MailStore.replace, the store side of REPLACE (RFC 8508 3.4), on both backends: append first,
then expunge (docs/decisions/0017), so that a failure or a crash between the two leaves both
messages and never neither; errors leave the replaced message untouched."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.errors import BackendUnavailable, Expunged, NotFound, OverQuota
from mailstore.fsck import Fsck
from mailstore.store import MailStore
from tests.mailgen import message

ROOT = os.path.join(os.path.dirname(__file__), "..")


@pytest.fixture
def store(backend):
    s = MailStore(backend)
    s.create_user("u", "pw")
    return s


def contents(store: MailStore, name: str) -> list[bytes]:
    mailbox = store.mailbox("u", name)
    return [store.read_message(v) for v in store.fetch(mailbox, store.uids(mailbox))]


def test_replace_within_and_across_mailboxes(store):
    """RFC 8508 3.4: the new message is in the target with its flags and date, the replaced one
    is gone from the source; the counters follow (fsck finds nothing)."""
    drafts = store.mailbox("u", "Drafts")
    _, old = store.append("u", drafts, message(1), ["\\Draft"])
    validity, new = store.replace(drafts, old, drafts, message(2), ["\\Seen", "\\Draft"],
                                  1_700_000_000.0)
    assert validity == drafts.uidvalidity and new > old
    assert store.uids(drafts) == [new]
    view = store.fetch(drafts, [new])[0]
    assert view.flags.names == {"\\Seen", "\\Draft"}
    assert view.record.internal_date == 1_700_000_000.0
    _, newer = store.replace(drafts, new, store.mailbox("u", "Sent"), message(3))
    assert store.uids(drafts) == [] and contents(store, "Sent") == [message(3)]
    assert store.mailbox("u", "Drafts").messages == 0
    assert store.mailbox("u", "Sent").messages == 1
    assert Fsck(store).run().ok


def test_replaced_message_gone_appends_nothing(store):
    """RFC 8508 3.4: no REPLACE of a message that is not there (expunged already): Expunged,
    and nothing appended."""
    drafts = store.mailbox("u", "Drafts")
    _, old = store.append("u", drafts, message(1))
    store.expunge(drafts, [old])
    with pytest.raises(Expunged):
        store.replace(drafts, old, drafts, message(2))
    with pytest.raises(Expunged):
        store.replace(drafts, 999, store.mailbox("u", "Sent"), message(2))
    assert contents(store, "Drafts") == [] and contents(store, "Sent") == []


def test_expunged_meanwhile_takes_the_new_message_back(store):
    """RFC 8508 3.4: another session expunges the replaced message between this REPLACE's read
    and its expunge: the client gets NO (Expunged), so its new message must not stay either."""
    drafts = store.mailbox("u", "Drafts")
    _, old = store.append("u", drafts, message(1))
    real = store.transfers.expunge
    calls = []

    def racing(mailbox, uids, only_deleted=False):
        if not calls:
            real(mailbox, uids)  # the other session wins
        calls.append(list(uids))
        return real(mailbox, uids, only_deleted)
    store.transfers.expunge = racing
    with pytest.raises(Expunged):
        store.replace(drafts, old, drafts, message(2))
    assert contents(store, "Drafts") == []
    assert Fsck(store).run().ok


def test_errors_leave_the_original(store):
    """RFC 8508 3.4: an append that fails expunges nothing -- no target (NotFound, IMAP's
    TRYCREATE), over quota (OverQuota, RFC 9208 OVERQUOTA)."""
    drafts = store.mailbox("u", "Drafts")
    _, old = store.append("u", drafts, message(1))
    with pytest.raises(NotFound):
        store.replace(drafts, old, store.mailbox("u", "Nope"), message(2))
    size = store.fetch(drafts, [old])[0].record.size
    store.set_quota("u", size + 100, None)
    with pytest.raises(OverQuota):
        store.replace(drafts, old, drafts, message(2, size=size + 500))
    assert contents(store, "Drafts") == [message(1)]
    # The replaced message is credited: at the quota's edge a draft can still be saved again.
    store.set_quota("u", size + 100, 1)
    store.replace(drafts, old, drafts, message(2))
    assert contents(store, "Drafts") == [message(2)]


def test_failure_between_append_and_expunge_loses_nothing(store):
    """An injected backend failure after the append, at the expunge: the error goes to the
    caller and both messages stay, each readable (decision 0017: both, never neither)."""
    drafts = store.mailbox("u", "Drafts")
    _, old = store.append("u", drafts, message(1))

    def fail(*args, **kwargs):
        raise BackendUnavailable("injected")
    store.transfers.expunge = fail
    with pytest.raises(BackendUnavailable):
        store.replace(drafts, old, store.mailbox("u", "Sent"), message(2))
    assert contents(store, "Drafts") == [message(1)]
    assert contents(store, "Sent") == [message(2)]
    assert Fsck(store).run().ok


CRASH = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    from mailstore.backends.embedded import EmbeddedBackend
    from mailstore.store import MailStore
    store = MailStore(EmbeddedBackend({data!r}))
    drafts = store.mailbox("u", "Drafts")
    # The process dies where the expunge would begin: after the append was made durable.
    store.transfers.expunge = lambda *a, **k: os._exit(9)
    store.replace(drafts, store.uids(drafts)[0], drafts, {new!r})
    os._exit(0)
""")


def test_process_killed_between_append_and_expunge(tmp_path):
    """A real crash (the process exits at once, no cleanup) between REPLACE's append and its
    expunge: on reopening, the old and the new message are both there and readable, and the
    store is consistent (fsck) -- the user deletes one, nothing is lost (decision 0017)."""
    data = str(tmp_path / "store")
    store = MailStore(EmbeddedBackend(data))
    store.create_user("u", "pw")
    store.append("u", "Drafts", message(1), ["\\Draft"])
    store.close()
    script = CRASH.format(root=os.path.abspath(ROOT), data=data, new=message(2))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == 9, proc.stderr.decode()
    store = MailStore(EmbeddedBackend(data))
    try:
        assert sorted(contents(store, "Drafts")) == sorted([message(1), message(2)])
        assert store.mailbox("u", "Drafts").messages == 2
        assert Fsck(store).run().ok
    finally:
        store.close()
