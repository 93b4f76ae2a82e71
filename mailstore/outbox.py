"""The outgoing queue: mail the server sends itself, kept in the store until a relay takes it.

Sieve's ``redirect`` and ``vacation`` (RFC 5228 4.2, RFC 5230), reject notices (RFC 5429) and
the bounces of this queue (RFC 3464) are *enqueued* here at delivery, inside the delivery's
durability guarantee: :meth:`Outbox.enqueue` returns only once the entry would survive a crash,
so the 2xx the delivery then gives promises the outgoing mail as well.  The sender
(``imapserver/delivery/relay.py``) drains the queue over SMTP.  Layout and reasoning:
docs/decisions/0024-outgoing-queue.md.

One row of ``JAMES_OUTBOX`` per entry, keyed by a time-ordered 16-byte id (listing is oldest
first).  The message bytes live *in the entry's row*, in chunks ``c:1 .. c:n`` of the store's
chunk size, not in ``JAMES_CONTENT``: an entry is never shared, lives minutes, and is removed
whole with its row; content rows are reference-counted against message rows, and fsck would
free one that only the queue referred to.  ``q:e`` is the envelope (written once, with the last
chunk), ``q:s`` the entry's state, changed only by check-and-put on that one cell: a claim, an
attempt's results, a retry by the operator.  So N processes draining one store never hold the
same entry at once, and a sender that dies holding one loses its claim when the lease ends.

SMTP cannot hand a message over exactly once (RFC 5321 6.1: a connection lost after the
final ``.`` leaves the sender unsure); this queue is at-least-once.  The window for a
duplicate is between the relay's 250 and :meth:`Outbox.record` landing, or a lease that ran
out during a slow transaction; outside it an entry is sent once, and never lost.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from . import dsn, keys
from .backends.base import Table, decode_counter, encode_counter
from .errors import InvalidAddress, TooLarge

ENVELOPE = b"q:e"
STATE = b"q:s"
STARTED = b"q:t"
UNFINISHED_AGE = 3600.0
"""Seconds after which a row with chunks but no state (an enqueue cut off by a crash: its
caller got an error, not a 2xx) is removed by :meth:`Outbox.sweep`."""


def chunk_column(index: int) -> bytes:
    return b"c:%d" % index


@dataclass(frozen=True)
class RetryPolicy:
    """When to try again and when to give up (``[delivery] relay_*`` settings).

    The n-th failed attempt waits ``min(backoff_max, backoff_base * 2**(n-1))`` seconds, times a
    random factor in ``[1 - jitter, 1 + jitter]`` so that entries deferred together (a relay
    outage) do not all come back in the same second.  An entry still undelivered after
    ``max_attempts`` attempts or ``max_age`` seconds is bounced (RFC 5321 4.5.4.1 suggests
    giving up after 4-5 days).  ``lease`` is how long a claim holds: longer than one SMTP
    transaction can take (the relay's timeouts bound it)."""

    backoff_base: float = 60.0
    backoff_max: float = 3600.0
    jitter: float = 0.2
    max_attempts: int = 30
    max_age: float = 5 * 86400.0
    lease: float = 600.0

    def delay(self, attempts: int, rng: random.Random) -> float:
        base = min(self.backoff_max, self.backoff_base * 2 ** max(0, attempts - 1))
        return base * rng.uniform(1 - self.jitter, 1 + self.jitter)


@dataclass
class Entry:
    """One queued message: its envelope and its state as read (``raw`` is the state cell, the
    expected value of the entry's next check-and-put)."""

    id: str
    mail_from: str
    rcpt_tos: list[str]
    reason: str
    created: float
    size: int
    chunks: int
    pending: list[str]
    sent: list[str] = field(default_factory=list)
    failed: dict[str, list] = field(default_factory=dict)
    """Recipients refused for good: address -> [reply code, reply text]."""
    attempts: int = 0
    next_attempt: float = 0.0
    last_error: str = ""
    lease_owner: str | None = None
    lease_until: float = 0.0
    done: bool = False
    held: bool = False
    """Queued by a delivery not yet answered (``enqueue(hold=True)``): nobody sends it
    until :meth:`Outbox.release`; :meth:`Outbox.delete` drops it if the delivery is
    withdrawn."""
    raw: bytes = b""

    def claimed(self, now: float) -> bool:
        """Whether a sender holds a live claim on it."""
        return self.lease_owner is not None and self.lease_until > now

    def as_dict(self) -> dict:
        return {"id": self.id, "from": self.mail_from, "to": self.rcpt_tos,
                "reason": self.reason, "created": self.created, "size": self.size,
                "pending": self.pending, "sent": self.sent, "failed": self.failed,
                "attempts": self.attempts, "next_attempt": self.next_attempt,
                "last_error": self.last_error, "claimed_by": self.lease_owner,
                "claimed_until": self.lease_until, "held": self.held}


def _state(entry: Entry) -> bytes:
    state = {"p": entry.pending, "ok": entry.sent, "bad": entry.failed,
             "n": entry.attempts, "next": entry.next_attempt, "err": entry.last_error,
             "lease": ([entry.lease_owner, entry.lease_until]
                       if entry.lease_owner is not None else None),
             "done": entry.done}
    if entry.held:
        state["hold"] = True
    return orjson.dumps(state)


def _entry(key: bytes, row: Mapping[bytes, bytes]) -> Entry | None:
    if STATE not in row or ENVELOPE not in row:
        return None
    env, st = orjson.loads(row[ENVELOPE]), orjson.loads(row[STATE])
    lease = st.get("lease")
    return Entry(id=key.hex(), mail_from=env["from"], rcpt_tos=env["to"], reason=env["reason"],
                 created=env["created"], size=env["size"], chunks=env["chunks"],
                 pending=st["p"], sent=st["ok"], failed=st["bad"], attempts=st["n"],
                 next_attempt=st["next"], last_error=st["err"],
                 lease_owner=lease[0] if lease else None, lease_until=lease[1] if lease else 0.0,
                 done=st["done"], held=bool(st.get("hold")), raw=row[STATE])


def check_address(address: str, *, empty_ok: bool = False) -> str:
    """An envelope address as given to SMTP ``MAIL FROM``/``RCPT TO`` (RFC 5321 4.1.2),
    without its angle brackets; raise InvalidAddress for one that could inject a command."""
    if not isinstance(address, str) or (not address and not empty_ok):
        raise InvalidAddress(f"bad envelope address: {address!r}")
    if any(c in address for c in "\r\n\x00<>") or address != address.strip():
        raise InvalidAddress(f"bad envelope address: {address!r}")
    return address


@dataclass
class Outcome:
    """What :meth:`Outbox.record` did: ``state`` is ``sent`` (every recipient accepted, the
    entry removed), ``deferred`` (some still pending, retried at ``entry.next_attempt``),
    ``bounced`` (some refused or expired; a DSN queued as ``bounce_id``), ``dropped`` (some
    refused or expired, and no DSN because the sender was null, RFC 5321 4.5.5) or ``lost``
    (the claim had run out and someone else holds the entry: nothing was written)."""

    state: str
    entry: Entry
    bounce_id: str | None = None
    failed: dict[str, list] = field(default_factory=dict)


class Outbox:
    """The queue over one table (``JAMES_OUTBOX``).  Thread-safe; every method is synchronous.

    ``chunk_size`` is the size of the message chunks in a row, ``max_message_size`` the largest
    message accepted, ``sync`` the backend's durability hook (called before enqueue returns),
    ``hostname`` the name bounces give as their Reporting-MTA (RFC 3464 2.2.2).
    """

    def __init__(self, table: Table, *, chunk_size: int, max_message_size: int,
                 clock: Callable[[], float] = time.time, sync: Callable[[], None] = lambda: None,
                 hostname: str = "localhost", policy: RetryPolicy | None = None,
                 rng: random.Random | None = None):
        self.table = table
        self.chunk_size = chunk_size
        self.max_message_size = max_message_size
        self.clock = clock
        self.hostname = hostname
        self.policy = policy or RetryPolicy()
        self._sync = sync
        self._rng = rng or random.Random()
        self._listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()

    # -- enqueue ------------------------------------------------------------------------------

    def on_enqueue(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(queue_id)`` after each enqueue made through this object (the sender
        of the same process wakes up at once instead of at its next poll)."""
        with self._lock:
            self._listeners.append(callback)

    def enqueue(self, mail_from: str, rcpt_tos: Sequence[str], message: bytes,
                reason: str, *, hold: bool = False) -> str:
        """Queue ``message`` for ``rcpt_tos`` with envelope sender ``mail_from`` ('' for the
        null sender of bounces and auto-replies, RFC 5321 4.5.5); return its queue id (32 hex
        digits).  Durable when it returns.  ``reason`` says why (``redirect``, ``vacation``,
        ``reject``, ``bounce``, ...), for operators.

        ``hold``: queue it held -- durable, but not sent until :meth:`release` -- for a
        delivery that may still be withdrawn (SMTP's all-or-nothing reply, a later enqueue
        of the same recipient failing): it then deletes the entry (:meth:`delete`), and the
        sender's retry queues it again, once.  A held entry whose delivery never came back
        (a crash before the answer; the client retries) is dropped by :meth:`sweep` after
        ``UNFINISHED_AGE``.

        Raises InvalidAddress for an address with CR, LF, NUL or angle brackets, or no
        recipient; TooLarge above the store's message size limit; BackendUnavailable."""
        qid = self._write(keys.new_ordered_id(), mail_from, rcpt_tos, message, reason,
                          held=hold)
        self._sync()
        if not hold:
            self._notify(qid)
        return qid

    def release(self, qid: str) -> bool:
        """Let a held entry go (its delivery was answered 2xx): due now, the sender woken.
        False if there is no such entry."""
        for _ in range(10):
            entry = self.get(qid)
            if entry is None:
                return False
            if not entry.held:
                return True
            entry.held = False
            entry.next_attempt = self.clock()
            if self._swap(entry) is not None:
                self._sync()
                self._notify(qid)
                return True
        return False

    def _write(self, row: bytes, mail_from: str, rcpt_tos: Sequence[str], message: bytes,
               reason: str, held: bool = False) -> str:
        check_address(mail_from, empty_ok=True)
        rcpts = list(dict.fromkeys(check_address(r) for r in rcpt_tos))
        if not rcpts:
            raise InvalidAddress("no recipient")
        if len(message) > self.max_message_size:
            raise TooLarge(f"message of {len(message)} bytes exceeds "
                           f"{self.max_message_size}")
        data = bytes(message)
        pieces = [data[i:i + self.chunk_size] for i in range(0, len(data), self.chunk_size)]
        now = self.clock()
        # Every chunk but the last goes first, one put each (an HBase cell, a Thrift call, is
        # bounded); the last goes with the envelope and the state, whose presence is what
        # makes the entry exist.  A crash in between leaves chunks nobody lists (sweep).
        for index, piece in enumerate(pieces[:-1], start=1):
            cells = {chunk_column(index): piece}
            if index == 1:
                cells[STARTED] = encode_counter(int(now))
            self.table.put(row, cells)
        entry = Entry(id=row.hex(), mail_from=mail_from, rcpt_tos=rcpts, reason=str(reason),
                      created=now, size=len(data), chunks=len(pieces), pending=list(rcpts),
                      next_attempt=now, held=held)
        final = {ENVELOPE: orjson.dumps({"from": mail_from, "to": rcpts, "reason": entry.reason,
                                         "created": now, "size": entry.size,
                                         "chunks": entry.chunks}),
                 STATE: _state(entry), STARTED: encode_counter(int(now))}
        if pieces:
            final[chunk_column(len(pieces))] = pieces[-1]
        self.table.put(row, final)
        return entry.id

    def _notify(self, qid: str) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for callback in listeners:
            try:
                callback(qid)
            except Exception:  # noqa: S110 - a listener's failure is not the enqueuer's
                pass

    # -- reading --------------------------------------------------------------------------------

    def get(self, qid: str) -> Entry | None:
        """The entry ``qid``, or None (never queued, finished or deleted)."""
        row = _row_key(qid)
        if row is None:
            return None
        return _entry(row, self.table.row(row, [ENVELOPE, STATE]))

    def entries(self, limit: int | None = None) -> list[Entry]:
        """Every live entry, oldest first (finished ones awaiting removal are left out).

        Keys sort by the millisecond of their enqueue; within one, by the time recorded."""
        start, stop = keys.outbox_range()
        out = []
        for key, row in self.table.scan(start=start, stop=stop, columns=[ENVELOPE, STATE]):
            entry = _entry(key, row)
            if entry is not None and not entry.done:
                out.append(entry)
                if limit is not None and len(out) >= limit:
                    break
        out.sort(key=lambda e: (e.created, e.id))
        return out

    def due(self, now: float | None = None, limit: int = 100) -> list[Entry]:
        """Entries whose next attempt is due and that nobody holds, oldest first."""
        now = self.clock() if now is None else now
        return [e for e in self.entries()
                if e.next_attempt <= now and not e.held and not e.claimed(now)][:limit]

    def message(self, entry: Entry) -> bytes:
        """The queued message's bytes, exactly as enqueued."""
        row = _row_key(entry.id)
        if entry.chunks == 0:
            return b""
        cells = self.table.row(row, [chunk_column(i) for i in range(1, entry.chunks + 1)])
        data = b"".join(cells.get(chunk_column(i), b"") for i in range(1, entry.chunks + 1))
        if len(data) != entry.size:
            raise OSError(f"queue entry {entry.id} lacks chunks")
        return data

    # -- claims and results ---------------------------------------------------------------------

    def claim(self, qid: str, owner: str, *, force: bool = False) -> Entry | None:
        """Take ``qid`` for one delivery attempt: None if it is gone, not due (unless
        ``force``), or held by a live claim; else the entry, now held by ``owner`` for
        ``policy.lease`` seconds.  Atomic (check-and-put of the state cell): of several
        claimants of one entry exactly one gets it."""
        current = self.get(qid)
        now = self.clock()
        if current is None or current.done or current.held or current.claimed(now):
            return None
        if current.next_attempt > now and not force:
            return None
        current.lease_owner, current.lease_until = owner, now + self.policy.lease
        return self._swap(current)

    def _swap(self, entry: Entry) -> Entry | None:
        """Write ``entry``'s state if the cell still holds what it was read as."""
        new = _state(entry)
        if not self.table.check_and_put(_row_key(entry.id), STATE, entry.raw, STATE, new):
            return None
        entry.raw = new
        return entry

    def record(self, entry: Entry, results: Mapping[str, tuple[int, str]],
               error: str = "") -> Outcome:
        """The results of an attempt on a claimed ``entry``: ``results`` maps recipients to
        the relay's (reply code, text); a recipient not in it (the connection failed first)
        stays pending, as does a 4xx one; 2xx removes it, 5xx refuses it for good (RFC 5321
        4.2.1).  ``error`` says why the attempt stopped early.  Then: every recipient done ->
        the entry is removed, with a DSN first for refused ones; else it waits for its next
        attempt, unless it is past ``max_attempts`` or ``max_age`` (its pending recipients are
        then refused as expired, status 4.4.7)."""
        now = self.clock()
        failed_now: dict[str, list] = {}
        for rcpt in list(entry.pending):
            if rcpt not in results:
                continue
            code, text = results[rcpt]
            if 200 <= code < 300:
                entry.pending.remove(rcpt)
                entry.sent.append(rcpt)
            elif 500 <= code < 600:
                entry.pending.remove(rcpt)
                entry.failed[rcpt] = failed_now[rcpt] = [code, text]
        entry.attempts += 1
        entry.last_error = error or "; ".join(f"{r}: {results[r][0]} {results[r][1]}"
                                              for r in entry.pending if r in results)
        if entry.pending and (entry.attempts >= self.policy.max_attempts
                              or now - entry.created >= self.policy.max_age):
            why = entry.last_error or "no attempt succeeded"
            for rcpt in entry.pending:
                entry.failed[rcpt] = failed_now[rcpt] = [0, f"gave up after {entry.attempts} "
                                                         f"attempts: {why}"]
            entry.pending = []
        if entry.pending:
            entry.next_attempt = now + self.policy.delay(entry.attempts, self._rng)
            entry.lease_owner, entry.lease_until = None, 0.0
            swapped = self._swap(entry)
            return Outcome("deferred" if swapped else "lost", entry, failed=failed_now)
        return self._finish(entry, failed_now)

    def expire(self, entry: Entry) -> Outcome | None:
        """Give up on a claimed entry past its age or attempts without trying it again (no
        relay configured); None if it is neither."""
        if (entry.attempts < self.policy.max_attempts
                and self.clock() - entry.created < self.policy.max_age):
            return None
        entry.attempts -= 1  # record counts one; this was no attempt
        return self.record(entry, {}, entry.last_error or "no relay configured")

    def _finish(self, entry: Entry, failed_now: dict[str, list]) -> Outcome:
        # The done mark proves the claim still holds; only then is a bounce queued and the row
        # removed.  A crash after the mark leaves a done row, finished by sweep().
        entry.done = True
        entry.lease_owner, entry.lease_until = None, 0.0
        if self._swap(entry) is None:
            return Outcome("lost", entry, failed=failed_now)
        outcome = self._bounce(entry)
        outcome.failed = failed_now
        self.table.delete(_row_key(entry.id))
        return outcome

    def _bounce(self, entry: Entry) -> Outcome:
        if not entry.failed:
            return Outcome("sent", entry)
        if not entry.mail_from:
            return Outcome("dropped", entry)    # RFC 5321 4.5.5: never bounce a bounce
        row = _bounce_key(entry.id)
        if STATE in self.table.row(row, [STATE]):   # queued already (sweep after a crash)
            return Outcome("bounced", entry, bounce_id=row.hex())
        headers = self._headers(entry)
        message = dsn.delivery_status_notification(
            reporting_mta=self.hostname, recipient=entry.mail_from, arrival=entry.created,
            failed=[(rcpt, code, text) for rcpt, (code, text) in entry.failed.items()],
            original_headers=headers, now=self.clock())
        bounce_id = self._write(row, "", [entry.mail_from], message, "bounce")
        self._sync()
        self._notify(bounce_id)
        return Outcome("bounced", entry, bounce_id=bounce_id)

    def _headers(self, entry: Entry) -> bytes:
        """The original's header block, for the DSN's text/rfc822-headers part (RFC 6522)."""
        try:
            data = self.message(entry)
        except OSError:
            return b""
        end = data.find(b"\r\n\r\n")
        return data[:end + 2] if end >= 0 else data[:8192]

    # -- operator actions -----------------------------------------------------------------------

    def retry(self, qid: str) -> bool:
        """Make ``qid`` due now (``mailadmin queue retry``); a live claim is left alone, so
        the entry is never sent twice at once.  False if there is no such entry."""
        for _ in range(10):
            entry = self.get(qid)
            if entry is None or entry.done:
                return False
            entry.next_attempt = min(entry.next_attempt, self.clock())
            if self._swap(entry) is not None:
                self._notify(qid)
                return True
        return False

    def delete(self, qid: str) -> bool:
        """Remove ``qid`` without sending it (``mailadmin queue delete``); False if absent.
        A sender holding it finds it gone when it records its attempt."""
        row = _row_key(qid)
        if row is None or not self.table.row(row, [STATE]):
            return False
        self.table.delete(row)
        return True

    def sweep(self) -> int:
        """Finish what a crash left: entries marked done but not removed (their bounce queued
        if it was not), enqueues cut off before their state was written, and held entries
        whose delivery never released them.  Returns the
        number of rows removed."""
        start, stop = keys.outbox_range()
        now = self.clock()
        removed = 0
        for key, row in self.table.scan(start=start, stop=stop, columns=[ENVELOPE, STATE,
                                                                         STARTED]):
            entry = _entry(key, row)
            if entry is not None and entry.done:
                self._bounce(entry)
            elif entry is not None and entry.held and now - entry.created >= UNFINISHED_AGE:
                pass  # its delivery was never answered 2xx: the client sends it again
            elif entry is not None or now - decode_counter(row.get(STARTED)) < UNFINISHED_AGE:
                continue
            self.table.delete(key)
            removed += 1
        return removed


def _row_key(qid: str) -> bytes | None:
    try:
        row = bytes.fromhex(qid)
    except (ValueError, TypeError):
        return None
    return row if len(row) == keys.UUID_LEN else None


def _bounce_key(qid: str) -> bytes:
    """The bounce of entry ``qid`` has an id of its own derived from it, so queuing it again
    (sweep after a crash) finds the first one instead of making a second."""
    import hashlib
    digest = bytearray(hashlib.blake2b(bytes.fromhex(qid) + b"bounce", digest_size=16).digest())
    # Keep the time order of ids: the bounce sorts with its original.
    digest[:6] = bytes.fromhex(qid)[:6]
    return bytes(digest)
