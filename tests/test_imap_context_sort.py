"""CONTEXT=SORT (RFC 5267 sections 4 and 5) and ESORT's PARTIAL (RFC 5267 3, 4.4; RFC 9394)
over IMAP: the RFC's examples as transcripts against a real ``imapserver``, sort contexts kept up
to date by another session's APPEND, STORE and EXPUNGE (on one process and across two sharing one
store), checked by applying every ADDTO/REMOVEFROM the way RFC 5267 4.3.3 and 4.3.4 tell a
client to and comparing with a fresh SORT.  Debian's Dovecot 2.3 does not advertise CONTEXT=SORT,
so there is no outside judge for UPDATE; ESORT's PARTIAL is compared with Dovecot in
tests/test_differential_ctxsort.py.
"""

from __future__ import annotations

import random
import re

import pytest

from imapserver.imap.search import parse_search
from imapserver.imap.search_updates import MAX_CONTEXTS, SearchContexts, UpdateContext
from mailstore import threads as mailthreads
from mailstore.sortcache import MessageKeys
from mailstore.sortkeys import SortKeys
from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message
from tests.test_imap_esearch import (
    PASSWORD,
    USER,
    append,
    fresh_box,
    login,
    ok,
    read_until,
    status,
)
from tests.test_imap_esearch import _close_clients as _close_clients  # noqa: F401 (autouse)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ctxsort") / "store")
    make_users(path, (USER, PASSWORD))
    with ServerProcess(path) as proc:
        yield proc


def subj(name: str, n: int = 0) -> bytes:
    return message(n, subject=name)


# -- a client keeping a sorted view: RFC 5267 4.3.2-4.3.4 -----------------------------------------

_PAIR = re.compile(rb"(ADDTO|REMOVEFROM) \(([^)]*)\)")


def expand(text: bytes) -> list[int]:
    """A sequence-set in the order written (RFC 5267 3.2: ranges ascend)."""
    out: list[int] = []
    for part in text.split(b","):
        a, _, b = part.partition(b":")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def apply_updates(view: list[int], lines: list[bytes], tag: str) -> list[int]:
    """``view`` after the ADDTO/REMOVEFROM items for ``tag`` in ``lines``, processed in the order
    they appear (4.3.2); each pair's set occupies positions p, p+1, ... after insertion (4.3.3)
    or before removal (4.3.4).  Fails on position 0 (not allowed for SORT) or a mismatch."""
    view = list(view)
    marker = f'* ESEARCH (TAG "{tag}")'.encode()
    for line in lines:
        if not line.startswith(marker):
            continue
        for kind, body in _PAIR.findall(line):
            words = body.split()
            assert len(words) % 2 == 0, line
            for pos_text, numbers in zip(words[::2], words[1::2], strict=True):
                pos = int(pos_text)
                assert pos >= 1, f"a SORT context needs a position: {line!r}"
                numbers = expand(numbers)
                if kind == b"ADDTO":
                    view[pos - 1:pos - 1] = numbers
                else:
                    assert view[pos - 1:pos - 1 + len(numbers)] == numbers, (view, line)
                    del view[pos - 1:pos - 1 + len(numbers)]
    return view


def all_of(client: Client, tag: str, command: str) -> list[int]:
    """The ESORT ALL result of ``command`` (a ``[UID] SORT RETURN (ALL) ...``), in order."""
    lines = ok(client, tag, command)
    m = re.search(rb" ALL (\S+)", lines[-1])
    return expand(m.group(1)) if m else []


# -- RFC 5267 4.4 / RFC 9394: PARTIAL on ESORT -----------------------------------------------------

