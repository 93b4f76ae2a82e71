"""One message on its way into the store: line ends made CRLF, hashed, held in memory or, when
large, in a temporary file.

Line ends: a bare LF becomes CRLF, as delivery does (docs/decisions/0008), because IMAP serves
stored messages as they are and IMAP's line end is CRLF.  mbox files and Maildir files use bare
LF; export turns CRLF back into LF (:class:`LfReader`), so a file with LF line ends comes back
byte for byte.  Lone CRs and 8-bit octets are kept.
"""

from __future__ import annotations

import hashlib
import tempfile


class Spool:
    """One message's bytes as they are read: in memory up to ``spill`` bytes, then in an
    anonymous temporary file; hashed (SHA-256) on the way, as stored.

    The last three bytes written are held back so that an mbox separator's blank line can be
    dropped when the message turns out to end there (:meth:`finish`).  Beyond ``max_size``
    stored bytes the content is dropped and only counted (:attr:`overflow`): a message too
    large to store is reported, not spooled.  ``crlf=False`` keeps line ends as they are.
    """

    def __init__(self, spill: int = 1024 * 1024, max_size: int | None = None,
                 crlf: bool = True):
        self.spill = spill
        self.max_size = max_size
        self.crlf = crlf
        self.size = 0
        """Bytes of the message as it will be stored."""
        self.overflow = False
        self._raw = 0
        self._after_cr = False
        self._mem = bytearray()
        self._file = None
        self._held = b""
        self._hash = hashlib.sha256()

    def write(self, data) -> None:
        if not data:
            return
        data = self._held + data
        self._held = bytes(data[-3:])
        self._emit(data[:-3])

    def finish(self, drop_blank_line: bool = False) -> None:
        """Flush what was held, without the final blank line if ``drop_blank_line``."""
        held, self._held = self._held, b""
        if drop_blank_line:
            if self._raw == 0 and held in (b"\n", b"\r\n"):
                held = b""
            elif held.endswith(b"\n\r\n"):
                held = held[:-2]
            elif held.endswith(b"\n\n"):
                held = held[:-1]
        self._emit(held)
        if self._file is not None:
            self._file.seek(0)

    def _emit(self, raw: bytes) -> None:
        if not raw:
            return
        self._raw += len(raw)
        out = raw
        if self.crlf and b"\n" in raw:
            # Two replaces (~1 us/KiB) rather than a look-behind regex (~10 us/KiB): every LF
            # ends up with exactly one CR before it, and CRs elsewhere stay as they are.
            out = (raw.replace(b"\r\n", b"\n") if b"\r" in raw else raw).replace(b"\n", b"\r\n")
            if self._after_cr and raw[:1] == b"\n":
                out = out[1:]  # the CR before it came in the previous piece
        self._after_cr = raw[-1:] == b"\r"
        self.size += len(out)
        if self.overflow:
            return
        if self.max_size is not None and self.size > self.max_size:
            self.overflow = True
            self._mem = bytearray()
            if self._file is not None:
                self._file.close()
                self._file = None
            return
        self._hash.update(out)
        if self._file is not None:
            self._file.write(out)
            return
        self._mem += out
        if len(self._mem) > self.spill:
            self._file = tempfile.TemporaryFile()
            self._file.write(self._mem)
            self._mem = bytearray()

    @property
    def digest(self) -> bytes:
        return self._hash.digest()

    def source(self):
        """The message: bytes, or a binary file positioned at its start."""
        return self._file if self._file is not None else bytes(self._mem)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._mem = bytearray()


class LfReader:
    """A reader over a stored message that turns CRLF into LF (for files on disk)."""

    def __init__(self, reader):
        self.reader = reader
        self._cr = False  # the previous piece ended in a CR that was held back

    def read(self, size: int = -1) -> bytes:
        data = self.reader.read(size)
        if self._cr:
            data = b"\r" + data
            self._cr = False
        if data.endswith(b"\r") and size != -1:
            # Is it the CR of a CRLF?  Look one byte ahead; a CR there is kept for next time.
            more = self.reader.read(1)
            if more == b"\r":
                self._cr = True
            else:
                data += more
        return data.replace(b"\r\n", b"\n")
