"""Commands valid in every state.

    capability = "CAPABILITY" CRLF                      ; RFC 5804 2.4
    noop       = "NOOP" [SP string] CRLF                ; 2.13 (the string comes back as TAG)
    logout     = "LOGOUT" CRLF                          ; 2.3
"""

from __future__ import annotations

from .. import wire
from ..context import AUTH, NOT_AUTH, command


def capability_lines(session) -> list[bytes]:
    """The capability listing (RFC 5804 1.7): one ``"NAME" ["value"]`` line each."""
    return [wire.string(name) + (b" " + wire.string(value) if value is not None else b"")
            for name, value in session.capabilities()]


@command("CAPABILITY", NOT_AUTH, AUTH)
def capability(ctx):
    ctx.expect_args(0)
    for line in capability_lines(ctx.session):
        ctx.line(line)
    ctx.finish(b"OK", "Capability completed")


@command("NOOP", NOT_AUTH, AUTH)
def noop(ctx):
    """RFC 5804 2.13: with a string argument the OK carries it back as ``(TAG "...")``."""
    ctx.expect_args(0, 1)
    code = None
    if ctx.args:
        code = b"TAG " + wire.string(ctx.args[0].data)
    ctx.finish(b"OK", "Done", code)


@command("LOGOUT", NOT_AUTH, AUTH)
def logout(ctx):
    """RFC 5804 2.3: OK, then the server closes the connection."""
    ctx.expect_args(0)
    ctx.finish(b"OK", "Logout completed")
    ctx.conn.close(reason="logout")
