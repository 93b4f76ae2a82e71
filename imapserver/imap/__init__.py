"""The IMAP4rev1 server over the mail store (our own command layer on Twisted's network stack).

``start`` opens the listeners configured in ``[imap]``: IMAP with STARTTLS on ``port`` and
implicit TLS on ``imaps_port`` (only when a certificate is configured); 0 disables either.
"""

from __future__ import annotations

import os
import socket

from ..services import INHERITED, inherited, listen_port
from . import commands  # noqa: F401  (registers every command)
from .server import IMAPServer


def tls_context(cfg):
    cert, key = cfg["imap"]["tls_cert"], cfg["imap"]["tls_key"]
    if not cert:
        return None
    from twisted.internet import ssl
    with open(cert, "rb") as f:
        cert_pem = f.read()
    with open(key or cert, "rb") as f:
        key_pem = f.read()
    return ssl.PrivateCertificate.loadPEM(cert_pem + b"\n" + key_pem).options()


class _Listener:
    def __init__(self, name, port, server):
        self.name = name
        self.port = port
        self.server = server

    def stop(self):
        d = self.port.stopListening()
        return d

    def abort(self) -> None:
        self.port.stopListening()


class _Shutdown:
    name = "imap-sessions"

    def __init__(self, server):
        self.server = server

    def stop(self):
        return self.server.stop()

    def abort(self) -> None:
        """Start-up failed: no connection was ever served, the idle threads just end."""
        self.server.threadpool.stop()


def start(store, cfg, reactor, loop, announce) -> list:
    """Open the listeners; the services to stop.  If one cannot be opened (a port in use),
    what was already started is stopped again before the error propagates: an IMAPServer's
    thread pool left running would keep the process from exiting."""
    context = tls_context(cfg)
    host = cfg["imap"]["host"]
    plain_port = listen_port(cfg["imap"]["port"])
    tls_port = listen_port(cfg["imap"]["imaps_port"])
    if INHERITED is not None:  # a worker: serve what the supervisor opened, bind nothing
        plain_port = tls_port = None
    servers: list[IMAPServer] = []
    listeners: list[_Listener] = []
    try:
        server = IMAPServer(store, cfg, reactor, context)
        servers.append(server)
        fd = inherited("imap")
        if fd is not None:
            listeners.append(_Listener("imap", _adopt(reactor, fd, server), server))
        fd = inherited("imaps")
        if fd is not None and context is not None:
            from twisted.protocols.tls import TLSMemoryBIOFactory
            tls_server = IMAPServer(store, cfg, reactor, context)
            tls_server.implicit_tls = True
            servers.append(tls_server)
            port = _adopt(reactor, fd, TLSMemoryBIOFactory(context, False, tls_server))
            listeners.append(_Listener("imaps", port, tls_server))
        if plain_port is not None:
            port = reactor.listenTCP(plain_port, server, interface=host,
                                     backlog=cfg["imap"]["listen_backlog"])
            listeners.append(_Listener("imap", port, server))
            announce("imap", host, port.getHost().port)
        if tls_port is not None and context is not None:
            tls_server = IMAPServer(store, cfg, reactor, context)
            tls_server.implicit_tls = True
            servers.append(tls_server)
            port = reactor.listenSSL(tls_port, tls_server, context,
                                     backlog=cfg["imap"]["listen_backlog"],
                                     interface=host)
            listeners.append(_Listener("imaps", port, tls_server))
            announce("imaps", host, port.getHost().port)
    except BaseException:
        for started in [*listeners, *(_Shutdown(s) for s in servers)]:
            started.abort()
        raise
    server.start_sweeping()  # one per process: the TLS listener's server shares the store
    return [*listeners, *(_Shutdown(s) for s in reversed(servers))]


def _adopt(reactor, fd: int, factory):
    """Serve a listening socket inherited from the supervisor (the reactor takes a duplicate
    of it, so ours is closed)."""
    family = _family(fd)
    try:
        return reactor.adoptStreamPort(fd, family, factory)
    finally:
        os.close(fd)


def _family(fd: int) -> int:
    sock = socket.socket(fileno=os.dup(fd))
    try:
        return sock.family
    finally:
        sock.close()
