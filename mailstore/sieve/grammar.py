"""Sieve parsing: sievelib's parser, with the commands it lacks registered here, into our tree.

sievelib (PyPI 1.6) parses RFC 5228 with a table of command classes, one per command, each
declaring its arguments.  Its table lacks several extensions we run (ereject, include,
duplicate, editheader, mailboxexists, the variables ``string`` test, ``:index``, the subaddress
address parts, comparator names other than i;octet/i;ascii-casemap), so this module registers
replacement or new classes through ``sievelib.commands.add_commands`` -- the library's own
extension point -- rather than patching it.  The parse result is then converted into
:class:`Node` trees with unquoted strings and decoded numbers, which is all the interpreter
reads: sievelib's slot model stays behind this module.

Parsed trees are cached by script text (a script runs once per delivery; parsing a 20-rule
script costs more than running it).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from sievelib import commands as sc
from sievelib.parser import Parser

# -- argument definitions --------------------------------------------------------------------

COMPARATOR = {"name": "comparator", "type": ["tag"], "values": [":comparator"],
              "extra_arg": {"type": "string"}, "required": False}
ADDRESS_PART = {"name": "address-part", "type": ["tag"],
                "values": [":localpart", ":domain", ":all"],
                "extension_values": {":user": "subaddress", ":detail": "subaddress"},
                "required": False}
MATCH_TYPE = {"name": "match-type", "type": ["tag"], "values": [":is", ":contains", ":matches"],
              "extension_values": {":count": "relational", ":value": "relational"},
              "extra_arg": {"type": "string", "valid_for": [":count", ":value"]},
              "required": False}
INDEX = {"name": "index", "type": ["tag"], "values": [":index"], "extension": "index",
         "extra_arg": {"type": "number"}, "required": False}
LAST = {"name": "last", "type": ["tag"], "values": [":last"], "extension": "index",
        "required": False}
MIME = {"name": "mime", "type": ["tag"], "values": [":mime"], "extension": "mime",
        "required": False}


def _tag(name: str, extension: str | None = None, arg: str | list | None = None) -> dict:
    spec = {"name": name, "type": ["tag"], "values": [":" + name], "required": False}
    if extension:
        spec["extension"] = extension
    if arg:
        spec["extra_arg"] = {"type": arg}
    return spec


def _req(name: str, *types: str) -> dict:
    return {"name": name, "type": list(types), "required": True}


def _opt(name: str, *types: str) -> dict:
    return {"name": name, "type": list(types), "required": False}


STRINGS = ("string", "stringlist")


class _OptionalFirst:
    """For commands whose first positional argument is optional (setflag "var" "flags";
    hasflag; deleteheader "name" "values"): sievelib fills the optional slot first, and
    this moves a lone argument back into the required slot at the end."""

    first: str
    second: str
    lone_is_first = False

    def reassign_arguments(self):
        if self.first in self.arguments and self.second not in self.arguments:
            if not self.lone_is_first:
                self.arguments[self.second] = self.arguments.pop(self.first)
            self.rargs_cnt = 1


# -- commands: names are those sievelib derives (name.lower().capitalize() + "Command") -------

class AddressCommand(sc.TestCommand):
    args_definition = [COMPARATOR, ADDRESS_PART, MATCH_TYPE, INDEX, LAST, MIME,
                       _req("header-list", *STRINGS), _req("key-list", *STRINGS)]


class EnvelopeCommand(sc.TestCommand):
    extension = "envelope"
    args_definition = [COMPARATOR, ADDRESS_PART, MATCH_TYPE,
                       _req("header-list", *STRINGS), _req("key-list", *STRINGS)]


class HeaderCommand(sc.TestCommand):
    args_definition = [COMPARATOR, MATCH_TYPE, INDEX, LAST, MIME,
                       _req("header-names", *STRINGS), _req("key-list", *STRINGS)]


class StringCommand(sc.TestCommand):
    """RFC 5229 5: string [COMPARATOR] [MATCH-TYPE] <source: string-list> <key-list>."""
    extension = "variables"
    args_definition = [COMPARATOR, MATCH_TYPE, _req("source", *STRINGS),
                       _req("key-list", *STRINGS)]


class BodyCommand(sc.TestCommand):
    extension = "body"
    args_definition = [COMPARATOR, MATCH_TYPE,
                       {"name": "body-transform", "values": [":raw", ":content", ":text"],
                        "extra_arg": {"type": ["string", "stringlist"],
                                      "valid_for": [":content"]},
                        "type": ["tag"], "required": False},
                       _req("key-list", *STRINGS)]


class DateCommand(sc.TestCommand):
    extension = "date"
    args_definition = [{"name": "zone", "type": ["tag"], "values": [":zone", ":originalzone"],
                        "extra_arg": {"type": "string", "valid_for": [":zone"]},
                        "required": False},
                       COMPARATOR, MATCH_TYPE, INDEX, LAST,
                       _req("header-name", "string"), _req("date-part", "string"),
                       _req("key-list", *STRINGS)]


class CurrentdateCommand(sc.TestCommand):
    extension = "date"
    args_definition = [{"name": "zone", "type": ["tag"], "values": [":zone"],
                        "extra_arg": {"type": "string"}, "required": False},
                       COMPARATOR, MATCH_TYPE,
                       _req("date-part", "string"), _req("key-list", *STRINGS)]


class HasflagCommand(_OptionalFirst, sc.TestCommand):
    extension = "imap4flags"
    non_deterministic_args = True
    first, second = "variable-list", "list-of-flags"
    args_definition = [COMPARATOR, MATCH_TYPE, _opt("variable-list", *STRINGS),
                       _req("list-of-flags", *STRINGS)]


class MailboxexistsCommand(sc.TestCommand):
    """RFC 5490 3.1: mailboxexists <mailbox-names: string-list>."""
    extension = "mailbox"
    args_definition = [_req("mailbox-names", *STRINGS)]


class MetadataCommand(sc.TestCommand):
    """RFC 5490 3.3: metadata [MATCH-TYPE] [COMPARATOR] <mailbox: string>
    <annotation-name: string> <key-list: string-list>."""
    extension = "mboxmetadata"
    args_definition = [COMPARATOR, MATCH_TYPE, _req("mailbox", "string"),
                       _req("annotation-name", "string"), _req("key-list", *STRINGS)]


class MetadataexistsCommand(sc.TestCommand):
    """RFC 5490 3.2: metadataexists <mailbox: string> <annotation-names: string-list>."""
    extension = "mboxmetadata"
    args_definition = [_req("mailbox", "string"), _req("annotation-names", *STRINGS)]


class ServermetadataCommand(sc.TestCommand):
    """RFC 5490 3.5: servermetadata [MATCH-TYPE] [COMPARATOR] <annotation-name: string>
    <key-list: string-list>."""
    extension = "servermetadata"
    args_definition = [COMPARATOR, MATCH_TYPE, _req("annotation-name", "string"),
                       _req("key-list", *STRINGS)]


class ServermetadataexistsCommand(sc.TestCommand):
    """RFC 5490 3.4: servermetadataexists <annotation-names: string-list>."""
    extension = "servermetadata"
    args_definition = [_req("annotation-names", *STRINGS)]


class DuplicateCommand(sc.TestCommand):
    """RFC 7352 3: duplicate [:handle] [:header / :uniqueid] [:seconds] [:last]."""
    extension = "duplicate"
    args_definition = [_tag("handle", arg="string"), _tag("header", arg="string"),
                       _tag("uniqueid", arg="string"), _tag("seconds", arg="number"),
                       {"name": "last", "type": ["tag"], "values": [":last"],
                        "required": False}]
    # Only optional tags: sievelib would call the test complete as soon as its name is
    # read and refuse the tags that follow, so it stays open until the token after it
    # ("{", "," or ")") makes the parser call reassign_arguments.
    non_deterministic_args = True
    _ended = False

    def reassign_arguments(self):
        self._ended = True

    def iscomplete(self, atype=None, avalue=None):
        return self._ended and (self.curarg is None or "extra_arg" not in self.curarg)


class FileintoCommand(sc.ActionCommand):
    extension = "fileinto"
    args_definition = [_tag("copy", "copy"), _tag("create", "mailbox"),
                       _tag("flags", "imap4flags", ["string", "stringlist"]),
                       _req("mailbox", "string")]


class KeepCommand(sc.ActionCommand):
    args_definition = [_tag("flags", "imap4flags", ["string", "stringlist"])]


class RedirectCommand(sc.ActionCommand):
    args_definition = [_tag("copy", "copy"), _req("address", "string")]


class RejectCommand(sc.ActionCommand):
    extension = "reject"
    args_definition = [_req("text", "string")]


class ErejectCommand(sc.ActionCommand):
    extension = "ereject"
    args_definition = [_req("text", "string")]


class _FlagAction(_OptionalFirst, sc.ActionCommand):
    extension = "imap4flags"
    non_deterministic_args = True
    first, second = "variable-name", "list-of-flags"
    args_definition = [_opt("variable-name", "string"), _req("list-of-flags", *STRINGS)]


class SetflagCommand(_FlagAction):
    pass


class AddflagCommand(_FlagAction):
    pass


class RemoveflagCommand(_FlagAction):
    pass


class VacationCommand(sc.ActionCommand):
    extension = "vacation"
    args_definition = [_tag("subject", arg="string"), _tag("days", arg="number"),
                       {"name": "seconds", "type": ["tag"],
                        "extension_values": {":seconds": "vacation-seconds"},
                        "extra_arg": {"type": "number"}, "required": False},
                       _tag("from", arg="string"),
                       _tag("addresses", arg=["string", "stringlist"]),
                       _tag("handle", arg="string"), _tag("mime"),
                       _req("reason", "string")]


class IncludeCommand(sc.ActionCommand):
    """RFC 6609 3.2: include [:personal / :global] [:once] [:optional] <name: string>."""
    extension = "include"
    args_definition = [{"name": "location", "type": ["tag"], "values": [":personal", ":global"],
                        "required": False},
                       _tag("once"), _tag("optional"), _req("name", "string")]


class ReturnCommand(sc.ActionCommand):
    extension = "include"
    args_definition = []


class GlobalCommand(sc.ActionCommand):
    extension = "include"
    args_definition = [_req("names", *STRINGS)]


class AddheaderCommand(sc.ActionCommand):
    """RFC 5293 4: addheader [:last] <field-name: string> <value: string>."""
    extension = "editheader"
    args_definition = [_tag("last"), _req("field-name", "string"), _req("value", "string")]


class DeleteheaderCommand(_OptionalFirst, sc.ActionCommand):
    """RFC 5293 5: deleteheader [:index <fieldno> [:last]] [COMPARATOR] [MATCH-TYPE]
    <field-name: string> [<value-patterns: string-list>]."""
    extension = "editheader"
    non_deterministic_args = True
    first, second = "field-name", "value-patterns"
    lone_is_first = True
    args_definition = [{**INDEX, "extension": "editheader"},
                       {**LAST, "extension": "editheader"}, COMPARATOR, MATCH_TYPE,
                       _opt("field-name", "string"), _req("value-patterns", *STRINGS)]


sc.add_commands([AddressCommand, EnvelopeCommand, HeaderCommand, StringCommand, BodyCommand,
                 DateCommand, CurrentdateCommand, HasflagCommand, MailboxexistsCommand,
                 MetadataCommand, MetadataexistsCommand, ServermetadataCommand,
                 ServermetadataexistsCommand,
                 DuplicateCommand, FileintoCommand, KeepCommand, RedirectCommand,
                 RejectCommand, ErejectCommand, SetflagCommand, AddflagCommand,
                 RemoveflagCommand, VacationCommand, IncludeCommand, ReturnCommand,
                 GlobalCommand, AddheaderCommand, DeleteheaderCommand])

# -- our tree --------------------------------------------------------------------------------


@dataclass
class Node:
    """One command or test: ``name``, its tagged arguments (``{":flags": [...], ":copy":
    True, ":count": "ge"}``), positional arguments (str, list of str, or int), tests (for
    if/elsif/not/allof/anyof) and the block of commands it holds."""

    name: str
    tags: dict = field(default_factory=dict)
    args: list = field(default_factory=list)
    tests: list = field(default_factory=list)
    block: list = field(default_factory=list)
    line: int = field(default=0, compare=False)
    """Where the command's or test's name is (1-based; 0: unknown), for runtime errors."""


class SieveSyntaxError(ValueError):
    """A script that does not parse; ``line`` is 1-based (0 if unknown)."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


