"""The cross-user isolation suite: every IMAP command that names a mailbox or acts on the
selected one, with and without each right it needs (RFC 4314 4), over both backends.

One imapserver process per backend (embedded, and HBase over the Thrift wire); alice owns the
mailboxes, set up through the store with bob's rights, and bob acts over IMAP.  Each row of
:data:`MATRIX` runs twice: with every right (``lrswipkxtea``) and with every right but the
one under test.  Then every command naming a mailbox is sent for a mailbox of alice's that bob
may not see and for one that does not exist: the answers must be the same octets (RFC 4314 6).
"""

from __future__ import annotations

import itertools
import re
import time
import urllib.parse
from dataclasses import dataclass

import pytest

from mailstore import sharing
from mailstore.acl import RIGHTS
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.hbasetarget import Lease
from tests.imapproc import Client, ServerProcess
from tests.mailgen import message

_names = itertools.count(1)


@dataclass
class World:
    server: ServerProcess
    store: MailStore

    def box(self, rights: str, *, sub: bool = True) -> tuple[str, str]:
        """A fresh mailbox of alice's with two messages (the second \\Deleted) and a child
        ``Sub``, bob's rights on both set to ``rights``: (alice's name, bob's name)."""
        name = f"Case{next(_names)}"
        box = self.store.create_mailbox("alice", name)
        self.store.append("alice", box, message(1))
        self.store.append("alice", box, message(2), flags=["\\Deleted"])
        self.store.grants.set(box.id, "bob", frozenset(rights))
        if sub:
            child = self.store.create_mailbox("alice", name + "/Sub")
            self.store.grants.set(child.id, "bob", frozenset(rights))
        return name, f"Other Users/alice/{name}"

    def flags(self, name: str, uid: int = 1) -> set[str]:
        box = self.store.mailbox("alice", name)
        views = self.store.fetch(box, [uid])
        return set(views[0].flags.names) if views else set()

    def uids(self, name: str) -> list[int]:
        return self.store.uids(self.store.mailbox("alice", name))

    def exists(self, name: str) -> bool:
        return name in {m.name for m in self.store.list_mailboxes("alice")}


@pytest.fixture(scope="module", params=["embedded", "hbase"])
def world(request, tmp_path_factory):
    base = tmp_path_factory.mktemp(f"acl-{request.param}")
    lease = None
    if request.param == "embedded":
        data_dir, args = str(base / "store"), []
        backend = EmbeddedBackend(data_dir, synchronous="NORMAL")
    else:
        target = request.getfixturevalue("hbase_target")
        lease = Lease(target, target.lease())
        data_dir, args = str(base / "unused"), lease.args()
        backend = lease.backend()
    store = MailStore(backend)
    try:
        for user in ("alice", "bob"):
            store.create_user(user, "pw", default_folders=False)
        store.append("bob", "INBOX", message(7), flags=["\\Seen", "\\Flagged"])
        with ServerProcess(data_dir, *args) as server:
            yield World(server, store)
    finally:
        store.close()
        if lease is not None:
            lease.target.give_back(lease.prefix)


@pytest.fixture
def bob(world):
    c = Client(world.server.port)
    assert c.cmd("l", "LOGIN bob pw")[-1].startswith(b"l OK")
    yield c
    c.close()


def tagged(lines: list[bytes]) -> bytes:
    return lines[-1].split(b" ", 1)[1]


def q(name: str) -> str:
    return '"' + name + '"'


def ok(lines):
    assert tagged(lines).startswith(b"OK"), lines
    return lines


def noperm(lines):
    assert tagged(lines).startswith(b"NO [NOPERM]"), lines
    return lines


def expect(has: bool, lines):
    return ok(lines) if has else noperm(lines)


# -- the matrix: (command, right, run(world, bob client, has the right)) ----------------------

def _select(w, c, has):
    _, name = w.box(RIGHTS if has else RIGHTS.replace("r", ""))
    expect(has, c.cmd("s", f"SELECT {q(name)}"))


def _examine(w, c, has):
    _, name = w.box(RIGHTS if has else RIGHTS.replace("r", ""))
    expect(has, c.cmd("s", f"EXAMINE {q(name)}"))


def _status(w, c, has):
    _, name = w.box(RIGHTS if has else RIGHTS.replace("r", ""))
    lines = expect(has, c.cmd("s", f"STATUS {q(name)} (MESSAGES)"))
    assert (lines[0] == f'* STATUS {q(name)} (MESSAGES 2)'.encode()) == has


def _list(w, c, has):
    _, name = w.box(RIGHTS if has else RIGHTS.replace("l", ""))
    lines = ok(c.cmd("s", 'LIST "" "Other Users/*"'))
    assert any(line.endswith(q(name).encode()) for line in lines) == has
    lines = ok(c.cmd("s", 'LIST "" "Other Users/alice/%"'))
    assert any(line.endswith(q(name).encode()) for line in lines) == has


