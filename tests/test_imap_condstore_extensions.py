"""CONDSTORE and QRESYNC (RFC 7162) together with the extensions that came beside them:
ESEARCH and CONTEXT=SEARCH (RFC 4731, 5267), MOVE into the selected mailbox (RFC 6851 3.3),
UNAUTHENTICATE (RFC 8437), STATUS=SIZE / QUOTA's STATUS items (RFC 8438, 9208) and PREVIEW
(RFC 8970).  Transcripts of one server.
"""

from __future__ import annotations

import re

import pytest

from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message


@pytest.fixture
def server(tmp_path):
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("cora", "pw"))
    with ServerProcess(data_dir) as proc:
        yield proc


@pytest.fixture
def login(server):
    clients: list[Client] = []

    def connect() -> Client:
        client = Client(server.port)
        clients.append(client)
        assert client.cmd("l", "LOGIN cora pw")[-1].startswith(b"l OK")
        return client
    yield connect
    for client in clients:
        client.close()


def append(client: Client, n: int, flags: str = "") -> None:
    data = message(n)
    client.send(b"a APPEND INBOX (%s) {%d+}\r\n" % (flags.encode(), len(data)) + data + b"\r\n")
    assert client.until_tagged("a")[-1].startswith(b"a OK")


def code(lines: list[bytes], name: bytes) -> int:
    for line in lines:
        m = re.search(rb"\[" + name + rb" (\d+)\]", line)
        if m:
            return int(m.group(1))
    raise AssertionError(f"no {name!r} in {lines!r}")


def modseqs(lines: list[bytes]) -> dict[int, int]:
    """UID -> MODSEQ from FETCH responses carrying both."""
    out = {}
    for line in lines:
        uid = re.search(rb"UID (\d+)", line)
        mod = re.search(rb"MODSEQ \((\d+)\)", line)
        if uid and mod:
            out[int(uid.group(1))] = int(mod.group(1))
    return out


def test_move_into_the_selected_mailbox_reports_vanished(login):
    """RFC 6851 3.3 with RFC 7162 3.2.10: MOVE into the selected mailbox itself, once QRESYNC
    is enabled, reports the old UIDs as VANISHED (never EXPUNGE), the copies as EXISTS, and
    the tagged OK carries HIGHESTMODSEQ."""
    a = login()
    for i in range(3):
        append(a, i)
    a.cmd("e", "ENABLE QRESYNC")
    a.cmd("s", "SELECT INBOX")
    out = a.cmd("m", "UID MOVE 1:2 INBOX")
    assert out[0].startswith(b"* OK [COPYUID ") and b" 1:2 4:5]" in out[0]
    assert b"* VANISHED 1:2" in out
    assert not any(line.endswith(b" EXPUNGE") for line in out)
    assert b"* 3 EXISTS" in out
    assert out.index(b"* VANISHED 1:2") < out.index(b"* 3 EXISTS")
    assert out[-1].startswith(b"m OK [HIGHESTMODSEQ ")


def test_removefrom_goes_before_vanished(login):
    """RFC 5267 4.3.4 with RFC 7162 3.2.10: a CONTEXT=SEARCH update for expunged messages
    (REMOVEFROM) goes before the VANISHED that replaces EXPUNGE, for the session's own
    EXPUNGE and for another session's, numbered as the client numbered them until then."""
    a, b = login(), login()
    for i in range(4):
        append(a, i, "\\Flagged")
    a.cmd("e", "ENABLE QRESYNC")
    a.cmd("s", "SELECT INBOX")
    b.cmd("s", "SELECT INBOX")
    out = a.cmd("q", "SEARCH RETURN (UPDATE) FLAGGED")
    assert out[0] == b'* ESEARCH (TAG "q")'  # UPDATE alone: no ALL (RFC 5267 4.3)
    a.cmd("t", "STORE 2 +FLAGS.SILENT (\\Deleted)")
    out = a.cmd("x", "EXPUNGE")
    assert out[:2] == [b'* ESEARCH (TAG "q") REMOVEFROM (0 2)', b"* VANISHED 2"]
    assert out[-1].startswith(b"x OK [HIGHESTMODSEQ ")
    b.cmd("t", "UID STORE 4 +FLAGS.SILENT (\\Deleted)")
    b.cmd("x", "UID EXPUNGE 4")
    out = a.cmd("n", "NOOP")
    assert out[:2] == [b'* ESEARCH (TAG "q") REMOVEFROM (0 3)', b"* VANISHED 4"]


def test_esearch_carries_modseq(login):
    """RFC 4731 3.2 and RFC 7162 3.1.5: an ESEARCH answering a search with a MODSEQ key
    carries MODSEQ, the highest of the messages returned (all found with ALL or COUNT, only
    the MIN/MAX message otherwise); none when nothing is returned.  SEARCH without RETURN keeps
    its (MODSEQ n)."""
    a = login()
    for i in range(4):
        append(a, i)
    highest = code(a.cmd("s", "SELECT INBOX"), b"HIGHESTMODSEQ")
    a.cmd("t", "STORE 4 +FLAGS (\\Seen)")
    a.cmd("t", "STORE 2 +FLAGS (\\Seen)")
    mods = modseqs(a.cmd("f", "UID FETCH 1:* (MODSEQ)"))
    assert mods[2] > mods[4]
    top = max(mods[2], mods[4])
    out = a.cmd("q", f"SEARCH RETURN (ALL) MODSEQ {highest + 1}")
    assert out[0] == b'* ESEARCH (TAG "q") ALL 2,4 MODSEQ %d' % top
    out = a.cmd("q", f"UID SEARCH RETURN (MAX COUNT) MODSEQ {highest + 1}")
    assert out[0] == b'* ESEARCH (TAG "q") UID MAX 4 COUNT 2 MODSEQ %d' % top
    out = a.cmd("q", f"SEARCH RETURN (MAX) MODSEQ {highest + 1}")
    assert out[0] == b'* ESEARCH (TAG "q") MAX 4 MODSEQ %d' % mods[4]
    out = a.cmd("q", f"SEARCH RETURN (COUNT) MODSEQ {top + 1}")
    assert out[0] == b'* ESEARCH (TAG "q") COUNT 0'
    out = a.cmd("q", f"SEARCH RETURN (COUNT) FLAGGED MODSEQ {highest + 1}")
    assert out[0] == b'* ESEARCH (TAG "q") COUNT 0'
    assert a.cmd("q", "SEARCH RETURN (ALL) SEEN")[0] == b'* ESEARCH (TAG "q") ALL 2,4'
    assert a.cmd("q", f"SEARCH MODSEQ {highest + 1}")[0] == b"* SEARCH 2 4 (MODSEQ %d)" % top