def test_rfc5267_esort_partial(server):
    """RFC 5267 4.4: PARTIAL selects positions of the *sorted* result ("A01 UID SORT RETURN
    (PARTIAL 23500:24000) (REVERSE DATE) UTF-8 UNDELETED UNKEYWORD $Junk"), echoes the range
    low:high, is short or NIL past the end, and never goes with ALL; RFC 9394 3.1: -1 is the last
    result."""
    c = login(server.port)
    names = ["f", "b", "e", "a", "d", "c", "h", "g"]
    box = fresh_box(c, [(subj(s, n), "") for n, s in enumerate(names, 1)])
    ok(c, "S", f"SELECT {box}")
    # Sorted by SUBJECT: a(4) b(2) c(6) d(5) e(3) f(1) g(8) h(7).
    assert ok(c, "A01", "UID SORT RETURN (PARTIAL 2:4) (SUBJECT) UTF-8 UNDELETED "
                        "UNKEYWORD $Junk") == [b'* ESEARCH (TAG "A01") UID PARTIAL (2:4 2,6,5)']
    assert ok(c, "A02", "SORT RETURN (PARTIAL 6:3 COUNT MIN MAX) (REVERSE SUBJECT) UTF-8 ALL") \
        == [b'* ESEARCH (TAG "A02") MIN 7 MAX 4 PARTIAL (3:6 1,3,5:6) COUNT 8']
    assert ok(c, "A03", "UID SORT RETURN (PARTIAL 7:100) (SUBJECT) UTF-8 ALL") \
        == [b'* ESEARCH (TAG "A03") UID PARTIAL (7:100 8,7)']
    assert ok(c, "A04", "UID SORT RETURN (PARTIAL 24000:24500) (SUBJECT) UTF-8 ALL") \
        == [b'* ESEARCH (TAG "A04") UID PARTIAL (24000:24500 NIL)']
    assert ok(c, "N1", "UID SORT RETURN (PARTIAL -1:-3) (SUBJECT) UTF-8 ALL") \
        == [b'* ESEARCH (TAG "N1") UID PARTIAL (-1:-3 1,8,7)']
    assert ok(c, "N2", "UID SORT RETURN (PARTIAL -7:-20) (SUBJECT) UTF-8 ALL") \
        == [b'* ESEARCH (TAG "N2") UID PARTIAL (-7:-20 4,2)']
    assert ok(c, "N3", "UID SORT RETURN (PARTIAL -9:-20) (SUBJECT) UTF-8 ALL") \
        == [b'* ESEARCH (TAG "N3") UID PARTIAL (-9:-20 NIL)']
    # The plain forms are unchanged.
    assert ok(c, "P1", "UID SORT (SUBJECT) UTF-8 ALL") == [b"* SORT 4 2 6 5 3 1 8 7"]
    assert ok(c, "P2", "UID SORT RETURN () (SUBJECT) UTF-8 ALL") \
        == [b'* ESEARCH (TAG "P2") UID ALL 4,2,6,5,3,1,8,7']
    for bad in ("PARTIAL 1:-3", "PARTIAL 0:5", "PARTIAL 1:*", "PARTIAL 1:2 ALL", "PARTIAL",
                "PARTIAL 1:2 PARTIAL 3:4", "FOO"):
        assert status(c, "B", f"SORT RETURN ({bad}) (SUBJECT) UTF-8 ALL") == b"BAD", bad


# -- RFC 5267 4.3: UPDATE on SORT ------------------------------------------------------------------