def _list_status(w, c, has):
    _, name = w.box(RIGHTS if has else RIGHTS.replace("r", ""))
    lines = ok(c.cmd("s", f'LIST "" {q(name)} RETURN (STATUS (MESSAGES))'))
    assert any(line.startswith(b"* STATUS") for line in lines) == has


def _append(w, c, has):
    local, name = w.box(RIGHTS if has else RIGHTS.replace("i", ""))
    raw = message(3)
    c.send(f"s APPEND {q(name)} {{{len(raw)}+}}\r\n".encode() + raw + b"\r\n")
    expect(has, c.until_tagged("s"))
    assert len(w.uids(local)) == (3 if has else 2)


def _append_flags(w, c, has):
    local, name = w.box(RIGHTS if has else RIGHTS.replace("s", ""))
    raw = message(3)
    c.send(f"s APPEND {q(name)} (\\Seen) {{{len(raw)}+}}\r\n".encode() + raw + b"\r\n")
    ok(c.until_tagged("s"))  # RFC 4314 4: a flag the user may not set is left off
    assert ("\\Seen" in w.flags(local, w.uids(local)[-1])) == has


def _copy(w, c, has):
    local, name = w.box(RIGHTS if has else RIGHTS.replace("i", ""))
    ok(c.cmd("s", "SELECT INBOX"))
    expect(has, c.cmd("c", f"COPY 1 {q(name)}"))
    assert len(w.uids(local)) == (3 if has else 2)


def _copy_flags(right, flag):
    def run(w, c, has):
        """RFC 4314 4: a copy keeps only the flags the target's ACL lets the user set."""
        local, name = w.box(RIGHTS if has else RIGHTS.replace(right, ""))
        ok(c.cmd("s", "SELECT INBOX"))
        ok(c.cmd("c", f"COPY 1 {q(name)}"))
        assert (flag in w.flags(local, w.uids(local)[-1])) == has
    return run


def _move_target(w, c, has):
    local, name = w.box(RIGHTS if has else RIGHTS.replace("i", ""))
    ok(c.cmd("s", "SELECT INBOX"))
    expect(has, c.cmd("c", f"MOVE 1 {q(name)}"))
    assert len(w.uids(local)) == (3 if has else 2)
    if has:  # put bob's message back for the next case
        ok(c.cmd("s", f"SELECT {q(name)}"))
        ok(c.cmd("m", "UID MOVE 3 INBOX"))


def _move_source(right):
    def run(w, c, has):
        local, name = w.box(RIGHTS if has else RIGHTS.replace(right, ""))
        ok(c.cmd("s", f"SELECT {q(name)}"))
        expect(has, c.cmd("m", "MOVE 1 INBOX"))
        assert w.uids(local) == ([2] if has else [1, 2])
    return run


def _store(flag, right):
    def run(w, c, has):
        local, name = w.box(RIGHTS if has else RIGHTS.replace(right, ""))
        ok(c.cmd("s", f"SELECT {q(name)}"))
        ok(c.cmd("f", f"STORE 1 +FLAGS ({flag})"))  # RFC 4314 4: silently kept otherwise
        assert (flag in w.flags(local)) == has
    return run


def _expunge(command):
    def run(w, c, has):
        local, name = w.box(RIGHTS if has else RIGHTS.replace("e", ""))
        ok(c.cmd("s", f"SELECT {q(name)}"))
        expect(has, c.cmd("x", command))
        assert w.uids(local) == ([1] if has else [1, 2])
    return run


def _close(w, c, has):
    local, name = w.box(RIGHTS if has else RIGHTS.replace("e", ""))
    ok(c.cmd("s", f"SELECT {q(name)}"))
    ok(c.cmd("x", "CLOSE"))
    assert w.uids(local) == ([1] if has else [1, 2])


def _fetch_seen(w, c, has):
    local, name = w.box(RIGHTS if has else RIGHTS.replace("s", ""))
    ok(c.cmd("s", f"SELECT {q(name)}"))
    ok(c.cmd("f", "FETCH 1 BODY[]"))
    assert ("\\Seen" in w.flags(local)) == has


def _create(w, c, has):
    local, name = w.box(RIGHTS if has else RIGHTS.replace("k", ""))
    expect(has, c.cmd("s", f"CREATE {q(name + '/Child')}"))
    assert w.exists(local + "/Child") == has


def _delete(w, c, has):
    local, name = w.box(RIGHTS if has else RIGHTS.replace("x", ""))
    expect(has, c.cmd("s", f"DELETE {q(name + '/Sub')}"))
    assert w.exists(local + "/Sub") != has


