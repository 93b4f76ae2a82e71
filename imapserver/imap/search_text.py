"""Text as SEARCH sees it (RFC 3501 6.4.4): re-exported from :mod:`mailstore.mime.searchtext`,
which the text index shares and whose docstring says how text is decoded and matched."""

from __future__ import annotations

from mailstore.mime.searchtext import (  # noqa: F401 (re-exported for tests and older imports)
    PartDecoder,
    StreamMatcher,
    _codec_name,
    _text_decoder,
    _Utf8OrCp1252,
    address_text,
    decode_bytes,
    decode_field,
    decode_header_text,
)

__all__ = ["PartDecoder", "StreamMatcher", "address_text", "decode_bytes", "decode_field",
           "decode_header_text"]
