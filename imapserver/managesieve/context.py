"""What a ManageSieve command handler gets, the errors it raises, and the command registry.

A handler is ``fn(ctx)``, registered with ``@command(NAME, *states)``; it returns None or a
Deferred.  It writes its response lines through ``ctx`` and ends with ``ctx.finish`` (or by
raising :class:`No`, which becomes ``NO (code) "text"``).  The registry depends on nothing
here but this module: protocol.py imports the command modules, they import this one.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet import threads

from ..observe import timed_store_call
from . import wire

NOT_AUTH = "not-authenticated"
AUTH = "authenticated"

_COMMANDS: dict[str, tuple[Callable, tuple[str, ...]]] = {}


class No(Exception):
    """The command failed: ``NO [(code)] "text"`` (RFC 5804 1.3)."""

    def __init__(self, text: str, code: str | bytes | None = None):
        super().__init__(text)
        self.text = text
        self.code = code


def command(name: str, *states: str):
    def register(fn: Callable) -> Callable:
        _COMMANDS[name] = (fn, states)
        return fn
    return register


def lookup(name: str) -> tuple[Callable, tuple[str, ...]] | None:
    return _COMMANDS.get(name)


def known_commands() -> list[str]:
    return sorted(_COMMANDS)


class CommandContext:
    """One command being run: its connection, session, arguments and its response lines."""

    def __init__(self, conn, name: str, args: list[wire.Argument]):
        self.conn = conn
        self.server = conn.server
        self.session = conn.session
        self.store = conn.server.store
        self.name = name
        self.args = args
        self.lines: list[bytes] = []
        self.status: bytes | None = None

    def call(self, fn: Callable, *args, operation: str = "sieve_scripts"):
        """Run a store call in the server's thread pool; a Deferred of its result."""
        return threads.deferToThreadPool(self.server.reactor, self.server.threadpool,
                                         timed_store_call, operation, fn, *args)

    def compute(self, fn: Callable, *args):
        """Run CPU work that is not a store call (parsing a script) in the thread pool."""
        return threads.deferToThreadPool(self.server.reactor, self.server.threadpool, fn, *args)

    def line(self, data: bytes) -> None:
        """A response line (without CRLF) written before the final OK/NO."""
        self.lines.append(data)

    def flush(self) -> None:
        """Write the lines so far now (before a SASL challenge waits for the client)."""
        lines, self.lines = self.lines, []
        self.conn.write_lines(lines)

    def finish(self, status: bytes, text: str | None = None,
               code: str | bytes | None = None) -> None:
        self.status = status
        self.lines.append(wire.response(status, text, code))
        self.flush()

    def expect_args(self, low: int, high: int | None = None) -> None:
        high = low if high is None else high
        if not low <= len(self.args) <= high:
            raise No(f"Wrong number of arguments for {self.name}")

    def text(self, index: int, what: str) -> str:
        try:
            return wire.text(self.args[index], what)
        except wire.SyntaxFault as exc:
            raise No(str(exc)) from None

    def number(self, index: int, what: str) -> int:
        arg = self.args[index]
        if arg.number is None:
            raise No(f"Expected a number for the {what}")
        return arg.number