def _rename(right):
    def run(w, c, has):
        local, name = w.box(RIGHTS if has else RIGHTS.replace(right, ""))
        expect(has, c.cmd("s", f"RENAME {q(name + '/Sub')} {q(name + '/Sub2')}"))
        assert w.exists(local + "/Sub2") == has
    return run


def _acl_command(command):
    def run(w, c, has):
        _, name = w.box(RIGHTS if has else RIGHTS.replace("a", ""))
        expect(has, c.cmd("s", command.format(name=q(name))))
    return run


def _getquotaroot(w, c, has):
    """RFC 9208 4.1.2 with RFC 4314 4 and 6: the quota of alice's mailbox is hers, not bob's to
    see, whatever his rights (with every right, or without l: the same answer), so the answer
    names no quota root and carries no QUOTA, though alice has a limit and bob has none."""
    w.store.set_quota("alice", 10 ** 9, 10 ** 6)
    _, name = w.box(RIGHTS if has else RIGHTS.replace("l", ""), sub=False)
    lines = ok(c.cmd("q", f"GETQUOTAROOT {q(name)}"))
    assert lines[:-1] == [f"* QUOTAROOT {q(name)}".encode()], lines


def _selected_housekeeping(w, c, has):
    """RFC 4314 4: CHECK, NOOP and UNSELECT need no right of their own, but what they report
    of the selected mailbox needs r.  bob selects alice's mailbox with every right; without r
    (taken away after the SELECT) they still answer OK and report nothing of a new message."""
    local, name = w.box(RIGHTS, sub=False)
    ok(c.cmd("s", f"SELECT {q(name)}"))
    if not has:
        box = w.store.mailbox("alice", local)
        w.store.grants.set(box.id, "bob", frozenset(RIGHTS.replace("r", "")))
    w.store.append("alice", local, message(6))
    lines = ok(c.cmd("c", "CHECK")) + ok(c.cmd("n", "NOOP"))
    assert (b"* 3 EXISTS" in lines) == has, lines
    assert not any(b"FETCH" in line or b"EXPUNGE" in line for line in lines), lines
    ok(c.cmd("u", "UNSELECT"))


def _myrights(w, c, has):
    _, name = w.box("l" if has else "", sub=False)
    lines = c.cmd("s", f"MYRIGHTS {q(name)}")
    if has:
        assert ok(lines)[0] == f"* MYRIGHTS {q(name)} l".encode()
    else:
        assert tagged(lines).startswith(b"NO [NONEXISTENT]"), lines


def _idle(w, c, has):
    """IDLE pushes what happens in the selected mailbox, and selecting needs r: a message
    alice adds (from another process: this test's) reaches bob's IDLE only with r."""
    local, name = w.box(RIGHTS if has else RIGHTS.replace("r", ""))
    expect(has, c.cmd("s", f"SELECT {q(name)}"))
    c.send("i IDLE\r\n")
    assert c.read_line().startswith(b"+ ")
    w.store.append("alice", local, message(4))
    pushed = []
    c.sock.settimeout(0.25)
    deadline = time.monotonic() + (5.0 if has else 1.0)  # the server polls every 0.25 s
    while time.monotonic() < deadline and b"* 3 EXISTS" not in pushed:
        try:
            pushed.append(c.read_line())
        except TimeoutError:
            pass
    c.sock.settimeout(10)
    c.send("DONE\r\n")
    pushed += c.until_tagged("i")
    assert (b"* 3 EXISTS" in pushed) == has, pushed


def _search_fetch_r(w, c, has):
    _, name = w.box(RIGHTS if has else RIGHTS.replace("r", ""))
    c.cmd("s", f"SELECT {q(name)}")
    for command in ("SEARCH ALL", "FETCH 1 FLAGS", "UID SEARCH ALL"):
        lines = c.cmd("q", command)
        assert tagged(lines).startswith(b"OK" if has else b"BAD"), lines


def _lsub(w, c, has):
    _, name = w.box(RIGHTS if has else RIGHTS.replace("l", ""), sub=False)
    ok(c.cmd("u", f"SUBSCRIBE {q(name)}"))
    lines = ok(c.cmd("s", f"LSUB \"\" {q(name)}"))
    # Without l the name is still the user's own subscription, shown as no mailbox.
    assert lines[0] == (b"* LSUB () \"/\" " if has else b"* LSUB (\\Noselect) \"/\" ") \
        + q(name).encode()
    ok(c.cmd("u", f"UNSUBSCRIBE {q(name)}"))


