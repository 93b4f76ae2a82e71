"""What the structure parser keeps about a message, and its JSON form.

The store parses a message once, at delivery, and keeps the result as message metadata so that
no later FETCH has to read the message again to answer ENVELOPE, BODYSTRUCTURE or to find
where ``BODY[1.2.MIME]`` starts.  These classes are that result.

JSON representation
-------------------
Every text value (header values, parameter names and values, address parts) is a ``str``
holding the message's raw octets decoded as **latin-1**: each byte becomes the code point of the
same number, so ``value.encode("latin-1")`` gives the original bytes back exactly, whatever
charset (or garbage) the message used, and :mod:`json` can store it without loss.  RFC 3501
wants these values returned raw, so nothing is decoded (no RFC 2047, no RFC 2231).

Tuples become JSON arrays.  Keys whose value is ``None`` are left out of a part's dict to keep
the metadata of many-part messages small; :meth:`BodyPart.from_json` restores them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .address import Address

Param = tuple[str, str]


def _addrs_to_json(addrs: list[Address] | None) -> list[list[str | None]] | None:
    return None if addrs is None else [list(a) for a in addrs]


def _addrs_from_json(data: Any) -> list[Address] | None:
    return None if data is None else [tuple(a) for a in data]  # type: ignore[misc]


def _params_from_json(data: Any) -> list[Param]:
    return [(p[0], p[1]) for p in data or ()]


_ENVELOPE_KEYS = ("date", "subject", "from", "sender", "reply_to", "to", "cc", "bcc",
                  "in_reply_to", "message_id")
_ADDRESS_KEYS = frozenset(("from", "sender", "reply_to", "to", "cc", "bcc"))


@dataclass(slots=True)
class Envelope:
    """The fields of RFC 3501's ENVELOPE (section 7.4.2), already parsed.

    ``date``, ``subject``, ``in_reply_to`` and ``message_id`` are the raw field values,
    unfolded and trimmed, ``None`` when the field is absent.  The address fields are lists of
    :data:`~mailstore.mime.address.Address` tuples, ``None`` when absent or empty.  ``sender``
    and ``reply_to`` are already defaulted to ``from_`` as RFC 3501 tells the server to do, so
    the IMAP layer can write the envelope out as it is (see :meth:`as_tuple`).
    """

    date: str | None = None
    subject: str | None = None
    from_: list[Address] | None = None
    sender: list[Address] | None = None
    reply_to: list[Address] | None = None
    to: list[Address] | None = None
    cc: list[Address] | None = None
    bcc: list[Address] | None = None
    in_reply_to: str | None = None
    message_id: str | None = None

    def as_tuple(self) -> tuple:
        """The ten envelope members in the order RFC 3501 writes them."""
        return (self.date, self.subject, self.from_, self.sender, self.reply_to, self.to,
                self.cc, self.bcc, self.in_reply_to, self.message_id)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: keys as in :data:`_ENVELOPE_KEYS`, addresses as 4-item lists."""
        out: dict[str, Any] = {}
        for key, value in zip(_ENVELOPE_KEYS, self.as_tuple(), strict=True):
            out[key] = _addrs_to_json(value) if key in _ADDRESS_KEYS else value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Envelope:
        """Rebuild an envelope from :meth:`to_json` output (``None`` gives an empty one)."""
        data = data or {}
        values = [_addrs_from_json(data.get(key)) if key in _ADDRESS_KEYS else data.get(key)
                  for key in _ENVELOPE_KEYS]
        return cls(*values)


