"""Units of mailadmin: mbox reading and writing, Maildir names, sizes, progress lines."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailstore.admin import mbox
from mailstore.admin.maildir import (
    decode_mutf7,
    encode_mutf7,
    flags_of,
    folder_to_mailbox,
    mailbox_to_folder,
)
from mailstore.admin.mbox import MboxReader, MboxWriter, parse_from_line
from mailstore.admin.output import Column, UsageError, parse_size, table
from mailstore.admin.progress import Progress
from mailstore.admin.spool import LfReader, Spool
from mailstore.admin.transfer import envelope_sender


def read(data: bytes, crlf: bool = False, **kw) -> list[mbox.MboxMessage]:
    """The messages of an mbox; line ends kept as they are unless ``crlf``."""
    out = []
    for m in MboxReader(io.BytesIO(data), crlf=crlf, **kw):
        src = m.spool.source()
        m.content = src if isinstance(src, bytes) else src.read()
        m.spool.close()
        out.append(m)
    return out


@pytest.mark.parametrize("line, expected", [
    (b"From a@b Sat Nov 21 12:00:00 2026\n", 1795262400.0),
    (b"From a@b  Sat Nov 21 12:00 2026\n", 1795262400.0),
    (b"From a@b Sat Nov 21 13:00:00 2026 +0100\n", 1795262400.0),
    (b"From a@b Sat Nov 21 07:00:00 EST 2026\r\n", 1795244400.0),
    (b"From MAILER-DAEMON Nov 21 12:00:00 2026\n", 1795262400.0),
    (b"From a@b no date here\n", None),
    (b"From a@b Foo 21 12:00:00 2026\n", None),
])
def test_from_line_dates(line, expected):
    assert parse_from_line(line) == expected


def test_a_from_in_the_body_without_blank_line_or_date_stays_body():
    data = (b"From a Sat Nov 21 12:00:00 2026\nSubject: x\n\nline\nFrom me to you\n"
            b"more\n\nFrom b Sat Nov 21 12:00:00 2026\nSubject: y\n\ny\n")
    first, second = read(data)
    assert first.content == b"Subject: x\n\nline\nFrom me to you\nmore\n"
    assert second.content == b"Subject: y\n\ny\n"


def test_metadata_headers_become_flags_and_are_not_stored():
    data = (b"From a Sat Nov 21 12:00:00 2026\nSubject: x\nStatus: RO\nX-Status: AF\n"
            b"X-Keywords: $Label1, work \\Bad\nX-UID: 7\n continued\nTo: b\n\nbody\n")
    (m,) = read(data)
    assert m.content == b"Subject: x\nTo: b\n\nbody\n"
    assert m.flags == {"\\Seen", "\\Answered", "\\Flagged", "$Label1", "work"}


def test_uw_imap_pseudo_message_is_skipped_and_date_falls_back_to_the_header():
    data = (b"From MAILER-DAEMON Sat Nov 21 12:00:00 2026\nSubject: DON'T DELETE THIS MESSAGE"
            b"\nX-IMAP: 1 2\n\nfolder data\n\nFrom someone\nDate: Sun, 22 Nov 2026 12:00:00"
            b" +0000\nSubject: real\n\nhi\n")
    pseudo, real = read(data)
    assert pseudo.skip and not pseudo.error
    assert real.internal_date == 1795262400.0 + 86400 and real.error is None


def test_big_messages_spill_to_a_file_and_oversized_ones_are_only_counted():
    big = b"Subject: big\n\n" + b"y" * 5000 + b"\n"
    data = b"From a Sat Nov 21 12:00:00 2026\n" + big + b"\n"
    (m,) = read(data, spill=1000)
    assert m.content == big and m.spool.size == len(big)
    (m,) = read(data, spill=1000, max_size=4000)
    assert m.spool.overflow and m.spool.size == len(big)
    spool = Spool(spill=10)
    spool.write(b"a" * 30)
    spool.finish(drop_blank_line=False)
    assert spool.source().read() == b"a" * 30
    spool.close()


def test_stored_line_ends_are_crlf_and_files_get_lf_back():
    data = (b"From a Sat Nov 21 12:00:00 2026\nSubject: x\n\nlf\ncrlf\r\nlone\rcr\n\n"
            b"From b Sat Nov 21 12:00:00 2026\r\nSubject: y\r\n\r\ny\r\n\r\n")
    first, second = read(data, crlf=True)
    assert first.content == b"Subject: x\r\n\r\nlf\r\ncrlf\r\nlone\rcr\r\n"
    assert second.content == b"Subject: y\r\n\r\ny\r\n"
    # A CR at the end of one write and its LF at the start of the next stay one CRLF.
    spool = Spool(crlf=True)
    for piece in (b"a\r", b"\nb\n", b"\r", b"\r", b"\n", b"\n"):
        spool.write(piece)
    spool.finish()
    assert spool.source() == b"a\r\nb\r\n\r\r\n\r\n"
    for size in (1, 2, 3, 64):
        reader = LfReader(io.BytesIO(b"a\r\nb\r\r\n\rc\r\n\r"))
        out = b""
        while piece := reader.read(size):
            out += piece
        assert out == b"a\nb\r\n\rc\n\r", size


def test_writer_quotes_from_lines_split_across_reads():
    class Trickle(io.RawIOBase):
        def __init__(self, data):
            self.data = data

        def readable(self):
            return True

        def read(self, n=-1):
            out, self.data = self.data[:3], self.data[3:]
            return out
    content = b"Subject: t\n\n>>From a\nFrom b\nxFrom c\n"
    out = io.BytesIO()
    MboxWriter(out).write(Trickle(content), {"\\Seen"}, 0)
    assert out.getvalue() == (b"From MAILER-DAEMON Thu Jan  1 00:00:00 1970\nSubject: t\n"
                              b"Status: RO\n\n>>>From a\n>From b\nxFrom c\n\n")
    assert read(out.getvalue())[0].content == content


header = st.from_regex(rb"\A[A-Z][a-z]{1,8}: [ -~]{0,20}\Z", fullmatch=True)
line = st.one_of(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")),
                 st.sampled_from([b"From x", b">From y", b">>From z", b"", b"From ",
                                  b"From a Sat Nov 21 12:00:00 2026", b"\r"]))
message = st.tuples(st.lists(header, min_size=1, max_size=4), st.lists(line, max_size=8),
                    st.sampled_from([b"\n", b"\r\n"]))
flags = st.sets(st.sampled_from(["\\Seen", "\\Answered", "\\Flagged", "\\Draft", "\\Deleted",
                                 "$Label1", "work"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(message, flags), min_size=1, max_size=5),
       st.sampled_from([5, 17, 4096]))
def test_mbox_write_then_read_gives_the_same_messages(messages, block):
    original = mbox.BLOCK
    mbox.BLOCK = block
    try:
        out = io.BytesIO()
        writer = MboxWriter(out)
        contents = []
        for (headers, body, nl), fl in messages:
            content = nl.join(headers) + nl + nl + nl.join(body) + nl
            contents.append((content, fl))
            writer.write(io.BytesIO(content), fl, 1_700_000_000)
        got = read(out.getvalue())
    finally:
        mbox.BLOCK = original
    assert [(m.content, m.flags) for m in got] == contents
    assert all(m.error is None and m.internal_date == 1_700_000_000 for m in got)


def test_modified_utf7_folder_names():
    assert decode_mutf7("Entw&APw-rfe") == "Entwürfe"
    assert encode_mutf7("Entwürfe") == "Entw&APw-rfe"
    assert encode_mutf7("a&b") == "a&-b" and decode_mutf7("a&-b") == "a&b"
    assert decode_mutf7("bad&%%-") == "bad&%%-"
    assert mailbox_to_folder("Lists/v1.0/日本") == ".Lists.v1&AC4-0.&ZeVnLA-"
    assert folder_to_mailbox(".Lists.v1&AC4-0.&ZeVnLA-") == "Lists/v1.0/日本"


def test_maildir_flags_from_file_names():
    assert flags_of("123.M1.host:2,FRS", {}) == {"\\Flagged", "\\Answered", "\\Seen"}
    assert flags_of("123.M1.host:2,PTab", {"a": "$Label1"}) == {"$Forwarded", "\\Deleted",
                                                                 "$Label1"}
    assert flags_of("123.M1.host", {}) == set()


def test_sizes():
    assert parse_size("4096") == 4096 and parse_size("10M") == 10 << 20
    assert parse_size("1.5GiB") == 3 << 29 and parse_size("2kb") == 2048
    assert parse_size("unlimited") is None
    for bad in ("12X", "-1k", "M", ""):
        with pytest.raises(UsageError):
            parse_size(bad)


def test_progress_shows_rate_and_eta_from_bytes():
    now = [0.0]
    out = io.StringIO()
    p = Progress("importing", total_bytes=1000, stream=out, tty=True, clock=lambda: now[0])
    now[0] = 10.0
    p.update(250, 250)
    assert out.getvalue().startswith("\rimporting  [######..................]   25%  250 msgs"
                                     "  25 msgs/s  25 B/s  ETA 0:00:30")
    now[0] = 40.0
    p.update(1000, 1000)
    p.close()
    assert out.getvalue().endswith("\rimporting  [########################]  100%  1,000 msgs"
                                   "  25 msgs/s  25 B/s  in 0:00:40\n")
    log = io.StringIO()
    p = Progress("exporting", total_count=10, stream=log, tty=False, interval=5,
                 clock=lambda: now[0])
    for i in range(10):
        now[0] += 1
        p.update(i + 1)
    p.close()
    assert log.getvalue().splitlines() == ["exporting   50%  5 msgs  1 msgs/s  ETA 0:00:05",
                                           "exporting  100%  10 msgs  1 msgs/s",
                                           "exporting  100%  10 msgs  1 msgs/s  in 0:00:10"]


def test_envelope_sender_for_the_from_line():
    assert envelope_sender(b"Return-Path: <a@b.example>\nFrom: c@d\n") == "a@b.example"
    assert envelope_sender(b"Return-Path: <>\n") == "MAILER-DAEMON"
    assert envelope_sender(b"From: Carl <c@d.example>\n") == "c@d.example"
    assert envelope_sender(b"Subject: x\n") == "MAILER-DAEMON"


def test_tables_align_numbers_right():
    rows = [{"name": "INBOX", "n": 5}, {"name": "Archive/2020", "n": 12345}]
    assert table(rows, [Column("name"), Column("n")]).splitlines() == [
        "NAME              N", "INBOX             5", "Archive/2020  12345"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=12).map(lambda b: b.translate(bytes.maketrans(
    b"\x00\x01\x02", b"\r\n\r"))), max_size=8))
def test_spool_crlf_is_bare_lf_made_crlf_however_the_bytes_arrive(pieces):
    import re
    spool = Spool(crlf=True)
    for piece in pieces:
        spool.write(piece)
    spool.finish()
    whole = b"".join(pieces)
    assert spool.source() == re.sub(rb"(?<!\r)\n", b"\r\n", whole)
    assert spool.size == len(spool.source())
