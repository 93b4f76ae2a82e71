"""ESEARCH (RFC 4731), SEARCHRES (RFC 5182), WITHIN (RFC 5032) and CONTEXT=SEARCH (RFC 5267
section 4, with RFC 9394's negative PARTIAL ranges) over IMAP: each RFC's examples played as
transcripts against a real ``imapserver``, and UPDATE contexts across two processes sharing one
store.  Dovecot's answers to the same conversations are compared in
tests/test_differential_esearch.py; the pure pieces (rendering, RETURN parsing, freezing a
program) are tested at the end.
"""

from __future__ import annotations

import re
import time

import pytest

from imapserver.imap.esearch import esearch_line, result_items, sequence_set
from imapserver.imap.search import evaluate, parse_search
from imapserver.imap.search_parse import SequenceKey
from imapserver.imap.search_return import ReturnOptions, split_return
from imapserver.imap.search_updates import MAX_CONTEXTS, SearchContexts, freeze
from imapserver.imap.selected import SelectedMailbox
from imapserver.imap.seqset import parse_seqset
from mailstore.errors import BackendUnavailable
from mailstore.store import MailStore
from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message

USER, PASSWORD = "test", "secret"
TIMEOUT = 10.0


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("esearch") / "store")
    make_users(path, (USER, PASSWORD))
    return path


@pytest.fixture(scope="module")
def server(data_dir):
    with ServerProcess(data_dir) as proc:
        yield proc


_names = iter(range(1_000_000))


_open: list[Client] = []


@pytest.fixture(autouse=True)
def _close_clients():
    """Every connection a test opened is closed, passed or failed."""
    yield
    while _open:
        _open.pop().close()


def login(port: int) -> Client:
    client = Client(port)
    _open.append(client)
    assert client.cmd("L", f"LOGIN {USER} {PASSWORD}")[-1].startswith(b"L OK")
    return client


def append(client: Client, box: str, raw: bytes, flags: str = "", when: str | None = None
           ) -> None:
    head = f"AP APPEND {box}" + (f" ({flags})" if flags else "") + (f' "{when}"' if when else "")
    client.send(f"{head} {{{len(raw)}+}}\r\n".encode() + raw + b"\r\n")
    assert client.until_tagged("AP")[-1].startswith(b"AP OK")


def ok(client: Client, tag: str, text: str) -> list[bytes]:
    """The untagged responses of a command that must succeed."""
    lines = client.cmd(tag, text)
    assert lines[-1].startswith(tag.encode() + b" OK"), lines
    return lines[:-1]


def status(client: Client, tag: str, text: str) -> bytes:
    """The tagged response's status word (OK, NO, BAD)."""
    return client.cmd(tag, text)[-1].split(b" ")[1]


def fresh_box(client: Client, messages: list[tuple[bytes, str]], when: str | None = None
              ) -> str:
    name = f"E{next(_names)}"
    ok(client, "C", f"CREATE {name}")
    for raw, flags in messages:
        append(client, name, raw, flags, when)
    return name


def imap_date(stamp: float) -> str:
    return time.strftime("%d-%b-%Y %H:%M:%S +0000", time.gmtime(stamp))


def read_until(client: Client, pattern: bytes, timeout: float = TIMEOUT) -> list[bytes]:
    """Lines (an IDLE's pushes) up to the first that matches ``pattern``."""
    client.sock.settimeout(timeout)
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines.append(client.read_line())
        if re.search(pattern, lines[-1]):
            return lines
    raise AssertionError(f"no {pattern!r} in {lines}")


# -- RFC 4731 ------------------------------------------------------------------------------------