def _replace(right):
    def run(w, c, has):
        """RFC 8508 3.4 with RFC 4314 4: REPLACE appends to the target (i) and expunges the
        replaced message from the selected mailbox (t, e)."""
        local, name = w.box(RIGHTS if has else RIGHTS.replace(right, ""))
        ok(c.cmd("s", f"SELECT {q(name)}"))
        raw = message(9)
        c.send(f"r REPLACE 1 {q(name)} {{{len(raw)}+}}\r\n".encode() + raw + b"\r\n")
        expect(has, c.until_tagged("r"))
        assert w.uids(local) == ([2, 3] if has else [1, 2])
    return run


def _uid_command(command, right, after):
    def run(w, c, has):
        local, name = w.box(RIGHTS if has else RIGHTS.replace(right, ""))
        ok(c.cmd("s", f"SELECT {q(name)}"))
        lines = c.cmd("u", command.format(name=q(name)))
        after(w, local, has, lines)
    return run


def _sort_thread(w, c, has):
    _, name = w.box(RIGHTS if has else RIGHTS.replace("r", ""))
    c.cmd("s", f"SELECT {q(name)}")
    for command in ("SORT (DATE) UTF-8 ALL", "THREAD REFERENCES UTF-8 ALL", "UID FETCH 1 UID",
                    "NOOP"):
        lines = c.cmd("q", command)
        assert tagged(lines).startswith(b"OK" if has or command == "NOOP" else b"BAD"), lines


def missing(lines):
    """The answer for a mailbox that does not exist (RFC 4314 6: what a hidden one gets)."""
    assert tagged(lines).startswith(b"NO [NONEXISTENT]"), lines
    return lines


def url_name(name: str) -> str:
    """A mailbox name as an IMAP URL spells it (RFC 5092 3.1: %-encoded UTF-8)."""
    return urllib.parse.quote(name)


def _getmetadata_l(w, c, has):
    """RFC 5464 3.3: without l the mailbox's annotations answer as a missing mailbox's."""
    local, name = w.box("lr" if has else "r", sub=False)
    w.store.set_metadata("alice", local, [("/shared/comment", b"team")])
    lines = c.cmd("g", f"GETMETADATA {q(name)} /shared/comment")
    if has:
        assert ok(lines)[0] == f'* METADATA {q(name)} (/shared/comment "team")'.encode()
    else:
        missing(lines)


def _getmetadata_any(w, c, has):
    """RFC 5464 3.3: l and any one of r s w i p reads the shared entries; l alone is NOPERM."""
    for letter in "rswip" if has else "":
        local, name = w.box("l" + letter, sub=False)
        w.store.set_metadata("alice", local, [("/shared/comment", b"team")])
        assert ok(c.cmd("g", f"GETMETADATA {q(name)} /shared/comment"))[0].endswith(b'"team")')
    if not has:
        _, name = w.box("l", sub=False)
        noperm(c.cmd("g", f"GETMETADATA {q(name)} /shared/comment"))


def _setmetadata(w, c, has):
    """RFC 5464 3.3: setting a shared entry of alice's mailbox needs l and one of r s w i p;
    what bob sets there alice reads (shared), without the rights nothing is stored."""
    local, name = w.box("lr" if has else "l", sub=False)
    expect(has, c.cmd("m", f'SETMETADATA {q(name)} (/shared/comment "by bob")'))
    _, found = w.store.get_metadata("alice", local, ["/shared/comment"])
    assert found == [("/shared/comment", b"by bob" if has else None)]


def _setmetadata_l(w, c, has):
    local, name = w.box("lr" if has else "rswip", sub=False)
    lines = c.cmd("m", f'SETMETADATA {q(name)} (/shared/comment "by bob")')
    ok(lines) if has else missing(lines)
    _, found = w.store.get_metadata("alice", local, ["/shared/comment"])
    assert found == [("/shared/comment", b"by bob" if has else None)]


def _metadata_private(w, c, has):
    """RFC 5464 3.3: /private entries are each user's own: bob's on alice's mailbox are his
    (alice does not see them, he does not see hers), and its /private/specialuse is alice's
    setting, neither shown to him nor his to change."""
    local, name = w.box("lr" if has else "l", sub=False)
    w.store.set_metadata("alice", local, [("/private/comment", b"alice's"),
                                          ("/private/specialuse", b"\\Archive")])
    lines = c.cmd("m", f'SETMETADATA {q(name)} (/private/comment "bob\'s")')
    expect(has, lines)
    lines = c.cmd("g", f"GETMETADATA {q(name)} (/private/comment /private/specialuse)")
    if has:
        assert ok(lines)[0] == (f'* METADATA {q(name)} (/private/comment "bob\'s" '
                                f'/private/specialuse NIL)').encode()
        assert tagged(c.cmd("m", f'SETMETADATA {q(name)} (/private/specialuse NIL)')
                      ).startswith(b"NO [CANNOT]")
    else:
        noperm(lines)
    _, found = w.store.get_metadata("alice", local, ["/private/comment", "/private/specialuse"])
    assert found == [("/private/comment", b"alice's"), ("/private/specialuse", b"\\Archive")]


