"""Bulk import of messages into one user's mailboxes (what ``mailadmin import`` stores through).

Three things set a bulk import apart from an APPEND (docs/decisions/0006-idempotent-import.md):

* **Idempotence.**  Each stored message leaves a record in ``JAMES_IMPORTS`` keyed by its
  mailbox and the SHA-256 of its bytes, holding the UID it got.  Before storing, one ``get`` of
  that key (and, on a hit, one of the message row) tells whether the message is still there;
  nothing ever scans a mailbox to find duplicates.  A message that was imported and later
  expunged or moved away is imported again.
* **Durability in batches.**  :meth:`MailStore.append` syncs the backend once per message; here
  :meth:`Importer.add` does not, and the importer syncs every ``sync_every`` messages and in
  :meth:`Importer.finish`.  A power cut loses at most the last batch, which a re-run restores.
* **Quota from a running total.**  The user's usage is added up once, then kept up to date
  locally, so a quota check costs nothing per message.  Deliveries running at the same time
  may make the total overshoot by what they add, as :func:`mailstore.users.check_quota` says.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import keys, names
from .backends.base import decode_counter, encode_counter
from .errors import AlreadyExists, NotFound, TooLarge, Unpublished
from .mailboxes import Mailbox
from .messages import STATE
from .schema import IMPORTS
from .users import check_quota

UID_CELL = b"i:uid"


@dataclass
class Imported:
    """What became of one message: its UID, and whether it was already there (skipped)."""

    uid: int
    skipped: bool


class Importer:
    """Adds messages to ``user``'s mailboxes; get one from :meth:`MailStore.importer`.

    Not thread-safe: one importer per thread.  Call :meth:`finish` at the end (also after an
    error) so that everything stored so far is durable.
    """

    def __init__(self, store, user: str, sync_every: int = 1000):
        self.store = store
        self.account = store.user(user)
        self.user = self.account.name
        self.records = store.backend.table(IMPORTS.name)
        self.sync_every = max(1, sync_every)
        self.unsynced = 0
        limited = self.account.storage_limit is not None or \
            self.account.message_limit is not None
        self.usage = store.usage(self.user) if limited else None
        self._boxes: dict[str, Mailbox] = {}

    def mailbox(self, name: str, create: bool = True) -> Mailbox:
        """The user's mailbox ``name``, created (with its parents) if missing and ``create``.

        Raises NotFound when missing and not ``create``, InvalidName for a bad name.
        """
        name = names.normalize_mailbox(name)
        if name not in self._boxes:
            try:
                box = self.store.mailbox(self.user, name)
            except NotFound:
                if not create:
                    raise
                try:
                    box = self.store.create_mailbox(self.user, name)
                except AlreadyExists:  # created meanwhile by someone else
                    box = self.store.mailbox(self.user, name)
            self._boxes[name] = box
        return self._boxes[name]

    def present(self, mailbox: Mailbox, digest: bytes) -> int | None:
        """The UID of the message with this digest if an import put it in ``mailbox`` and it
        is still there; otherwise None."""
        cell = self.records.row(keys.import_key(mailbox.id, digest), [UID_CELL]).get(UID_CELL)
        if cell is None:
            return None
        uid = decode_counter(cell)
        found = self.store.messages.get(mailbox.id, [uid], [STATE])
        return uid if found else None

    def add(self, mailbox: Mailbox, source, size: int, digest: bytes,
            flags=(), internal_date: float | None = None) -> Imported:
        """Store one message unless it is already there.

        ``source`` is bytes or a binary file of exactly ``size`` bytes whose SHA-256 is
        ``digest``.  Raises TooLarge or OverQuota (nothing stored), or what ingest raises.
        """
        uid = self.present(mailbox, digest)
        if uid is not None:
            return Imported(uid, True)
        if size > self.store.max_message_size:
            raise TooLarge(f"message of {size} bytes is larger than the limit of "
                           f"{self.store.max_message_size} bytes")
        if self.usage is not None:
            check_quota(self.account, self.usage, size, 1)
        # One unit of work, as an APPEND is (one transaction on the embedded store).
        with self.store.unit_of_work(size):
            stored = self.store.ingest(source)
            try:
                uid = self.store.add_stored(mailbox, stored, flags, internal_date)
            except Unpublished:
                raise  # the message row holds the content's reference
            except BaseException:
                self.store.content.decref(stored.content_id)
                raise
            # The record is written after the message: a crash in between costs a duplicate
            # on re-run, never a message skipped that is not there.
            self.records.put(keys.import_key(mailbox.id, digest),
                             {UID_CELL: encode_counter(uid)})
        if self.usage is not None:
            self.usage = (self.usage[0] + stored.size, self.usage[1] + 1)
        self.unsynced += 1
        if self.unsynced >= self.sync_every:
            self.sync()
        return Imported(uid, False)

    def sync(self) -> None:
        """Make every message stored so far durable."""
        if self.unsynced:
            self.store.backend.sync()
            self.unsynced = 0

    def finish(self) -> None:
        self.sync()
        # Leave each mailbox's index checkpoint current (docs/decisions/0009), so the first
        # SELECT after a big import starts from it instead of reading every message row.  It
        # is derived data: if the store fails here, the SELECT builds it instead.
        for box in self._boxes.values():
            try:
                self.store.open_index(box)
            except Exception:
                break
