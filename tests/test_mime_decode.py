"""Streamed Content-Transfer-Encoding decoding (``mailstore.mime.decode``), which BINARY
(RFC 3516 section 4.2) serves parts from.

The oracle is Python's own whole-buffer decoding of the same octets: ``base64.b64decode``
(RFC 2045 6.8: characters outside the alphabet are ignored) and ``quopri.decodestring``
(RFC 2045 6.7).  However the encoded part is cut into chunks, the decoded octets must be the
same, octet for octet.
"""

from __future__ import annotations

import base64
import binascii
import quopri

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailstore.mime.decode import UnknownEncoding, decode_chunks, normalise


def cut(data: bytes, sizes: list[int]) -> list[bytes]:
    out, i, k = [], 0, 0
    while i < len(data):
        n = sizes[k % len(sizes)] if sizes else len(data)
        out.append(data[i:i + n])
        i += n
        k += 1
    return out


NOISY_BASE64 = st.binary(max_size=200).map(base64.encodebytes) | st.binary(max_size=80).map(
    lambda raw: bytes(b"AQ/+=\r\n !*x"[b % 11] for b in raw))
SIZES = st.lists(st.integers(1, 9), max_size=5)


@settings(max_examples=400, deadline=None)
@given(NOISY_BASE64, SIZES)
def test_base64_matches_b64decode_however_cut(encoded, sizes):
    """RFC 2045 6.8: decoding is the same as Python's b64decode, chunk boundaries anywhere
    (including inside a quantum and between the two "=" of a padding)."""
    try:
        want = base64.b64decode(encoded)
    except binascii.Error:
        return  # b64decode refuses an unpadded end; compared in the next test
    assert b"".join(decode_chunks(cut(encoded, sizes), "base64")) == want


def test_base64_lenient_ends():
    """An unpadded last quantum gives its octets (b64decode refuses it); data after a
    completed padding is not decoded, as binascii.a2b_base64 reads it (RFC 2045 6.8: "=" ends
    the data)."""
    assert b"".join(decode_chunks([b"QUJD", b"RA"], "BASE64")) == b"ABCD"
    assert b"".join(decode_chunks([b"QQ=", b"=QUJD"], "base64")) == b"A"
    assert b"".join(decode_chunks([b"Q"], "base64")) == b""


QP = st.binary(max_size=200).map(quopri.encodestring) | st.binary(max_size=80).map(
    lambda raw: bytes(b"=AF0\r\n a\t\xe9"[b % 10] for b in raw))


@settings(max_examples=400, deadline=None)
@given(QP, SIZES)
def test_quoted_printable_matches_quopri_however_cut(encoded, sizes):
    """RFC 2045 6.7: decoding is the same as quopri.decodestring, soft line breaks and "="
    sequences split across chunks included."""
    want = quopri.decodestring(encoded)
    assert b"".join(decode_chunks(cut(encoded, sizes), "Quoted-Printable")) == want


@pytest.mark.parametrize("encoding", [None, "7bit", "8BIT", "binary", " Binary "])
def test_identity_encodings_pass_through(encoding):
    """RFC 2045 6.2 (and 6.1's default of 7bit): nothing to undo."""
    data = [b"a\x00b", b"", b"\xff\r\n"]
    assert list(decode_chunks(data, encoding)) == [b"a\x00b", b"\xff\r\n"]


@pytest.mark.parametrize("encoding", ["x-uuencode", "base-64", "quoted_printable", ""])
def test_unknown_encodings_are_refused_before_reading(encoding):
    """RFC 3516 4.2: an encoding the server cannot undo is an error (UNKNOWN-CTE)."""
    def never():
        raise AssertionError("read")
        yield b""
    with pytest.raises(UnknownEncoding):
        decode_chunks(never(), encoding)
    with pytest.raises(UnknownEncoding):
        normalise(encoding)