def _append_catenate(w, c, data: str, target: str = "INBOX") -> list[bytes]:
    c.send(f"a APPEND {q(target)} CATENATE ({data})\r\n".encode())
    return c.until_tagged("a")


def _catenate_url_out(w, c, has):
    """RFC 4469 3, 5 with RFC 4314 4: a CATENATE URL reads with the user's rights, so a part
    of alice's mailbox needs r on it; without, the URL is [BADURL] as a missing one."""
    local, name = w.box("lr" if has else "l", sub=False)
    before = len(w.store.uids(w.store.mailbox("bob", "INBOX")))
    url = f"/{url_name(name)}/;UID=1"
    lines = _append_catenate(w, c, f'URL "{url}"')
    if has:
        ok(lines)
    else:
        assert tagged(lines).startswith(f"NO [BADURL {url}]".encode()), lines
    after = len(w.store.uids(w.store.mailbox("bob", "INBOX")))
    assert after == before + (1 if has else 0)


def _catenate_url_selected(w, c, has):
    """RFC 4469 5 / RFC 5092 7.2: a ``;UID=`` URL is relative to the selected mailbox -- alice's
    one as bob sees it, not a mailbox of his own of the same name."""
    local, name = w.box("lr" if has else "l" + "swi", sub=False)
    w.store.create_mailbox("bob", local)  # a mailbox of bob's with alice's name, empty
    c.cmd("s", f"SELECT {q(name)}")
    lines = _append_catenate(w, c, 'URL ";UID=1"', target="INBOX")
    if has:
        ok(lines)
    else:
        assert tagged(lines).startswith(b"NO"), lines
    if has:
        ok(c.cmd("u", "UNSELECT"))


def _catenate_into(w, c, has):
    """RFC 4469 5: APPEND ... CATENATE into alice's mailbox needs i there."""
    local, name = w.box(RIGHTS if has else RIGHTS.replace("i", ""), sub=False)
    uid = w.store.uids(w.store.mailbox("bob", "INBOX"))[0]  # MOVE rows move bob's message
    expect(has, _append_catenate(w, c, f'URL "/INBOX/;UID={uid}"', target=name))
    assert len(w.uids(local)) == (3 if has else 2)


def _rump(name: str, uid: int = 1) -> str:
    return f"imap://bob@localhost/{url_name(name)}/;UID={uid};URLAUTH=authuser"


def _genurlauth(w, c, has):
    """RFC 4467 7.2 with RFC 4314 4: a URLAUTH URL to a message of alice's mailbox only with
    r there; without, BAD as for a mailbox that does not exist."""
    _, name = w.box("lr" if has else "l" + "swi", sub=False)
    lines = c.cmd("g", f'GENURLAUTH "{_rump(name)}" INTERNAL')
    if has:
        ok(lines)
    else:
        assert tagged(lines) == f"BAD Invalid URL: Mailbox doesn't exist: {name}".encode()


def _urlfetch(w, c, has):
    """RFC 4467 6, 7.3: URLFETCH reads with the rights of the URL's user *now*: when alice
    takes bob's r away, his URL gives NIL."""
    local, name = w.box("lr", sub=False)
    lines = ok(c.cmd("g", f'GENURLAUTH "{_rump(name)}" INTERNAL'))
    url = lines[0].split(b" ", 2)[2].strip(b'"').decode()
    if not has:
        w.store.grants.set(w.store.mailbox("alice", local).id, "bob", frozenset("lswi"))
    lines = ok(c.cmd("f", f'URLFETCH "{url}"'))
    assert lines[0].endswith(b" NIL") != has, lines


def _resetkey(w, c, has):
    """RFC 4467 7.1 with RFC 4314 4: RESETKEY of alice's mailbox needs r (what GENURLAUTH
    needs); seen without it, NO [NOPERM]."""
    _, name = w.box("lr" if has else "lswi", sub=False)
    expect(has, c.cmd("k", f"RESETKEY {q(name)}"))


