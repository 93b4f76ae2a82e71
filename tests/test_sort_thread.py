"""SORT and THREAD in the store: base subjects (RFC 5256 2.1), keys stored at append (both
backends), the per-process key cache, and the threading algorithms (RFC 5256 4)."""

from __future__ import annotations

import time

import pytest

from mailstore import keys, sortkeys
from mailstore import threads as mailthreads
from mailstore.messages import SORTKEYS
from mailstore.sortcache import MessageKeys
from mailstore.sortkeys import SortKeys, base_subject, message_ids
from mailstore.store import MailStore


def mail(headers: dict[str, str], body: str = "body\n") -> bytes:
    head = "".join(f"{k}: {v}\n" for k, v in headers.items())
    return (head + "\n" + body).replace("\n", "\r\n").encode()


# -- base subject (RFC 5256 2.1) ------------------------------------------------------------------

@pytest.mark.parametrize("subject, base, reply", [
    ("Hello", "Hello", False),
    ("Re: Hello", "Hello", True),
    ("RE:Hello", "Hello", True),
    ("re: re: Re:  Hello", "Hello", True),
    ("Fwd: Hello", "Hello", True),
    ("fw: Hello", "Hello", True),
    ("Re [blob]: Hello", "Hello", True),          # subj-refwd with a blob before ":"
    ("[list] Re: Hello", "Hello", True),          # blob before the leader
    ("[list] Hello", "Hello", False),             # step 4: a leading blob goes
    ("[list]", "[list]", False),                  # ... unless nothing would be left
    ("[a][b] [c]", "[c]", False),                 # ... one at a time, keeping the last
    ("Hello (fwd)", "Hello", True),               # step 2: trailer
    ("Hello (fwd) (FWD)  ", "Hello", True),
    ("[Fwd: Hello]", "Hello", True),              # step 6
    ("[fwd: Re: [x] Hello (fwd)]", "Hello", True),
    ("Re: [fwd: Re: Hello]", "Hello", True),
    ("Hello\t  world", "Hello world", False),     # step 1: white space collapsed
    ("  ", "", False),
    ("Re:", "", True),
    ("Refund: money", "Refund: money", False),    # "re" must be followed by ":" or a blob
    ("Fwdx: y", "Fwdx: y", False),
])
def test_base_subject_table(subject, base, reply):
    """RFC 5256 2.1: the base subject and whether the subject was a reply or forward."""
    assert base_subject(subject) == (base, reply)


def test_base_subject_decodes_encoded_words():
    """RFC 5256 2.1 step 1: RFC 2047 encoded words are decoded before the rest."""
    keys_ = sortkeys.compute({"subject": "=?utf-8?q?Re=3A_=C3=A9t=C3=A9?= (fwd)"}, b"")
    assert keys_.subject == sortkeys.casemap("été") and keys_.reply


def test_message_ids_and_references():
    """RFC 5256 4 step 1: msg-ids from References, else the first of In-Reply-To; ids
    without "@" are not valid; comments and white space inside do not count."""
    assert message_ids("<a@b> (c) <c@d>  junk <nohost> < e@f >") == ["a@b", "c@d", "e@f"]
    header = b"References: <r1@x>\r\n <r2@x>\r\nIn-Reply-To: <i@x>\r\n\r\n"
    found = sortkeys.compute({"message_id": "<m@x>", "in_reply_to": "<i@x> <j@x>"}, header)
    assert (found.message_id, found.references) == ("m@x", ("r1@x", "r2@x"))
    found = sortkeys.compute({"in_reply_to": "junk <i@x> <j@x>"}, b"Subject: x\r\n\r\n")
    assert (found.message_id, found.references) == (None, ("i@x",))


def test_address_keys():
    """RFC 5256 3: FROM/TO/CC sort by the first address's mailbox; RFC 5957 3: DISPLAYFROM
    by its decoded display name, or its address when it has none."""
    env = {"from": [["=?utf-8?q?=C3=89mile?=", None, "emile", "e.example"],
                    [None, None, "zz", "z.example"]],
           "to": [[None, None, "undisclosed-recipients", None], [None, None, None, None]],
           "cc": [[None, None, "Carl", "c.example"]],
           "date": "Mon, 2 Feb 2026 10:00:00 +0100"}
    found = sortkeys.compute(env, b"")
    assert (found.from_, found.to, found.cc) == ("EMILE", "UNDISCLOSED-RECIPIENTS", "CARL")
    assert found.display_from == sortkeys.casemap("Émile")
    assert found.display_to == "UNDISCLOSED-RECIPIENTS"
    assert found.date == 1770022800.0
    assert sortkeys.compute({"date": "not a date"}, b"").date is None


