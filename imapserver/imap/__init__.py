"""The IMAP4rev1 server over the mail store (our own command layer on Twisted's network stack).

``start`` opens the listeners configured in ``[imap]``: IMAP with STARTTLS on ``port`` and
implicit TLS on ``imaps_port`` (only when a certificate is configured); 0 disables either.
"""

from __future__ import annotations

from ..services import listen_port
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


class _Shutdown:
    name = "imap-sessions"

    def __init__(self, server):
        self.server = server

    def stop(self):
        return self.server.stop()


def start(store, cfg, reactor, loop, announce) -> list:
    context = tls_context(cfg)
    server = IMAPServer(store, cfg, reactor, context)
    host = cfg["imap"]["host"]
    services = []
    plain_port = listen_port(cfg["imap"]["port"])
    tls_port = listen_port(cfg["imap"]["imaps_port"])
    if plain_port is not None:
        port = reactor.listenTCP(plain_port, server, interface=host,
                                 backlog=cfg["imap"]["listen_backlog"])
        announce("imap", host, port.getHost().port)
        services.append(_Listener("imap", port, server))
    if tls_port is not None and context is not None:
        tls_server = IMAPServer(store, cfg, reactor, context)
        tls_server.implicit_tls = True
        port = reactor.listenSSL(tls_port, tls_server, context,
                                 backlog=cfg["imap"]["listen_backlog"],
                                 interface=host)
        announce("imaps", host, port.getHost().port)
        services.append(_Listener("imaps", port, tls_server))
        services.append(_Shutdown(tls_server))
    server.start_sweeping()  # one per process: the TLS listener's server shares the store
    services.append(_Shutdown(server))
    return services
