"""The sender of the outgoing queue: hands queued mail to the configured SMTP relay.

Mail the server sends itself (Sieve ``redirect`` and ``vacation``, reject notices, bounces) is
queued durably by :class:`mailstore.outbox.Outbox` at delivery; this module drains the queue
over SMTP (RFC 5321) to ``[delivery] relay_host``, with STARTTLS (RFC 3207) and AUTH PLAIN or
LOGIN (RFC 4954) as configured.  Python's ``smtplib`` does the SMTP, in a worker thread: the
queue's store calls are synchronous too, so one thread runs claim, send and record in order,
and no new dependency (aiosmtplib) is needed for a client that sends a few messages a minute.

Who sends what: every process sends at once the entries it enqueued itself (a wake-up from
:meth:`Outbox.on_enqueue`); one process -- the only one, or worker 1 of ``--workers N`` --
also scans the queue every ``relay_poll_interval`` seconds for entries due again (deferred,
enqueued by a process that died, claimed by one that crashed).  Claims are atomic in the store
(check-and-put), so even two scanners (two machines on one HBase) never hold one entry at once.
docs/relay.md is the operator's view.
"""

from __future__ import annotations

import asyncio
import os
import smtplib
import socket
import ssl
import threading
import time
import uuid
from dataclasses import dataclass

from prometheus_client import Counter, Gauge

from mailstore.errors import BackendUnavailable
from mailstore.outbox import Entry, Outbox, RetryPolicy

from ..observe import PREFIX, Logger

log = Logger("relay")

ENQUEUED = Counter(PREFIX + "relay_enqueued_total",
                   "Messages queued for the SMTP relay by this process")
SENT = Counter(PREFIX + "relay_sent_total", "Queue entries every recipient of which the relay "
               "accepted")
DEFERRED = Counter(PREFIX + "relay_deferred_total",
                   "Delivery attempts to the relay that left recipients for a later attempt")
BOUNCED = Counter(PREFIX + "relay_bounced_total", "Queue entries given up, by what followed: "
                  "a DSN to the sender (bounced) or none for a null sender (dropped)",
                  ["outcome"])
QUEUED = Gauge(PREFIX + "relay_queue_entries",
               "Entries in the outgoing queue at the last scan (the scanning process only)")

SWEEP_EVERY = 600.0
"""Seconds between sweeps of rows a crash left (Outbox.sweep) by the scanning process."""


@dataclass(frozen=True)
class RelaySettings:
    host: str
    port: int
    starttls: str
    ca_file: str
    username: str
    password: str
    helo: str
    timeout: float
    poll_interval: float
    policy: RetryPolicy

    @classmethod
    def from_config(cls, cfg) -> RelaySettings:
        d = cfg["delivery"]
        policy = RetryPolicy(backoff_base=d["relay_backoff_base"],
                             backoff_max=d["relay_backoff_max"],
                             max_attempts=d["relay_max_attempts"], max_age=d["relay_max_age"],
                             lease=d["relay_claim_timeout"])
        if d["relay_username"] and d["relay_starttls"] == "no":
            # Every attempt would stop before AUTH (never in clear) and the queue would only
            # grow: refuse at start-up, as other settings that cannot work are refused.
            raise ValueError("[delivery] relay_username needs relay_starttls = required "
                             "(AUTH is only sent over TLS)")
        return cls(host=d["relay_host"], port=d["relay_port"], starttls=d["relay_starttls"],
                   ca_file=d["relay_ca_file"], username=d["relay_username"],
                   password=d["relay_password"], helo=d["relay_helo"] or d["hostname"],
                   timeout=d["relay_timeout"], poll_interval=d["relay_poll_interval"],
                   policy=policy)

    def tls_context(self) -> ssl.SSLContext:
        """``required``: the certificate must verify for relay_host.  ``opportunistic``:
        encryption without authentication (RFC 7435), since most relays' certificates would
        not verify and the alternative is plain text."""
        context = ssl.create_default_context(cafile=self.ca_file or None)
        if self.starttls != "required":
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


class RelayError(Exception):
    """The attempt stopped before any recipient got an answer (the entry is deferred)."""


