"""A MOVE whose planned target UID was given up while its owner stalled (a reader's open after
``abandon_after``, as during a Thrift gateway outage), so the owner wrote the copy at a fresh
UID, and which then died before deleting its sources: the roll forward must not write the copy
a second time (RFC 6851 3.1: the message ends up in the target once; decision 0003, whose
"known limit" this was).  The random gateway-fault loop (bench/gateway_fault_loop.py) found
such messages twice in the target.
"""

from __future__ import annotations

from crashing import Clock, Crash
from test_crash_counters import INTENT_TIMEOUT, _fill, _open_all, _store, assert_exact

from mailstore.messages import STATE
from mailstore.records import ABANDONED, COMMITTED, state_of
from mailstore.schema import MAILBOXES


class StallThenDie:
    """Table wrapper: the first commit of a row in ``target`` finds that row given up just
    before (as a reader would after ``abandon_after``); once the copies are written, the
    publication of the target (a check-and-put on its mailbox row) and everything after it --
    the sources' uncount and deletion -- never happen."""

    def __init__(self, table, name: str, state: dict):
        self._table, self._name, self._state = table, name, state

    def __getattr__(self, attr):
        real = getattr(self._table, attr)
        if not callable(real):
            return real

        def call(*args, **kwargs):
            state = self._state
            if state["dead"]:
                raise Crash
            if self._name == MAILBOXES.name and attr == "check_and_put" and state["stalled"]:
                state["dead"] = True
                raise Crash
            if self._name == "JAMES_MESSAGES":
                if (attr == "check_and_put" and args[1] == STATE and args[2] is None
                        and state_of(args[4]) == COMMITTED and not state["stalled"]
                        and args[0].startswith(state["target"])):
                    state["stalled"] = True
                    self._table.check_and_put(args[0], STATE, None, STATE, ABANDONED)
            return real(*args, **kwargs)
        return call


class Wrapped:
    def __init__(self, backend, state):
        self._backend, self._state = backend, state

    def table(self, name):
        return StallThenDie(self._backend.table(name), name, self._state)

    def __getattr__(self, name):
        return getattr(self._backend, name)


def test_move_rolled_forward_after_its_owner_wrote_a_fresh_uid(backend):
    clock = Clock()
    store = _store(backend, clock)
    user, uids = _fill(store, 3)
    work = store.mailbox(user, "Work")
    state = {"dead": False, "stalled": False, "target": work.id}
    dying = _store(Wrapped(backend, state), clock)
    try:
        dying.move(dying.mailbox(user, "INBOX"), uids, dying.mailbox(user, "Work"))
    except Crash:
        pass
    assert state["stalled"] and state["dead"]
    clock.sleep(INTENT_TIMEOUT + 1)
    store = _store(backend, clock)
    _open_all(store, user)
    clock.sleep(INTENT_TIMEOUT + 1)
    _open_all(store, user)
    inbox, work = store.mailbox(user, "INBOX"), store.mailbox(user, "Work")
    assert list(store.iter_messages(inbox)) == []
    ids = sorted(v.header.split(b"Message-ID: <")[1].split(b">")[0]
                 for v in store.messages.scan(work.id, columns=[b"m:s", b"f:v", b"m:hdr"]))
    assert ids == [b"m0@test", b"m1@test", b"m2@test"], ids
    assert_exact(store, user, "rolled forward")


def test_copy_rolled_forward_after_its_owner_wrote_a_fresh_uid(backend):
    """RFC 3501 6.4.7 (and RFC 4315 3's COPYUID): the same for a COPY, whose intent is keyed
    by its target.  Before, the roll forward found the planned UID given up and wrote the
    copy again at yet another UID: the message twice in the target (decision 0003's limit)."""
    clock = Clock()
    store = _store(backend, clock)
    user, uids = _fill(store, 3)
    work = store.mailbox(user, "Work")
    state = {"dead": False, "stalled": False, "target": work.id}
    dying = _store(Wrapped(backend, state), clock)
    try:
        dying.copy(dying.mailbox(user, "INBOX"), uids, dying.mailbox(user, "Work"))
    except Crash:
        pass
    assert state["stalled"] and state["dead"]
    clock.sleep(INTENT_TIMEOUT + 1)
    store = _store(backend, clock)
    _open_all(store, user)
    clock.sleep(INTENT_TIMEOUT + 1)
    _open_all(store, user)
    work = store.mailbox(user, "Work")
    ids = sorted(v.header.split(b"Message-ID: <")[1].split(b">")[0]
                 for v in store.messages.scan(work.id, columns=[b"m:s", b"f:v", b"m:hdr"]))
    assert ids == [b"m0@test", b"m1@test", b"m2@test"], ids
    assert len(store.uids(store.mailbox(user, "INBOX"))) == 3
    assert_exact(store, user, "rolled forward")
