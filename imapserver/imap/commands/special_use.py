"""CREATE-SPECIAL-USE (RFC 6154 section 3): a special-use attribute given at CREATE.

    create-param =/ "USE" SP "(" [use-attr *(SP use-attr)] ")"    ; RFC 6154 6, RFC 4466

A mailbox of ours holds at most one special use, and only the uses of real folders can be
given: \\All and \\Flagged name virtual mailboxes (every message, every flagged message) whose
contents we do not compute, so a mailbox created with them would claim what it is not.  Any
other attribute, or more than one, is ``NO [USEATTR]`` and nothing is created (RFC 6154 3:
the server MUST NOT create the mailbox then).  ``USE ()`` is a plain CREATE.
"""

from __future__ import annotations

from ..context import Bad, No
from ..wire import Atom

CREATABLE = ("\\Archive", "\\Drafts", "\\Junk", "\\Sent", "\\Trash")
"""Special uses CREATE accepts, as spelled in LIST (mailstore.mailboxes.SPECIAL_USE)."""


def creatable_use(params) -> str | None:
    """The special use a CREATE's parameter list asks for (None for ``USE ()``).  Raises Bad
    for a malformed list or another parameter, No [USEATTR] for a use we cannot give."""
    if not isinstance(params, list) or len(params) != 2 or not isinstance(params[0], Atom) \
            or params[0].upper() != "USE" or not isinstance(params[1], list):
        raise Bad("CREATE takes a mailbox name and optionally (USE (attributes))")
    attrs = params[1]
    if not all(isinstance(a, Atom) and a.startswith("\\") for a in attrs):
        raise Bad("USE takes a list of special-use attributes")
    if not attrs:
        return None
    if len(attrs) > 1:
        raise No("A mailbox can have only one special use here", "USEATTR")
    by_name = {use.lower(): use for use in CREATABLE}
    use = by_name.get(attrs[0].lower())
    if use is None:
        raise No(f"Special use {attrs[0]} cannot be given to a mailbox here", "USEATTR")
    return use
