"""Is a Sieve script acceptable?  What ManageSieve's PUTSCRIPT/CHECKSCRIPT (RFC 5804 2.6, 2.12)
and ``mailadmin sieve put`` ask before a script is stored.

First version, written by the managesieve work of issue 15 on sievelib's parser alone; the
interpreter's owner (``mailstore/sieve/``) replaces the parse with its own grammar (sievelib
plus the commands it lacks) and keeps this module's two names: :func:`validate` and
:data:`EXTENSIONS` (the capability list ManageSieve announces as ``SIEVE``).
"""

from __future__ import annotations

import re

from sievelib.commands import RequireCommand
from sievelib.parser import Parser

EXTENSIONS: tuple[str, ...] = (
    "fileinto", "reject", "ereject", "envelope", "imap4flags", "copy", "body", "variables",
    "relational", "comparator-i;ascii-numeric", "subaddress", "date", "index", "vacation",
    "include", "mailbox", "mboxmetadata", "duplicate", "editheader",
)
"""The Sieve extensions (RFC 5228 6 capability strings) scripts may ``require``, in the order
ManageSieve's ``SIEVE`` capability lists them."""

# Comparators every implementation has (RFC 5228 2.7.3): requiring them is allowed, not news.
_IMPLICIT = ("comparator-i;octet", "comparator-i;ascii-casemap")


def validate(text: str) -> list[str]:
    """The errors that keep ``text`` from being run, each ``"line N: what"`` (1-based line);
    an empty list for a script that may be stored.

    Checks the grammar (RFC 5228 8), that every command and tag of an extension is preceded
    by its ``require`` (3.2), and that every required extension is one this server runs."""
    parser = Parser()       # one per call: the parser keeps state between parses
    if not parser.parse(text.encode("utf-8")):
        return [parser.error]
    errors = []
    known = set(EXTENSIONS) | set(_IMPLICIT)
    for command in parser.result:
        if not isinstance(command, RequireCommand):
            continue
        wanted = command.arguments["capabilities"]
        for name in ([wanted] if not isinstance(wanted, list) else wanted):
            name = name.strip('"')
            if name not in known:
                errors.append(f"line {_line_of(text, name)}: require: unknown extension "
                              f"'{name}'")
    return errors


def _line_of(text: str, name: str) -> int:
    """The line of the first ``require`` naming ``name`` (sievelib keeps no positions)."""
    found = re.search(r'require\b[^;]*"' + re.escape(name) + '"', text)
    return text.count("\n", 0, found.start() if found else 0) + 1
