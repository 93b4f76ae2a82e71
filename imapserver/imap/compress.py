"""COMPRESS=DEFLATE (RFC 4978): raw DEFLATE (RFC 1951, no zlib header) in both directions.

The connection (protocol.py) owns one :class:`Deflate` once COMPRESS has answered OK.  It sits
between the transport and the IMAP parser/writer, above TLS (RFC 4978 4: compression after
TLS, never below it -- Twisted's TLS layer is the transport, so what we compress is then
encrypted).

Output: every ``write_lines``/``write_raw`` call is compressed and ended with Z_SYNC_FLUSH
(RFC 4978 4: the client must never wait for output the server holds back), so a batch of
responses, an IDLE push or a chunk of a streamed literal reaches the client as soon as it is
written.

Input: decompressed at most ``INFLATE_CHUNK`` octets at a time (``decompress(data,
max_length)``; the rest waits in ``unconsumed_tail``), each chunk parsed before the next is
made.  The parser bounds what it keeps (lines over ``max_line_length`` are skipped, literals
are spooled), so a small input that inflates to gigabytes (a "zip bomb") costs CPU, not memory.

Memory (RFC 4978 4 lets the compressor choose its window): zlib's defaults cost about 256 KiB
for a compressor (32 KiB window) and 40 KiB for a decompressor.  The compressor here uses an
8 KiB window and memLevel 6 (about 70 KiB); responses are short lines and message literals,
where the larger window gains little.  The decompressor must accept any window the client
chose (up to 32 KiB): that one is not ours to shrink.  bench/RESULTS.md has the measured RSS.
"""

from __future__ import annotations

import zlib

COMPRESS_WBITS = 13
"""The compressor's window: 2**13 = 8 KiB (zlib's default is 15, 32 KiB)."""
COMPRESS_MEMLEVEL = 6
"""The compressor's hash table and pending buffer size (zlib's default is 8)."""
COMPRESS_LEVEL = 6
INFLATE_CHUNK = 64 * 1024
"""Decompressed octets made per step before the parser takes them."""


class Deflate:
    """The two DEFLATE streams of one connection."""

    def __init__(self) -> None:
        self._out = zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, -COMPRESS_WBITS,
                                     COMPRESS_MEMLEVEL)
        self._in = zlib.decompressobj(-15)
        self._tail = b""  # compressed input not yet inflated (waits for the parser)
        # The last step filled INFLATE_CHUNK: zlib may hold output (the end of a match) with
        # all input consumed, so ask again even without a tail.
        self._full = False
        self.failed = False

    def compress(self, chunks: list[bytes]) -> bytes:
        """The compressed form of ``chunks``, flushed so the client can inflate all of it."""
        out = [self._out.compress(chunk) for chunk in chunks]
        out.append(self._out.flush(zlib.Z_SYNC_FLUSH))
        return b"".join(out)

    def feed(self, data: bytes) -> None:
        """Take compressed input; :meth:`inflate` hands it out in bounded steps."""
        self._tail += data

    @property
    def pending(self) -> bool:
        return bool(self._tail) or self._full

    def inflate(self) -> bytes:
        """At most INFLATE_CHUNK decompressed octets of what was fed (b"" when none are
        ready).  Raises zlib.error on a corrupt stream."""
        if not self.pending:
            return b""
        data = self._in.decompress(self._tail, INFLATE_CHUNK)
        self._full = len(data) == INFLATE_CHUNK
        # Keep what zlib did not take: it waits until the parser has taken this chunk.
        self._tail = self._in.unconsumed_tail
        if self._in.eof:
            # A final block: the client ended its stream, which RFC 4978 never has it do.
            raise zlib.error("the client's DEFLATE stream ended")
        return data
