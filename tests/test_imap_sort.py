"""SORT / THREAD / ESORT transcripts against our server (what Dovecot cannot judge: we accept
only UTF-8 and US-ASCII, where Dovecot converts any charset iconv knows)."""

from __future__ import annotations

import pytest

from tests.imapproc import Client, ServerProcess, make_users


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("imap") / "store")
    make_users(data_dir, ("alice", "wonderland"))
    with ServerProcess(data_dir) as proc:
        yield proc


@pytest.fixture
def client(server):
    c = Client(server.port)
    assert c.cmd("L", "LOGIN alice wonderland")[-1].startswith(b"L OK")
    yield c
    c.close()


def append(c: Client, raw: bytes) -> None:
    c.send(f"A APPEND INBOX {{{len(raw)}+}}\r\n".encode() + raw + b"\r\n")
    assert c.until_tagged("A")[-1].startswith(b"A OK")


def test_capabilities_advertised(client):
    """RFC 5256 1, RFC 5957 1, RFC 5267 3: what we implement is announced."""
    caps = client.cmd("C", "CAPABILITY")[0].split()
    for cap in (b"SORT", b"SORT=DISPLAY", b"THREAD=ORDEREDSUBJECT", b"THREAD=REFERENCES",
                b"ESORT"):
        assert cap in caps


def test_other_charsets_are_refused(client):
    """RFC 5256 3 and 4: a charset we do not support is NO [BADCHARSET (our list)]."""
    append(client, b"Subject: x\r\n\r\nbody\r\n")
    client.cmd("S", "SELECT INBOX")
    for tag, text in (("a", "SORT (DATE) KOI8-R ALL"), ("b", "UID THREAD REFERENCES x-y ALL"),
                      ("c", "SORT RETURN (COUNT) (DATE) ISO-8859-1 ALL")):
        assert client.cmd(tag, text)[-1].startswith(
            tag.encode() + b" NO [BADCHARSET (US-ASCII UTF-8)]")
    assert client.cmd("d", "SORT (DATE) utf-8 ALL")[-1].startswith(b"d OK")
    assert client.cmd("e", "THREAD REFERENCES us-ascii ALL")[-1].startswith(b"e OK")


def test_needs_a_selected_mailbox(client):
    """RFC 5256 3/4: SORT and THREAD are valid in the selected state only."""
    assert client.cmd("a", "SORT (DATE) UTF-8 ALL")[-1].startswith(b"a BAD")
    assert client.cmd("b", "THREAD REFERENCES UTF-8 ALL")[-1].startswith(b"b BAD")


def test_repeated_answers_follow_the_mailbox(client):
    """A remembered answer is never served for a changed mailbox: after an expunge the
    sequence numbers move, after an append the new message is in."""
    client.cmd("S", "SELECT INBOX")
    client.cmd("x", "STORE 1:* +FLAGS.SILENT (\\Deleted)")
    client.cmd("y", "EXPUNGE")
    for n in (3, 1, 2):
        append(client, f"Subject: s{n}\r\n\r\nbody\r\n".encode())
    client.cmd("n", "NOOP")
    first = client.cmd("a", "SORT (SUBJECT) UTF-8 ALL")
    assert first[0] == b"* SORT 2 3 1"
    assert client.cmd("b", "SORT (SUBJECT) UTF-8 ALL")[0] == b"* SORT 2 3 1"
    client.cmd("c", "STORE 2 +FLAGS.SILENT (\\Deleted)")
    client.cmd("d", "EXPUNGE")
    assert client.cmd("e", "SORT (SUBJECT) UTF-8 ALL")[0] == b"* SORT 2 1"
    append(client, b"Subject: s0\r\n\r\nbody\r\n")
    client.cmd("n", "NOOP")
    assert client.cmd("f", "SORT (SUBJECT) UTF-8 ALL")[0] == b"* SORT 3 2 1"
    assert client.cmd("g", "SORT RETURN (MIN COUNT) (SUBJECT) UTF-8 ALL")[0] == \
        b'* ESEARCH (TAG "g") MIN 3 COUNT 3'


def test_esearch_rendering():
    """RFC 5267 3.2: ESORT's ALL lists numbers in sort order (a sequence-set, only ascending
    runs written as ranges); MIN/MAX are the first and last in that order, left out with
    COUNT 0 when nothing matched (RFC 4731 3.1)."""
    from imapserver.imap.esearch import esearch_line, result_items, sequence_set

    def esearch(tag, uid, numbers, **wanted):
        return esearch_line(tag, uid, result_items(numbers, sorted_result=True, **wanted))

    assert sequence_set([5, 1, 2, 3, 9, 8, 7], ordered=False) == "5,1:3,9,8,7"
    assert esearch("t1", True, [4, 2, 3], want_min=True, want_max=True, want_count=True,
                   want_all=True) == b'ESEARCH (TAG "t1") UID MIN 4 MAX 3 ALL 4,2:3 COUNT 3'
    assert esearch("t2", False, [], want_min=True, want_max=True, want_all=True,
                   want_count=True) == b'ESEARCH (TAG "t2") COUNT 0'
    assert esearch("t3", False, [1, 2], want_all=True) == b'ESEARCH (TAG "t3") ALL 1:2'
    assert esearch("t4", False, [9, 3, 4, 1], partial=("2:3", [3, 4])) == \
        b'ESEARCH (TAG "t4") PARTIAL (2:3 3:4)'