def send(settings: RelaySettings, mail_from: str, rcpt_tos: list[str], message: bytes
         ) -> dict[str, tuple[int, str]]:
    """One SMTP transaction: the relay's (code, text) per recipient it answered (RFC 5321
    3.3); recipients missing from the result were not reached.  A refused MAIL FROM or DATA
    answers for every recipient concerned.  Raises RelayError (or OSError, smtplib's errors)
    when the attempt fails before any recipient's answer."""
    with smtplib.SMTP(settings.host, settings.port, local_hostname=settings.helo,
                      timeout=settings.timeout) as smtp:
        _ehlo(smtp)
        secure = False
        if settings.starttls != "no" and smtp.has_extn("starttls"):
            code, text = smtp.starttls(context=settings.tls_context())
            secure = True
            _ehlo(smtp)            # RFC 3207 4.2: the session starts over
        elif settings.starttls == "required":
            raise RelayError("the relay offers no STARTTLS and relay_starttls = required")
        if settings.username:
            _authenticate(smtp, settings, secure)
        options = []
        if any(not a.isascii() for a in (mail_from, *rcpt_tos)):
            if not smtp.has_extn("smtputf8"):
                return {r: (553, "5.6.7 the relay does not support SMTPUTF8 (RFC 6531)")
                        for r in rcpt_tos}
            options.append("SMTPUTF8")
        if not message.isascii() and smtp.has_extn("8bitmime"):
            options.append("BODY=8BITMIME")
        code, text = smtp.mail(mail_from, options)
        if code != 250:
            return {r: (code, _text(text)) for r in rcpt_tos}
        results = {}
        for rcpt in rcpt_tos:
            code, text = smtp.rcpt(rcpt)
            results[rcpt] = (code, _text(text))
        accepted = [r for r, (code, _) in results.items() if 200 <= code < 300]
        if not accepted:
            smtp.rset()
            return results
        try:
            code, text = smtp.data(message)
        except smtplib.SMTPDataError as exc:
            code, text = exc.smtp_code, exc.smtp_error
        for rcpt in accepted:
            results[rcpt] = (code, _text(text))
        try:
            smtp.quit()
        except (smtplib.SMTPException, OSError):
            pass   # the message was answered; a lost QUIT changes nothing
        return results


def _ehlo(smtp: smtplib.SMTP) -> None:
    code, text = smtp.ehlo()
    if code != 250:
        raise RelayError(f"EHLO refused: {code} {_text(text)}")


def _authenticate(smtp: smtplib.SMTP, settings: RelaySettings, secure: bool) -> None:
    """AUTH PLAIN, else LOGIN (RFC 4954), and only over TLS: a password is never sent in
    clear (RFC 4954 4, 14)."""
    if not secure:
        raise RelayError("relay_username is set but the session is not encrypted: "
                         "AUTH only over TLS (set relay_starttls = required)")
    offered = (smtp.esmtp_features.get("auth") or "").upper().split()
    smtp.user, smtp.password = settings.username, settings.password
    for mechanism, answer in (("PLAIN", smtp.auth_plain), ("LOGIN", smtp.auth_login)):
        if mechanism in offered:
            smtp.auth(mechanism, answer)
            return
    raise RelayError(f"the relay offers neither AUTH PLAIN nor LOGIN ({' '.join(offered)})")


def _text(text) -> str:
    return (text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)).replace(
        "\r", " ").replace("\n", " ")