def test_rfc5267_4_3_3_addto_positions(server):
    """RFC 5267 4.3.3's example: a sort context holding 2734:2735 receives 2731:2733 at the
    front; "ADDTO (1 2733) ADDTO (1 2731:2732)" and "ADDTO (1 2731:2733)" are the same, and "the
    last is the preferred representation".  Here: UIDs 1 and 2 (subjects d, e) sorted by
    SUBJECT; another session appends a, b, c (UIDs 3-5), which go in front, in one run."""
    c, other = login(server.port), login(server.port)
    box = fresh_box(c, [(subj("d"), ""), (subj("e"), "")])
    ok(c, "S", f"SELECT {box}")
    ok(other, "O", f"SELECT {box}")
    assert ok(c, "C01", "UID SORT RETURN (UPDATE ALL) (SUBJECT) UTF-8 UNDELETED") \
        == [b'* ESEARCH (TAG "C01") UID ALL 1:2']
    for name in ("a", "b", "c"):
        append(other, box, subj(name))
    lines = ok(c, "N1", "NOOP")
    assert lines[-1] == b'* ESEARCH (TAG "C01") UID ADDTO (1 3:5)', lines
    assert lines.index(b"* 5 EXISTS") < len(lines) - 1  # after the EXISTS (4.3.3)
    # Two runs at two places: "ab" goes between a and b, "z" at the end.
    append(other, box, subj("z"))
    append(other, box, subj("ab"))
    lines = ok(c, "N2", "NOOP")
    assert lines[-1] == b'* ESEARCH (TAG "C01") UID ADDTO (2 7 7 6)', lines
    assert all_of(c, "V", "UID SORT RETURN (ALL) (SUBJECT) UTF-8 UNDELETED") == \
        apply_updates([3, 4, 5, 1, 2], [lines[-1]], "C01") == [3, 7, 4, 5, 1, 2, 6]


def test_rfc5267_sort_update_flags_and_expunge(server):
    """RFC 5267 4.3, 4.3.3, 4.3.4 on a SORT context: a flag change that does not change whether
    a message matches moves nothing (no ESEARCH); one that makes it leave gives REMOVEFROM at
    its position, one that makes it join gives ADDTO at its place in the order (sort keys do not
    change, so it goes back where it was); an expunge gives REMOVEFROM *before* the EXPUNGE,
    numbered as the client still numbers it, and shifts every later position; SORT (not UID
    SORT) updates carry message sequence numbers (4.3.2).  The session's own STORE and EXPUNGE
    update its contexts too."""
    c, other = login(server.port), login(server.port)
    names = ["c", "a", "e", "b", "d"]  # UIDs 1-5; by SUBJECT: 2 4 1 5 3
    box = fresh_box(c, [(subj(s, n), "") for n, s in enumerate(names, 1)])
    ok(c, "S", f"SELECT {box}")
    ok(other, "O", f"SELECT {box}")
    assert ok(c, "U1", "UID SORT RETURN (UPDATE ALL) (SUBJECT) UTF-8 UNSEEN") \
        == [b'* ESEARCH (TAG "U1") UID ALL 2,4,1,5,3']
    assert ok(c, "Q1", "SORT RETURN (UPDATE COUNT) (REVERSE SUBJECT) UTF-8 UNSEEN") \
        == [b'* ESEARCH (TAG "Q1") COUNT 5']
    view, qview = [2, 4, 1, 5, 3], [3, 5, 1, 4, 2]
    # \Flagged: no test in the program, so no position changes and no ESEARCH at all.
    ok(other, "F1", "STORE 1 +FLAGS.SILENT (\\Flagged)")
    lines = ok(c, "N1", "NOOP")
    assert any(b"FETCH" in x for x in lines) and not any(b"ESEARCH" in x for x in lines), lines
    # \Seen on UID 1 (position 3): it leaves both contexts.
    ok(other, "F2", "STORE 1 +FLAGS.SILENT (\\Seen)")
    lines = ok(c, "N2", "NOOP")
    assert b'* ESEARCH (TAG "U1") UID REMOVEFROM (3 1)' in lines, lines
    assert b'* ESEARCH (TAG "Q1") REMOVEFROM (3 1)' in lines, lines
    view, qview = apply_updates(view, lines, "U1"), apply_updates(qview, lines, "Q1")
    assert view == [2, 4, 5, 3] and qview == [3, 5, 4, 2]
    # ... and back: it returns to its old place.
    ok(other, "F3", "STORE 1 -FLAGS.SILENT (\\Seen)")
    lines = ok(c, "N3", "NOOP")
    assert b'* ESEARCH (TAG "U1") UID ADDTO (3 1)' in lines, lines
    view, qview = apply_updates(view, lines, "U1"), apply_updates(qview, lines, "Q1")
    # Expunge UID 4 (position 2 in U1; sequence number 4, position 4 in Q1).
    ok(other, "X1", "STORE 4 +FLAGS.SILENT (\\Deleted)")
    ok(other, "X2", "EXPUNGE")
    lines = ok(c, "N4", "NOOP")
    expunge = lines.index(b"* 4 EXPUNGE")
    assert lines.index(b'* ESEARCH (TAG "U1") UID REMOVEFROM (2 4)') < expunge, lines
    assert lines.index(b'* ESEARCH (TAG "Q1") REMOVEFROM (4 4)') < expunge, lines
    view = apply_updates(view, lines, "U1")
    qview = apply_updates(qview, lines[:expunge], "Q1")
    qview = [n - 1 if n > 4 else n for n in qview]  # the client renumbers at the EXPUNGE
    assert view == all_of(c, "V1", "UID SORT RETURN (ALL) (SUBJECT) UTF-8 UNSEEN") == [2, 1, 5, 3]
    assert qview == all_of(c, "V2", "SORT RETURN (ALL) (REVERSE SUBJECT) UTF-8 UNSEEN")
    # Our own STORE updates our contexts too, with the FETCH it answers.
    lines = ok(c, "F4", "UID STORE 5 +FLAGS (\\Seen)")
    assert b'* ESEARCH (TAG "U1") UID REMOVEFROM (3 5)' in lines, lines
    # ... and our own EXPUNGE: UID 1 (U1 now 2 1 3, position 2; sequence number 1).
    ok(c, "F5", "UID STORE 1 +FLAGS.SILENT (\\Deleted)")
    lines = ok(c, "F6", "EXPUNGE")
    assert lines.index(b'* ESEARCH (TAG "U1") UID REMOVEFROM (2 1)') < \
        lines.index(b"* 1 EXPUNGE"), lines


