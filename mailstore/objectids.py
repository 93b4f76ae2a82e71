"""Object identifiers of RFC 8474 (OBJECTID): MAILBOXID, EMAILID and THREADID.

RFC 8474 section 7: ``objectid = 1*255(ALPHA / DIGIT / "_" / "-")``, case significant.  Each
of ours is a letter saying what it names and lower-case hex, all derived from ids the store
already keeps, so nothing new is stored:

* MAILBOXID ``F`` + the mailbox row id (16 octets, 32 hex digits).  The row id never changes
  (RENAME keeps it, section 4.2); RENAME of INBOX moves its messages into a new mailbox,
  which has a new id, while INBOX keeps its own.  Ids are random, so a deleted mailbox's id
  is never given to a new one (section 4).
* EMAILID ``M`` + the content id.  A message's content is stored once and shared by every
  row that refers to it: COPY and MOVE keep the reference (section 5.1: "MUST" keep the
  EMAILID), and so does a delivery to several recipients.  The same octets APPENDed twice are
  two contents with two EMAILIDs, which section 5.1 allows.
* THREADID ``T`` + 20 hex digits of the SHA-256 of the thread's root Message-ID: the first
  message id in References, or else in In-Reply-To, or else the message's own Message-ID
  (RFC 5322 3.6.4: References starts with the thread's first message).  Computed from the
  stored header block when asked, so messages stored before it existed have one too.  A
  reply whose sender dropped References and kept only In-Reply-To to a reply starts a thread
  of its own; a message with none of the three fields is a thread of one (derived from its
  EMAILID).  Section 5.2 allows a server to return NIL instead; this costs one header parse.
"""

from __future__ import annotations

import hashlib
import re

from .mime import field_value, header_fields

_OBJECTID = re.compile(r"[A-Za-z0-9_-]{1,255}\Z")
_MSG_ID = re.compile(r"<([^<>]+)>")


def is_objectid(text: str) -> bool:
    """Whether ``text`` is an objectid as RFC 8474 section 7 writes it."""
    return bool(_OBJECTID.match(text))


def mailbox_id(mailbox_key: bytes) -> str:
    """The MAILBOXID of the mailbox whose row id is ``mailbox_key``."""
    return "F" + mailbox_key.hex()


def email_id(content_id: bytes) -> str:
    """The EMAILID of every message whose content is ``content_id``."""
    return "M" + content_id.hex()


def thread_root(header: bytes | None) -> str | None:
    """The Message-ID (without brackets) a message's thread starts from, if it names one."""
    if not header:
        return None
    fields: dict[str, str] = {}
    for name, raw in header_fields(header):
        key = name.lower() if name else ""
        if key in ("references", "in-reply-to", "message-id") and key not in fields:
            fields[key] = field_value(raw)
    for key in ("references", "in-reply-to", "message-id"):
        found = _MSG_ID.search(fields.get(key, ""))
        if found and found.group(1).strip():
            return "".join(found.group(1).split())
    return None


def thread_id(header: bytes | None, content_id: bytes) -> str:
    """The THREADID of a message with this top-level header block and content."""
    root = thread_root(header)
    if root is None:
        return "T" + hashlib.sha256(b"content:" + content_id).hexdigest()[:20]
    # Field values are the header's octets read as latin-1: this gives the octets back.
    return "T" + hashlib.sha256(root.encode("latin-1")).hexdigest()[:20]


__all__ = ["email_id", "is_objectid", "mailbox_id", "thread_id", "thread_root"]