def rfc4731_box(client: Client) -> str:
    """16 messages: \\Flagged on 2, 5, 10, 11 (5 from Smith), \\Seen on 1-3, \\Deleted on
    2-16 -- so that the RFC's examples give the RFC's answers."""
    messages = []
    for n in range(1, 17):
        flags = [f for f, on in (("\\Flagged", n in (2, 5, 10, 11)), ("\\Seen", n <= 3),
                                 ("\\Deleted", n >= 2)) if on]
        sender = "John Smith <smith@example.com>" if n == 5 else "Alice <alice@example.com>"
        messages.append((message(n, sender=sender), " ".join(flags)))
    return fresh_box(client, messages, "01-Mar-2004 10:00:00 +0000")


def test_rfc4731_examples(server):
    """RFC 4731 3.1: each example of the section, on a mailbox built to give its answers."""
    c = login(server.port)
    box = rfc4731_box(c)
    ok(c, "S", f"SELECT {box}")
    assert ok(c, "A282", 'SEARCH RETURN (MIN COUNT) FLAGGED SINCE 1-Feb-1994 NOT FROM "Smith"') \
        == [b'* ESEARCH (TAG "A282") MIN 2 COUNT 3']
    assert ok(c, "A283", 'SEARCH RETURN () FLAGGED SINCE 1-Feb-1994 NOT FROM "Smith"') \
        == [b'* ESEARCH (TAG "A283") ALL 2,10:11']
    assert ok(c, "A284", "SEARCH RETURN (MIN) UNSEEN") == [b'* ESEARCH (TAG "A284") MIN 4']
    assert ok(c, "A286", "SEARCH RETURN (COUNT) DELETED") == [b'* ESEARCH (TAG "A286") COUNT 15']
    # A285: "if the ESEARCH UID indicator is present, all data ... is referring to UIDs".
    # UIDs 1-6 expunged, so the mailbox holds UIDs 7-16 as messages 1-10.
    ok(c, "X", "STORE 1:* -FLAGS.SILENT (\\Deleted)")
    ok(c, "X", "STORE 1:6 +FLAGS.SILENT (\\Deleted)")
    ok(c, "X", "EXPUNGE")
    assert ok(c, "A285", "UID SEARCH RETURN (MIN MAX) 1:5000") \
        == [b'* ESEARCH (TAG "A285") UID MIN 7 MAX 16']
    assert ok(c, "A285b", "SEARCH RETURN (MIN MAX) 1:5000") \
        == [b'* ESEARCH (TAG "A285b") MIN 1 MAX 10']
    # "If the SEARCH results in no matches, the server MUST NOT include the MIN result option
    # ...; however, it still MUST send the ESEARCH response"; COUNT is always there.
    assert ok(c, "N1", "SEARCH RETURN (MIN MAX ALL COUNT) DELETED") \
        == [b'* ESEARCH (TAG "N1") COUNT 0']
    assert ok(c, "N2", "UID SEARCH RETURN (ALL) DELETED") == [b'* ESEARCH (TAG "N2") UID']
    # Without RETURN, the plain SEARCH response of RFC 3501 as before.
    assert ok(c, "P", "SEARCH 1:3") == [b"* SEARCH 1 2 3"]
    assert status(c, "B1", "SEARCH RETURN (FOO) ALL") == b"BAD"
    assert status(c, "B2", "SEARCH RETURN ALL") == b"BAD"


# -- RFC 5182 ------------------------------------------------------------------------------------