def test_rfc5267_sort_contexts_share_the_search_mechanism(server):
    """RFC 5267 4.3, 4.3.1, 4.3.5 for SORT: tag reuse while a context updates is BAD (whether
    the context came from SEARCH or SORT); CANCELUPDATE stops a sort context; the limit counts
    SEARCH and SORT contexts together, and past it UPDATE alone is refused with NOUPDATE while
    the other return options are answered."""
    c, other = login(server.port), login(server.port)
    box = fresh_box(c, [(subj(s), "") for s in "ba"])
    ok(c, "S", f"SELECT {box}")
    ok(other, "O", f"SELECT {box}")
    assert ok(c, "B01", "UID SEARCH RETURN (UPDATE) UNSEEN") == [b'* ESEARCH (TAG "B01") UID']
    assert status(c, "B01", "UID SORT RETURN (UPDATE) (SUBJECT) UTF-8 ALL") == b"BAD"
    assert ok(c, "C01", "UID SORT RETURN (UPDATE) (SUBJECT) UTF-8 UNSEEN") \
        == [b'* ESEARCH (TAG "C01") UID']
    assert status(c, "C01", "UID SEARCH RETURN (UPDATE) ALL") == b"BAD"
    assert ok(c, "C02", 'CANCELUPDATE "C01"') == []
    append(other, box, subj("c"))
    lines = ok(c, "N1", "NOOP")
    assert b'* ESEARCH (TAG "B01") UID ADDTO (0 3)' in lines, lines
    assert not any(b"C01" in x for x in lines), lines
    for n in range(MAX_CONTEXTS - 1):
        ok(c, f"U{n}", "SORT RETURN (UPDATE COUNT) (SUBJECT) UTF-8 ALL")
    lines = ok(c, "U99", "SORT RETURN (UPDATE COUNT) (SUBJECT) UTF-8 ALL")
    assert lines == [b'* ESEARCH (TAG "U99") COUNT 3',
                     b'* NO [NOUPDATE "U99"] Too many update contexts'], lines
    # Contexts end with the selection.
    ok(c, "S2", f"SELECT {box}")
    append(other, box, subj("d"))
    assert not any(b"ESEARCH" in x for x in ok(c, "N2", "NOOP"))


