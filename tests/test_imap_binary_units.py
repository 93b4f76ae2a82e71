"""``imapserver.imap.binary`` without a server: planning, streaming memory, the size cache.

RFC 3516 4.2 asks for a section's decoded octets; a decoded part larger than ``STREAM_ABOVE``
must be sent without being held (docs/decisions/0016), so its peak memory is measured here.
"""

from __future__ import annotations

import base64
import io
import random
import tracemalloc
from types import SimpleNamespace

import pytest

from imapserver.imap import binary
from imapserver.imap.binary import STREAM_ABOVE, UnknownCte, binary_literal, binary_size, plan
from imapserver.imap.render import parse_fetch_item
from mailstore.mime import parse_bytes


def view_of(raw: bytes, content: bytes = b"c" * 16) -> SimpleNamespace:
    info = parse_bytes(raw)
    return SimpleNamespace(body=info.body.to_json(),
                           record=SimpleNamespace(content=content, size=len(raw)))


def b64_message(payload: bytes) -> bytes:
    return (b"Subject: big\r\nContent-Transfer-Encoding: base64\r\n\r\n"
            + base64.encodebytes(payload).replace(b"\n", b"\r\n"))


def test_large_part_is_streamed_not_held():
    """A 6 MiB decoded part: count first, then octets chunk by chunk; the peak of new
    allocations stays a small multiple of STREAM_ABOVE, not the part's size."""
    payload = random.Random(5).randbytes(6 * 1024 * 1024)
    raw = b64_message(payload)
    view = view_of(raw, b"large-part-0001!")
    reader = io.BytesIO(raw)
    item = parse_fetch_item("BINARY.PEEK[1]")
    tracemalloc.start()
    try:
        head, count, chunks = binary_literal(view, item, lambda: reader)
        assert count == len(payload) and head == b"BINARY[1] ~{%d}\r\n" % count
        pos = 0
        for chunk in chunks:
            assert chunk == payload[pos:pos + len(chunk)]
            pos += len(chunk)
        assert pos == len(payload)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * STREAM_ABOVE, peak


def test_size_cache_spares_the_second_decode(monkeypatch):
    """BINARY.SIZE of the same content and part is decoded once (the content id never
    changes for a stored message); the cache keeps at most CACHE_ENTRIES entries."""
    raw = b64_message(b"\x00\x01hello")
    view = view_of(raw, b"cache-test-0001!")
    opened = []

    def open_reader():
        opened.append(1)
        return io.BytesIO(raw)
    item = parse_fetch_item("BINARY.SIZE[1]")
    assert binary_size(view, item, open_reader) == b"BINARY.SIZE[1] 7"
    assert binary_size(view, item, open_reader) == b"BINARY.SIZE[1] 7"
    assert len(opened) == 1
    monkeypatch.setattr(binary, "CACHE_ENTRIES", 0)
    binary._remember(("other",), (1, False))
    assert not binary._cache


def test_plan_refuses_unknown_encodings_anywhere_below():
    """RFC 3516 4.2: BINARY[] of a message with an x-uuencode leaf is UNKNOWN-CTE; its other
    leaves alone are fine."""
    raw = (b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n"
           b"Content-Transfer-Encoding: base64\r\n\r\naGk=\r\n--b\r\n"
           b"Content-Transfer-Encoding: x-uuencode\r\n\r\nbegin\r\n--b--\r\n")
    view = view_of(raw)
    with pytest.raises(UnknownCte):
        plan(view.body, (), len(raw))
    with pytest.raises(UnknownCte):
        plan(view.body, (2,), len(raw))
    assert len(plan(view.body, (1,), len(raw))) == 1
