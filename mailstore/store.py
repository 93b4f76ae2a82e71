"""The mail store's public API: what the IMAP server, the SMTP/LMTP handlers and mailadmin use.

Nothing outside ``mailstore`` talks to a backend directly.  Every method is synchronous and
thread-safe; the protocol edges run them off their event loops (``deferToThread`` in Twisted,
``asyncio.to_thread`` in aiosmtpd).  Errors are those of :mod:`mailstore.errors`.
"""

from __future__ import annotations

import contextlib
import functools
import io
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence

from . import keyformat, keys, names
from .acl import ANYONE, SHARED_OWNER, Grants, flag_changeable, public_name
from .backends import open_backend
from .backends.base import Backend, Mutation, decode_counter, delete_rows
from .changelog import ChangeLog
from .content import DEFAULT_CHUNK, DEFAULT_GRACE, ContentStore
from .deliveries import Delivery, deliver_all
from .errors import (
    AlreadyExists,
    Expunged,
    InvalidName,
    TooLarge,
    Unpublished,
)
from .index import CHECKPOINT_EVERY, Delta, Indexes, MailboxIndex, Marks
from .indexer import TextQueue
from .mailboxes import DEFAULT_FOLDERS, MODSEQ, Mailbox, Mailboxes
from .messages import (
    BODY,
    HEADER,
    SUMMARY,
    Ingestion,
    Messages,
    MessageView,
    StoredContent,
    canonical_flags,
    flag_target,
    known_size,
)
from .metadata import (
    DEFAULT_POLICY,
    METADATA_RIGHTS,
    SIEVE_LOG,
    SPECIALUSE,
    Annotations,
    Metadata,
    Policy,
    digests,
)
from .modseqs import SinceModseq, since_modseq
from .outbox import Outbox
from .records import COMMITTED, DELETING, MOVING, Flags, MessageRecord, state_of
from .schema import IMPORTS, INTENTS, OUTBOX, Layout, create_schema
from .sharing import open_mailbox, visible_mailboxes
from .sievescripts import ScriptLimits, SieveScripts
from .sortcache import MessageKeys, SortKeyCache
from .textindex import TextSearch
from .transfers import Transfers
from .urlauth import UrlauthKeys
from .users import (
    METADATA_GENERATION,
    NAMES_GENERATION,
    SUBSCRIPTIONS_GENERATION,
    QuotaUsage,
    User,
    Users,
    check_quota,
)

DEFAULT_MAX_MESSAGE = 64 * 1024 * 1024
FLAG_BATCH = 1000
"""Messages per change-log entry of a STORE."""


