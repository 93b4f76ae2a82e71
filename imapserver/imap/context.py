"""What a command handler sees: its arguments, the session, and a response buffer.

Handlers are registered per command name with the states they are valid in (RFC 3501 3)::

    @command("SELECT", AUTH, SELECTED)
    def select(ctx): ...

A handler may return a Deferred (``yield ctx.call(store_fn, ...)`` with ``inlineCallbacks``);
it raises :class:`No` or :class:`Bad` to fail.  Untagged responses collect in ``ctx.out`` and
go out with the tagged one in a single write.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet import defer, threads

from ..observe import timed_store_call

NOT_AUTH, AUTH, SELECTED = "notauth", "auth", "selected"
ANY = (NOT_AUTH, AUTH, SELECTED)

_HANDLERS: dict[str, tuple[Callable, tuple[str, ...]]] = {}

# Store calls by what they do, for the latency and error metrics (docs/metrics.md).
_OPERATION_OF_FUNCTION = {
    "_authenticate": "authenticate", "_authenticate_cached": "authenticate",
    "_open": "open_mailbox", "refresh": "refresh",
    "_list_data": "list_mailboxes", "_recent_counts": "mailbox_status",
    "create_mailbox": "create_mailbox", "rename_mailbox": "rename_mailbox",
    "subscribe": "subscribe", "unsubscribe": "unsubscribe", "_render_batch": "fetch",
    "_next_pieces": "read_content", "retest_contexts": "search",
    "_deleted_counts": "mailbox_status", "quota": "quota",
    # CONDSTORE/QRESYNC (RFC 7162): HIGHESTMODSEQ is mailbox status; CHANGEDSINCE's narrowing
    # and VANISHED (EARLIER) belong to the FETCH that asked.
    "_highests": "mailbox_status", "highest_modseq": "mailbox_status",
    "_changed_uids": "fetch", "_vanished": "fetch",
    "get_metadata": "get_metadata", "set_metadata": "set_metadata",  # RFC 5464
    # NOTIFY (RFC 5465): its first look, and a delivery's reads.
    "_load": "notify", "_gather": "notify",
    # RFC 4314 (mailstore/sharing.py): GETACL, LISTRIGHTS and MYRIGHTS open the mailbox to
    # read its ACL; SETACL and DELETEACL change it.
    "open_mailbox": "acl", "set_acl": "acl", "delete_acl": "acl",
}
_OPERATION_OF_COMMAND = {  # closures (``def run()``) of these commands
    "DELETE": "delete_mailbox", "STATUS": "mailbox_status", "APPEND": "append",
    "CLOSE": "expunge", "EXPUNGE": "expunge", "STORE": "store_flags", "COPY": "copy",
    "MOVE": "move", "SEARCH": "search", "SORT": "search", "THREAD": "search",
    "REPLACE": "replace", "RENAME": "rename_mailbox",
    "NOTIFY": "notify",  # NOTIFY SET's first look, and each delivery's reads (RFC 5465)
    "GENURLAUTH": "urlauth", "RESETKEY": "urlauth", "URLFETCH": "urlauth",
}


class No(Exception):
    """A tagged NO: the command was valid but failed (RFC 3501 7.1.2)."""

    def __init__(self, text: str, code: str | None = None):
        super().__init__(text)
        self.text = text
        self.code = code


class Bad(Exception):
    """A tagged BAD: the command was not understood or not allowed now (RFC 3501 7.1.3)."""

    def __init__(self, text: str, code: str | None = None):
        super().__init__(text)
        self.text = text
        self.code = code


def command(name: str, *states: str):
    def register(fn: Callable) -> Callable:
        _HANDLERS[name] = (fn, states or ANY)
        return fn
    return register


def known_commands() -> list[str]:
    return sorted(_HANDLERS)


class CommandContext:
    def __init__(self, conn, tag: str, name: str, args: list):
        self.conn = conn
        self.session = conn.session
        self.server = conn.server
        self.store = conn.server.store
        self.tag = tag
        self.name = name
        self.args = args
        # UID's sub-command (UID's handler drops it from args): names its store calls.
        self.uid_command = str(args[0]).upper() if name == "UID" and args else None
        self.out: list[bytes] = []
        self.finished = False
        # A code for the tagged OK whoever sends it (RFC 7162 3.2.10: HIGHESTMODSEQ after
        # VANISHED), unless the command gives its own.
        self.ok_code: str | None = None

    def untagged(self, line: bytes) -> None:
        self.out.append(b"* " + line)

    def call(self, fn: Callable, *args, **kwargs):
        """Run a store call in the thread pool (timed for the store latency histogram); a
        Deferred firing with its result."""
        return threads.deferToThreadPool(self.server.reactor, self.server.threadpool,
                                         timed_store_call, self.store_operation(fn), fn,
                                         *args, **kwargs)

    def call_local(self, fn: Callable, *args, **kwargs):
        """:meth:`call` for a bounded call that mostly only reads (a FETCH batch of cached
        columns, STATUS, LIST, SELECT): run in this thread when the backend's reads are local
        (``local_reads``, the embedded store), since a worker thread's round trip costs more
        CPU than such a read (~200 us per command, bench/RESULTS.md, issue 14); else as
        :meth:`call`.  Timed and counted the same either way.

        The reactor must never wait for the write lock, so the call runs under the backend's
        ``reads_only()``: if it tries to write (SELECT claiming \\Recent for new messages,
        a roll-forward of what a crashed writer left), whatever became of it is dropped and
        it runs again in the pool.  ``fn`` must therefore change nothing outside the store
        before its writes (what it builds and returns is simply built again)."""
        backend = self.store.backend
        if not backend.local_reads:
            return self.call(fn, *args, **kwargs)
        with backend.reads_only() as probe:
            try:
                result = timed_store_call(self.store_operation(fn), fn, *args, **kwargs)
            except Exception:
                if probe.refused:
                    return self.call(fn, *args, **kwargs)
                return defer.fail()
        if probe.refused:
            return self.call(fn, *args, **kwargs)
        return defer.succeed(result)

    def store_operation(self, fn: Callable) -> str:
        """The ``operation`` label of a store call (observe.STORE_OPERATIONS): by the function
        called, or for a command's own closure by the command."""
        name = getattr(fn, "__name__", "")
        if name in _OPERATION_OF_FUNCTION:
            return _OPERATION_OF_FUNCTION[name]
        return _OPERATION_OF_COMMAND.get(self.uid_command or self.name, "other")

    def flush(self) -> None:
        """Send what has accumulated (used before long waits: IDLE, literals, streaming)."""
        if self.out:
            self.conn.write_lines(self.out)
            self.out = []

    def finish(self, status: bytes, text: str, code: str | None = None) -> None:
        if self.finished:
            return
        self.finished = True
        if code is None and status == b"OK":
            code = self.ok_code
        line = self.tag.encode() + b" " + status + b" "
        if code:
            line += b"[" + code.encode() + b"] "
        from .names import response_text  # names -> context: imported here, not at the top
        from .rev2 import utf8_names
        line += response_text(text, utf8_names(self.session))
        self.out.append(line)
        self.conn.write_lines(self.out)
        self.out = []

    def expect_args(self, low: int, high: int | None = None) -> None:
        high = low if high is None else high
        if not low <= len(self.args) <= high:
            raise Bad(f"{self.name} takes {low if low == high else f'{low} to {high}'} "
                      f"argument(s)")


def dispatch(ctx: CommandContext):
    entry = _HANDLERS.get(ctx.name)
    if entry is None:
        if ctx.name == "UID" and ctx.args:
            raise Bad(f"Unknown UID command {ctx.args[0]!s}")
        raise Bad(f"Unknown command {ctx.name}")
    fn, states = entry
    if ctx.session.state not in states:
        if ctx.session.state == NOT_AUTH:
            raise Bad(f"{ctx.name} requires authentication first")
        if SELECTED in states and AUTH not in states:
            raise Bad(f"{ctx.name} requires a selected mailbox")
        raise Bad(f"{ctx.name} is not allowed now")
    return fn(ctx)