def _notify_mailboxes(w, c, has):
    """RFC 5465 3.1, 5.2 with RFC 4314 4: NOTIFY on alice's mailbox by name gives STATUS (at
    SET and when a message arrives) only with r; seen without r it is ``LIST (\\NoAccess)``
    and nothing of its messages follows."""
    local, name = w.box("lr" if has else "lswi", sub=False)
    lines = ok(c.cmd("n", f"NOTIFY SET STATUS (mailboxes {q(name)} (MessageNew MessageExpunge))"))
    if has:
        assert lines[0].startswith(f"* STATUS {q(name)} (MESSAGES 2 ".encode()), lines
    else:
        assert lines[0] == f'* LIST (\\NoAccess) "/" {q(name)}'.encode(), lines
        ok(c.cmd("n", "NOTIFY NONE"))  # without STATUS too (RFC 5465 3.1)
        lines = ok(c.cmd("n", f"NOTIFY SET (mailboxes {q(name)} (MessageNew MessageExpunge))"))
        assert lines[0] == f'* LIST (\\NoAccess) "/" {q(name)}'.encode(), lines
    w.store.append("alice", local, message(5))
    want = f"* STATUS {q(name)} (MESSAGES 3 ".encode()
    pushed = idle_lines(c, want, 5.0 if has else 1.0, prefix=True)
    assert any(line.startswith(want) for line in pushed) == has, pushed
    ok(c.cmd("n", "NOTIFY NONE"))


def _notify_subtree(w, c, has):
    """RFC 5465 5.4 with RFC 4314 4: a SUBTREE on alice's namespace tells of a mailbox that
    appears there only if bob may see it (l); an ACL change is what makes it appear."""
    local, name = w.box("lr", sub=False)
    ok(c.cmd("n", 'NOTIFY SET (subtree "Other Users/alice" (MailboxName))'))
    w.store.create_mailbox("alice", local + "/New")
    sharing.admin_set_acl(w.store, "alice", local + "/New", "bob", "lr" if has else "r")
    want = f'* LIST (\\HasNoChildren) "/" {q(name + "/New")}'.encode()
    pushed = idle_lines(c, want, 5.0 if has else 1.0)
    assert (want in pushed) == has, pushed
    assert not any(b"/New" in line for line in pushed if line != want), pushed
    ok(c.cmd("n", "NOTIFY NONE"))


def _notify_personal(w, c, has):
    """RFC 5465 6.2: PERSONAL is the user's own namespace: alice's mailboxes, whatever bob's
    rights, are never in it (has: every right; without: none -- the answer is the same)."""
    local, _name = w.box(RIGHTS if has else "", sub=False)
    ok(c.cmd("n", "NOTIFY SET STATUS (personal (MessageNew MessageExpunge))"))
    w.store.append("alice", local, message(5))
    pushed = idle_lines(c, b"", 1.0)
    assert not any(b"Other Users" in line for line in pushed), pushed
    ok(c.cmd("n", "NOTIFY NONE"))


def _notify_revoked(w, c, has):
    """RFC 5465 5.9 with RFC 4314 4: rights are checked as events go out.  bob watches
    alice's mailbox with r; alice takes r away (has: she does not): he is told ``LIST
    (\\NoAccess)`` and hears nothing more of its messages."""
    local, name = w.box("lr", sub=False)
    ok(c.cmd("n", f"NOTIFY SET (mailboxes {q(name)} (MessageNew MessageExpunge))"))
    if not has:
        sharing.admin_set_acl(w.store, "alice", local, "bob", "l")
        want = f'* LIST (\\NoAccess) "/" {q(name)}'.encode()
        assert want in idle_lines(c, want, 5.0)
    w.store.append("alice", local, message(6))
    want = f"* STATUS {q(name)} (MESSAGES 3 ".encode()
    pushed = idle_lines(c, want, 5.0 if has else 1.0, prefix=True)
    assert any(line.startswith(want) for line in pushed) == has, pushed
    ok(c.cmd("n", "NOTIFY NONE"))


def _notify_metadata(w, c, has):
    """RFC 5465 5.6 with RFC 5464 3.3: a change to a shared entry of alice's mailbox reaches
    bob's MailboxMetadataChange only if he may read its annotations (l and one of rswip)."""
    local, name = w.box("lr" if has else "l", sub=False)
    ok(c.cmd("n", f"NOTIFY SET (mailboxes {q(name)} (MailboxMetadataChange))"))
    w.store.set_metadata("alice", local, [("/shared/comment", b"news")])
    want = f"* METADATA {q(name)} /shared/comment".encode()
    pushed = idle_lines(c, want, 5.0 if has else 1.0)
    assert (want in pushed) == has, pushed
    ok(c.cmd("n", "NOTIFY NONE"))


