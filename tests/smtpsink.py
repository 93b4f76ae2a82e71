"""A local SMTP sink for the relay tests: a real aiosmtpd server on a port the kernel chose.

:func:`reserve_port` binds a socket without listening: connections to its port are refused
(the relay is "down") and no other process can take the port meanwhile.  :class:`Sink` then
serves SMTP on that very socket (aiosmtpd's ``Controller`` in its own thread and loop), records
every message it answered 250 with the exact bytes received, and answers RCPT and DATA from a
script of replies a test sets (``rcpt_replies``, ``data_replies``: lists consumed in order;
empty means 250).  ``hold_rcpt``/``hold_data`` make it wait inside the command (to kill the
sender at that moment: in DATA, after the message is kept and before the reply is sent);
``in_rcpt``/``in_data`` tell the test it got there.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from dataclasses import dataclass

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult


def reserve_port() -> socket.socket:
    """A bound, not listening, TCP socket on 127.0.0.1 (a closed port nobody else gets)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    data: bytes
    tls: bool
    login: str | None


class _Handler:
    def __init__(self, sink: Sink):
        self.sink = sink

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        self.sink.in_rcpt.set()
        await _wait(self.sink.hold_rcpt)
        reply = self.sink.rcpt_replies.pop(0) if self.sink.rcpt_replies else "250 OK"
        if reply.startswith("250"):
            envelope.rcpt_tos.append(address)
        return reply

    async def handle_DATA(self, server, session, envelope):
        # The message is taken (kept) before the reply is held back and sent, as a real MTA
        # commits its queue file before its 250: a sender killed while the sink holds the
        # reply has handed the message over without learning it.
        reply = self.sink.data_replies.pop(0) if self.sink.data_replies else "250 queued"
        if reply.startswith("250"):
            login = session.auth_data if session.authenticated else None
            with self.sink.lock:
                self.sink.received.append(Received(
                    envelope.mail_from, list(envelope.rcpt_tos), envelope.original_content,
                    session.ssl is not None, login))
        self.sink.in_data.set()
        await _wait(self.sink.hold_data)
        return reply


async def _wait(gate: threading.Event | None) -> None:
    while gate is not None and not gate.is_set():
        await asyncio.sleep(0.01)


class _Controller(Controller):
    """aiosmtpd's Controller on a socket bound beforehand (it only knows host and port)."""

    def __init__(self, handler, sock: socket.socket, **kwargs):
        self._sock = sock
        super().__init__(handler, hostname="127.0.0.1", port=sock.getsockname()[1], **kwargs)

    def _create_server(self):
        return self.loop.create_server(self._factory_invoker, sock=self._sock)


class Sink:
    """An SMTP server that keeps what it accepts; a context manager."""

    def __init__(self, sock: socket.socket | None = None, *, certs: tuple[str, str] | None = None,
                 require_starttls: bool = False, users: dict[str, str] | None = None):
        self.sock = sock or reserve_port()
        self.port = self.sock.getsockname()[1]
        self.received: list[Received] = []
        self.rcpt_replies: list[str] = []
        self.data_replies: list[str] = []
        self.hold_rcpt: threading.Event | None = None
        self.hold_data: threading.Event | None = None
        self.in_rcpt = threading.Event()
        self.in_data = threading.Event()
        self.lock = threading.Lock()
        kwargs: dict = {}
        if certs is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*certs)
            kwargs.update(tls_context=context, require_starttls=require_starttls)
        if users is not None:
            def authenticate(server, session, envelope, mechanism, auth_data):
                ok = users.get(auth_data.login.decode()) == auth_data.password.decode()
                return AuthResult(success=ok, auth_data=auth_data.login.decode())
            kwargs.update(authenticator=authenticate, auth_require_tls=True,
                          auth_required=True)
        self.controller = _Controller(_Handler(self), self.sock, **kwargs)

    def start(self) -> Sink:
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.controller.start()
        return self

    def stop(self) -> None:
        for gate in (self.hold_rcpt, self.hold_data):
            if gate is not None:
                gate.set()
        self.controller.stop()

    def __enter__(self) -> Sink:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def messages(self) -> list[Received]:
        with self.lock:
            return list(self.received)