def test_rfc5182_save_and_dollar(server):
    """RFC 5182 2.1 and its examples: SAVE alone answers no ESEARCH and $ then names the
    result in FETCH, STORE, COPY, SEARCH, UID SEARCH UID; SAVE with MIN and/or MAX keeps only
    those; a pipelined SEARCH ... $ sees the saved result of the SEARCH before it."""
    c = login(server.port)
    box = rfc4731_box(c)
    ok(c, "S", f"SELECT {box}")
    # Section 2.1's first example, with the RFC 4731 mailbox: found 2, 10 and 11.
    assert ok(c, "A282", 'SEARCH RETURN (SAVE) FLAGGED SINCE 1-Feb-1994 NOT FROM "Smith"') == []
    fetched = ok(c, "A283", "FETCH $ (UID FLAGS)")
    assert [int(line.split()[1]) for line in fetched] == [2, 10, 11]
    assert ok(c, "A284", "UID SEARCH UID $") == [b"* SEARCH 2 10 11"]
    assert ok(c, "A285", "SEARCH $ 1:10") == [b"* SEARCH 2 10"]
    # SAVE with MIN and MAX and no ALL/COUNT: "$" holds the (one or) two messages returned.
    assert ok(c, "M1", "SEARCH RETURN (SAVE MIN MAX) FLAGGED") \
        == [b'* ESEARCH (TAG "M1") MIN 2 MAX 11']
    assert ok(c, "M2", "SEARCH $") == [b"* SEARCH 2 11"]
    assert ok(c, "M3", "SEARCH RETURN (SAVE MAX COUNT) FLAGGED") \
        == [b'* ESEARCH (TAG "M3") MAX 11 COUNT 4']
    assert ok(c, "M4", "SEARCH $") == [b"* SEARCH 2 5 10 11"]
    # Pipelined, as section 2.1 allows: the STORE and the SEARCH wait for the saved result.
    c.send(b"P1 SEARCH RETURN (SAVE) UNSEEN\r\nP2 STORE $ +FLAGS.SILENT (\\Seen)\r\n"
           b"P3 SEARCH UNSEEN\r\n")
    lines = c.until_tagged("P3")
    assert b"* SEARCH" in lines and lines[-1].startswith(b"P3 OK"), lines
    # COPY $ and the copies' COPYUID.
    ok(c, "C1", "SEARCH RETURN (SAVE) 1:2")
    assert b"COPYUID" in c.cmd("C2", f"COPY $ {box}")[-1]
    # "$" alone only: the grammar has no "$" inside a sequence-set.
    assert status(c, "B1", "FETCH $,1 FLAGS") == b"BAD"
    assert status(c, "B2", "SEARCH $:3") == b"BAD"


def test_rfc5182_lifetime(server):
    """RFC 5182 2.1: the variable is empty after SELECT/EXAMINE; expunged messages leave it and
    new ones never join it; a SEARCH with SAVE answered NO empties it, one answered BAD leaves
    it; "$" with nothing saved is the empty set, not an error."""
    c, other = login(server.port), login(server.port)
    box = fresh_box(c, [(message(n), "") for n in range(1, 6)])
    ok(c, "S", f"SELECT {box}")
    assert ok(c, "E0", "FETCH $ (UID)") == []          # nothing saved yet: empty, OK
    assert ok(c, "E1", "SEARCH $") == [b"* SEARCH"]
    ok(c, "V1", "SEARCH RETURN (SAVE) 2:4")
    # Another session expunges message 3 (UID 3); a message arrives.
    ok(other, "O1", f"SELECT {box}")
    ok(other, "O2", "STORE 3 +FLAGS.SILENT (\\Deleted)")
    ok(other, "O3", "EXPUNGE")
    append(other, box, message(6))
    ok(c, "N", "NOOP")
    assert ok(c, "V2", "UID SEARCH UID $") == [b"* SEARCH 2 4"]
    assert ok(c, "V3", "SEARCH $") == [b"* SEARCH 2 3"]   # renumbered: UID 4 is now 3
    # BAD: not run, the variable stays.
    assert status(c, "V4", "SEARCH RETURN (SAVE) NOSUCHKEY") == b"BAD"
    assert ok(c, "V5", "UID SEARCH UID $") == [b"* SEARCH 2 4"]
    # NO: run and failed, the variable is emptied.
    assert status(c, "V6", "SEARCH RETURN (SAVE) CHARSET X-NOSUCH ALL") == b"NO"
    assert ok(c, "V7", "UID SEARCH UID $") == [b"* SEARCH"]
    # SELECT (and EXAMINE) start with an empty variable.
    ok(c, "V8", "SEARCH RETURN (SAVE) ALL")
    ok(c, "V9", f"EXAMINE {box}")
    assert ok(c, "V10", "SEARCH $") == [b"* SEARCH"]
    # UID EXPUNGE $ and MOVE $ take it too.
    ok(c, "S2", f"SELECT {box}")
    ok(c, "W1", "SEARCH RETURN (SAVE) 1")
    ok(c, "W2", "STORE $ +FLAGS.SILENT (\\Deleted)")
    assert b"* 1 EXPUNGE" in ok(c, "W3", "UID EXPUNGE $")
    ok(c, "W4", "SEARCH RETURN (SAVE) 1")
    ok(c, "W5", f"CREATE {box}x")
    assert b"* 1 EXPUNGE" in ok(c, "W6", f"MOVE $ {box}x")