MATRIX = [
    ("SELECT", "r", _select), ("EXAMINE", "r", _examine), ("STATUS", "r", _status),
    ("LIST", "l", _list), ("LIST-STATUS", "r", _list_status),
    ("SEARCH/FETCH", "r", _search_fetch_r), ("IDLE", "r", _idle),
    ("APPEND", "i", _append), ("APPEND-flags", "s", _append_flags),
    ("COPY", "i", _copy), ("MOVE-target", "i", _move_target),
    ("COPY-seen", "s", _copy_flags("s", "\\Seen")),
    ("COPY-flagged", "w", _copy_flags("w", "\\Flagged")),
    ("MOVE-source-t", "t", _move_source("t")), ("MOVE-source-e", "e", _move_source("e")),
    ("STORE-seen", "s", _store("\\Seen", "s")), ("STORE-flagged", "w", _store("\\Flagged", "w")),
    ("STORE-keyword", "w", _store("$Work", "w")),
    ("STORE-deleted", "t", _store("\\Deleted", "t")),
    ("EXPUNGE", "e", _expunge("EXPUNGE")), ("UID-EXPUNGE", "e", _expunge("UID EXPUNGE 1:*")),
    ("CLOSE", "e", _close), ("FETCH-BODY-seen", "s", _fetch_seen),
    ("CREATE", "k", _create), ("DELETE", "x", _delete),
    ("RENAME-x", "x", _rename("x")), ("RENAME-k", "k", _rename("k")),
    ("GETACL", "a", _acl_command("GETACL {name}")),
    ("SETACL", "a", _acl_command("SETACL {name} carol lr")),
    ("DELETEACL", "a", _acl_command("DELETEACL {name} carol")),
    ("LISTRIGHTS", "a", _acl_command("LISTRIGHTS {name} carol")),
    ("MYRIGHTS", "l", _myrights), ("LSUB", "l", _lsub),
    ("GETQUOTAROOT", "l", _getquotaroot), ("CHECK/NOOP/UNSELECT", "r", _selected_housekeeping),
    ("REPLACE-target-i", "i", _replace("i")), ("REPLACE-source-t", "t", _replace("t")),
    ("REPLACE-source-e", "e", _replace("e")), ("SORT/THREAD/UID-FETCH", "r", _sort_thread),
    ("UID-STORE-seen", "s", _uid_command(
        "UID STORE 1 +FLAGS (\\Seen)", "s",
        lambda w, local, has, lines: ok(lines) and (
            ("\\Seen" in w.flags(local)) == has or pytest.fail(str(lines))))),
    ("UID-COPY-i", "i", _uid_command(
        "UID COPY 1 {name}", "i",
        lambda w, local, has, lines: expect(has, lines) and (
            len(w.uids(local)) == (3 if has else 2) or pytest.fail(str(lines))))),
    ("UID-MOVE-source-e", "e", _uid_command(
        "UID MOVE 1 {name}", "e",
        lambda w, local, has, lines: expect(has, lines) and (
            w.uids(local) == ([2, 3] if has else [1, 2]) or pytest.fail(str(lines))))),
    ("GETMETADATA-l", "l", _getmetadata_l), ("GETMETADATA-rswip", "r", _getmetadata_any),
    ("SETMETADATA-rswip", "r", _setmetadata), ("SETMETADATA-l", "l", _setmetadata_l),
    ("METADATA-private", "r", _metadata_private),
    ("CATENATE-URL-out", "r", _catenate_url_out),
    ("CATENATE-URL-selected", "r", _catenate_url_selected),
    ("CATENATE-into", "i", _catenate_into),
    ("GENURLAUTH", "r", _genurlauth), ("URLFETCH", "r", _urlfetch), ("RESETKEY", "r", _resetkey),
    ("NOTIFY-MAILBOXES", "r", _notify_mailboxes), ("NOTIFY-SUBTREE", "l", _notify_subtree),
    ("NOTIFY-PERSONAL", "-", _notify_personal), ("NOTIFY-revoked", "r", _notify_revoked),
    ("NOTIFY-METADATA", "r", _notify_metadata),
]


@pytest.mark.parametrize("has", [True, False], ids=["with", "without"])
@pytest.mark.parametrize("command, right, run", MATRIX, ids=[f"{c}-{r}" for c, r, _ in MATRIX])
def test_rights_matrix(world, bob, command, right, run, has):
    """RFC 4314 4: each command succeeds with its right and is refused (NO [NOPERM], or the
    change silently left out where section 4 says so) without it."""
    run(world, bob, has)


# -- no existence oracle ----------------------------------------------------------------------