class Relay:
    """Drains one store's outgoing queue on an asyncio loop; a service (``name``, ``stop``).

    ``scans``: this process also scans the queue periodically (see the module docstring)."""

    name = "relay"

    def __init__(self, outbox: Outbox, settings: RelaySettings, loop: asyncio.AbstractEventLoop,
                 scans: bool):
        self.outbox = outbox
        self.settings = settings
        self.loop = loop
        self.scans = scans
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._wanted: set[str] = set()
        self._wake = asyncio.Event()
        self._stopping = threading.Event()
        self._warned = False
        self._next_sweep = 0.0
        self._task: asyncio.Task | None = None

    def start(self) -> Relay:
        self.outbox.policy = self.settings.policy
        self.outbox.on_enqueue(self._enqueued)
        self._task = self.loop.create_task(self._run())
        return self

    def _enqueued(self, qid: str) -> None:
        """Called in the enqueuing thread; the loop picks the entry up at once."""
        ENQUEUED.inc()
        if self._stopping.is_set():
            return
        self.loop.call_soon_threadsafe(self._want, qid)

    def _want(self, qid: str) -> None:
        self._wanted.add(qid)
        self._wake.set()

    async def _run(self) -> None:
        scan_due = 0.0 if self.scans else float("inf")
        while not self._stopping.is_set():
            now = self.loop.time()
            if now >= scan_due:
                scan_due = now + self.settings.poll_interval
                await self._attempt(None)
            elif self._wanted:
                wanted, self._wanted = self._wanted, set()
                await self._attempt(sorted(wanted))
            else:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(),
                                           timeout=min(scan_due - now, 3600.0))
                except TimeoutError:
                    pass

    async def _attempt(self, ids: list[str] | None) -> None:
        try:
            await asyncio.to_thread(self.drain, ids)
        except BackendUnavailable as exc:
            log.warn("relay_store_unavailable", error=str(exc))
        except Exception:
            # The store unreachable (BackendUnavailable) or a bug: logged, tried again at the
            # next wake-up or scan; the entries stay queued.
            log.failure("drain_failed")

    def drain(self, ids: list[str] | None = None) -> int:
        """Try the entries ``ids`` (just enqueued), or every due entry; return how many were
        attempted.  Runs in a worker thread."""
        outbox = self.outbox
        if ids is None:
            entries = outbox.entries()
            QUEUED.set(len(entries))
            now = outbox.clock()
            entries = [e for e in entries if e.next_attempt <= now and not e.claimed(now)]
            if now >= self._next_sweep:
                self._next_sweep = now + SWEEP_EVERY
                outbox.sweep()
        else:
            entries = [e for e in map(outbox.get, ids) if e is not None]
        if not self.settings.host:
            self._hold(entries)
            return 0
        tried = 0
        for entry in entries:
            if self._stopping.is_set():
                break
            claimed = outbox.claim(entry.id, self.owner)
            if claimed is not None:
                tried += 1
                self._try(claimed)
        return tried

    def _hold(self, entries: list[Entry]) -> None:
        """No relay: entries stay queued (one warning per process), except those past their
        maximum age, which are given up as they would be after failed attempts."""
        if entries and not self._warned:
            self._warned = True
            log.warn("relay_not_configured", queued=len(entries),
                     hint="set [delivery] relay_host; see mailadmin queue list")
        for entry in entries:
            if self.outbox.clock() - entry.created < self.outbox.policy.max_age:
                continue
            claimed = self.outbox.claim(entry.id, self.owner, force=True)
            if claimed is not None:
                outcome = self.outbox.expire(claimed)
                if outcome is not None:
                    self._report(outcome, 0.0)

    def _try(self, entry: Entry) -> None:
        started = time.monotonic()
        results: dict[str, tuple[int, str]] = {}
        error = ""
        try:
            message = self.outbox.message(entry)
            results = send(self.settings, entry.mail_from, list(entry.pending), message)
        except smtplib.SMTPResponseException as exc:
            error = f"{exc.smtp_code} {_text(exc.smtp_error)}"
        except (smtplib.SMTPException, OSError, RelayError, ssl.SSLError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        outcome = self.outbox.record(entry, results, error)
        self._report(outcome, time.monotonic() - started)

    def _report(self, outcome, seconds: float) -> None:
        entry = outcome.entry
        fields = dict(queue_id=entry.id, reason=entry.reason, sender=entry.mail_from,
                      sent=entry.sent, attempts=entry.attempts, seconds=round(seconds, 3))
        if outcome.state == "sent":
            SENT.inc()
            log.info("relay_sent", **fields)
        elif outcome.state == "deferred":
            DEFERRED.inc()
            log.info("relay_deferred", **fields, pending=entry.pending, error=entry.last_error,
                     next_attempt=round(entry.next_attempt, 3))
        elif outcome.state in ("bounced", "dropped"):
            BOUNCED.labels(outcome.state).inc()
            # A dropped entry had a null sender (RFC 5321 4.5.5): this line is its only trace.
            (log.warn if outcome.state == "dropped" else log.info)(
                "relay_" + outcome.state, **fields, failed=outcome.failed,
                bounce_id=outcome.bounce_id)
        else:
            log.warn("relay_claim_lost", **fields)

    async def stop(self) -> None:
        """Stop after the entry being sent, if any (its result is recorded)."""
        self._stopping.set()
        self._wake.set()
        if self._task is not None:
            await self._task


def check_settings(cfg) -> RelaySettings:
    """The relay settings of ``cfg``, checked before anything starts: ValueError for settings
    that cannot work, OSError or ssl.SSLError for a bad ``relay_ca_file``."""
    settings = RelaySettings.from_config(cfg)
    if settings.host and settings.starttls != "no":
        settings.tls_context()
    return settings


def start(store, settings: RelaySettings, hostname: str, loop: asyncio.AbstractEventLoop,
          scans: bool) -> Relay:
    """The relay sender of ``store``'s queue, running on ``loop``; ``hostname`` is the name
    its bounces give (RFC 3464 Reporting-MTA)."""
    store.outbox.hostname = hostname
    return Relay(store.outbox, settings, loop, scans).start()
