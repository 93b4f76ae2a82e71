"""The Sieve interpreter: a parsed script, a message and its envelope in, actions out.

RFC 5228 (core) with fileinto, reject/ereject (RFC 5429), envelope, imap4flags (RFC 5232),
copy (RFC 3894), body (RFC 5173), variables (RFC 5229), relational (RFC 5231),
comparator-i;ascii-numeric, subaddress (RFC 5233), date/index (RFC 5260), vacation (RFC 5230),
include (RFC 6609), mailbox (RFC 5490), duplicate (RFC 7352) and editheader (RFC 5293).

No I/O: the store is reached only through the callables of :class:`Environment`.  Runaway
scripts are bounded by a step counter (every command, test and matched value counts), not by a
clock, so a run is deterministic and its bound the same on a fast or a loaded machine.
"""

from __future__ import annotations

import re

from . import dates, vacation
from .actions import (
    Discard,
    Envelope,
    Environment,
    Redirect,
    Reject,
    Result,
    Store,
    Vacation,
)
from .grammar import Node, Script, SieveSyntaxError, parse
from .match import COMPARATORS, RELATIONS, MatchBudget, MatchError, Work, casemap, match
from .message import SieveMessage, addresses, decode_value, is_address_header

SUPPORTED = frozenset({
    "fileinto", "reject", "ereject", "envelope", "imap4flags", "copy", "body", "variables",
    "relational", "comparator-i;octet", "comparator-i;ascii-casemap",
    "comparator-i;ascii-numeric", "subaddress", "date", "index", "vacation",
    "vacation-seconds", "include", "mailbox", "mboxmetadata", "servermetadata", "duplicate",
    "editheader", "encoded-character",
})
"""Capabilities a script may require (also what ManageSieve announces as SIEVE)."""

SEPARATOR = "+"
"""The subaddress separator (RFC 5233 4), the same as plus-addressing at delivery."""

# Header fields editheader may not touch (RFC 5293 6: MUST NOT allow Received; we also keep
# the trace and loop-detection fields of delivery and auto-reply, as Pigeonhole does).
PROTECTED_FIELDS = {"received", "auto-submitted"}


class SieveRuntimeError(Exception):
    """A script failed while running (a limit, an invalid argument): implicit keep."""


class _Stop(Exception):
    pass


class _Return(Exception):
    pass


def run(script: str | Script, raw_message: bytes | SieveMessage, envelope: Envelope,
        env: Environment | None = None) -> Result:
    """Run ``script`` on ``raw_message``; never raises for a script or message problem.

    ``raw_message`` may be a :class:`SieveMessage` shared by the recipients of one delivery
    (what it decoded is reused; the run works on a clone).

    A script that does not parse, or fails at run time, yields an implicit keep into the
    default mailbox with ``Result.error`` set (RFC 5228 2.10.6).
    """
    env = env or Environment()
    interp = _Interpreter(raw_message, envelope, env)
    try:
        try:
            parsed = parse(script) if isinstance(script, str) else script
            interp.run_script(parsed, "")
        except _Stop:
            pass
        return interp.finish()
    except (SieveRuntimeError, SieveSyntaxError, MatchError) as exc:
        if isinstance(exc, SieveSyntaxError):
            # An included script that does not parse names its own line.
            line, message = exc.line, exc.message
        else:
            line, message = interp.line, str(exc)
        return Result(actions=[Store(env.default_mailbox, keep=True, implicit=True)],
                      error=str(exc), notes=interp.result.notes,
                      error_line=line, error_script=interp.script_name,
                      error_message=message)


_EXPANSION_CHARS_PER_STEP = 1024
"""Characters a variable reference expands to, counted as one step."""
_GLOB_ITERATIONS_PER_STEP = 64
"""Wildcard-match iterations counted as one step (a step is a few microseconds of Python;
an iteration a few tenths of one)."""