def test_cell_round_trip_and_unknown_versions():
    found = sortkeys.compute({"subject": "Re: x", "message_id": "<a@b>"},
                             b"References: <r@b>\r\n\r\n")
    assert sortkeys.decode(sortkeys.encode(found)) == found
    assert sortkeys.decode(b"[99, 1]") is None and sortkeys.decode(b"garbage") is None


# -- storage on both backends ---------------------------------------------------------------------

@pytest.fixture
def store(backend):
    return MailStore(backend)


def test_keys_stored_at_append_and_copied(store):
    """The keys are written beside the envelope at append, and with a copy."""
    store.create_user("ann", "pw")
    _, uid = store.append("ann", "INBOX", mail({"Subject": "Re: Plans", "From": "b@x",
                                               "Message-ID": "<p@x>", "References": "<o@x>"}))
    inbox = store.mailbox("ann", "INBOX")
    raw = store.messages.table.row(keys.message_key(inbox.id, uid), [SORTKEYS])[SORTKEYS]
    stored = sortkeys.decode(raw)
    assert (stored.subject, stored.reply, stored.from_, stored.message_id,
            stored.references) == ("PLANS", True, "B", "p@x", ("o@x",))
    store.create_mailbox("ann", "Kept")
    archive = store.mailbox("ann", "Kept")
    pairs = store.copy(inbox, [uid], archive)
    raw = store.messages.table.row(keys.message_key(archive.id, pairs[0][1]),
                                   [SORTKEYS])[SORTKEYS]
    assert sortkeys.decode(raw) == stored


def test_rows_without_keys_are_computed_from_envelope_and_header(store):
    """Messages stored before the m:sk cell existed: keys from m:env and m:hdr, the same."""
    store.create_user("ann", "pw")
    uids = [store.append("ann", "INBOX", mail({"Subject": f"Fwd: s{i}", "From": f"f{i}@x",
                                               "References": f"<r{i}@x>"}))[1]
            for i in range(3)]
    inbox = store.mailbox("ann", "INBOX")
    expected = store.sort_keys(inbox, uids)
    for uid in uids[:2]:
        store.messages.table.delete(keys.message_key(inbox.id, uid), [SORTKEYS])
    fresh = MailStore(store.backend)
    assert fresh.sort_keys(inbox, uids) == expected


def test_cache_reads_only_new_messages_and_drops_expunged(store):
    """Per process, a second read costs nothing; then only new UIDs are read."""
    store.create_user("ann", "pw")
    uids = [store.append("ann", "INBOX", mail({"Subject": f"s{i}"}))[1] for i in range(5)]
    inbox = store.mailbox("ann", "INBOX")
    cache = store.sort_cache
    assert set(store.sort_keys(inbox, uids)) == set(uids)
    read = cache.rows_read
    store.sort_keys(inbox, uids)
    assert cache.rows_read == read
    uids.append(store.append("ann", "INBOX", mail({"Subject": "new"}))[1])
    assert set(store.sort_keys(inbox, uids)) == set(uids)
    assert cache.rows_read == read + 1
    store.expunge(inbox, [uids[0]])
    other = MailStore(store.backend)
    assert set(other.sort_keys(inbox, uids)) == set(uids[1:])  # gone: left out
    # A subset asked for keeps the rest cached; entries of expunged UIDs go when many.
    store.sort_keys(inbox, uids[3:4], present=uids)
    read = cache.rows_read
    store.sort_keys(inbox, uids)
    assert cache.rows_read == read
    held = cache._boxes[inbox.id]
    held.update({10_000 + i: held[uids[1]] for i in range(2000)})
    store.sort_keys(inbox, uids[1:2], present=uids[1:])
    assert set(held) == set(uids[1:])


def test_large_mailbox_is_read_by_one_scan(store):
    """Above the multi-get threshold the keys come from one bounded scan (and a second
    mailbox's rows are never read)."""
    store.create_user("ann", "pw")
    inbox = store.mailbox("ann", "INBOX")
    stored = store.ingest(mail({"Subject": "same"}), refs=2100)
    uids = [store.add_stored(inbox, stored) for _ in range(2100)]
    store.create_mailbox("ann", "Elsewhere")
    store.append("ann", "Elsewhere", mail({"Subject": "other"}))
    found = store.sort_keys(inbox, uids)
    assert len(found) == 2100 and store.sort_cache.rows_read == 2100


# -- SORT order and THREAD trees ------------------------------------------------------------------