# -- RFC 5032 ------------------------------------------------------------------------------------

def test_rfc5032_older_younger(server):
    """RFC 5032 3: OLDER/YOUNGER n, n seconds back from now, against INTERNALDATE ("SEARCH
    UNSEEN YOUNGER 259200": unseen messages of the last three days); n is an nz-number."""
    c = login(server.port)
    now = time.time()
    box = fresh_box(c, [])
    for n, age, flags in ((1, 5 * 86400, ""), (2, 86400, ""), (3, 3600, "\\Seen"), (4, 60, "")):
        append(c, box, message(n), flags, imap_date(now - age))
    ok(c, "S", f"SELECT {box}")
    assert ok(c, "a1", "SEARCH UNSEEN YOUNGER 259200") == [b"* SEARCH 2 4"]
    assert ok(c, "a2", "SEARCH OLDER 259200") == [b"* SEARCH 1"]
    assert ok(c, "a3", "SEARCH OLDER 7200 YOUNGER 172800") == [b"* SEARCH 2"]
    assert ok(c, "a4", "UID SEARCH RETURN (COUNT) NOT YOUNGER 30") \
        == [b'* ESEARCH (TAG "a4") UID COUNT 4']
    for bad in ("OLDER 0", "YOUNGER -1", "YOUNGER", "OLDER x", "OLDER 4294967296"):
        assert status(c, "b", f"SEARCH {bad}") == b"BAD", bad


# -- RFC 5267 ------------------------------------------------------------------------------------

