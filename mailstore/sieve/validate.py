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


# Where each capability shows in a script: command/test names and tags (RFC 5228 3.2: a
# capability required but never used is harmless, but often a sign of a typo elsewhere).
# Capabilities whose use is harder to see (variables, encoded-character, comparators) are
# not checked: a warning must never be wrong.
_USED_BY: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "fileinto": (frozenset({"fileinto"}), frozenset()),
    "reject": (frozenset({"reject"}), frozenset()),
    "ereject": (frozenset({"ereject"}), frozenset()),
    "envelope": (frozenset({"envelope"}), frozenset()),
    "imap4flags": (frozenset({"setflag", "addflag", "removeflag", "hasflag"}),
                   frozenset({":flags"})),
    "copy": (frozenset(), frozenset({":copy"})),
    "body": (frozenset({"body"}), frozenset()),
    "relational": (frozenset(), frozenset({":count", ":value"})),
    "subaddress": (frozenset(), frozenset({":user", ":detail"})),
    "date": (frozenset({"date", "currentdate"}), frozenset()),
    "index": (frozenset(), frozenset({":index", ":last"})),
    "vacation": (frozenset({"vacation"}), frozenset()),
    "vacation-seconds": (frozenset(), frozenset({":seconds"})),
    "include": (frozenset({"include", "return", "global"}), frozenset()),
    "mailbox": (frozenset({"mailboxexists"}), frozenset({":create"})),
    "mboxmetadata": (frozenset({"metadata", "metadataexists"}), frozenset()),
    "servermetadata": (frozenset({"servermetadata", "servermetadataexists"}), frozenset()),
    "duplicate": (frozenset({"duplicate"}), frozenset()),
    "editheader": (frozenset({"addheader", "deleteheader"}), frozenset()),
}


def warnings(text: str, limits=None, mailbox_exists=None) -> list[str]:
    """What is valid but probably not meant (RFC 5804 1.3 ``WARNINGS``), as ``"line N:
    warning: ..."`` strings, in line order.  Call on a script :func:`validate` accepts.

    As Pigeonhole: a vacation ``:days`` under ``limits.vacation_min_days`` (the minimum is
    used), a hash comment ending the script without a line break.  Ours besides: ``:days``
    or ``:seconds`` over the maximum (clamped), a ``fileinto`` without ``:create`` into a
    mailbox that does not exist (``mailbox_exists(name)``; the message goes to INBOX), an
    extension required but never used."""
    from .actions import Limits

    limits = limits or Limits()
    try:
        script = parse(text)
    except SieveSyntaxError:
        return []
    found: list[tuple[int, str]] = []
    nodes = list(_walk(script.commands))
    names = {n.name for n in nodes}
    tags = {t for n in nodes for t in n.tags}
    for node in nodes:
        if node.name == "require":
            wanted = node.args[0] if isinstance(node.args[0], list) else [node.args[0]]
            for capability in wanted:
                commands, used_tags = _USED_BY.get(capability, (None, None))
                if commands is not None and not (commands & names or used_tags & tags):
                    found.append((node.line, f"extension '{capability}' is required but "
                                             "not used"))
        elif node.name == "vacation":
            days = node.tags.get(":days")
            if isinstance(days, int) and days < limits.vacation_min_days:
                found.append((node.line, f"specified :days value '{days}' is under the "
                                         f"minimum ({limits.vacation_min_days} is used)."))
            elif isinstance(days, int) and days > limits.vacation_max_days:
                found.append((node.line, f"specified :days value '{days}' is over the "
                                         f"maximum ({limits.vacation_max_days} is used)."))
            seconds = node.tags.get(":seconds")
            if isinstance(seconds, int) and seconds > limits.vacation_max_days * 86400:
                found.append((node.line, f"specified :seconds value '{seconds}' is over the "
                                         f"maximum ({limits.vacation_max_days * 86400} is "
                                         "used)."))
        elif node.name == "fileinto" and mailbox_exists is not None and node.args \
                and ":create" not in node.tags:
            mailbox = node.args[0]
            if isinstance(mailbox, str) and "${" not in mailbox \
                    and mailbox.upper() != "INBOX" and not mailbox_exists(mailbox):
                found.append((node.line, f"mailbox '{mailbox}' does not exist: fileinto "
                                         "keeps the message in INBOX instead (add :create "
                                         "to make it, RFC 5490 3.2)"))
    if not text.endswith("\n") and _ends_in_hash_comment(text):
        found.append((text.count("\n") + 1, "no newline (CRLF) at end of hash comment at "
                                            "end of file."))
    found.sort(key=lambda item: item[0])
    return [f"line {line}: warning: {message}" for line, message in found]


def _ends_in_hash_comment(text: str) -> bool:
    """Whether the script's last token is a ``#`` comment (RFC 5228 2.3: it ends with a
    CRLF; at the end of the script Pigeonhole warns)."""
    from sievelib.parser import Parser

    last = None
    for ttype, _value in Parser().lexer.scan(text.encode("utf-8")):
        last = ttype
    return last == "hash_comment"
