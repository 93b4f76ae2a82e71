"""The message as Sieve tests see it: header fields (decoded, RFC 5228 2.7.2), addresses
(RFC 5228 5.1), body parts (RFC 5173), and editheader's changes to the header (RFC 5293).

The header is split from the raw bytes ourselves (field order and exact values matter to
editheader and to :index); only MIME body walking uses the stdlib ``email`` package, and only
when a ``body`` test asks.
"""

from __future__ import annotations

import email
import email.errors
import email.header
import email.policy
import email.utils
import functools
import re
from functools import cached_property

_FIELD_NAME = re.compile(rb"^([\x21-\x39\x3b-\x7e]+)[ \t]*:", re.M)


def split_message(raw: bytes) -> tuple[list[tuple[str, bytes]], bytes]:
    """(header fields as (name, raw value without the name and colon, folded, no final CRLF)
    in order, body bytes after the blank line)."""
    end = raw.find(b"\r\n\r\n")
    sep = 4
    lf = raw.find(b"\n\n")
    if lf != -1 and (end == -1 or lf < end):
        end, sep = lf, 2
    if raw.startswith(b"\r\n") or raw.startswith(b"\n"):
        return [], raw[2 if raw.startswith(b"\r\n") else 1:]
    head, body = (raw, b"") if end == -1 else (raw[:end], raw[end + sep:])
    fields: list[tuple[str, bytes]] = []
    for line in re.split(rb"\r?\n(?![ \t])", head):
        found = _FIELD_NAME.match(line)
        if not found:
            continue  # not a field (e.g. an mbox "From " line): not visible to tests
        fields.append((found.group(1).decode("ascii"), line[found.end():]))
    return fields, body


def decode_value(raw: bytes) -> str:
    """Unfolded, leading white space removed, RFC 2047 encoded-words decoded, 8-bit text
    taken as UTF-8 (RFC 6532) -- as RFC 5228 2.7.2 asks for comparisons."""
    text = re.sub(r"\r?\n(?=[ \t])", "", raw.decode("utf-8", "replace")).strip(" \t")
    if "=?" not in text:
        return text
    try:
        parts = email.header.decode_header(text)
        out = []
        for chunk, charset in parts:
            if isinstance(chunk, bytes):
                out.append(chunk.decode(charset or "utf-8", "replace"))
            else:
                out.append(chunk)
        return "".join(out)
    except (LookupError, ValueError, email.errors.HeaderParseError):
        return text


ADDRESS_HEADERS = {"from", "to", "cc", "bcc", "sender", "resent-from", "resent-to",
                   "resent-cc", "resent-bcc", "resent-sender", "reply-to", "resent-reply-to",
                   "delivered-to", "errors-to"}


def is_address_header(name: str) -> bool:
    """Whether the address test may name ``name`` (RFC 5228 5.1: fields whose syntax is an
    address list; as Pigeonhole, also any X- field, which may hold one)."""
    low = name.lower()
    return low in ADDRESS_HEADERS or low.startswith("x-")


@functools.lru_cache(maxsize=1024)
def _addresses(value: str) -> tuple[str, ...]:
    return tuple(addr for _name, addr in email.utils.getaddresses([value]) if addr)


def addresses(value: str) -> list[str]:
    """The addr-specs in an address list, group syntax flattened, names dropped.  Cached:
    a script tests the same From/To many times, and stdlib parsing is slow."""
    return list(_addresses(value))