PROBES = [
    "SELECT {n}", "EXAMINE {n}", "STATUS {n} (MESSAGES UIDNEXT)", "DELETE {n}",
    "RENAME {n} {n}2", "CREATE {n}/Child", "GETACL {n}", "SETACL {n} bob lr",
    "DELETEACL {n} bob", "LISTRIGHTS {n} bob", "MYRIGHTS {n}", 'LIST "" {n}',
    'LIST "" {n}/*', 'LIST "" {n} RETURN (MYRIGHTS STATUS (MESSAGES))', "SUBSCRIBE {n}",
    "UNSUBSCRIBE {n}", "GETQUOTAROOT {n}", "COPY 1 {n}", "MOVE 1 {n}", "APPEND {n} {{1+}}\r\nx",
    "GETMETADATA {n} /shared/comment", "GETMETADATA (DEPTH infinity) {n} (/shared /private)",
    'SETMETADATA {n} (/shared/comment "x")', "RESETKEY {n}", "RESETKEY {n} INTERNAL",
    "NOTIFY SET STATUS (mailboxes {n} (MessageNew MessageExpunge MailboxName))",
    "NOTIFY SET STATUS (subtree {n} (MessageNew MessageExpunge MailboxMetadataChange))",
    'APPEND INBOX CATENATE (URL "/{u}/;UID=1")', 'APPEND {n} CATENATE (URL "/INBOX/;UID=1")',
    'GENURLAUTH "imap://bob@localhost/{u}/;UID=1;URLAUTH=authuser" INTERNAL',
]


@pytest.mark.parametrize("probe", PROBES)
def test_hidden_mailboxes_answer_as_missing_ones(world, bob, probe):
    """RFC 4314 6: a mailbox of alice's that bob has no right on answers every command exactly
    as a name that does not exist (same status, code and text, the name aside)."""
    hidden, _ = world.box("", sub=True)
    answers = []
    for name in (hidden, f"Nothing{next(_names)}"):
        ok(bob.cmd("s", "SELECT INBOX"))
        text = re.sub(r"\{n\}([^\s)]*)",
                      lambda m, name=name: q(f"Other Users/alice/{name}{m.group(1)}"), probe)
        text = text.replace("{u}", url_name(f"Other Users/alice/{name}"))
        lines = bob.cmd("t", text.replace("{{", "{").replace("}}", "}"))
        ok(bob.cmd("z", "NOTIFY NONE"))
        answers.append([line.replace(name.encode(), b"NAME") for line in lines])
    assert answers[0] == answers[1]


def idle_lines(c: Client, wanted: bytes, timeout: float, prefix: bool = False) -> list[bytes]:
    """What the server pushes during ``timeout`` seconds (or until ``wanted`` comes: a whole
    line, or with ``prefix`` the start of one)."""
    pushed: list[bytes] = []
    c.sock.settimeout(0.25)
    deadline = time.monotonic() + timeout

    def arrived() -> bool:
        if prefix:
            return any(line.startswith(wanted) for line in pushed)
        return wanted in pushed
    while time.monotonic() < deadline and not (wanted and arrived()):
        try:
            pushed.append(c.read_line())
        except TimeoutError:
            pass
    c.sock.settimeout(10)
    return pushed


def test_revoking_r_stops_idle_updates_of_a_selected_mailbox(world, bob):
    """RFC 4314 4: without "r" nothing of the mailbox reaches the user.  A session that had
    alice's mailbox selected when alice took bob's rights away hears nothing more of it; a new
    SELECT is refused."""
    local, name = world.box("lrs")
    ok(bob.cmd("s", f"SELECT {q(name)}"))
    bob.send("i IDLE\r\n")
    assert bob.read_line().startswith(b"+ ")
    world.store.append("alice", local, message(4))
    assert b"* 3 EXISTS" in idle_lines(bob, b"* 3 EXISTS", 5.0)
    box = world.store.mailbox("alice", local)
    world.store.grants.set(box.id, "bob", frozenset("l"))
    world.store.append("alice", local, message(5))
    pushed = idle_lines(bob, b"* 4 EXISTS", 1.0)
    bob.send("DONE\r\n")
    pushed += bob.until_tagged("i")
    assert not any(b"EXISTS" in line for line in pushed), pushed
    assert tagged(bob.cmd("s", f"SELECT {q(name)}")).startswith(b"NO [NOPERM]")


def test_a_right_taken_away_counts_from_the_next_command(world, bob):
    """RFC 4314 4: rights are the ACL's as it is when a command runs.  bob selected alice's
    mailbox with every right; alice takes e, t and w away; his next EXPUNGE is NO [NOPERM],
    his STORE keeps \\Flagged as it was, without a refresh in between."""
    local, name = world.box(RIGHTS)
    ok(bob.cmd("s", f"SELECT {q(name)}"))
    box = world.store.mailbox("alice", local)
    world.store.grants.set(box.id, "bob", frozenset("lrs"))
    noperm(bob.cmd("x", "EXPUNGE"))
    noperm(bob.cmd("m", "MOVE 1 INBOX"))
    ok(bob.cmd("f", "STORE 1 +FLAGS (\\Flagged)"))
    assert "\\Flagged" not in world.flags(local)
    assert world.uids(local) == [1, 2]