_NUMBER = re.compile(r"([0-9]+)([KMGkmg]?)")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _number(text: str) -> int:
    digits, unit = _NUMBER.fullmatch(text).groups()
    return int(digits) * _UNITS[unit.lower()]


def _string(raw: str) -> str:
    """The value of a quoted string or a ``text:`` multi-line string (RFC 5228 2.4.2)."""
    if raw.startswith('"'):
        # Only \\ and \" are defined; any other backslash is dropped (RFC 5228 2.4.2).
        return re.sub(r"\\(.)", r"\1", raw[1:-1], flags=re.DOTALL)
    # text: [comment] CRLF *(line) "." CRLF; a line starting with ".." loses one dot.
    body = raw.split("\n", 1)[1] if "\n" in raw else ""
    body = re.sub(r"\r?\n\.\r?$", "", "\n" + body)[1:] if body else ""
    lines = body.split("\n")
    lines = [line[1:] if line.startswith("..") else line for line in lines]
    text = "\n".join(lines)
    text = text.replace("\r\n", "\n").replace("\n", "\r\n")
    return text + ("\r\n" if text else "")


def _value(raw):
    if isinstance(raw, list):
        return [_string(item) for item in raw]
    if isinstance(raw, str) and (raw.startswith('"') or raw.startswith("text:")):
        return _string(raw)
    if isinstance(raw, str) and _NUMBER.fullmatch(raw):
        return _number(raw)
    return raw