def test_rfc5267_contexts(server):
    """RFC 5267 4.2-4.3.5: CONTEXT is a hint; UPDATE answers now and then notifies: ADDTO when
    another session's flag change makes a message match (after its FETCH), REMOVEFROM for an
    expunged match *before* the EXPUNGE, ADDTO for a new message after its EXISTS; tag reuse is
    BAD; CANCELUPDATE stops it; past the limit UPDATE is refused with NOUPDATE (4.3.1)."""
    c, other = login(server.port), login(server.port)
    box = fresh_box(c, [(message(n), "\\Seen" if n % 2 else "") for n in range(1, 7)])
    ok(c, "S", f"SELECT {box}")
    ok(other, "O", f"SELECT {box}")
    assert ok(c, "A01", "SEARCH RETURN (CONTEXT COUNT) UNDELETED UNKEYWORD $Junk") \
        == [b'* ESEARCH (TAG "A01") COUNT 6']
    assert ok(c, "B01", "UID SEARCH RETURN (UPDATE COUNT) KEYWORD $Junk") \
        == [b'* ESEARCH (TAG "B01") UID COUNT 0']
    assert ok(c, "C01", "SEARCH RETURN (UPDATE) UNSEEN") == [b'* ESEARCH (TAG "C01")']
    # "the following is rejected, and has no effect"
    assert status(c, "B01", "SEARCH RETURN (UPDATE) FLAGGED") == b"BAD"
    ok(other, "O1", "STORE 2:3 +FLAGS.SILENT ($Junk)")
    lines = ok(c, "N1", "NOOP")
    assert lines[-1] == b'* ESEARCH (TAG "B01") UID ADDTO (0 2:3)', lines
    assert lines.index(b'* ESEARCH (TAG "B01") UID ADDTO (0 2:3)') > \
        max(i for i, line in enumerate(lines) if b"FETCH" in line)
    # An expunged match: REMOVEFROM first, numbered as the client still numbers it.
    ok(other, "O2", "STORE 2 +FLAGS.SILENT (\\Deleted)")
    ok(other, "O3", "EXPUNGE")
    lines = ok(c, "N2", "NOOP")
    assert lines[:3] == [b'* ESEARCH (TAG "B01") UID REMOVEFROM (0 2)',
                         b'* ESEARCH (TAG "C01") REMOVEFROM (0 2)',
                         b"* 2 EXPUNGE"], lines
    # A new message: ADDTO after the EXISTS that gives it its number.
    append(other, box, message(7), "$Junk")
    lines = ok(c, "N3", "NOOP")
    exists = lines.index(b"* 6 EXISTS")
    assert lines.index(b'* ESEARCH (TAG "C01") ADDTO (0 6)') > exists
    assert lines.index(b'* ESEARCH (TAG "B01") UID ADDTO (0 7)') > exists
    # Our own STORE: the update comes with its FETCH.
    lines = ok(c, "N4", "STORE 6 +FLAGS (\\Seen)")
    assert lines[-1] == b'* ESEARCH (TAG "C01") REMOVEFROM (0 6)', lines
    assert ok(c, "B04", 'CANCELUPDATE "B01"') == []
    assert status(c, "B05", 'CANCELUPDATE "B01"') == b"NO"
    assert status(c, "B06", "CANCELUPDATE B01") == b"BAD"
    ok(other, "O4", "STORE 1 +FLAGS.SILENT ($Junk)")
    assert not any(b"B01" in line for line in ok(c, "N5", "NOOP"))
    # The limit: one more than MAX_CONTEXTS is answered, but not kept.
    for n in range(MAX_CONTEXTS - 1):
        assert ok(c, f"U{n}", "SEARCH RETURN (UPDATE COUNT) ALL")[-1].startswith(b"* ESEARCH")
    lines = ok(c, "U99", "SEARCH RETURN (UPDATE COUNT) ALL")
    assert lines == [b'* ESEARCH (TAG "U99") COUNT 6',
                     b'* NO [NOUPDATE "U99"] Too many update contexts'], lines
    # Contexts end with the selection.
    ok(c, "S2", f"SELECT {box}")
    ok(other, "O5", "STORE 1:* -FLAGS.SILENT (\\Seen)")
    assert not any(b"ESEARCH" in line for line in ok(c, "N6", "NOOP"))


def test_rfc5267_sequence_numbers_are_evaluated_once(server):
    """RFC 5267 4.3: "message sequence numbers used in the search program are evaluated at the
    time the command is received": ``SEARCH RETURN (UPDATE) 4:*`` keeps naming the messages
    that were 4 and up then, not those numbered so after an expunge or a delivery."""
    c, other = login(server.port), login(server.port)
    box = fresh_box(c, [(message(n), "") for n in range(1, 6)])
    ok(c, "S", f"SELECT {box}")
    ok(other, "O", f"SELECT {box}")
    assert ok(c, "T1", "UID SEARCH RETURN (UPDATE ALL) 4:* UNSEEN") \
        == [b'* ESEARCH (TAG "T1") UID ALL 4:5']
    ok(other, "O1", "STORE 1 +FLAGS.SILENT (\\Deleted)")
    ok(other, "O2", "EXPUNGE")
    append(other, box, message(6))
    ok(other, "O3", "STORE 1:* +FLAGS.SILENT (\\Seen)")
    lines = ok(c, "N", "NOOP")
    assert [x for x in lines if b"ESEARCH" in x] == [b'* ESEARCH (TAG "T1") UID REMOVEFROM '
                                                      b"(0 4:5)"], lines