def durable(method):
    """Sync the backend once before an operation is acknowledged (see Backend.sync)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        result = method(self, *args, **kwargs)
        self.backend.sync()
        return result
    return wrapper


class MailStore:
    """Users, mailboxes and messages over one backend.

    ``chunk_size`` is the content chunk size in bytes (64 KiB to 1 MiB).  ``max_message_size``
    bounds every stored message.  ``clock`` and ``sleep`` are injectable for tests.
    ``abandon_after`` is how long, in seconds, a UID may stay allocated but unwritten before a
    reader gives it up; ``intent_timeout`` how old an unfinished move or expunge must be before
    it is recovered by someone else.  ``release_grace`` is how long, in seconds, content stays
    readable after its last message is expunged (docs/decisions/0011-expunge-vs-readers.md).
    """

    def __init__(self, backend: Backend, *, chunk_size: int = DEFAULT_CHUNK,
                 max_message_size: int = DEFAULT_MAX_MESSAGE, read_ahead: int = 2,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 abandon_after: float = 10.0, intent_timeout: float = 60.0,
                 release_grace: float = DEFAULT_GRACE, create_tables: bool = True,
                 layout: Layout | None = None, sieve_limits: ScriptLimits | None = None,
                 text_index: bool | str = True, auth_cache_size: int = 10000,
                 auth_cache_ttl: float = 3600.0):
        self.backend = backend
        if create_tables:
            create_schema(backend, layout)
        # The store's user key format, recorded in it (a new store takes the configured
        # buckets; one made before salting stays unsalted): docs/decisions/0027.
        self.user_keys = keyformat.settle(backend, (layout or Layout()).user_keys)
        self.max_message_size = max_message_size
        self.clock = clock
        self.content = ContentStore(backend.table("JAMES_CONTENT"), chunk_size, read_ahead, clock,
                                    releases=backend.table(INTENTS.name), grace=release_grace)
        self.mailboxes = Mailboxes(backend, clock, self.user_keys)
        self.users = Users(backend, clock, self.user_keys, auth_cache_size, auth_cache_ttl)
        self.messages = Messages(backend, self.mailboxes, self.content, clock, sleep,
                                 abandon_after)
        self.changes = ChangeLog(backend, clock, abandon_after)
        self.transfers = Transfers(backend, self.messages, self.mailboxes, self.content,
                                   self.users, clock, intent_timeout, self.changes)
        self.indexes = Indexes(backend, self.messages, self.changes)
        self.sort_cache = SortKeyCache(self.messages)
        self.urlauth = UrlauthKeys(backend, self.user_keys)
        self.grants = Grants(backend, self.user_keys)
        self._sieve_scripts = SieveScripts(backend, limits=sieve_limits, clock=clock,
                                           user_exists=self.users.get,
                                           user_keys=self.user_keys)
        self.metadata = Metadata(backend)
        self.annotations = Annotations(self.metadata, self.mailboxes)
        self.annotations.computed[SIEVE_LOG] = lambda user: self.sieve_errors.text(user)
        self._chunk_size = chunk_size
        # The text index (mailstore/textindex.py, docs/decisions/0026): derived data, kept at
        # every append, copy, move, expunge and mailbox deletion, never needed for a right
        # answer (SEARCH scans what it does not cover).
        mode = {True: "yes", False: "no"}.get(text_index, text_index)
        queue = TextQueue(backend) if mode == "background" else None
        self.text = TextSearch(backend.text_index() if mode != "no" else None, self.messages,
                               mode=mode, grouped=backend.grouped, queue=queue)
        # A COPY or MOVE cut by a crash and rolled forward hands its copies to the index too.
        self.transfers.recovered_copies = self._index_copies
        if self.text.queue is not None:
            # Each append's counting call queues its message for the background indexer
            # (mailstore/indexer.py): no write of its own, durable before the message is.
            self.messages.count_also = self.text.queue.increments

    @functools.cached_property
    def sieve_tracking(self):
        """Vacation replies sent and duplicate ids seen by Sieve (mailstore/sieve/tracking.py)."""
        from .sieve.tracking import SieveTracking  # sieve imports sievelib: only when used
        return SieveTracking(self.backend, self.clock, self.user_keys)

    @functools.cached_property
    def sieve_errors(self):
        """Each user's last Sieve runtime errors (mailstore/sieve/errorlog.py)."""
        from .sieve.errorlog import SieveErrorLog
        return SieveErrorLog(self.backend, self.clock, self.user_keys)

    def _bump(self, user: str, column: bytes) -> None:
        """Announce a change of ``user``'s mailbox list, subscriptions or annotations (what
        NOTIFY polls).  Shared/'s owner has no account and no users row to count in: a
        change there is not announced (decision 0021)."""
        if user != SHARED_OWNER:
            self.users.bump(user, column)

    def bump_grantees(self, acl, column: bytes = NAMES_GENERATION) -> None:
        """Announce a change to everyone an ACL names (not negative entries): a mailbox they
        see was created, renamed, deleted, its ACL changed, or its shared annotations --
        NOTIFY sessions of theirs look again (RFC 5465 5.4, 5.6, 5.9).  ``anyone`` is every
        user: its change moves the one ``anyone`` generation every user's include
        (:meth:`generations`), not each user's.  Bounded by the ACL's size."""
        for identifier in sorted(acl):
            if not identifier.startswith("-"):
                self._bump(identifier, column)

    @property
    def sieve_scripts(self) -> SieveScripts:
        """Every user's Sieve scripts and the active one (mailstore/sievescripts.py)."""
        return self._sieve_scripts

    @functools.cached_property
    def outbox(self) -> Outbox:
        """The outgoing queue (mailstore/outbox.py): mail the server sends through its relay."""
        return Outbox(self.backend.table(OUTBOX.name), chunk_size=self._chunk_size,
                      max_message_size=self.max_message_size, clock=self.clock,
                      sync=self.backend.sync)

    @classmethod
    def open(cls, backend_name: str, backend_options: dict, **store_options) -> MailStore:
        return cls(open_backend(backend_name, backend_options), **store_options)

    def close(self) -> None:
        self.backend.close()

    # -- users ----------------------------------------------------------------------------------

    @durable
    def create_user(self, name: str, password: str | None,
                    default_folders: bool = True) -> str:
        """Create an account with INBOX (and Drafts, Sent, Trash, Junk, Archive, subscribed)."""
        user = self.users.create(name, password)
        self.mailboxes.create(user, "INBOX")
        self.mailboxes.subscribe(user, "INBOX")
        if default_folders:
            for folder, use in DEFAULT_FOLDERS:
                self.mailboxes.create(user, folder, use)
                self.mailboxes.subscribe(user, folder)
        return user

    def authenticate(self, name: str, password: str) -> str | None:
        """The canonical user name if ``password`` is ``name``'s, else None.  Costs a
        password hash (scrypt, ~50 ms) unless this process verified the same password against
        the same stored hash less than ``auth_cache_ttl`` seconds ago
        (docs/decisions/0030-auth-cache.md)."""
        return self.users.authenticate(name, password)

    def authenticate_cached(self, name: str, password: str) -> str | None:
        """The canonical user name when the auth cache vouches for ``password`` (one read of
        the user's password cell, no password hash); None when it cannot, which is not a
        refusal: then call :meth:`authenticate`."""
        return self.users.authenticate_cached(name, password)

    def user(self, name: str) -> User:
        return self.users.get(name)

    def list_users(self) -> list[User]:
        return self.users.list()

    def usage(self, user: str) -> tuple[int, int]:
        """(bytes, messages) stored by ``user``: the sum of their mailbox counters."""
        boxes = self.mailboxes.list(user)
        return sum(m.size for m in boxes), sum(m.messages for m in boxes)

    def check_quota(self, user: str, add_bytes: int, add_messages: int) -> None:
        """Raise OverQuota if storing this much more would take ``user`` over a limit."""
        if user == SHARED_OWNER:
            return  # shared mailboxes (Shared/...) have no account, so no limits
        account = self.users.get(user)
        if account.storage_limit is None and account.message_limit is None:
            return  # no limits: skip adding up the mailboxes
        check_quota(account, self.usage(account.name), add_bytes, add_messages)

    def quota(self, user: str) -> QuotaUsage:
        """``user``'s limits and usage (octets and messages in all their mailboxes, from the
        mailbox counters).  The mailboxes are not added up for a user without limits: usage
        is then reported as 0.  Raises NotFound."""
        if user == SHARED_OWNER:
            return QuotaUsage(0, None, 0, None)
        account = self.users.get(user)
        if account.storage_limit is None and account.message_limit is None:
            return QuotaUsage(0, None, 0, None)
        used_bytes, used_messages = self.usage(account.name)
        return QuotaUsage(used_bytes, account.storage_limit, used_messages,
                          account.message_limit)

    def deleted_usage(self, mailbox: Mailbox) -> tuple[int, int]:
        """(messages, octets) marked \\Deleted in ``mailbox``: what EXPUNGE would free (RFC
        9208 4.1.4, STATUS DELETED and DELETED-STORAGE).  The \\Deleted UIDs come from the
        mailbox's index (no scan of the mailbox); their sizes from one multi-get per
        ``FLAG_BATCH`` of them, so the cost is that of the \\Deleted messages alone."""
        uids = list(self.indexes.open(mailbox).deleted)
        count = octets = 0
        for i in range(0, len(uids), FLAG_BATCH):
            for view in self.messages.get(mailbox.id, uids[i:i + FLAG_BATCH], SUMMARY):
                if "\\Deleted" in view.flags.names:  # as read now, not as indexed
                    count += 1
                    octets += view.record.size
        return count, octets

    @durable
    def delete_user(self, name: str) -> None:
        """Remove a user with every mailbox, message and content reference."""
        user = self.users.get(name).name
        for mailbox in self.mailboxes.list(user):
            self._delete_mailbox(mailbox)
        # Grants to the user go too: a new account of the same name must not inherit them.
        for mailbox_id in self.grants.candidates(user, with_anyone=False):
            for identifier in (user, "-" + user):
                self.grants.set(mailbox_id, identifier, frozenset())
        self.mailboxes.drop_subscriptions(user)
        self.metadata.drop_user(user)
        self.urlauth.reset_all(user)
        self.sieve_scripts.delete_all(user)
        self.sieve_tracking.delete_all(user)
        self.users.delete_row(user)

    # -- mailboxes ------------------------------------------------------------------------------

    @durable
    def create_mailbox(self, user: str, name: str, special_use: str | None = None) -> Mailbox:
        """Create ``name`` (RFC 3501 6.3.3); missing parents are created too."""
        name = names.normalize_mailbox(name)
        if user != SHARED_OWNER:  # the owner of Shared/ has no account (acl.SHARED_OWNER)
            self.users.get(user)  # NotFound for an unknown user: no mailbox rows without owner
        try:
            for parent in names.parent_names(name):
                try:
                    self.mailboxes.create(user, parent)
                except AlreadyExists:
                    pass
            return self.mailboxes.create(user, name, special_use)
        finally:
            self._bump(user, NAMES_GENERATION)  # a parent may be new even if it failed

    def mailbox(self, user: str, name: str, recover: bool = True) -> Mailbox:
        """The mailbox with fresh counters; rolls forward stale moves/expunges of it first."""
        mailbox = self.mailboxes.get(user, name)
        if recover:
            # What a failed APPEND or delivery of this process left owed (issue 16).
            self.messages.retry_owed()
        if recover and self.transfers.pending(mailbox.id):
            if self.transfers.recover(mailbox.id):
                mailbox = self.mailboxes.get(user, name)
        if recover and mailbox.visible_uid < mailbox.last_uid:
            # UIDs allocated and not (yet) written: a killed writer's are given up once they
            # have stayed so for abandon_after (docs/decisions/0001), without waiting here.
            if self.messages.settle(mailbox.id, mailbox.visible_uid, mailbox.last_uid) \
                    != mailbox.visible_uid:
                mailbox = self.mailboxes.get(user, name)
        return mailbox

    def list_mailboxes(self, user: str) -> list[Mailbox]:
        return self.mailboxes.list(user)

    def mailboxes_by_id(self, user: str, mailbox_ids: Sequence[bytes]) -> dict[bytes, Mailbox]:
        """Those of ``mailbox_ids`` that are live mailboxes of ``user``, with their counters as
        they stand, in one multi-get (NOTIFY's STATUS responses, RFC 5465 5.2)."""
        return {mid: m for mid, m in self.mailboxes.load_many(list(mailbox_ids)).items()
                if m.owner == user}

    @durable
    def rename_mailbox(self, user: str, old: str, new: str) -> list[Mailbox]:
        """RENAME (RFC 3501 6.3.5).  Renaming INBOX moves its messages to a new mailbox and
        leaves INBOX empty, as the RFC requires."""
        renamed: list[Mailbox] = []
        try:
            renamed = self._rename_mailbox(user, old, new)
            return renamed
        finally:
            self._bump(user, NAMES_GENERATION)
            for mailbox in renamed:
                self.bump_grantees(mailbox.acl)

    def _rename_mailbox(self, user: str, old: str, new: str) -> list[Mailbox]:
        if names.normalize_mailbox(old) == "INBOX":
            inbox = self.mailbox(user, "INBOX")
            target = self.create_mailbox(user, new)
            uids = self.messages.uids(inbox.id)
            for i in range(0, len(uids), 500):
                self.transfers.move(inbox, uids[i:i + 500], target)
            return [target]
        for parent in names.parent_names(names.normalize_mailbox(new)):
            try:
                self.mailboxes.create(user, parent)
            except AlreadyExists:
                pass
        return self.mailboxes.rename(user, old, new)

    @durable
    def delete_mailbox(self, user: str, name: str) -> None:
        """DELETE (RFC 3501 6.3.4): the mailbox, every message in it, their content references.

        INBOX cannot be deleted.  Children stay (the caller decides about \\Noselect).
        """
        mailbox = self.mailboxes.get(user, name)
        if mailbox.name == "INBOX":
            raise InvalidName("INBOX cannot be deleted")
        try:
            self._delete_mailbox(mailbox)
        finally:
            self._bump(user, NAMES_GENERATION)
            self.bump_grantees(mailbox.acl)

    def _delete_mailbox(self, mailbox: Mailbox) -> None:
        # Operations on it that died are finished first (a copy into it holds references
        # its rows do not yet), while it is still live to them.
        if self.transfers.pending(mailbox.id):
            self.transfers.recover(mailbox.id)
        # Invisible first, then the messages, then the row: a crash leaves a 'deleting' row
        # that fsck finishes off, never messages without a mailbox.
        self.mailboxes.mark_deleting(mailbox)
        self.grants.forget(mailbox.id, mailbox.acl)
        purge_mailbox_messages(self, mailbox)
        for key, _op, _at in self.transfers.pending(mailbox.id):
            self.transfers.intents.delete(key)
        self._drop_import_records(mailbox.id)
        self.metadata.drop_mailbox(mailbox.id)  # RFC 5464 3.1: annotations go with it
        self.urlauth.drop(mailbox.owner, mailbox.id)
        self.changes.drop(mailbox.id)
        self.indexes.forget(mailbox.id)
        self.text.drop(mailbox.id)
        self.mailboxes.remove_row(mailbox.id)

    def _drop_import_records(self, mailbox_id: bytes) -> None:
        """Forget what was imported into a mailbox (one bounded prefix scan)."""
        delete_rows(self.backend.table(IMPORTS.name), prefix=mailbox_id, columns=[b"i"])

    @durable
    def subscribe(self, user: str, name: str) -> None:
        self.mailboxes.subscribe(user, name)
        self._bump(user, SUBSCRIPTIONS_GENERATION)

    @durable
    def unsubscribe(self, user: str, name: str) -> None:
        self.mailboxes.unsubscribe(user, name)
        self._bump(user, SUBSCRIPTIONS_GENERATION)

    def note_metadata_change(self, user: str) -> None:
        """Tell NOTIFY sessions that ``user``'s mailbox or server metadata changed (RFC 5465
        5.8, 5.9): for the METADATA commands to call after each change they make."""
        self._bump(user, METADATA_GENERATION)

    def generations(self, users: list[str]) -> dict[str, tuple[int, int, int]]:
        """Where each user's mailbox list, subscriptions and metadata stand: (names,
        subscriptions, metadata) change generations, each moved on after every change of
        its kind, in one round trip for all of them (NOTIFY's poller, decision 0021)."""
        # "anyone" is reserved as a user name (users.py), so its row holds the generations of
        # changes that concern every user (a grant to anyone, the server's shared entries);
        # each user's are the sums, which move whenever either part does.
        found = self.users.generations([*users, ANYONE])
        everyone = found.pop(ANYONE, (0, 0, 0))
        return {user: tuple(a + b for a, b in zip(mine, everyone, strict=True))
                for user, mine in found.items()}

    def note_server_metadata_change(self) -> None:
        """Tell every user's NOTIFY sessions that the server's shared annotations changed
        (RFC 5465 5.8 ServerMetadataChange; RFC 5464 3.2: /shared server entries are seen by
        all): for ``mailadmin metadata set|unset`` and SETMETADATA of a server entry."""
        self._bump(ANYONE, METADATA_GENERATION)

    def subscriptions(self, user: str) -> list[str]:
        return self.mailboxes.subscriptions(user)

    # -- annotations (RFC 5464 METADATA; mailstore/metadata.py, docs/decisions/0019) -------------

    def get_metadata(self, user: str, mailbox: str | None, entries: Sequence[str],
                     depth: int | None = 0, policy: Policy = DEFAULT_POLICY
                     ) -> tuple[str | None, list[tuple[str, bytes | None]]]:
        """GETMETADATA (RFC 5464 4.2): ``entries`` (checked names, metadata.entry_name) of
        the mailbox ``user`` calls ``mailbox`` (None: the server) and their descendants
        within ``depth`` levels (None: all).  Returns the mailbox's name as the user sees it
        and ``(entry, value)`` pairs, value None for a requested entry without one.

        Another user's mailbox needs ``l`` and one of ``r s w i p`` (RFC 5464 3.3): NotFound
        without ``l`` (as a mailbox that does not exist, RFC 4314 6), PermissionDenied
        without the others (sharing.open_mailbox)."""
        if mailbox is None:
            return None, self.annotations.get_on(user, None, entries, depth, policy)
        box = self._annotated(user, mailbox)
        return (public_name(user, box.owner, box.name),
                self.annotations.get_on(user, box, entries, depth, policy))

    def _annotated(self, user: str, imap_name: str) -> Mailbox:
        return open_mailbox(self, user, imap_name, "l", METADATA_RIGHTS)[0]

    @durable
    def set_metadata(self, user: str, mailbox: str | None,
                     changes: Sequence[tuple[str, bytes | None]], policy: Policy = DEFAULT_POLICY
                     ) -> bool:
        """SETMETADATA (RFC 5464 4.3): set each ``(entry, value)``, or remove it for None, on
        the mailbox ``user`` calls ``mailbox`` (None: the server), all or none, with the
        rights :meth:`get_metadata` needs.  When something changed, the change generation of
        everyone who may see it moves on (NOTIFY's MailboxMetadataChange and
        ServerMetadataChange, RFC 5465 5.6, 5.7): the user's, and for a mailbox's shared
        entries its owner's.  True if something changed.  Raises the errors of
        metadata.Annotations.set_on, NotFound and PermissionDenied."""
        box = None if mailbox is None else self._annotated(user, mailbox)
        changed = self.annotations.set_on(user, box, changes, policy)
        if changed:
            self._bump(user, METADATA_GENERATION)
            if box is None and any(not n.startswith("/private/") for n, _ in changes):
                self.note_server_metadata_change()
            if box is not None and any(not n.startswith("/private/") for n, _ in changes):
                # Shared entries: everyone who may see the mailbox sees them.
                if box.owner != user:
                    self._bump(box.owner, METADATA_GENERATION)
                self.bump_grantees({k: v for k, v in box.acl.items() if k != user},
                                   METADATA_GENERATION)
        return changed

    def metadata_digest(self, user: str) -> dict[tuple[str, str], bytes]:
        """Every annotation ``user`` sees on the server and on the mailboxes they may read
        annotations of (their own; others' by the names they see them by), as
        ``{(mailbox name, or "" for the server, entry name): digest of the value}`` (one
        multi-get): what NOTIFY compares to tell which entries changed (RFC 5465 5.6, 5.7;
        RFC 5464 4.4.2).  ``/private/specialuse`` is the mailbox row's and is included."""
        boxes = [m for m, rights in visible_mailboxes(self, user)
                 if rights & set(METADATA_RIGHTS)]  # RFC 5464 3.3: l (listed) and one of these
        found = self.metadata.read_many([None, *(m.id for m in boxes)], user)
        out: dict[tuple[str, str], bytes] = {}
        for mailbox_id, name in [(None, ""), *((m.id, m.name) for m in boxes)]:
            for entry, digest in digests(found.get(mailbox_id, {})).items():
                out[(name, entry)] = digest
        for m in boxes:
            if m.special_use and m.owner == user:
                out[(m.name, SPECIALUSE)] = digests({"": m.special_use.encode()})[""]
        return out

    def metadata_digests(self, user: str, mailbox_id: bytes | None) -> dict[str, bytes]:
        """What ``user`` sees on a mailbox (None: the server) as entry name -> digest of the
        value, stored entries only: two of them, before and after a change that
        :meth:`metadata_marks` signalled, give the entries that changed
        (metadata.changed_entries) for NOTIFY's unsolicited METADATA (RFC 5464 4.4.2)."""
        return digests(self.metadata.read(mailbox_id, user))

    def metadata_marks(self, user: str, mailbox_ids: Sequence[bytes | None]
                       ) -> dict[bytes | None, int]:
        """A number per mailbox (None: the server) that moves whenever an annotation
        ``user`` can see there changes, in any process: what NOTIFY's MailboxMetadataChange
        (RFC 5465 5.4) polls for, one multi-get for all of them."""
        return self.metadata.marks(mailbox_ids, user)

    # -- messages -------------------------------------------------------------------------------

    def ingest(self, source, refs: int = 1) -> StoredContent:
        """Store content once for ``refs`` future message rows (see :meth:`add_stored`)."""
        return self.messages.ingest(source, refs, self.max_message_size)

    def ingestion(self) -> Ingestion:
        """:meth:`ingest` of one message a piece at a time, as it arrives (an APPEND literal
        streamed from the socket): feed, then finish, whose StoredContent :meth:`append`
        takes as its source; or abort.  TooLarge past ``max_message_size``."""
        return self.messages.ingestion(1, self.max_message_size)

    def discard_ingested(self, stored: StoredContent) -> None:
        """Remove the content of a finished :meth:`ingestion` that no message took (its
        APPEND was refused, or its client went): nothing ever referred to it."""
        self.content.discard(stored.content_id)

    @durable
    def append(self, user: str, mailbox_name: str | Mailbox, source, flags: Iterable[str] = (),
               internal_date: float | None = None) -> tuple[int, int]:
        """APPEND (RFC 3501 6.3.11): store a message; return (UIDVALIDITY, UID).

        ``mailbox_name`` is a name of ``user``'s, or a Mailbox of theirs already looked up (an
        IMAP session has it: two reads saved per APPEND).  ``source`` is bytes or a binary
        file, read in chunks: a large message never sits in memory whole, or the
        StoredContent of a finished :meth:`ingestion` (whose reference this call then owns,
        whatever it raises).  Raises NotFound, TooLarge, OverQuota or BackendUnavailable with
        nothing left behind -- except errors.Unpublished, whose message stays (it becomes
        visible later).
        """
        size = known_size(source)
        if size is not None and size > self.max_message_size:
            raise TooLarge(f"message larger than {self.max_message_size} bytes")
        with self.unit_of_work(size):
            return self._append(user, mailbox_name, source, size, flags, internal_date)

    def unit_of_work(self, size: int | None):
        """One message's writes as one unit where the backend makes that cheaper (one
        transaction on the embedded store, Backend.grouped), if the message is known to fit
        in one chunk: a streamed one would hold the write lock while its source is read."""
        if size is None or size > self.content.chunk_size:
            return contextlib.nullcontext()
        return self.backend.grouped()

    def _append(self, user: str, mailbox_name: str | Mailbox, source, size: int | None,
                flags: Iterable[str], internal_date: float | None,
                credit: tuple[int, int] = (0, 0)) -> tuple[int, int]:
        """``credit``: (bytes, messages) the caller frees right after (REPLACE's message),
        not counted against the quota."""
        credit_bytes, credit_messages = credit
        if isinstance(mailbox_name, Mailbox):
            # Another user's mailbox too, once the caller has checked the ACL (sharing.py):
            # the message is stored once, in the owner's mailbox, on the owner's quota.
            mailbox = mailbox_name
        else:
            try:
                mailbox = self.mailboxes.get(user, mailbox_name)
            except BaseException:
                if isinstance(source, StoredContent):  # ours now, and nothing refers to it
                    self.content.discard(source.content_id)
                raise
        user = mailbox.owner
        if isinstance(source, StoredContent):
            stored = source  # ingested as it arrived: the quota is checked below, after
        elif size is not None and size <= self.content.chunk_size:
            stored = self._prepare(mailbox, source, size, credit)
        else:
            # Checked first: content of more than a chunk is not written just to be refused.
            self.check_quota(user, (size or 0) - credit_bytes, 1 - credit_messages)
            stored = self.ingest(source)
        if size is None:
            try:
                self.check_quota(user, stored.size - credit_bytes, 1 - credit_messages)
            except BaseException:
                # No row refers to the content yet: no reader can have reached it, so it
                # goes at once rather than after a grace period (decision 0011).
                self.content.discard(stored.content_id)
                raise
        try:
            uid = self.add_stored(mailbox, stored, flags, internal_date)
        except Unpublished:
            raise  # the message row holds the content's reference (or settles it later)
        except BaseException:
            # Exactly once even if the store fails again here (issue 16): owed till it answers.
            self.content.give_back(stored.content_id)
            raise
        return mailbox.uidvalidity, uid

    def _prepare(self, mailbox: Mailbox, source, size: int,
                 credit: tuple[int, int]) -> StoredContent:
        """The first steps of an APPEND of known ``size`` (at most a chunk), at the same
        time where the backend can: read the owner's account (for the quota) and write the
        content.  Neither depends on the other, and neither makes anything visible: nothing
        refers to the content until the message row is committed (decision 0001).  The UID,
        MODSEQ and counts are taken after, by Messages.add: the count and the row's counted
        marker go in one call, which is what keeps the counters exact after a kill (decision
        0004), so they cannot be taken beside the content.  A refusal (over quota, or a
        failure) deletes the content at once (no row ever referred to it)."""
        got: dict[str, object] = {}

        def account() -> None:
            if mailbox.owner != SHARED_OWNER:  # Shared/'s owner has no account, no limits
                got["account"] = self.users.get(mailbox.owner)

        def ingest() -> None:
            got["stored"] = self.ingest(source)
        try:
            self.backend.concurrently(account, ingest)
            owner = got.get("account")
            if isinstance(owner, User) and (owner.storage_limit is not None
                                            or owner.message_limit is not None):
                check_quota(owner, self.usage(owner.name), size - credit[0], 1 - credit[1])
        except BaseException:
            stored = got.get("stored")
            if isinstance(stored, StoredContent):
                self.content.discard(stored.content_id)
            raise
        return got["stored"]  # type: ignore[return-value]

    def add_stored(self, mailbox: Mailbox, stored: StoredContent, flags: Iterable[str] = (),
                   internal_date: float | None = None) -> int:
        """Add a message row for content already ingested (one of its references); its UID."""
        uid, _modseq = self.messages.add(mailbox, stored, flags, internal_date)
        # In the append's unit of work (one SQLite transaction on the embedded store), after
        # the commit record: a crash in between leaves the message unmarked, so scanned.
        if self.text.at_append:
            self.text.add(mailbox.id, uid, lambda: self.text.docs_of_stored(stored))
        if uid % CHECKPOINT_EVERY == 0:
            # Keep the index checkpoint near, so that the first SELECT of a mailbox filled
            # only by delivery does not read every row (docs/decisions/0009).  Derived data:
            # the message is stored whatever happens here, and the next multiple retries.
            # It reads up to a thousand rows: not while holding other writers up.
            self.backend.flush_group()
            try:
                self.indexes.refresh_checkpoint(mailbox)
            except Exception:
                pass
        return uid

    @durable
    def deliver(self, recipients: Sequence[tuple[str, str]], source,
                flags: Sequence[Iterable[str]] | None = None) -> list[Delivery]:
        """Deliver one message to several (user, mailbox) pairs, storing its content once.

        Each recipient gets their own row, flags and UID; a recipient that fails (no such
        mailbox, over quota) is reported in its Delivery and gives its reference back.
        ``flags``, if given, holds the flags of each recipient's row, in the same order
        (Sieve's imap4flags, RFC 5232).
        """
        with self.unit_of_work(known_size(source)):
            return self._deliver(recipients, source, flags)

    def _deliver(self, recipients: Sequence[tuple[str, str]], source,
                 flags: Sequence[Iterable[str]] | None = None) -> list[Delivery]:
        return deliver_all(self, recipients, source, flags)

    def uids(self, mailbox: Mailbox) -> list[int]:
        return self.messages.uids(mailbox.id)

    def scan(self, mailbox: Mailbox, low_uid: int = 1, high_uid: int | None = None,
             columns: list[bytes] | None = SUMMARY) -> Iterator[MessageView]:
        """Visible messages with UIDs in [low_uid, high_uid], ascending: one bounded scan
        (cheaper than ``fetch`` by UID list when most of a range is wanted)."""
        return self.messages.scan(mailbox.id, low_uid, high_uid, columns, batch_size=5000)

    def uid_flags(self, mailbox: Mailbox, high_uid: int) -> Iterator[tuple[int, Flags]]:
        """(UID, flags) of every visible message up to ``high_uid``, ascending, decoding
        nothing else (SEARCH on flags, and a session whose change log was trimmed)."""
        return self.messages.uid_flags(mailbox.id, high_uid)

    def sort_keys(self, mailbox: Mailbox, uids: Sequence[int],
                  present: Sequence[int] | None = None) -> dict[int, MessageKeys]:
        """The SORT/THREAD keys (RFC 5256; :mod:`mailstore.sortkeys`) of the messages among
        ``uids`` (ascending) that still exist, by UID.  Kept per process: only UIDs this
        process has not read before cost a row read (:mod:`mailstore.sortcache`).
        ``present``: every UID of the mailbox the caller knows of (lets the cache forget
        expunged ones)."""
        return self.sort_cache.keys(mailbox.id, uids, present)

    def marks(self, mailbox_ids: Sequence[bytes]) -> dict[bytes, Marks]:
        """Where each mailbox stands, in one round trip: a new message moves its UID watermark,
        a flag change or expunge its change-log watermark (docs/decisions/0009)."""
        return self.indexes.marks(mailbox_ids)

    def open_index(self, mailbox: Mailbox) -> MailboxIndex:
        """The mailbox's UID list, unseen and \\Deleted UIDs and keywords as of now, without
        reading every message row (from this process's cache or the stored checkpoint, brought
        up to date by the change log).  The caller owns the copy it gets."""
        return self.indexes.open(mailbox)

    def changes_since(self, mailbox: Mailbox, since: Marks) -> Delta | None:
        """New messages, changed flags and vanished UIDs since ``since``; None if the change log
        no longer reaches back that far (the caller then rereads, e.g. with open_index)."""
        return self.indexes.delta(mailbox, since)

    # -- MODSEQs (RFC 7162; docs/decisions/0014-modseq-and-vanished.md) ----------------------

    def highest_modseq(self, mailbox: Mailbox, marks: Marks | None = None,
                       keep: bool = False) -> int:
        """HIGHESTMODSEQ for a view of ``mailbox`` at ``marks`` (by default as it stands now):
        no change with a MODSEQ at or below it is still to appear (RFC 7162 3.1.2.1).
        ``keep``: it goes to a client; remember it for other processes (modseqs.py)."""
        if marks is None:
            marks = self.indexes.marks([mailbox.id]).get(mailbox.id, Marks(0, 0, 0))
        return self.indexes.highest_modseq(mailbox.id, marks, keep)

    def since_modseq(self, mailbox: Mailbox, modseq: int, view: MailboxIndex) -> SinceModseq:
        """Flag changes of the messages in ``view`` after ``modseq``, and the UIDs expunged
        after it (a superset; None past the change log's reach): CHANGEDSINCE, VANISHED and
        QRESYNC's SELECT (RFC 7162 3.1.4.1, 3.2.5, 3.2.6)."""
        return since_modseq(self.indexes, mailbox, modseq, view)

    # -- \Recent (RFC 3501 2.3.2; docs/decisions/0010-recent.md) -------------------------------

    def claim_recent(self, mailbox: Mailbox, up_to_uid: int, guess: int | None = None
                     ) -> tuple[int, int]:
        """Make the not yet claimed UIDs up to ``up_to_uid`` recent to the caller alone.

        Returns ``(low, high)``: the UIDs with ``low < uid <= high`` are the caller's recent
        messages, and no other caller -- in this process or any other sharing the store -- gets
        any of them; ``low == high`` when someone else was first.  ``up_to_uid`` must not
        exceed the UID watermark the caller has read (a UID not yet visible to it would be
        claimed unseen).  ``guess`` is the watermark as the caller last saw it (by default as
        ``mailbox`` was read): one check-and-put when right.  A read-write SELECT and each
        refresh of a read-write session claim; EXAMINE never does (RFC 3501 6.3.2).
        """
        return self.mailboxes.claim_recent(
            mailbox.id, up_to_uid, mailbox.recent_uid if guess is None else guess)

    def recent_watermark(self, mailbox: Mailbox) -> int:
        """The highest UID claimed as \\Recent so far (one get)."""
        return self.mailboxes.recent_watermark(mailbox.id)

    def unclaimed_recent(self, mailbox: Mailbox, above: int = 0) -> int:
        """How many visible messages of ``mailbox`` (as read) no session has claimed as
        \\Recent yet, counting only UIDs above ``above``: STATUS RECENT (RFC 3501 6.3.10).

        A bounded scan of the unclaimed UIDs alone, which are few once anyone has selected
        the mailbox; a mailbox nobody ever claimed in has every message unclaimed, and then
        the message counter answers without a scan.
        """
        low = max(mailbox.recent_uid, above)
        if low >= mailbox.visible_uid:
            return 0
        if low == 0:
            return mailbox.messages
        return sum(1 for _ in self.messages.uid_flags(mailbox.id, mailbox.visible_uid, low + 1))

    def newest(self, mailbox: Mailbox, count: int = 25) -> list[MessageView]:
        return self.messages.newest(mailbox.id, count)

    def fetch(self, mailbox: Mailbox, uids: Iterable[int],
              columns: list[bytes] | None = SUMMARY) -> list[MessageView]:
        return self.messages.get(mailbox.id, uids, columns)

    def text_candidates(self, mailbox: Mailbox, queries, uids: list[int]) -> dict:
        """SEARCH's text index lookup (:meth:`.textindex.TextSearch.candidates`): for each
        ``key -> (documents, case-folded needle)``, the UIDs of ``uids`` that may match;
        keys the index cannot narrow are left out (the caller scans for them)."""
        return self.text.candidates(mailbox.id, queries, uids)

    def open_message(self, view: MessageView) -> io.RawIOBase:
        return self.messages.open_body(view)

    def preview(self, mailbox: Mailbox, view: MessageView) -> str:
        """The RFC 8970 preview of a message of ``mailbox``: the one stored with it, or for a
        message stored before previews were kept, computed from its content now (one read of
        its first text part) and stored for next time (see :mod:`mailstore.preview`)."""
        return self.messages.preview(mailbox.id, view)

    def read_message(self, view: MessageView) -> bytes:
        return self.messages.open_body(view).read()

    def sweep_released(self) -> int:
        """Delete content whose grace period after its last expunge is over (a batch of it);
        return how many release records were handled.  Releases sweep as they go; this is for
        a store gone quiet (the IMAP server calls it now and then).  Once an hour it also
        frees the files of large values no content refers to (decision 0028)."""
        handled = self.content.sweep()
        self.content.reclaim_now_and_then()
        return handled

    def store_flags(self, mailbox: Mailbox, uids: Iterable[int], flags: Iterable[str],
                    mode: str = "add", unchanged_since: int | None = None,
                    rights: frozenset[str] | None = None):
        """STORE (RFC 3501 6.4.6).  Not fsynced, as Dovecot's default fsync_mode does not sync
        flag changes: they survive a crash of the process, and a power cut may lose the last
        ones, never a message.  Logged in the change log, so other sessions learn of it.
        ``rights``: the caller's ACL rights on the mailbox (RFC 4314 4), if not all: flags it
        may not change keep their state (acl.flag_changeable)."""
        if mode not in ("add", "remove", "replace"):
            raise ValueError(f"bad flag mode {mode}")
        wanted = canonical_flags(flags)
        changeable = flag_changeable(rights)
        uids = list(uids)
        changed: list[tuple[int, Flags]] = []
        failed: list[int] = []
        # In batches, each logged on its own: a long STORE 1:* is never one pending entry that
        # readers settle (abandon_after) long before it ends.  Only the messages whose flags
        # this changes are logged and written; the others are a no-op as of this read, and
        # other sessions hear nothing of them.
        for i in range(0, len(uids), FLAG_BATCH):
            views = self.messages.get(mailbox.id, uids[i:i + FLAG_BATCH], SUMMARY)
            moving = []
            for view in views:
                if unchanged_since is not None and view.flags.modseq > unchanged_since:
                    failed.append(view.uid)
                elif flag_target(mode, wanted, view.flags.names, changeable) \
                        != view.flags.names:
                    moving.append(view)
            if not moving:
                continue
            # The batch's MODSEQs come with its change number, in one step.  Its writes (the
            # change number, the log entry opened and closed, the flag cells, the watermark)
            # are one transaction where the backend makes that cheaper (Backend.grouped):
            # 5 commits became 1 for a one-message STORE (bench/RESULTS.md, issue 14).  None
            # of them waits for another writer (ChangeLog.advance never waits).
            with self.backend.grouped(), \
                    self.changes.recording(mailbox.id, [v.uid for v in moving],
                                           also={MODSEQ: len(moving)}) as taken:
                top = taken[MODSEQ]
                done, missed = self.messages.store_flags(
                    mailbox, (), wanted, mode, unchanged_since, views=moving,
                    modseqs=range(top - len(moving) + 1, top + 1), journal=self.transfers,
                    changeable=changeable)
            changed += done
            failed += missed
        return changed, sorted(failed)

    @durable
    def expunge(self, mailbox: Mailbox, uids: Iterable[int],
                only_deleted: bool = False) -> list[int]:
        """Expunge ``uids`` (only those with \\Deleted, if ``only_deleted``, as read in the
        same step: EXPUNGE, CLOSE and UID EXPUNGE need not read the rows first)."""
        gone = self.transfers.expunge(mailbox, uids, only_deleted)
        self.text.forget(mailbox.id, gone)
        return gone

    @durable
    def replace(self, source: Mailbox, uid: int, target: Mailbox, message,
                flags: Iterable[str] = (), internal_date: float | None = None
                ) -> tuple[int, int]:
        """REPLACE (RFC 8508 3.4): APPEND ``message`` to ``target``, then expunge ``uid`` from
        ``source``; return the new message's (UIDVALIDITY, UID).

        Built from the two crash-safe operations, in that order (docs/decisions/0017): a crash
        between them leaves both messages (the user deletes one; nothing is lost), never
        neither.  The replaced message is credited against the quota (it goes away), so a
        draft at the quota's edge can still be saved again.  Raises Expunged (with nothing
        appended) if ``uid`` is not in ``source``, and NotFound, TooLarge, OverQuota or
        BackendUnavailable as :meth:`append` does, with ``uid`` untouched.
        """
        if source.owner != target.owner:
            raise InvalidName("a message can only be replaced within one user's mailboxes")
        old = [v for v in self.messages.get(source.id, [uid], SUMMARY)
               if state_of(v.state_raw) == COMMITTED]
        if not old:
            raise Expunged(f"message {uid} no longer exists")
        size = known_size(message)
        if size is not None and size > self.max_message_size:
            raise TooLarge(f"message larger than {self.max_message_size} bytes")
        with self.unit_of_work(size):
            validity, new_uid = self._append(target.owner, target, message, size, flags,
                                             internal_date, credit=(old[0].record.size, 1))
        gone = self.transfers.expunge(source, [uid])
        self.text.forget(source.id, gone)
        if not gone:
            # Expunged (or moved) by another session since it was read above: RFC 8508 3.4
            # has no REPLACE that only appends, so the new message goes too.  Another
            # session may have seen it come and go; the client is told NO.
            self.transfers.expunge(target, [new_uid])
            raise Expunged(f"message {uid} was expunged meanwhile")
        return validity, new_uid

    @durable
    def copy(self, source: Mailbox, uids: Iterable[int], target: Mailbox,
             rights: frozenset[str] | None = None) -> list[tuple[int, int]]:
        """COPY (RFC 3501 6.4.7).  ``rights``: the caller's ACL rights on ``target`` if not
        all: the copies lose the flags those do not let the caller set (RFC 4314 4)."""
        uids = list(uids)
        views = self.messages.get(source.id, uids, SUMMARY)
        self.check_quota(target.owner, sum(v.record.size for v in views), len(views))
        pairs = self.transfers.copy(source, uids, target)
        self._drop_unpermitted_flags(target, [new for _old, new in pairs], rights)
        self._index_copies(target, [new for _old, new in pairs])
        return pairs

    def _drop_unpermitted_flags(self, target: Mailbox, uids: list[int],
                                rights: frozenset[str] | None) -> None:
        """Remove from the new messages ``uids`` the flags ``rights`` do not let their
        writer set (a second step after the copy or move: other sessions may glimpse them
        in between, which shows nothing the messages did not already have)."""
        changeable = flag_changeable(rights)
        if changeable is None or not uids:
            return
        drop: dict[frozenset[str], list[int]] = {}
        for view in self.messages.get(target.id, uids, SUMMARY):
            unpermitted = frozenset(f for f in view.flags.names if not changeable(f))
            if unpermitted:
                drop.setdefault(unpermitted, []).append(view.uid)
        for flags, which in drop.items():
            self.store_flags(target, which, flags, "remove")

    @durable
    def move(self, source: Mailbox, uids: Iterable[int], target: Mailbox,
             rights: frozenset[str] | None = None) -> list[tuple[int, int]]:
        """MOVE (RFC 6851); ``rights`` as for :meth:`copy`."""
        uids = list(uids)
        if source.owner != target.owner:
            # Into a shared mailbox (the caller checked the ACL): the owner's quota takes it.
            views = self.messages.get(source.id, uids, SUMMARY)
            self.check_quota(target.owner, sum(v.record.size for v in views), len(views))
        pairs = self.transfers.move(source, uids, target)
        self._drop_unpermitted_flags(target, [new for _old, new in pairs], rights)
        self._index_copies(target, [new for _old, new in pairs])
        self.text.forget(source.id, [old for old, _new in pairs])
        return pairs

    def _index_copies(self, target: Mailbox, uids: list[int]) -> None:
        """Index the messages ``uids`` a COPY or MOVE (or its roll forward) gave ``target``
        (read back from their content: the same octets give the same documents), or queue
        them for the background indexer.  Never raises; UIDs without a message are passed
        over."""
        self.text.queue_copies(target.id, uids)
        if not self.text.at_append or not uids:
            return
        try:
            views = self.messages.get(target.id, uids, [*SUMMARY, HEADER, BODY])
        except Exception:  # noqa: BLE001 - left unindexed: scanned, and fsck reports them
            return
        for view in views:
            self.text.add(target.id, view.uid, functools.partial(self.text.docs_of_view, view))

    # -- administration (mailadmin) --------------------------------------------------------------

    # -- URLAUTH (RFC 4467) -------------------------------------------------------------------

    def urlauth_key(self, user: str, mailbox: Mailbox, create: bool = False) -> bytes | None:
        """``user``'s URLAUTH access key for ``mailbox`` (RFC 4467 3.2): made now with
        ``create`` (GENURLAUTH), else None when there is none (URLFETCH: the URL is dead)."""
        if create:
            key = self.urlauth.get_or_create(user, mailbox.id)
            self.backend.sync()
            return key
        return self.urlauth.get(user, mailbox.id)

    @durable
    def reset_urlauth_keys(self, user: str, mailbox_name: str | None = None) -> None:
        """RESETKEY (RFC 4467 7.1): a new key for the mailbox ``user`` calls ``mailbox_name``
        (another user's too: ``user``'s own key for it), or with None no key for any mailbox;
        either way every URL made before is revoked.  Needs ``r`` (what GENURLAUTH needs,
        RFC 4314 4): NotFound for a mailbox missing or hidden, PermissionDenied for one seen
        without ``r``."""
        if mailbox_name is None:
            self.urlauth.reset_all(user)
        else:
            mailbox, _ = open_mailbox(self, user, mailbox_name, "r")
            self.urlauth.reset(user, mailbox.id)

    @durable
    def set_password(self, user: str, password: str) -> None:
        """Replace ``user``'s password.  Raises NotFound."""
        self.users.set_password(user, password)

    @durable
    def set_quota(self, user: str, storage: int | None, messages: int | None) -> None:
        """Set ``user``'s limits: bytes stored and number of messages; None means unlimited."""
        self.users.set_quota(user, storage, messages)

    def importer(self, user: str, sync_every: int = 1000):
        """A bulk importer into ``user``'s mailboxes (see :mod:`mailstore.imports`): idempotent,
        quota-checked, synced every ``sync_every`` messages.  Raises NotFound."""
        from .imports import Importer
        return Importer(self, user, sync_every)

    def iter_messages(self, mailbox: Mailbox, columns: list[bytes] | None = SUMMARY,
                      batch_size: int = 500) -> Iterable[MessageView]:
        """Every visible message of ``mailbox`` in ascending UID order, read ``batch_size`` rows
        at a time (memory stays flat however big the mailbox)."""
        return self.messages.scan(mailbox.id, columns=columns, batch_size=batch_size)

    def stats(self) -> dict[str, int]:
        """Store-wide totals: users, mailboxes, messages, bytes of messages, content rows and
        their bytes, and the bytes saved by sharing content between messages.

        Message totals come from the mailbox counters (fsck keeps them true); content totals
        from one scan of the content table's info and reference cells.  Content released by
        its last expunge and waiting out its grace period (docs/decisions/0011) is no longer
        counted.
        """
        import json

        from .content import INFO, REFS
        users = self.users.list()
        mailboxes = messages = message_bytes = 0
        for account in users:
            for box in self.mailboxes.list(account.name):
                mailboxes += 1
                messages += box.messages
                message_bytes += box.size
        contents = content_bytes = 0
        for _key, row in self.content.table.scan(start=b"", stop=b"\xff" * 17,
                                                 columns=[INFO, REFS], batch_size=5000):
            if INFO not in row or decode_counter(row.get(REFS)) <= 0:
                continue
            contents += 1
            content_bytes += json.loads(row[INFO])["size"]
        return {"users": len(users), "mailboxes": mailboxes, "messages": messages,
                "message_bytes": message_bytes, "contents": contents,
                "content_bytes": content_bytes,
                "bytes_saved": message_bytes - content_bytes}


def purge_mailbox_messages(store: MailStore, mailbox: Mailbox, batch: int = 500) -> int:
    """Delete every message row of a mailbox, whatever its state; drop content references.

    Used by mailbox deletion and by fsck to finish a deletion that crashed.
    """
    table = store.messages.table
    start, stop = keys.message_range(mailbox.id)
    removed = 0
    while True:
        rows = list(table.scan(start=start, stop=stop, columns=SUMMARY, limit=batch))
        if not rows:
            return removed
        table.mutate_rows([Mutation(k, delete_row=True) for k, _ in rows])
        count = 0
        refs: Counter[bytes] = Counter()
        for _key, row in rows:
            raw = row.get(b"m:s")
            if state_of(raw) in (COMMITTED, MOVING, DELETING):
                record = MessageRecord.decode(raw)
                count += 1
                # A row mid-move keeps its reference for the target copy.
                if state_of(raw) != MOVING:
                    refs[record.content] += 1
        store.content.decref_many(refs)
        removed += count