def test_unauthenticate_forgets_condstore_and_qresync(login):
    """RFC 8437 4.1: UNAUTHENTICATE forgets what ENABLE enabled, CONDSTORE and QRESYNC
    included: after a new LOGIN, a QRESYNC SELECT is refused until ENABLE again, FETCH
    responses carry no MODSEQ and expunges are EXPUNGE again."""
    a = login()
    for i in range(3):
        append(a, i)
    a.cmd("e", "ENABLE QRESYNC")
    selected = a.cmd("s", "SELECT INBOX")
    uidvalidity = code(selected, b"UIDVALIDITY")
    highest = code(selected, b"HIGHESTMODSEQ")
    assert a.cmd("u", "UNAUTHENTICATE")[-1].startswith(b"u OK")
    assert a.cmd("l", "LOGIN cora pw")[-1].startswith(b"l OK")
    out = a.cmd("s", f"SELECT INBOX (QRESYNC ({uidvalidity} {highest}))")
    assert out[-1].startswith(b"s BAD")
    a.cmd("s", "SELECT INBOX")
    out = a.cmd("t", "STORE 1 +FLAGS (\\Deleted)")
    assert out[0].startswith(b"* 1 FETCH (FLAGS (\\Deleted") and b"MODSEQ" not in out[0]
    out = a.cmd("x", "EXPUNGE")
    assert out[0] == b"* 1 EXPUNGE" and b"VANISHED" not in b"".join(out)
    assert not out[-1].startswith(b"x OK [HIGHESTMODSEQ")
    out = a.cmd("e", "ENABLE QRESYNC")
    assert out[-2] == b"* ENABLED QRESYNC"


def test_status_takes_highestmodseq_beside_the_new_items(login):
    """RFC 7162 3.1.2.2 with RFC 8438 (SIZE), RFC 8474 (MAILBOXID) and RFC 9208 4.1.4
    (DELETED): STATUS answers every item asked for, in the order asked."""
    a = login()
    append(a, 1, "\\Deleted")
    append(a, 2)
    out = a.cmd("st", "STATUS INBOX (MESSAGES SIZE HIGHESTMODSEQ DELETED MAILBOXID UIDNEXT)")
    m = re.fullmatch(rb"\* STATUS INBOX \(MESSAGES 2 SIZE (\d+) HIGHESTMODSEQ (\d+) DELETED 1 "
                     rb"MAILBOXID \(\S+\) UIDNEXT 3\)", out[0])
    assert m and int(m.group(1)) > 0 and int(m.group(2)) >= 1, out
    out = a.cmd("li", 'LIST "" INBOX RETURN (STATUS (HIGHESTMODSEQ DELETED SIZE))')
    assert re.fullmatch(rb"\* STATUS INBOX \(HIGHESTMODSEQ \d+ DELETED 1 SIZE \d+\)", out[1])


def test_fetch_preview_modifiers_beside_changedsince(login):
    """RFC 8970 6 with RFC 7162 3.1.4.1: FETCH's third argument may be PREVIEW's modifiers
    (``PREVIEW (LAZY)``), FETCH's own (``(CHANGEDSINCE n)``), or both, in that order."""
    a = login()
    for i in range(3):
        append(a, i)
    highest = code(a.cmd("s", "SELECT INBOX"), b"HIGHESTMODSEQ")
    a.cmd("t", "STORE 2 +FLAGS.SILENT (\\Flagged)")
    out = a.cmd("f", f"UID FETCH 1:* PREVIEW (LAZY) (CHANGEDSINCE {highest})")
    assert len(out) == 3 and out[-1].startswith(b"f OK")
    assert re.fullmatch(rb"\* 2 FETCH \(UID 2 PREVIEW .+ MODSEQ \(\d+\)\)", out[1]), out
    out = a.cmd("f", f"FETCH 1:* PREVIEW (CHANGEDSINCE {highest})")
    assert len(out) == 2
    assert re.fullmatch(rb"\* 2 FETCH \(PREVIEW .+ MODSEQ \(\d+\)\)", out[0]), out
    out = a.cmd("f", "FETCH 1 PREVIEW (LAZY)")
    # PREVIEW changes no flag: no MODSEQ unless asked (RFC 7162 3.1.4.1).
    assert re.fullmatch(rb"\* 1 FETCH \(PREVIEW [^()]+\)", out[0]), out
    for bad in ("FETCH 1 PREVIEW (LAZY) (CHANGEDSINCE 1) (VANISHED)",
                "FETCH 1 FLAGS (LAZY)", "FETCH 1 PREVIEW (CHANGEDSINCE x)"):
        assert a.cmd("b", bad)[-1].startswith(b"b BAD"), bad
