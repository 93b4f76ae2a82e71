"""IMAP commands, one command group to a module; importing this registers them all."""

from . import (  # noqa: F401
    auth,
    basic,
    compress,
    fetch,
    idle,
    mailbox_cmds,
    message_cmds,
    metadata,
    quota,
    replace_cmd,
    search_cmd,
    sort_cmd,
)