def test_rfc5267_partial(server):
    """RFC 5267 4.4: PARTIAL low:high of the results in mailbox order, fewer or NIL past the
    end, 500:400 the same as 400:500, never with ALL; RFC 9394 3.1: negative ranges count from
    the last result (-1), and mixed signs, 0 or * are BAD."""
    c = login(server.port)
    box = fresh_box(c, [(message(n), "\\Seen" if n % 3 == 0 else "") for n in range(1, 31)])
    ok(c, "S", f"SELECT {box}")
    assert ok(c, "A02", "UID SEARCH RETURN (PARTIAL 25:40) ALL") \
        == [b'* ESEARCH (TAG "A02") UID PARTIAL (25:40 25:30)']
    assert ok(c, "A03", "UID SEARCH RETURN (PARTIAL 1:5) UNSEEN") \
        == [b'* ESEARCH (TAG "A03") UID PARTIAL (1:5 1:2,4:5,7)']
    assert ok(c, "A04", "UID SEARCH RETURN (PARTIAL 24000:24500) ALL") \
        == [b'* ESEARCH (TAG "A04") UID PARTIAL (24000:24500 NIL)']
    assert ok(c, "A05", "SEARCH RETURN (PARTIAL 5:1 COUNT) SEEN") \
        == [b'* ESEARCH (TAG "A05") PARTIAL (1:5 3,6,9,12,15) COUNT 10']
    assert ok(c, "N1", "UID SEARCH RETURN (PARTIAL -1:-3) SEEN") \
        == [b'* ESEARCH (TAG "N1") UID PARTIAL (-1:-3 24,27,30)']
    assert ok(c, "N2", "SEARCH RETURN (PARTIAL -3:-1) UNSEEN") \
        == [b'* ESEARCH (TAG "N2") PARTIAL (-1:-3 26,28:29)']
    assert ok(c, "N3", "SEARCH RETURN (PARTIAL -11:-20) SEEN") \
        == [b'* ESEARCH (TAG "N3") PARTIAL (-11:-20 NIL)']
    assert ok(c, "N4", "SEARCH RETURN (PARTIAL -5:-20) SEEN") \
        == [b'* ESEARCH (TAG "N4") PARTIAL (-5:-20 3,6,9,12,15,18)']
    for bad in ("PARTIAL 1:-3", "PARTIAL 0:5", "PARTIAL 1:*", "PARTIAL 1:2 ALL", "PARTIAL",
                "PARTIAL 1:2 PARTIAL 3:4", "PARTIAL -0:-1"):
        assert status(c, "B", f"SEARCH RETURN ({bad}) ALL") == b"BAD", bad


def test_update_contexts_across_two_processes(tmp_path):
    """RFC 5267 4.3 and 4.3.2 across frontends: a session on one ``imapserver`` process IDLEs
    with a UID SEARCH RETURN (UPDATE) context; another process's session changes a flag,
    delivers and expunges, and the first hears ADDTO after the FETCH, ADDTO after the EXISTS
    and REMOVEFROM before the EXPUNGE, without issuing a command."""
    data = str(tmp_path / "store")
    make_users(data, (USER, PASSWORD))
    with ServerProcess(data) as one, ServerProcess(data) as two:
        a, b = login(one.port), login(two.port)
        box = fresh_box(b, [(message(n), "\\Seen") for n in range(1, 4)])
        ok(a, "S", f"SELECT {box}")
        ok(b, "S", f"SELECT {box}")
        assert ok(a, "U1", "UID SEARCH RETURN (UPDATE ALL) UNSEEN") \
            == [b'* ESEARCH (TAG "U1") UID']
        a.send(b"I IDLE\r\n")
        assert a.read_line().startswith(b"+")
        ok(b, "B1", "STORE 2 -FLAGS.SILENT (\\Seen)")
        lines = read_until(a, rb"ESEARCH")
        assert lines[-1] == b'* ESEARCH (TAG "U1") UID ADDTO (0 2)', lines
        assert any(b"FETCH" in x for x in lines[:-1]), lines
        append(b, box, message(4))
        lines = read_until(a, rb"ESEARCH")
        assert lines[-1] == b'* ESEARCH (TAG "U1") UID ADDTO (0 4)', lines
        assert b"* 4 EXISTS" in lines[:-1], lines
        ok(b, "B2", "STORE 2 +FLAGS.SILENT (\\Deleted)")
        ok(b, "B3", "EXPUNGE")
        lines = read_until(a, rb"EXPUNGE")
        assert lines[-2:] == [b'* ESEARCH (TAG "U1") UID REMOVEFROM (0 2)', b"* 2 EXPUNGE"], \
            lines
        a.send(b"DONE\r\n")
        assert a.until_tagged("I")[-1].startswith(b"I OK")
        assert ok(a, "U2", "UID SEARCH RETURN (ALL) UNSEEN") == [b'* ESEARCH (TAG "U2") UID ALL 4']


