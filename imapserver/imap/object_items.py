"""FETCH data of the message attributes added by OBJECTID, SAVEDATE and PREVIEW.

Grammar::

    msg-att-static =/ fetch-emailid-resp / fetch-threadid-resp          ; RFC 8474 section 7
    fetch-emailid-resp  = "EMAILID" SP "(" objectid ")"
    fetch-threadid-resp = "THREADID" SP ( "(" objectid ")" / nil )
    msg-att-static =/ "SAVEDATE" SP (date-time / nil)                    ; RFC 8514 section 5
    msg-att-dynamic =/ "PREVIEW" SP nstring                              ; RFC 8970 section 6

The ids and the preview come from :mod:`mailstore.objectids` and :mod:`mailstore.preview`.
A message stored before save dates were kept answers ``SAVEDATE NIL`` (RFC 8514 section 3).
One stored before previews were kept has its preview computed from its content on its first
``PREVIEW`` and stored; with ``PREVIEW (LAZY)`` it answers NIL instead, as RFC 8970 section 3.1
lets a server do when the preview is not at hand, and a later plain PREVIEW computes it.
"""

from __future__ import annotations

from mailstore.objectids import email_id, thread_id

from .render import internaldate
from .wire import nstring


def object_item(store, mailbox, view, item) -> bytes:
    """The response data of ``item`` (kind EMAILID, THREADID, SAVEDATE or PREVIEW) for
    ``view`` (a message of ``mailbox``; runs in a worker thread: PREVIEW may read content)."""
    kind = item.kind
    if kind == "EMAILID":
        return b"EMAILID (" + email_id(view.record.content).encode() + b")"
    if kind == "THREADID":
        return b"THREADID (" + thread_id(view.header, view.record.content).encode() + b")"
    if kind == "SAVEDATE":
        saved = view.record.save_date
        return b"SAVEDATE " + (b"NIL" if saved is None else internaldate(saved))
    if kind == "PREVIEW":
        text = view.preview
        if text is None and not item.lazy:
            text = store.preview(mailbox, view)
        return b"PREVIEW " + nstring(None if text is None else text.encode("utf-8"))
    raise ValueError(f"not an object item: {kind}")


OBJECT_KINDS = frozenset(("EMAILID", "THREADID", "SAVEDATE", "PREVIEW"))

__all__ = ["OBJECT_KINDS", "object_item"]
