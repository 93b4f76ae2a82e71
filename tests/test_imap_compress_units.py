"""imapserver.imap.compress.Deflate on its own: RFC 4978's raw DEFLATE (RFC 1951) streams,
inflated in bounded steps."""

from __future__ import annotations

import zlib

import pytest

from imapserver.imap import compress
from imapserver.imap.compress import INFLATE_CHUNK, Deflate


def drain(d: Deflate) -> bytes:
    out = []
    while chunk := d.inflate():
        assert len(chunk) <= INFLATE_CHUNK
        out.append(chunk)
    return b"".join(out)


@pytest.mark.parametrize("flush", [zlib.Z_SYNC_FLUSH, zlib.Z_PARTIAL_FLUSH, zlib.Z_NO_FLUSH])
@pytest.mark.parametrize("size", [INFLATE_CHUNK - 1, INFLATE_CHUNK, INFLATE_CHUNK + 1,
                                  3 * INFLATE_CHUNK + 7])
def test_bounded_steps_lose_nothing(flush, size):
    """RFC 4978 3: everything the client compressed reaches the parser, in steps of at most
    INFLATE_CHUNK octets, whatever flush the client used (RFC 4978 4 asks the server for
    Z_SYNC_FLUSH or Z_PARTIAL_FLUSH; a client's choice is its own), including a long match
    ending exactly where a step ends with no input left."""
    data = b"a" * size + b"\r\n"
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    wire = c.compress(data) + c.flush(flush)
    if flush == zlib.Z_NO_FLUSH:
        wire += c.flush(zlib.Z_SYNC_FLUSH)  # a client sends what it compressed eventually
        wire = wire[:-4]  # ... without the empty stored block: no input left after the data
    d = Deflate()
    d.feed(wire)
    assert drain(d) == data


def test_output_is_flushed_per_call_and_the_window_is_bounded(monkeypatch):
    """RFC 4978 4: each call's output inflates completely at the client (sync flush), and a
    stream made with the server's 8 KiB window inflates with any raw-DEFLATE reader."""
    d = Deflate()
    reader = zlib.decompressobj(-15)
    for text in (b"* OK first\r\n", b"* 1 EXISTS\r\n" * 100, b"a OK done\r\n"):
        assert reader.decompress(d.compress([text])) == text
    assert compress.COMPRESS_WBITS < 15


def test_a_corrupt_or_ended_stream_raises():
    """RFC 4978 has no end of stream: a final block or garbage is an error for the caller."""
    d = Deflate()
    d.feed(b"\xff" * 16)
    with pytest.raises(zlib.error):
        d.inflate()
    d = Deflate()
    d.feed(zlib.compress(b"x", wbits=-15))  # ends with a final block
    with pytest.raises(zlib.error):
        drain(d)


def test_output_zlib_holds_after_taking_all_input_is_not_left_behind():
    """RFC 4978 3: a TCP segment may end anywhere in the client's stream.  Where it ends just
    after a long match that the step bound cut, zlib has taken all the input but still holds
    output: that output is handed out now, not when the client next sends something."""
    data = b"a" * (INFLATE_CHUNK + 500)
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    wire = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    cuts = []
    for cut in range(1, len(wire)):
        probe = zlib.decompressobj(-15)
        if len(probe.decompress(wire[:cut], INFLATE_CHUNK)) == INFLATE_CHUNK \
                and not probe.unconsumed_tail and probe.decompress(b"", INFLATE_CHUNK):
            cuts.append(cut)
    assert cuts  # the case exists for this input
    d = Deflate()
    d.feed(wire[:cuts[0]])
    assert drain(d) == zlib.decompressobj(-15).decompress(wire[:cuts[0]])