def test_sort_contexts_follow_random_changes(server):
    """RFC 5267 4.3.2: "servers MUST generate ADDTO and REMOVEFROM responses such that the
    results are maintained in the requested order".  Another session appends, flags and
    expunges at random; after each round the client's view, updated only by the ADDTOs and
    REMOVEFROMs, equals a fresh UID SORT.  Bounded: 25 rounds."""
    rng = random.Random(5267)
    c, other = login(server.port), login(server.port)
    box = fresh_box(c, [(subj(rng.choice("abcdefgh") + str(n), n), "") for n in range(12)])
    ok(c, "S", f"SELECT {box}")
    ok(other, "O", f"SELECT {box}")
    command = "UID SORT RETURN (UPDATE ALL) (REVERSE SUBJECT SIZE) UTF-8 UNFLAGGED"
    view = all_of(c, "R", command)
    top = 12
    for n in range(25):
        action = rng.choice(("append", "flag", "unflag", "expunge"))
        if action == "append":
            append(other, box, subj(rng.choice("abcdefgh"), 100 + n),
                   "\\Flagged" if rng.random() < 0.3 else "")
            top += 1
        else:
            # UIDs that no longer exist are left alone by UID STORE / UID EXPUNGE.
            uids = ",".join(str(rng.randint(1, top)) for _ in range(2))
            flag = "\\Deleted" if action == "expunge" else "\\Flagged"
            sign = "-" if action == "unflag" else "+"
            ok(other, "F", f"UID STORE {uids} {sign}FLAGS.SILENT ({flag})")
            if action == "expunge":
                ok(other, "X", f"UID EXPUNGE {uids}")
        lines = ok(c, "N", "NOOP")
        view = apply_updates(view, lines, "R")
        assert view == all_of(c, "V", command.replace("UPDATE ALL", "ALL")), (n, action, lines)


# -- across two processes --------------------------------------------------------------------------

def test_sort_context_across_two_processes(tmp_path):
    """RFC 5267 4.3.2-4.3.4 across frontends: a session on one ``imapserver`` process IDLEs with
    a UID SORT RETURN (UPDATE) context; a session of another process on the same store appends a
    message that sorts first (ADDTO at position 1, after its EXISTS), changes a flag the program
    does not test (FETCH, no ESEARCH), one it does (REMOVEFROM at the message's position), and
    expunges a matching message (REMOVEFROM at its position, before the EXPUNGE)."""
    data = str(tmp_path / "store")
    make_users(data, (USER, PASSWORD))
    with ServerProcess(data) as one, ServerProcess(data) as two:
        a, b = login(one.port), login(two.port)
        box = fresh_box(b, [(subj(s), "") for s in ("m", "x", "q")])  # by SUBJECT: 1 3 2
        ok(a, "S", f"SELECT {box}")
        ok(b, "S", f"SELECT {box}")
        assert ok(a, "U1", "UID SORT RETURN (UPDATE ALL) (SUBJECT) UTF-8 UNSEEN") \
            == [b'* ESEARCH (TAG "U1") UID ALL 1,3,2']
        a.send(b"I IDLE\r\n")
        assert a.read_line().startswith(b"+")
        append(b, box, subj("b"))
        lines = read_until(a, rb"ESEARCH")
        assert lines[-1] == b'* ESEARCH (TAG "U1") UID ADDTO (1 4)', lines
        assert b"* 4 EXISTS" in lines[:-1], lines
        ok(b, "B1", "STORE 3 +FLAGS.SILENT (\\Flagged)")
        lines = read_until(a, rb"FETCH")
        ok(b, "B2", "STORE 3 +FLAGS.SILENT (\\Seen)")
        lines += read_until(a, rb"ESEARCH")
        assert lines[-1] == b'* ESEARCH (TAG "U1") UID REMOVEFROM (3 3)', lines
        assert not any(b"ESEARCH" in x for x in lines[:-1]), lines
        ok(b, "B3", "STORE 1 +FLAGS.SILENT (\\Deleted)")
        ok(b, "B4", "EXPUNGE")
        lines = read_until(a, rb"EXPUNGE")
        assert lines[-2:] == [b'* ESEARCH (TAG "U1") UID REMOVEFROM (2 1)', b"* 1 EXPUNGE"], \
            lines
        a.send(b"DONE\r\n")
        assert a.until_tagged("I")[-1].startswith(b"I OK")
        assert all_of(a, "V", "UID SORT RETURN (ALL) (SUBJECT) UTF-8 UNSEEN") == [4, 2]