def test_capabilities_advertised(server):
    """RFC 4731 4, RFC 5182 3, RFC 5032 4, RFC 5267 5: the capability names, advertised."""
    c = login(server.port)
    caps = ok(c, "C", "CAPABILITY")[0].split()
    for name in (b"ESEARCH", b"SEARCHRES", b"WITHIN", b"CONTEXT=SEARCH"):
        assert name in caps


# -- the pieces ------------------------------------------------------------------------------------

@pytest.mark.parametrize("numbers, text", [
    ([], ""), ([5], "5"), ([1, 2, 3], "1:3"), ([2, 10, 11], "2,10:11"),
    ([3, 1, 2, 2, 7], "1:3,7"), ([1, 3, 5], "1,3,5"),
])
def test_sequence_set_is_compact(numbers, text):
    """RFC 4731 3.1: ALL "using the sequence-set syntax"; example "ALL 2,10:11"."""
    assert sequence_set(numbers) == text


def test_sequence_set_keeps_a_sort_order():
    """RFC 5267 3.2 (for ESORT): ranges only where ascending, the order kept."""
    assert sequence_set([5, 6, 7, 3, 2, 9], ordered=False) == "5:7,3,2,9"


def test_esearch_line_and_items():
    """RFC 4731 4 / RFC 4466 2.6.2 response form, items in Dovecot's order."""
    items = result_items([2, 10, 11], want_min=True, want_max=True, want_all=True,
                         want_count=True)
    assert esearch_line("A1", True, items) == b'ESEARCH (TAG "A1") UID MIN 2 MAX 11 ' \
        b"ALL 2,10:11 COUNT 3"
    assert esearch_line("A2", False, result_items([], want_min=True, want_count=True)) \
        == b'ESEARCH (TAG "A2") COUNT 0'


@pytest.mark.parametrize("words, expected", [
    ([], ReturnOptions(all=True)),
    (["MIN", "count"], ReturnOptions(min=True, count=True)),
    (["SAVE"], ReturnOptions(save=True)),
    (["PARTIAL", "500:400"], ReturnOptions(partial=(400, 500))),
    (["PARTIAL", "-1:-100", "UPDATE"], ReturnOptions(partial=(-100, -1), update=True)),
])
def test_return_options_parse(words, expected):
    """RFC 4466 2.6.1, RFC 4731 3.1 ("()" is ALL), RFC 5267 5, RFC 9394 3."""
    options, rest = split_return(["RETURN", words, "ALL"])
    assert options == expected and rest == ["ALL"]


def test_save_alone_sends_no_esearch():
    """RFC 5182 2.1."""
    assert not ReturnOptions(save=True).sends_esearch
    assert ReturnOptions(save=True, count=True).sends_esearch
    assert ReturnOptions(update=True).sends_esearch


def test_freeze_turns_sequence_numbers_into_uids():
    """RFC 5267 4.3: numbers fixed at command time; ranges cannot take in later UIDs."""
    uids = [3, 5, 8, 9]
    frozen = freeze(SequenceKey(parse_seqset("2:*"), False), uids)
    assert frozen == SequenceKey(parse_seqset("5:9"), True)
    assert freeze(SequenceKey(parse_seqset("7"), False), uids).seqset.ranges == ()