def _convert(command) -> Node:
    node = Node(command.name)
    for spec in command.args_definition:
        name = spec["name"]
        if name not in command.arguments:
            continue
        raw = command.arguments[name]
        kinds = spec["type"]
        if "tag" in kinds:
            extra = command.extra_arguments.get(name)
            node.tags[raw.lower()] = True if extra is None else _value(extra)
        elif kinds == ["testlist"]:
            node.tests.extend(_convert(t) for t in raw)
        elif kinds == ["test"]:
            node.tests.append(_convert(raw))
        else:
            node.args.append(_value(raw))
    node.block = [_convert(child) for child in command.children]
    return node


@dataclass
class Script:
    """A parsed script: its commands and the capabilities it requires."""

    commands: list[Node]
    required: set[str]


@functools.lru_cache(maxsize=256)
def parse(text: str) -> Script:
    """Parse a script; raises :class:`SieveSyntaxError`.  Cached by text (a Script is never
    modified by the interpreter, so sharing one between deliveries is safe)."""
    parser = Parser()
    if not parser.parse(text.encode("utf-8") if isinstance(text, str) else text):
        match = re.match(r"line (\d+): (.*)", parser.error, re.DOTALL)
        if match:
            raise SieveSyntaxError(int(match.group(1)), match.group(2))
        raise SieveSyntaxError(0, parser.error)
    _check_terminated(parser, text)
    commands = [_convert(c) for c in parser.result]
    _place(commands, parser, text)
    required: set[str] = set()
    for node in commands:
        if node.name == "require":
            value = node.args[0]
            required.update([value] if isinstance(value, str) else value)
    return Script(commands, required)


