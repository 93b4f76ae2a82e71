"""Text as SEARCH sees it (now kept in :mod:`mailstore.mime.searchtext`, which the text
index shares): decoded header values, decoded body parts, streamed substring search.

RFC 3501 6.4.4 asks for case-insensitive substring matching and leaves decoding to the server.
We decode as Dovecot does, so that a user searching for what they see finds it:

* Header values (:func:`decode_field`): unfolded, 8-bit octets read as UTF-8 (RFC 6532) or,
  failing that, as windows-1252, and RFC 2047 encoded words (``=?charset?B|Q?...?=``) decoded,
  the white space between two adjacent encoded words dropped.  An encoded word in an unknown
  charset is decoded as UTF-8-or-windows-1252; one that does not decode is left as written.
* Body parts (:class:`PartDecoder`): the Content-Transfer-Encoding undone (base64,
  quoted-printable; anything else taken as it is), then the charset parameter applied with
  Python's codecs (undecodable octets become U+FFFD).  ``us-ascii``, ``utf-8``, a missing or
  unknown charset read as UTF-8, switching to windows-1252 at the first octet that is not
  UTF-8 (mail labelled us-ascii is often neither).  ``iso-8859-1`` is read as windows-1252,
  its superset, as browsers do.  Both work incrementally, chunk by chunk.
* Matching (:class:`StreamMatcher`): :meth:`str.casefold` on both sides (so ``STRASSE`` finds
  ``Straße``); no Unicode normalisation and no white space folding.  A needle may straddle
  pieces: each piece is searched together with the end of the previous one.
"""

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