@dataclass(slots=True, eq=True)
class BodyPart:
    """One entity of the MIME tree, with what BODYSTRUCTURE and BODY[section] need.

    ``type``/``subtype`` are as written (case kept); a part without a valid Content-Type gets
    RFC 2045's default ``text/plain; charset=us-ascii``, or ``message/rfc822`` inside a
    ``multipart/digest`` (RFC 2046 section 5.1.5).  ``params`` keeps the order of the header,
    names and values as written (compare names case-insensitively, as :meth:`param` does).
    ``encoding`` is the Content-Transfer-Encoding as written, ``None`` when the part has none
    (RFC 2045's default, 7bit), so that the IMAP layer can write the default its own way.
    Metadata stored by earlier versions has ``7BIT`` there for a default and an explicit
    encoding alike, lower-cased parameter names, and line counts that include an unterminated
    last line; it still loads and renders as it did then, just not as Dovecot would.

    Offsets are octet offsets into the whole message, so a FETCH reads exactly the bytes it
    needs: ``[header_start, body_start)`` is ``BODY[n.MIME]`` (or ``BODY[n.HEADER]`` of an
    encapsulated message), ``[body_start, body_end)`` is ``BODY[n]``.  The line break before a
    boundary belongs to the boundary (RFC 2046 section 5.1.1), so it is not in the body.

    ``size`` is the body's octet count.  ``lines`` is its count of text lines, which is its
    count of line feeds: a last line without one (text right before a boundary, or at the end
    of the message) is not counted, as Dovecot and UW-IMAP count it.  It is only set for
    ``text/*`` and ``message/rfc822``, the types RFC 3501 reports it for.

    ``parts`` is a list for ``multipart/*`` (``None`` otherwise).  It is empty when the
    boundary never appears, is missing, or the nesting/part limits were hit; RFC 3501 has no
    syntax for an empty multipart, so the IMAP layer should write one empty ``text/plain``
    child instead, as Dovecot does.  ``message`` is the encapsulated message of a
    ``message/rfc822`` part; it is ``None`` when that message could not be parsed in place (a
    base64 or quoted-printable encoding, the limits, or a part header cut short by a boundary),
    in which case the IMAP layer has to describe the part as a basic one (for instance as
    ``application/octet-stream``), because RFC 3501's grammar requires an envelope and a body
    after ``"MESSAGE" "RFC822"``.
    """

    type: str = "text"
    subtype: str = "plain"
    params: list[Param] = field(default_factory=list)
    id: str | None = None
    description: str | None = None
    encoding: str | None = None
    size: int = 0
    lines: int | None = None
    md5: str | None = None
    disposition: tuple[str, list[Param]] | None = None
    language: list[str] | None = None
    location: str | None = None
    header_start: int = 0
    body_start: int = 0
    body_end: int = 0
    boundary: str | None = None
    parts: list[BodyPart] | None = None
    message: MessageInfo | None = None

    def param(self, name: str) -> str | None:
        """The value of the first Content-Type parameter called ``name`` (case-insensitive)."""
        name = name.lower()
        return next((v for k, v in self.params if k.lower() == name), None)

    @property
    def is_multipart(self) -> bool:
        return self.parts is not None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; ``None`` members are omitted."""
        out: dict[str, Any] = {
            "type": self.type, "subtype": self.subtype,
            "params": [list(p) for p in self.params],
            "size": self.size, "header_start": self.header_start,
            "body_start": self.body_start, "body_end": self.body_end,
        }
        for key in ("id", "description", "encoding", "lines", "md5", "location", "boundary",
                    "language"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.disposition is not None:
            out["disposition"] = [self.disposition[0], [list(p) for p in self.disposition[1]]]
        if self.parts is not None:
            out["parts"] = [p.to_json() for p in self.parts]
        if self.message is not None:
            out["message"] = self.message.to_json()
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BodyPart:
        """Rebuild a part (and its children) from :meth:`to_json` output.

        Output of earlier versions loads as it was written (an ``encoding`` of ``7BIT`` stays
        ``7BIT``: whether the message said so cannot be told from it any more).
        """
        disposition = data.get("disposition")
        parts = data.get("parts")
        message = data.get("message")
        return cls(
            type=data["type"], subtype=data["subtype"],
            params=_params_from_json(data.get("params")),
            id=data.get("id"), description=data.get("description"),
            encoding=data.get("encoding"), size=data.get("size", 0),
            lines=data.get("lines"), md5=data.get("md5"),
            disposition=None if disposition is None
            else (disposition[0], _params_from_json(disposition[1])),
            language=data.get("language"), location=data.get("location"),
            header_start=data.get("header_start", 0), body_start=data.get("body_start", 0),
            body_end=data.get("body_end", 0), boundary=data.get("boundary"),
            parts=None if parts is None else [cls.from_json(p) for p in parts],
            message=None if message is None else MessageInfo.from_json(message),
        )


@dataclass(slots=True, eq=True)
class MessageInfo:
    """A parsed message: the top-level one, or one encapsulated in a ``message/rfc822`` part.

    ``size`` is the message's octet count; ``header_size`` that of its header block *including*
    the blank line ending it (all of it when there is none); ``lines`` counts the line feeds
    of its body, as :class:`BodyPart` does.  ``body`` is the root of the MIME tree: for a simple
    message a single leaf whose offsets frame the whole message.

    ``truncated`` is set on the top-level message when a limit (header cap, nesting depth,
    part count) made the parser treat something as opaque; the metadata is still consistent,
    just less detailed.
    """

    size: int = 0
    header_size: int = 0
    lines: int = 0
    envelope: Envelope = field(default_factory=Envelope)
    body: BodyPart = field(default_factory=BodyPart)
    truncated: bool = False

    def to_json(self) -> dict[str, Any]:
        """A dict :func:`json.dumps` can store; see the module docstring for the encoding."""
        return {"size": self.size, "header_size": self.header_size, "lines": self.lines,
                "truncated": self.truncated, "envelope": self.envelope.to_json(),
                "body": self.body.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MessageInfo:
        """Rebuild from :meth:`to_json` output (after a ``json.loads``)."""
        return cls(size=data.get("size", 0), header_size=data.get("header_size", 0),
                   lines=data.get("lines", 0), truncated=bool(data.get("truncated", False)),
                   envelope=Envelope.from_json(data.get("envelope")),
                   body=BodyPart.from_json(data["body"]))