class _Interpreter:
    def __init__(self, raw: bytes | SieveMessage, envelope: Envelope, env: Environment):
        self.message = raw.clone() if isinstance(raw, SieveMessage) else SieveMessage(raw)
        self.envelope = envelope
        self.env = env
        self.limits = env.limits
        self.max_steps = env.limits.max_steps
        self.result = Result()
        self.steps = 0
        self.implicit_keep = True
        self.flags: list[str] = []  # imap4flags' internal variable (RFC 5232 3)
        self.variables: dict[str, str] = {}
        self.globals: dict[str, str] = {}
        self.global_names: set[str] = set()
        self.captures: list[str] = []
        self.required: set[str] = set()
        self.included_once: set[tuple[str, str]] = set()
        self.depth = 0
        self.added_header_bytes = 0
        self.line = 0
        """The line of the command or test running (for the error log)."""
        self.script_name = ""
        """The included script running ("" for the active script itself)."""

    # -- control ----------------------------------------------------------------------------

    def step(self, count: int = 1) -> None:
        self.steps += count
        if self.steps > self.max_steps:
            raise SieveRuntimeError(f"script exceeded {self.limits.max_steps} steps")

    def run_script(self, script: Script, name: str) -> None:
        unknown = script.required - SUPPORTED
        if unknown:
            raise SieveRuntimeError(f"unsupported extension {sorted(unknown)[0]}")
        outer_required, outer_vars = self.required, self.variables
        outer_name = self.script_name
        self.script_name = name
        self.required = script.required
        if name:  # an included script has its own variables, globals shared (RFC 6609 3.3)
            self.variables = {}
        try:
            self.block(script.commands)
        except _Return:
            pass
        finally:
            self.required, self.variables = outer_required, outer_vars
        # Restored only when it ended without an error: on one, where it happened stays.
        self.script_name = outer_name

    def block(self, commands: list[Node]) -> None:
        skip_else = False
        for node in commands:
            self.line = node.line
            self.step()
            name = node.name
            if name in ("elsif", "else"):
                if skip_else:
                    continue
                if name == "else" or self.test(node.tests[0]):
                    skip_else = True
                    self.block(node.block)
                continue
            skip_else = False
            if name == "if":
                if self.test(node.tests[0]):
                    skip_else = True
                    self.block(node.block)
                continue
            handler = getattr(self, "cmd_" + name, None)
            if handler is None:
                raise SieveRuntimeError(f"unsupported command {name}")
            handler(node)

    # -- strings and variables (RFC 5229 3) ---------------------------------------------------

    _REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.]*|[0-9]+)\}")
    _ENCODED = re.compile(r"\$\{(hex|unicode):([0-9A-Fa-f\s]*)\}", re.I)

    def s(self, value):
        """A string argument with variables expanded (only when ``variables`` is required)."""
        if isinstance(value, list):
            return [self.s(v) for v in value]
        if not isinstance(value, str):
            return value
        if "encoded-character" in self.required and "${" in value:
            value = self._ENCODED.sub(self._decode_char, value)
        if "variables" not in self.required or "${" not in value:
            return value
        return self._REF.sub(self._lookup, value)

    @staticmethod
    def _decode_char(found: re.Match) -> str:
        """RFC 5228 2.4.2.4: ${hex:...} octets (as UTF-8), ${unicode:...} code points."""
        numbers = found.group(2).split()
        try:
            if found.group(1).lower() == "hex":
                return bytes(int(n, 16) for n in numbers).decode("utf-8")
            return "".join(chr(int(n, 16)) for n in numbers)
        except (ValueError, OverflowError) as exc:
            raise SieveRuntimeError(f"invalid encoded character {found.group(0)}") from exc

    def _lookup(self, found: re.Match) -> str:
        value = self._value(found.group(1))
        # Each reference is charged for what it adds (one step a KiB), before the string is
        # built: thousands of ${x} in one string, run again by includes, would otherwise
        # be megabytes of copying per step (RFC 5229 6, RFC 5228 2.10.6).
        self.step(1 + len(value) // _EXPANSION_CHARS_PER_STEP)
        return value

    def _value(self, name: str) -> str:
        if name.isdigit():
            index = int(name)
            return self.captures[index] if index < len(self.captures) else ""
        low = name.lower()
        if low in self.variables:
            return self.variables[low]
        return self.globals.get(low, "")

    def set_variable(self, name: str, value: str) -> None:
        low = name.lower()
        value = value[: self.limits.max_variable_size]
        if low.startswith("global."):
            self.globals[low[7:]] = value
        elif low in self.global_names:
            self.globals[low] = value
        else:
            self.variables[low] = value

    # -- tests --------------------------------------------------------------------------------

    def test(self, node: Node) -> bool:
        self.line = node.line
        self.step()
        handler = getattr(self, "test_" + node.name, None)
        if handler is None:
            raise SieveRuntimeError(f"unsupported test {node.name}")
        return handler(node)

    def test_true(self, node: Node) -> bool:
        return True

    def test_false(self, node: Node) -> bool:
        return False

    def test_not(self, node: Node) -> bool:
        return not self.test(node.tests[0])

    def test_allof(self, node: Node) -> bool:
        return all(self.test(t) for t in node.tests)

    def test_anyof(self, node: Node) -> bool:
        return any(self.test(t) for t in node.tests)

    def test_size(self, node: Node) -> bool:
        limit = node.args[0]
        size = self.message.size
        return size > limit if ":over" in node.tags else size < limit

    def test_exists(self, node: Node) -> bool:
        return all(self.message.has(name) for name in _as_list(self.s(node.args[0])))

    def compare(self, node: Node, values: list[str], keys) -> bool:
        """The match of RFC 5228 2.7 with ``node``'s comparator and match type; sets the
        match variables on a :matches success (RFC 5229 3.2)."""
        spec = _SPECS.get(id(node))
        if spec is None or spec[0] is not node:
            spec = _SPECS[id(node)] = (node, *_compare_spec(node))
        _node, comparator, kind, relation = spec
        if comparator not in ("i;ascii-casemap", "i;octet") and \
                "comparator-" + comparator not in self.required:
            raise SieveRuntimeError(f"comparator {comparator} used without require")
        keys = _as_list(self.s(keys))
        if kind == ":count":
            values = [str(len(values))]
        self.step(len(values) * max(1, len(keys)))
        work = None
        if kind == ":matches":
            # What is left of the step bound, as wildcard-loop iterations: a key of
            # thousands of characters with ``?`` against a big body would otherwise be
            # pattern x value iterations of Python (minutes) inside one step.
            work = Work((self.max_steps - self.steps) * _GLOB_ITERATIONS_PER_STEP)
            before = work.left
        try:
            found, captures = match(values, keys, kind, comparator, relation, work)
        except MatchBudget:
            raise SieveRuntimeError(f"script exceeded {self.limits.max_steps} steps") from None
        if work is not None:
            self.step((before - work.left) // _GLOB_ITERATIONS_PER_STEP)
        if found and captures is not None and "variables" in self.required:
            self.captures = captures[:10]
        return found

    def indexed(self, node: Node, values: list) -> list:
        """RFC 5260 6: :index N (1-based) [:last] picks one field's value(s)."""
        index = node.tags.get(":index")
        if index is None:
            return values
        if index < 1:
            raise SieveRuntimeError(":index must be 1 or more")
        position = len(values) - index if ":last" in node.tags else index - 1
        return [values[position]] if 0 <= position < len(values) else []

    def test_header(self, node: Node) -> bool:
        names = _as_list(self.s(node.args[0]))
        values = []
        for name in names:
            values.extend(self.indexed(node, self.message.headers(name)))
        return self.compare(node, values, node.args[1])

    def address_part(self, node: Node, address: str) -> str | None:
        local, at, domain = address.rpartition("@")
        if not at:
            local, domain = address, ""
        if ":localpart" in node.tags:
            return local
        if ":domain" in node.tags:
            return domain
        if ":user" in node.tags or ":detail" in node.tags:
            user, sep, detail = local.partition(SEPARATOR)
            if ":user" in node.tags:
                return user
            return detail if sep else None  # no detail: matches nothing (RFC 5233 4)
        return address

    def test_address(self, node: Node) -> bool:
        names = _as_list(self.s(node.args[0]))
        values = []
        for name in names:
            if not is_address_header(name):
                raise SieveRuntimeError(f"address test on non-address header {name}")
            for field in self.indexed(node, self.message.headers(name)):
                # A field without any mailbox in it (an empty group, garbage) is tested as
                # the text it holds, as Pigeonhole does (RFC 5228 2.7.4 leaves it open).
                found = addresses(field) or ([field.strip()] if field.strip() else [])
                for address in found:
                    part = self.address_part(node, address)
                    if part is not None:
                        values.append(part)
        return self.compare(node, values, node.args[1])

    def test_envelope(self, node: Node) -> bool:
        values = []
        for name in _as_list(self.s(node.args[0])):
            low = name.lower()
            if low == "from":
                address = self.envelope.mail_from
                if not address:  # null reverse-path: "" whatever the part (RFC 5228 5.4)
                    values.append("")
                    continue
            elif low == "to":
                address = self.envelope.rcpt_to
            else:
                continue  # "auth" and others: no value
            part = self.address_part(node, address)
            if part is not None:
                values.append(part)
        return self.compare(node, values, node.args[1])

    def test_string(self, node: Node) -> bool:
        sources = _as_list(self.s(node.args[0]))
        if ":count" in node.tags:  # RFC 5229 5: empty strings are not counted
            sources = [v for v in sources if v != ""]
        return self.compare(node, sources, node.args[1])

    def test_body(self, node: Node) -> bool:
        if ":raw" in node.tags:
            values = [self.message.body_raw()]
        elif ":content" in node.tags:
            values = self.message.body_parts(_as_list(self.s(node.tags[":content"])))
        else:
            values = self.message.body_parts(None)
        self.step(sum(len(v) for v in values) // 4096)
        return self.compare(node, values, node.args[0])

    def test_hasflag(self, node: Node) -> bool:
        if len(node.args) == 2:
            names = _as_list(self.s(node.args[0]))
            flags = []
            for name in names:
                flags.extend(_split_flags(self._lookup_name(name)))
        else:
            flags = list(self.flags)
        return self.compare(node, flags, node.args[-1])

    def _lookup_name(self, name: str) -> str:
        low = name.lower()
        return self.variables.get(low, self.globals.get(low, ""))

    def test_mailboxexists(self, node: Node) -> bool:
        return all(self.env.mailbox_exists(name) for name in _as_list(self.s(node.args[0])))

    # mboxmetadata / servermetadata (RFC 5490 3.2-3.5)

    def _annotation(self, mailbox: str | None, name: str) -> str | None:
        if not name.startswith(("/private/", "/shared/")):
            return None  # not an entry name: no value (RFC 5464 3.2)
        return self.env.metadata(mailbox, name)

    def test_metadata(self, node: Node) -> bool:
        value = self._annotation(self.s(node.args[0]), self.s(node.args[1]))
        return self.compare(node, [] if value is None else [value], node.args[2])

    def test_metadataexists(self, node: Node) -> bool:
        mailbox = self.s(node.args[0])
        return all(self._annotation(mailbox, name) is not None
                   for name in _as_list(self.s(node.args[1])))

    def test_servermetadata(self, node: Node) -> bool:
        value = self._annotation(None, self.s(node.args[0]))
        return self.compare(node, [] if value is None else [value], node.args[1])

    def test_servermetadataexists(self, node: Node) -> bool:
        return all(self._annotation(None, name) is not None
                   for name in _as_list(self.s(node.args[0])))

    def test_date(self, node: Node) -> bool:
        header, part = self.s(node.args[0]), self.s(node.args[1])
        values = []
        for field in self.indexed(node, self.message.headers(header)):
            if header.lower() == "received":  # its date follows the last ";" (RFC 5260 4)
                field = field.rpartition(";")[2]
            when = dates.parse_date(field)
            if when is None:
                continue  # unparsable date: no value (RFC 5260 4)
            zone = self._zone(node, when[1])
            values.append(dates.part(when[0], zone, part))
        values = [v for v in values if v is not None]
        return self.compare(node, values, node.args[2])

    def test_currentdate(self, node: Node) -> bool:
        zone = self._zone(node, self.env.local_zone)
        value = dates.part(self.env.now, zone, self.s(node.args[0]))
        return self.compare(node, [] if value is None else [value], node.args[1])

    def _zone(self, node: Node, original: int) -> int:
        if ":originalzone" in node.tags:
            return original
        zone = node.tags.get(":zone")
        if zone is None:
            return self.env.local_zone
        minutes = dates.parse_zone(self.s(zone))
        if minutes is None:
            raise SieveRuntimeError(f"invalid :zone {zone}")
        return minutes

    def test_duplicate(self, node: Node) -> bool:
        key = self.duplicate_key(node)
        if key is None:
            return False
        seconds = min(node.tags.get(":seconds", self.limits.duplicate_default_seconds),
                      self.limits.duplicate_max_seconds)
        if self.env.duplicate_claim is not None:
            # Atomic: of two deliveries racing with the same id one takes it, the other
            # sees a duplicate (the claim is the record; with :last a seen id is refreshed
            # once delivered).
            seen = not self.env.duplicate_claim(key, seconds)
            if seen and ":last" in node.tags:
                self.result.duplicate_marks.append((key, seconds))
            return seen
        seen = self.env.duplicate_seen(key)
        # RFC 7352 3: the id is recorded (or, with :last, refreshed) once delivered; without
        # :last an existing record keeps its expiry.
        if not seen or ":last" in node.tags:
            self.result.duplicate_marks.append((key, seconds))
        return seen

    def duplicate_key(self, node: Node) -> str | None:
        if ":uniqueid" in node.tags:
            value = self.s(node.tags[":uniqueid"])
        else:
            name = self.s(node.tags.get(":header", "message-id"))
            found = self.message.headers(name)
            if not found:
                return None  # no such field: the test is false (RFC 7352 3.1)
            value = found[0].strip()
            if name.lower() == "message-id":
                value = value.strip()
        handle = self.s(node.tags.get(":handle", ""))
        return f"{handle}\0{value}"

    # -- actions ------------------------------------------------------------------------------

    def add_action(self, action) -> None:
        if len(self.result.actions) >= self.limits.max_actions:
            raise SieveRuntimeError(f"more than {self.limits.max_actions} actions")
        self.result.actions.append(action)

    def cmd_require(self, node: Node) -> None:
        pass  # checked when the script is loaded

    def cmd_stop(self, node: Node) -> None:
        raise _Stop

    def cmd_keep(self, node: Node) -> None:
        self.store(self.env.default_mailbox, node, keep=True)
        self.implicit_keep = False

    def cmd_fileinto(self, node: Node) -> None:
        mailbox = self.s(node.args[0])
        if not mailbox or "\0" in mailbox:
            raise SieveRuntimeError(f"invalid mailbox name {mailbox!r}")
        self.store(mailbox, node, create=":create" in node.tags)
        if ":copy" not in node.tags:
            self.implicit_keep = False

    def store(self, mailbox: str, node: Node, keep: bool = False, create: bool = False
              ) -> Store:
        if ":flags" in node.tags:
            flags = _dedupe(_split_flags(self.s(node.tags[":flags"])))
        else:
            flags = list(self.flags)
        self.check_conflict("store")
        # The same mailbox twice stores one copy (RFC 5228 4.1), with the flags of the last
        # action (as Pigeonhole does: tests/sieve_corpus/scripts/edge_flags_latest_wins).
        for action in self.result.actions:
            if isinstance(action, Store) and _same_mailbox(action.mailbox, mailbox):
                action.flags = tuple(flags)
                action.create = action.create or create
                action.keep = action.keep or keep
                return action
        action = Store(mailbox, tuple(flags), create, keep)
        self.add_action(action)
        return action

    def check_conflict(self, kind: str) -> None:
        """RFC 5429 2.1: reject/ereject cannot be combined with keep, fileinto, redirect or
        vacation (Pigeonhole makes this a runtime error)."""
        rejecting = any(isinstance(a, Reject) for a in self.result.actions)
        if kind == "reject":
            others = [a for a in self.result.actions if not isinstance(a, Discard)]
            if others:
                raise SieveRuntimeError("reject cannot be combined with other actions")
        elif rejecting:
            raise SieveRuntimeError(f"{kind} cannot be combined with reject")

    def cmd_discard(self, node: Node) -> None:
        self.implicit_keep = False
        if not any(isinstance(a, Discard) for a in self.result.actions):
            self.result.actions.append(Discard())

    def cmd_redirect(self, node: Node) -> None:
        address = self.s(node.args[0]).strip()
        found = addresses(address)
        if len(found) != 1 or "@" not in found[0]:
            raise SieveRuntimeError(f"redirect to an invalid address {address!r}")
        target = found[0]
        self.check_conflict("redirect")
        redirects = [a for a in self.result.actions if isinstance(a, Redirect)]
        if any(_same_address(a.address, target) for a in redirects):
            if ":copy" not in node.tags:
                self.implicit_keep = False
            return  # the same address twice: one redirect (RFC 5228 2.10.3)
        if len(redirects) >= self.limits.max_redirects:
            raise SieveRuntimeError(f"more than {self.limits.max_redirects} redirects")
        self.add_action(Redirect(target, ":copy" in node.tags))
        if ":copy" not in node.tags:
            self.implicit_keep = False

    def cmd_reject(self, node: Node, extended: bool = False) -> None:
        if self.result.reject is not None:
            raise SieveRuntimeError("more than one reject")
        self.check_conflict("reject")
        self.add_action(Reject(self.s(node.args[0]), extended))
        self.implicit_keep = False

    def cmd_ereject(self, node: Node) -> None:
        self.cmd_reject(node, extended=True)

    # imap4flags (RFC 5232 3)

    def _flag_target(self, node: Node) -> tuple[str | None, list[str]]:
        flags = _split_flags(self.s(node.args[-1]))
        name = self.s(node.args[0]) if len(node.args) == 2 else None
        return name, flags

    def _current(self, name: str | None) -> list[str]:
        return list(self.flags) if name is None else _split_flags(self._lookup_name(name))

    def _assign(self, name: str | None, flags: list[str]) -> None:
        flags = _dedupe(flags)
        if name is None:
            self.flags = flags
        else:
            self.set_variable(name, " ".join(flags))

    def cmd_setflag(self, node: Node) -> None:
        name, flags = self._flag_target(node)
        self._assign(name, flags)

    def cmd_addflag(self, node: Node) -> None:
        name, flags = self._flag_target(node)
        self._assign(name, self._current(name) + flags)

    def cmd_removeflag(self, node: Node) -> None:
        name, flags = self._flag_target(node)
        gone = {casemap(f) for f in flags}
        self._assign(name, [f for f in self._current(name) if casemap(f) not in gone])

    # variables (RFC 5229 4)

    def cmd_set(self, node: Node) -> None:
        name = node.args[0]
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?", name):
            raise SieveRuntimeError(f"invalid variable name {name!r}")
        value = self.s(node.args[1])
        tags = node.tags
        # Modifiers apply in precedence order: lower/upper, then lowerfirst/upperfirst,
        # then quotewildcard, then length (RFC 5229 4.1).
        if ":lower" in tags:
            value = value.lower()
        if ":upper" in tags:
            value = value.upper()
        if ":lowerfirst" in tags:
            value = value[:1].lower() + value[1:]
        if ":upperfirst" in tags:
            value = value[:1].upper() + value[1:]
        if ":quotewildcard" in tags:
            value = re.sub(r"([*?\\])", r"\\\1", value)
        if ":length" in tags:
            value = str(len(value))
        self.set_variable(name, value)

    # vacation (RFC 5230)

    def cmd_vacation(self, node: Node) -> None:
        self.check_conflict("vacation")
        if any(isinstance(a, Vacation) for a in self.result.actions):
            raise SieveRuntimeError("more than one vacation action")
        decision = vacation.decide(node, self.s, self.message, self.envelope, self.env,
                                   self.required)
        if isinstance(decision, str):
            self.result.notes.append(f"vacation not sent: {decision}")
            return
        self.add_action(decision)

    # include (RFC 6609)

    def cmd_include(self, node: Node) -> None:
        location = "global" if ":global" in node.tags else "personal"
        name = self.s(node.args[0])
        if ":once" in node.tags:
            if (location, name) in self.included_once:
                return
            self.included_once.add((location, name))
        if self.depth >= self.limits.max_include_depth:
            raise SieveRuntimeError(f"include nested deeper than {self.limits.max_include_depth}")
        text = self.env.get_script(location, name)
        if text is None:
            if ":optional" in node.tags:
                return
            raise SieveRuntimeError(f"included script {name!r} not found")
        self.depth += 1
        try:
            self.run_script(parse(text), name)
        finally:
            self.depth -= 1

    def cmd_return(self, node: Node) -> None:
        raise _Return

    def cmd_global(self, node: Node) -> None:
        for name in _as_list(node.args[0]):
            self.global_names.add(name.lower())

    # editheader (RFC 5293)

    def cmd_addheader(self, node: Node) -> None:
        name, value = self.s(node.args[0]), self.s(node.args[1])
        if not re.fullmatch(r"[\x21-\x39\x3b-\x7e]+", name):
            raise SieveRuntimeError(f"addheader: invalid field name {name!r}")
        if name.lower() in PROTECTED_FIELDS:
            return  # silently ignored, as Pigeonhole does for protected fields
        self.added_header_bytes += len(name) + len(value) + 4
        if self.added_header_bytes > self.limits.max_added_header_bytes:
            raise SieveRuntimeError(f"addheader added more than "
                                    f"{self.limits.max_added_header_bytes} characters of fields")
        self.message.add_field(name, value, ":last" in node.tags)

    def cmd_deleteheader(self, node: Node) -> None:
        name = self.s(node.args[0])
        if name.lower() in PROTECTED_FIELDS:
            return
        patterns = self.s(node.args[1]) if len(node.args) == 2 else None
        low = name.lower()
        positions = [i for i, (n, _) in enumerate(self.message.fields) if n.lower() == low]
        index = node.tags.get(":index")
        if index is not None:
            position = len(positions) - index if ":last" in node.tags else index - 1
            positions = [positions[position]] if 0 <= position < len(positions) else []
        chosen = set()
        for i in positions:
            if patterns is None:
                chosen.add(i)
                continue
            value = decode_value(self.message.fields[i][1])
            saved = self.captures
            if self.compare(node, [value], patterns):
                chosen.add(i)
            self.captures = saved  # deleteheader does not set match variables
        self.message.delete_fields(lambda i, _n, _v: i not in chosen)

    # -- the end ------------------------------------------------------------------------------

    def finish(self) -> Result:
        result = self.result
        if self.implicit_keep:
            # With the flags the internal variable holds at the end (RFC 5232 3).
            action = self.store(self.env.default_mailbox, Node("keep"), keep=True)
            action.implicit = True
        if self.message.edited:
            result.message = self.message.as_bytes()
        return result


# (node, comparator, match type, relation) by id(node): derived once from a parsed node,
# which the parse cache shares between runs; the node itself is kept to make the id safe.
_SPECS: dict[int, tuple] = {}


def _compare_spec(node: Node) -> tuple[str, str, str | None]:
    comparator = node.tags.get(":comparator", "i;ascii-casemap")
    if comparator not in COMPARATORS:
        raise SieveRuntimeError(f"unknown comparator {comparator}")
    kind = next((t for t in (":is", ":contains", ":matches", ":count", ":value")
                 if t in node.tags), ":is")
    relation = None
    if kind in (":count", ":value"):
        relation = str(node.tags[kind]).lower()
        if relation not in RELATIONS:
            raise SieveRuntimeError(f"invalid relational match {relation}")
    if len(_SPECS) > 65536:
        _SPECS.clear()
    return comparator, kind, relation


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _split_flags(value) -> list[str]:
    """Flag lists are space-separated in each string (RFC 5232 3)."""
    out = []
    for item in _as_list(value):
        out.extend(item.split())
    return out


def _dedupe(flags: list[str]) -> list[str]:
    """Flags without repeats; case-insensitive (IMAP flags are, RFC 3501 2.3.2)."""
    seen, out = set(), []
    for flag in flags:
        key = casemap(flag)
        if key not in seen:
            seen.add(key)
            out.append(flag)
    return out


def _same_address(a: str, b: str) -> bool:
    """Local parts are case-sensitive, domains are not (RFC 5321 2.4)."""
    local_a, _, domain_a = a.rpartition("@")
    local_b, _, domain_b = b.rpartition("@")
    return local_a == local_b and domain_a.lower() == domain_b.lower()


def _same_mailbox(a: str, b: str) -> bool:
    if a.upper() == "INBOX" and b.upper() == "INBOX":
        return True
    return a == b
