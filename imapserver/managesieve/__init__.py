"""The ManageSieve server (RFC 5804): users manage their Sieve scripts over the network.

``start`` opens the listener of ``[managesieve]`` (``port``, default 4190; ``--sieve-port``;
0 disables it) with STARTTLS when ``[imap] tls_cert`` is set -- the same certificate and the
same plaintext-authentication policy as IMAP.  In a worker process it serves the socket its
supervisor opened (imapserver/workers.py) instead.  docs/managesieve.md.

Layout, as imapserver/imap: protocol.py (the connection: input, queue, output), session.py
(state, capabilities), context.py (what a handler gets), wire.py (strings and responses),
commands/ (one module per command group), server.py (the factory and error codes).
"""

from __future__ import annotations

from ..imap import _adopt, tls_context
from ..services import INHERITED, inherited, listen_port
from .server import ManageSieveServer


class _Listener:
    name = "managesieve"

    def __init__(self, port):
        self.port = port

    def stop(self):
        return self.port.stopListening()

    def abort(self) -> None:
        self.port.stopListening()


class _Sessions:
    name = "managesieve-sessions"

    def __init__(self, server: ManageSieveServer):
        self.server = server

    def stop(self):
        return self.server.stop()

    def abort(self) -> None:
        self.server.threadpool.stop()


def start(store, cfg, reactor, loop, announce) -> list:
    """Open the listener; the services to stop (none when it is disabled).  A failure to
    listen stops the thread pool again before it propagates."""
    host = cfg["managesieve"]["host"]
    port_number = listen_port(cfg["managesieve"]["port"])
    fd = inherited("managesieve")
    if INHERITED is not None:
        port_number = None      # a worker: serve what the supervisor opened, bind nothing
    if fd is None and port_number is None:
        return []
    server = ManageSieveServer(store, cfg, reactor, tls_context(cfg))
    try:
        if fd is not None:
            port = _adopt(reactor, fd, server)
        else:
            port = reactor.listenTCP(port_number, server, interface=host,
                                     backlog=cfg["imap"]["listen_backlog"])
            announce("managesieve", host, port.getHost().port)
    except BaseException:
        server.threadpool.stop()
        raise
    return [_Listener(port), _Sessions(server)]