def entries(*specs) -> dict[int, MessageKeys]:
    """uid -> keys from (uid, message_id, references, subject, date) tuples."""
    out = {}
    for uid, mid, refs, subject, date in specs:
        base, reply = base_subject(subject)
        out[uid] = MessageKeys(1000.0 + uid, uid, SortKeys(
            "", "", "", "", "", date, sortkeys.casemap(base), reply, mid, tuple(refs)))
    return out


def test_sort_ties_and_reverse():
    """RFC 5256 3: ties by sequence number, also under REVERSE."""
    e = entries((1, None, (), "b", 5.0), (2, None, (), "a", 5.0), (3, None, (), "b", 1.0),
                (4, None, (), "a", None))
    assert mailthreads.sort_uids(e, [1, 2, 3, 4], [("DATE", False)]) == [3, 1, 2, 4]
    assert mailthreads.sort_uids(e, [1, 2, 3, 4], [("DATE", True)]) == [4, 1, 2, 3]
    assert mailthreads.sort_uids(e, [1, 2, 3, 4], [("SUBJECT", False), ("DATE", True)]) == \
        [4, 2, 1, 3]


def test_references_rfc_shapes():
    """RFC 5256 4: missing parents become dummies, a dummy with several children stays at
    the root, one with one child is replaced by it; loops in References are not followed."""
    e = entries((1, "a@x", (), "A", 1.0), (2, "b@x", ("a@x",), "Re: A", 2.0),
                (3, "c@x", ("gone@x",), "C", 3.0), (4, "d@x", ("gone@x",), "D", 4.0),
                (5, "e@x", ("gone2@x",), "E", 5.0),
                (6, "f@x", ("g@x", "f@x", "g@x"), "F", 6.0))
    threads = mailthreads.references(e, [1, 2, 3, 4, 5, 6])
    assert mailthreads.render(threads) == b"(1 2)((3)(4))(5)(6)"


def test_deep_threads_do_not_recurse():
    """A 20,000-message reply chain and a deep branching tree thread and render."""
    n = 20_000
    specs = [(1, "m1@x", (), "x", 1.0)]
    specs += [(i, f"m{i}@x", (f"m{i - 1}@x",), "Re: x", float(i)) for i in range(2, n + 1)]
    e = entries(*specs)
    out = mailthreads.render(mailthreads.references(e, list(range(1, n + 1))))
    assert out.startswith(b"(1 2 3 ") and out.endswith(b" %d)" % n)
    # Each message has two replies: a tree 12 levels deep and 8,191 wide at its widest.
    specs = [(1, "t1@x", (), "t", 1.0)]
    specs += [(i, f"t{i}@x", (f"t{i // 2}@x",), "Re: t", float(i)) for i in range(2, 8192)]
    e = entries(*specs)
    out = mailthreads.render(mailthreads.references(e, list(range(1, 8192))))
    assert out.startswith(b"(1 (2 (4 (8 ")


def test_references_speed_on_many_messages():
    """Threading 100,000 messages of short threads stays well under a few seconds."""
    n = 100_000
    specs = [(i, f"m{i}@x", (f"m{i - 1}@x",) if i % 5 else (), f"s{i // 5}", float(i))
             for i in range(1, n + 1)]
    e = entries(*specs)
    start = time.thread_time()  # CPU time (0.3 s here): the cost, not stretched by load
    threads = mailthreads.references(e, list(range(1, n + 1)))
    assert len(threads) == n // 5 + 1
    assert time.thread_time() - start < 10


def test_threading_pauses_the_collector_and_resumes_it():
    """The cyclic collector is paused only while REFERENCES builds its trees (also when that
    fails), and the trees hold no parent links (no cycles to collect)."""
    import gc

    e = entries((1, "a@x", (), "A", 1.0), (2, "b@x", ("a@x",), "Re: A", 2.0))
    assert gc.isenabled()
    threads = mailthreads.references(e, [1, 2])
    assert gc.isenabled() and threads[0].children[0].parent is None
    with pytest.raises(TypeError):
        mailthreads.references(None, [1])
    assert gc.isenabled()


@pytest.mark.parametrize("subject", ["[a]" * 10_000 + "x", "[fwd: " * 5_000 + "x" + "]" * 5_000,
                                     "[fwd: " * 290 + "x" + "]" * 290, "Re: " * 20_000])
def test_pathological_subjects_are_cheap(subject):
    """A Subject built to make RFC 5256 2.1's repeated steps rescan it costs milliseconds at
    delivery, not seconds (only the first MAX_SUBJECT characters are looked at)."""
    start = time.thread_time()  # CPU time: a busy machine's scheduler pauses do not count
    base_subject(subject)
    assert time.thread_time() - start < 0.5