def _preorder(nodes: list[Node]):
    for node in nodes:
        yield node
        yield from _preorder(node.tests)
        yield from _preorder(node.block)


def _place(commands: list[Node], parser: Parser, text: str | bytes) -> None:
    """Give each node the line of its name.  RFC 5228 8.1: identifiers occur only as
    command and test names, and the tree in pre-order (a command, its tests, its block)
    is source order, so the n-th identifier token is the n-th node.  Should the two ever
    disagree in number, lines stay 0 (unknown) rather than wrong."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    lines = []
    lexer = parser.lexer
    for ttype, _value in lexer.scan(data):
        if ttype == "identifier":
            lines.append(lexer.curlineno())
    nodes = list(_preorder(commands))
    if len(nodes) == len(lines):
        for node, line in zip(nodes, lines, strict=True):
            node.line = line


def _check_terminated(parser: Parser, text: str | bytes) -> None:
    """RFC 5228 8.1: ``command = identifier arguments (";" / block)``.  sievelib accepts a
    last command cut off by the end of the script (``keep;\n discard``); Pigeonhole refuses
    it, on the line where the script ends, and so do we.  The last token that is not a
    comment must be ``;`` or ``}`` (or there is none: an empty script)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    last = None
    for ttype, _value in parser.lexer.scan(data):
        if ttype not in ("hash_comment", "bracket_comment"):
            last = ttype
    if last not in (None, "semicolon", "right_cbracket"):
        raise SieveSyntaxError(data.count(b"\n") + 1,
                               "expected ';' or a block at the end of the last command, "
                               "found the end of the script (RFC 5228 8.1)")