def test_context_sort_advertised(server):
    """RFC 5267 5: CONTEXT=SORT (with ESORT, RFC 5267 3) in the capability list."""
    caps = ok(login(server.port), "C", "CAPABILITY")[0].split()
    assert b"CONTEXT=SORT" in caps and b"ESORT" in caps


# -- the pieces ------------------------------------------------------------------------------------

def keyed(count: int, seed: int) -> dict:
    """uid -> MessageKeys with few distinct values, so that ties (RFC 5256 3) are common."""
    rng = random.Random(seed)
    return {uid: MessageKeys(float(rng.randint(0, 5)), rng.randint(0, 3), SortKeys(
        rng.choice("ab"), rng.choice("xy"), "", "", "", rng.choice((None, 1.0, 2.0)),
        rng.choice("pqr"), False, f"m{uid}", ())) for uid in range(1, count + 1)}


@pytest.mark.parametrize("criteria", [
    [("SUBJECT", False)], [("DATE", True)], [("SUBJECT", True), ("SIZE", False)],
    [("ARRIVAL", False), ("FROM", True), ("SUBJECT", False)], [("SIZE", True)],
])
def test_insert_sorted_places_as_sort_uids_orders(criteria):
    """RFC 5267 4.3.2 ("results are maintained in the requested order") with RFC 5256 3's
    order: messages put into a sorted result one batch at a time end where sorting everything
    puts them, ties by UID also under REVERSE; the keys of only O(log n) placed messages are
    read per new message."""
    entries = keyed(400, 7)
    rng = random.Random(12)
    uids = list(entries)
    first = sorted(rng.sample(uids, 300))
    order = mailthreads.sort_uids(entries, first, criteria)
    rest = [u for u in uids if u not in set(first)]
    asked: list[int] = []

    def keys_of(wanted):
        asked.extend(wanted)
        return {u: entries[u] for u in wanted if u in entries}
    while rest:
        batch, rest = rest[:7], rest[7:]
        asked.clear()
        order = mailthreads.insert_sorted(order, batch, keys_of, criteria)
        assert len(set(asked)) <= len(batch) * (2 + len(order).bit_length())
    assert order == mailthreads.sort_uids(entries, uids, criteria)
    # A new message without keys (gone) is not placed.
    assert mailthreads.insert_sorted([1], [999], keys_of, criteria) == [1]


def test_sort_context_survives_keys_gone_from_the_store():
    """RFC 5267 4.3.2-4.3.4: should a placed message have no keys any more when a new one is
    placed (expunged elsewhere, not yet seen by this session), it is removed from the result
    with a REMOVEFROM at its position, and the new message is added where it sorts."""
    entries = keyed(6, 3)
    criteria = (("SUBJECT", False), ("ARRIVAL", True))
    order = mailthreads.sort_uids(entries, [1, 2, 3, 4, 5], criteria)
    gone = order[2]

    class Store:
        def sort_keys(self, mailbox, wanted, present=None):
            return {u: entries[u] for u in wanted if u in entries and u != gone}
    ctx = UpdateContext("T", parse_search(["ALL"], uid_mode=True), set(order), criteria,
                        list(order))
    line = SearchContexts._resort(ctx, Store(), None, [1, 2, 3, 4, 5, 6], set(), [6])
    view = apply_updates(order, [b"* " + line], "T")
    assert view == ctx.order == mailthreads.sort_uids(
        entries, [u for u in range(1, 7) if u != gone], criteria)
    assert f"REMOVEFROM (3 {gone})".encode() in line, line