# -- over every backend ----------------------------------------------------------------------------

@pytest.fixture
def inbox(backend):
    """Three messages with internal dates 1000, 2000 and 3000 (seconds), the second \\Seen."""
    store = MailStore(backend)
    user = store.create_user("alice", "pw")
    for n, stamp in enumerate((1000.0, 2000.0, 3000.0), 1):
        store.append(user, "INBOX", message(n), flags=["\\Seen"] if n == 2 else [],
                     internal_date=stamp)
    return store, store.mailbox(user, "INBOX")


def test_within_counts_back_from_now(inbox):
    """RFC 5032 3: OLDER n -- internal date more than n seconds before now; YOUNGER n -- the
    rest (Dovecot's reading: ``date < now - n`` and ``date >= now - n``), at the boundary too."""
    store, box = inbox
    uids = store.uids(box)

    def run(text: str) -> list[int]:
        return evaluate(parse_search(text.split(), uid_mode=True), store, box, uids, now=3500.0)
    assert run("YOUNGER 500") == [3]
    assert run("OLDER 500") == [1, 2]
    assert run("OLDER 1500") == [1]
    assert run("YOUNGER 1500") == [2, 3]
    assert run("UNSEEN YOUNGER 2500") == [1, 3]


class _Reads:
    """The store, recording the UIDs each fetch reads."""

    def __init__(self, store):
        self.store = store
        self.read: list[int] = []

    def fetch(self, mailbox, uids, columns=None):
        self.read += list(uids)
        return self.store.fetch(mailbox, uids, columns)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_context_retests_only_what_changed(inbox):
    """RFC 5267 appendix B: on a change, test the changed messages against the context's
    program, not the mailbox; REMOVEFROM for a match expunged, numbered as the client knew
    it."""
    store, box = inbox
    uids = store.uids(box)
    program = parse_search(["UNSEEN"], uid_mode=False)
    contexts = SearchContexts()
    contexts.add("T", program, uids, evaluate(program, store, box, uids))
    store.store_flags(box, [1], ["\\Seen"], "add")
    store.store_flags(box, [2], ["\\Seen"], "remove")
    reads = _Reads(store)
    assert contexts.retest(reads, box, uids, set(), {1, 2}) \
        == [b'ESEARCH (TAG "T") REMOVEFROM (0 1) ADDTO (0 2)']
    assert sorted(reads.read) == [1, 2]
    assert contexts.expunged({3}, {1: 1, 2: 2, 3: 3}.get) == [b'ESEARCH (TAG "T") REMOVEFROM (0 3)']
    assert contexts.retest(reads, box, uids, set(), {1}) == []  # nothing new to say


class _Flaky(_Reads):
    """The store, whose fetch fails while ``down`` is set."""

    down = False

    def fetch(self, mailbox, uids, columns=None):
        if self.down:
            raise BackendUnavailable("down for the test")
        return super().fetch(mailbox, uids, columns)


def test_failed_context_retest_costs_only_the_update(inbox):
    """RFC 5267 4.3 vs RFC 3501 7.4.1: when re-testing a context fails, the refresh still
    reports the new message (the session's numbering has moved on), and the ADDTO follows at
    the next refresh instead of being lost."""
    store, box = inbox
    flaky = _Flaky(store)
    selected = SelectedMailbox(flaky, box, readonly=False)
    selected.load()
    program = parse_search(["UNSEEN"], uid_mode=True)
    uids = list(selected.uids)
    selected.contexts.add("T", program, uids, evaluate(program, store, box, uids))
    store.append("alice", "INBOX", message(4))
    flaky.down = True
    changes = selected.refresh()
    assert changes.exists == 4 and changes.context_after == []
    flaky.down = False
    assert selected.refresh().context_after == [b'ESEARCH (TAG "T") UID ADDTO (0 4)']