class SieveMessage:
    """A message under test; ``fields`` may be edited (editheader) and the result rendered
    with :meth:`as_bytes`."""

    def __init__(self, raw: bytes):
        self.raw = raw
        self.fields, self.body = split_message(raw)
        self.edited = False
        self._decoded: dict[str, list[str]] = {}
        self._bodies: dict = {}  # body transform -> texts; shared by clones (same body)

    def clone(self) -> SieveMessage:
        """A copy for another recipient's script: it shares what was decoded so far (the
        same bytes, the same answers), and editheader changes stay in the copy."""
        other = object.__new__(SieveMessage)
        other.__dict__.update(self.__dict__)
        other._decoded = self._decoded  # shared until an edit replaces it
        return other

    @property
    def size(self) -> int:
        return len(self.raw)

    def headers(self, name: str) -> list[str]:
        """The decoded values of the fields named ``name``, in order (cached until an edit)."""
        low = name.lower()
        found = self._decoded.get(low)
        if found is None:
            found = self._decoded[low] = [decode_value(v) for n, v in self.fields
                                          if n.lower() == low]
        return list(found)

    def raw_headers(self, name: str) -> list[bytes]:
        low = name.lower()
        return [v for n, v in self.fields if n.lower() == low]

    def has(self, name: str) -> bool:
        low = name.lower()
        return any(n.lower() == low for n, _ in self.fields)

    # -- editheader (RFC 5293) -----------------------------------------------------------------

    def add_field(self, name: str, value: str, last: bool) -> None:
        encoded = encode_value(value)
        item = (name, b" " + encoded)
        # New list and cache, never changed in place: a clone may share the old ones.
        self.fields = [*self.fields, item] if last else [item, *self.fields]
        self.edited = True
        self._decoded = {}

    def delete_fields(self, keep) -> int:
        """Remove the fields for which ``keep(position, name, value)`` is False."""
        before = len(self.fields)
        self.fields = [f for i, f in enumerate(self.fields) if keep(i, f[0], f[1])]
        self.edited = self.edited or len(self.fields) != before
        self._decoded = {}
        return before - len(self.fields)

    def as_bytes(self) -> bytes:
        if not self.edited:
            return self.raw
        head = b"".join(n.encode("ascii") + b":" + v + b"\r\n" for n, v in self.fields)
        return head + b"\r\n" + self.body

    # -- body (RFC 5173) -------------------------------------------------------------------

    @cached_property
    def _mime(self) -> email.message.Message:
        return email.message_from_bytes(self.raw, policy=email.policy.compat32)

    def _simple_text(self) -> str | None:
        """The body of a single-part text/plain message in US-ASCII or UTF-8 without a
        transfer encoding -- most mail -- decoded without the MIME parser; else None."""
        types = self.headers("content-type")
        if len(types) > 1 or (types and not _SIMPLE_TYPE.match(types[0])):
            return None
        if not _identity_encoding(self):
            return None
        return self.body.decode("utf-8", "replace")

    def body_raw(self) -> str:
        return self.body.decode("utf-8", "replace")

    def body_parts(self, types: list[str] | None) -> list[str]:
        """Decoded text of the leaf parts whose Content-Type matches one of ``types``
        ("type/subtype", "type", or "" for every part); ``None``: the :text transform,
        text parts only (RFC 5173 5.2)."""
        key = None if types is None else tuple(types)
        found = self._bodies.get(key)
        if found is None:
            found = self._bodies[key] = self._body_parts(types)
        return list(found)

    def _body_parts(self, types: list[str] | None) -> list[str]:
        simple = self._simple_text()
        if simple is not None and (types is None or any(
                t == "" or t.lower() in ("text", "text/plain") for t in types)):
            return [simple]
        out = []
        for part in self._mime.walk():
            if part.is_multipart():
                continue
            ctype = part.get_content_type().lower()
            main = ctype.split("/", 1)[0]
            if types is None:
                wanted = main == "text"
            else:
                wanted = any(t == "" or t.lower() == ctype or t.lower() == main
                             for t in types)
            if not wanted:
                continue
            payload = part.get_payload(decode=True) or b""
            if main == "text":
                charset = part.get_content_charset() or "us-ascii"
                try:
                    text = payload.decode(charset, "replace")
                except LookupError:
                    text = payload.decode("utf-8", "replace")
                if ctype == "text/html" and types is None:
                    text = re.sub(r"<[^>]*>", " ", text)  # RFC 5173 5.2: text from HTML
                out.append(text)
            else:
                out.append(payload.decode("utf-8", "replace"))
        return out


_SIMPLE_TYPE = re.compile(r"\s*text/plain\s*(;\s*charset\s*=\s*\"?(us-ascii|utf-8)\"?\s*)?$",
                          re.I)


def _identity_encoding(message: SieveMessage) -> bool:
    encodings = message.headers("content-transfer-encoding")
    return all(e.strip().lower() in ("7bit", "8bit", "binary") for e in encodings)


def encode_value(value: str) -> bytes:
    """A header value from a script: CR and LF cannot end the field and start another
    (header injection), so line breaks become folding white space; non-ASCII text is an
    RFC 2047 encoded-word."""
    value = re.sub(r"[\r\n]+", " ", value).strip()
    if value.isascii():
        return value.encode("ascii")
    return email.header.Header(value, "utf-8").encode().encode("ascii")
