"""Checking a script before it is stored (ManageSieve PUTSCRIPT/CHECKSCRIPT, RFC 5804 2.6).

``validate(text) -> list of error strings``, each starting with ``line N:``; an empty list
means the script can be activated.  Parsing is sievelib's (with our commands registered, see
:mod:`mailstore.sieve.grammar`); on top of it this checks what the grammar alone does not:
capabilities we do not implement, comparators and relational operators, and constant
arguments that can only fail at run time (a :matches key with i;ascii-numeric).
"""

from __future__ import annotations

import re

from .grammar import Node, SieveSyntaxError, parse
from .interpreter import SUPPORTED
from .match import COMPARATORS, RELATIONS
from .message import is_address_header

EXTENSIONS: tuple[str, ...] = (
    "fileinto", "reject", "ereject", "envelope", "imap4flags", "copy", "body", "variables",
    "relational", "comparator-i;ascii-numeric", "subaddress", "date", "index", "vacation",
    "vacation-seconds", "include", "mailbox", "mboxmetadata", "servermetadata", "duplicate",
    "editheader", "encoded-character",
)
"""The capabilities ManageSieve announces as ``SIEVE`` (RFC 5804 1.7), in this order: what
:data:`~mailstore.sieve.interpreter.SUPPORTED` runs, without the two comparators every
implementation has (RFC 5228 2.7.3)."""


def validate(text: str | bytes) -> list[str]:
    """Errors in ``text`` as ``"line N: message"`` strings, first error first."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = text[: exc.start].count(b"\n") + 1
            return [f"line {line}: script is not UTF-8 (RFC 5228 2.1)"]
    try:
        script = parse(text)
    except SieveSyntaxError as exc:
        return [f"line {exc.line}: {exc.message}"]
    errors = []
    for capability in sorted(script.required - SUPPORTED):
        errors.append(f"line {_line_of(text, capability)}: unsupported extension "
                      f"{capability!r}")
    for node in _walk(script.commands):
        errors.extend(_check(node, script.required, text))
    return errors


def _walk(nodes: list[Node]):
    for node in nodes:
        yield node
        yield from _walk(node.tests)
        yield from _walk(node.block)


def _check(node: Node, required: set[str], text: str) -> list[str]:
    """Errors of one command or test, each placed on the line of the argument at fault."""
    errors: list[tuple[str, str]] = []  # (the text to find, the message)
    comparator = node.tags.get(":comparator")
    if isinstance(comparator, str) and "${" not in comparator:
        quoted = f'"{comparator}"'
        if comparator not in COMPARATORS:
            errors.append((quoted, f"unknown comparator {comparator!r}"))
        elif comparator == "i;ascii-numeric" and \
                "comparator-i;ascii-numeric" not in required:
            errors.append((quoted, "comparator i;ascii-numeric used without require"))
        elif comparator == "i;ascii-numeric" and (":contains" in node.tags or
                                                  ":matches" in node.tags):
            errors.append((quoted, f"comparator {comparator} cannot be used with :contains "
                                   "or :matches (RFC 4790 9.1.1)"))
    for tag in (":count", ":value"):
        relation = node.tags.get(tag)
        if isinstance(relation, str) and relation.lower() not in RELATIONS:
            errors.append((f'"{relation}"',
                           f"invalid relational match {relation!r} (RFC 5231 4.2)"))
    if node.name == "set" and node.args and not re.fullmatch(
            r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?", node.args[0]):
        errors.append((f'"{node.args[0]}"',
                       f"invalid variable name {node.args[0]!r} (RFC 5229 4)"))
    if node.name == "address" and node.args:
        for name in node.args[0] if isinstance(node.args[0], list) else [node.args[0]]:
            if "${" not in name and not is_address_header(name):
                errors.append((f'"{name}"', f"header {name!r} is not an address header "
                                            "(RFC 5228 5.1)"))
    if node.name in ("fileinto", "redirect") and node.args and node.args[0] == "":
        errors.append((node.name, f"{node.name} with an empty argument"))
    return [f"line {_line_of(text, needle)}: {message}" for needle, message in errors]


def _line_of(text: str, needle: str) -> int:
    """Where ``needle`` first appears (our tree keeps no positions; the first occurrence
    is right for every check above except repeats of the same argument)."""
    position = text.find(needle)
    return text.count("\n", 0, position) + 1 if position >= 0 else 1
