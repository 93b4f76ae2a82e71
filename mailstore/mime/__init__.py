"""MIME structure of stored messages, computed once at delivery.

IMAP's FETCH can ask for a message's ENVELOPE, its BODYSTRUCTURE, any part by section number
(``BODY[1.2]``), a part's MIME header (``BODY[1.2.MIME]``), some header fields
(``BODY[HEADER.FIELDS (...)]``) and octet ranges of all of these (RFC 3501 sections 6.4.5 and
7.4.2).  Parsing a 50 MB message for each such request would be ruinous, so the store feeds the
message through :class:`StructureParser` while it is being written and keeps the resulting
:class:`MessageInfo` (as JSON, see :mod:`mailstore.mime.model`) with the message.  Every later
request is answered from that metadata plus, for content, a read of exactly the octet range the
metadata points at.

Typical use::

    parser = StructureParser()
    for chunk in chunks:
        parser.feed(chunk)
    info = parser.close()
    cell = json.dumps(info.to_json())
    ...
    info = MessageInfo.from_json(json.loads(cell))

The parser is pure Python, uses no :mod:`email` machinery (which buffers whole messages and
normalises the values IMAP must return raw) and never raises on malformed input.
"""

from .address import GROUP_END, Address, parse_address_list
from .headers import field_value, header_fields
from .model import BodyPart, Envelope, MessageInfo
from .structure import (
    MAX_DEPTH,
    MAX_HEADER,
    MAX_HEADER_TOTAL,
    MAX_LINE,
    MAX_PARTS,
    StructureParser,
    parse_bytes,
)

__all__ = [
    "GROUP_END",
    "MAX_DEPTH",
    "MAX_HEADER",
    "MAX_HEADER_TOTAL",
    "MAX_LINE",
    "MAX_PARTS",
    "Address",
    "BodyPart",
    "Envelope",
    "MessageInfo",
    "StructureParser",
    "field_value",
    "header_fields",
    "parse_address_list",
    "parse_bytes",
]
