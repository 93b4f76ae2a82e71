"""Mail delivery into the store: SMTP and LMTP listeners on aiosmtpd.

``start`` binds the listeners configured in ``[delivery]`` on the process's asyncio loop (the
one Twisted's asyncio reactor runs), next to IMAP.  A message is stored by
:meth:`MailStore.deliver` in a worker thread and acknowledged only once it is committed; see
``handler`` for the replies, ``transaction`` for the all-or-nothing rules, ``trace`` for the
header fields added, docs/postfix.md for feeding the store from Postfix.  ``relay`` sends the
outgoing queue (mailstore/outbox.py) to the configured SMTP relay (docs/relay.md).  Both
listeners offer STARTTLS (RFC 3207) with the IMAP certificate when one is configured; see
``protocol``.
"""

from __future__ import annotations

import asyncio
import socket
import ssl

from mailstore.metadata import Policy
from mailstore.sieve.actions import Limits
from mailstore.sieve.executor import SieveSettings

from .. import observe
from ..services import INHERITED, inherited, listen_port
from . import relay
from .handler import DeliveryHandler, Settings
from .protocol import StoreLMTP, StoreSMTP

SHUTDOWN_GRACE = 30.0
"""Seconds a stopping listener waits for deliveries in progress before closing connections."""


class Listener:
    """One running SMTP or LMTP server: ``name``, ``port``, ``stop()``."""

    def __init__(self, name: str, serving: asyncio.Future, port: int, connections: set):
        self.name = name
        self.serving = serving  # resolves to the asyncio Server
        self.port = port
        self.connections = connections

    async def stop(self) -> None:
        """Stop accepting, let messages in DATA finish and be answered, close the connections.

        A session between commands is closed as it is: whatever it had not finished was never
        acknowledged, and its sender will retry.
        """
        server = await self.serving
        server.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SHUTDOWN_GRACE
        while any(c.in_data for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.close()
        await server.wait_closed()


def start(store, cfg, reactor, loop: asyncio.AbstractEventLoop, announce) -> list:
    """Bind the SMTP and LMTP listeners of ``cfg["delivery"]`` and serve them on ``loop``.

    Called on ``loop``'s thread.  The sockets are bound here, synchronously, so that a port in
    use stops start-up with an error (OSError); ``announce(name, host, port)`` is called for
    each once it listens.  ``reactor`` is unused: aiosmtpd runs on ``loop`` directly.
    """
    section = cfg["delivery"]
    settings = Settings(hostname=section["hostname"], domains=list(section["domains"]),
                        plus_addressing=section["plus_addressing"],
                        over_quota_code=section["over_quota_code"],
                        sieve=sieve_settings(cfg))
    limit = cfg["store"]["max_message_size"]
    # Loaded before any socket is bound: a missing or broken certificate stops start-up.
    context = check_tls(cfg)
    relay_settings = relay.check_settings(cfg)
    require_tls = section["smtp_require_starttls"]
    wanted = []
    for name, key, protocol, lmtp in (("smtp", "smtp_port", StoreSMTP, False),
                                      ("lmtp", "lmtp_port", StoreLMTP, True)):
        port = listen_port(section[key])
        if INHERITED is not None:  # a worker: serve what the supervisor opened
            port = inherited(name)
        if port is not None:
            wanted.append((name, port, protocol, lmtp))
    # Every socket is bound before any serves: if one cannot be (a port in use), the others
    # are closed again and nothing was started.
    sockets: list[socket.socket] = []
    try:
        for _name, port, _protocol, _lmtp in wanted:
            if INHERITED is not None:  # ``port`` is the inherited socket's descriptor
                sock = socket.socket(fileno=port)
                sock.setblocking(False)
                sockets.append(sock)
                continue
            sockets.append(_listen(section["host"], port))
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    listeners = []
    for (name, _port, protocol, lmtp), sock in zip(wanted, sockets, strict=True):
        handler = DeliveryHandler(store, settings, lmtp=lmtp)
        connections: set = set()

        def factory(protocol=protocol, handler=handler, connections=connections, lmtp=lmtp):
            return protocol(handler, line_length_limit=limit + 1024, connections=connections,
                            data_size_limit=limit, enable_SMTPUTF8=True,
                            hostname=settings.hostname, tls_context=context,
                            require_starttls=require_tls and not lmtp,
                            ident=f"{'LMTP' if lmtp else 'ESMTP'} imapserver", loop=loop)

        # The socket already listens; create_server only starts accepting from it.
        serving = asyncio.ensure_future(loop.create_server(factory, sock=sock), loop=loop)
        bound = sock.getsockname()[1]
        listeners.append(Listener(name, serving, bound, connections))
        announce(name, section["host"], bound)
    # The sender of the outgoing queue (Sieve redirect/vacation, bounces): every process sends
    # what it queued itself; one scans for entries due again (worker 1, or the only process).
    listeners.append(relay.start(store, relay_settings, settings.hostname, loop,
                                 scans=observe.WORKER in (None, 1)))
    return listeners


def sieve_settings(cfg) -> SieveSettings:
    """The ``[sieve]`` section as the delivery side uses it (docs/sieve.md)."""
    sieve, delivery = cfg["sieve"], cfg["delivery"]
    limits = Limits(max_actions=sieve["max_actions"], max_redirects=sieve["max_redirects"],
                    max_steps=sieve["max_steps"],
                    max_include_depth=sieve["max_include_depth"],
                    vacation_min_days=sieve["vacation_min_days"],
                    vacation_max_days=sieve["vacation_max_days"],
                    vacation_default_days=sieve["vacation_default_days"],
                    duplicate_max_seconds=sieve["duplicate_max_seconds"],
                    duplicate_default_seconds=min(sieve["duplicate_max_seconds"],
                                                  Limits().duplicate_default_seconds))
    return SieveSettings(limits=limits, hostname=delivery["hostname"],
                         domains=tuple(delivery["domains"]), enabled=sieve["enabled"],
                         global_scripts_user=sieve["global_scripts_user"],
                         metadata_policy=Policy(admin=cfg["imap"]["metadata_admin"]))


def check_tls(cfg) -> ssl.SSLContext | None:
    """The STARTTLS context (see tls_context), after checking the settings that need one.

    Raises ValueError for ``smtp_require_starttls = yes`` without a certificate: aiosmtpd would
    silently drop the requirement."""
    context = tls_context(cfg)
    if cfg["delivery"]["smtp_require_starttls"] and context is None:
        raise ValueError("[delivery] smtp_require_starttls = yes needs [imap] tls_cert")
    return context


def tls_context(cfg) -> ssl.SSLContext | None:
    """The server context for STARTTLS from ``[imap] tls_cert``/``tls_key`` (PEM; an empty
    key means the key is in the certificate file), or None when no certificate is set.

    Raises OSError or ssl.SSLError for a file that is missing, unreadable, not PEM, or a key
    that does not match the certificate.  No client certificate is asked for: an SMTP server
    must not require one (RFC 3207 4.1), and the store authenticates nobody at delivery.
    """
    cert, key = cfg["imap"]["tls_cert"], cfg["imap"]["tls_key"]
    if not cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key or None)
    return context


def _listen(host: str, port: int, backlog: int = 128) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"Couldn't listen on {host}:{port}: {exc.strerror}") from None
    except BaseException:
        sock.close()
        raise
    return sock
