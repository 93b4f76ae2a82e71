"""Each user's Sieve scripts (RFC 5228) and which one is active, as ManageSieve (RFC 5804)
manages them; docs/decisions/0023-sieve-scripts-storage.md.

One row per user in ``JAMES_SIEVE_SCRIPTS``.  The row's *directory* cell ``d:dir`` names every
script (name -> the cell holding its text, and its size) and the active one; script texts live
in cells ``s:<cell id>`` of the same row.  Every change to the set of scripts or to the active
one is made by one check-and-put of the directory (the only multi-cell atomicity HBase's
Thrift1 gateway offers is one check-and-put), so:

* at most one script is active, and the active one always exists: a reader of the directory
  sees the state before or after a change, never a half-made one;
* a delivery reading the active script while it is switched or replaced gets the old script or
  the new one, never none (its text cell is written before the directory names it, and deleted
  only after the directory stops naming it: a reader that finds it gone reads the directory
  again);
* the per-user limits (number of scripts, script size, total size) hold under concurrent
  uploads: they are checked against the directory that the check-and-put then replaces.

Script *validity* is not checked here: storage keeps any text (the ManageSieve server and
``mailadmin sieve put`` validate before they put).  All methods are synchronous and
thread-safe, like the rest of the store.  Errors are :mod:`mailstore.errors`'s.
"""

from __future__ import annotations

import json
import os
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from . import keys, names
from .backends.base import Backend
from .errors import (
    AlreadyExists,
    Conflict,
    InvalidName,
    MailStoreError,
    NotFound,
    OverQuota,
    TooLarge,
)
from .schema import SIEVE_SCRIPTS

DIRECTORY = b"d:dir"
SCRIPT_FAMILY = b"s"

MAX_NAME_CHARS = 128
"""Longest script name, in characters.  RFC 5804 1.6: servers MUST allow at least 128."""

# A change that loses its check-and-put to a concurrent change of the same user's scripts is
# retried against the new directory; only a user whose scripts are changed this many times
# during one change gets Conflict.
_ATTEMPTS = 20

# A text cell that no directory names and is older than this is a leftover of a writer that
# died between writing the text and the check-and-put; younger ones may belong to a change in
# flight, so they are left alone (seconds).
_LEFTOVER_AGE = 3600


class ScriptActive(MailStoreError):
    """The active script cannot be deleted (RFC 5804 2.10: deactivate it first)."""


class TooManyScripts(OverQuota):
    """The user already has the maximum number of scripts."""


@dataclass(frozen=True)
class ScriptLimits:
    """Per-user limits ([managesieve] settings).  Sizes are octets of UTF-8 text."""

    max_scripts: int = 20
    max_script_size: int = 64 * 1024
    max_total_size: int = 1024 * 1024


@dataclass(frozen=True)
class _Entry:
    cell: str
    size: int


class _Directory:
    """The decoded ``d:dir`` cell: scripts by name and the active name (or None)."""

    def __init__(self, raw: bytes | None):
        self.raw = raw
        data = json.loads(raw) if raw else {}
        self.active: str | None = data.get("active")
        self.scripts: dict[str, _Entry] = {n: _Entry(c, s)
                                          for n, (c, s) in data.get("scripts", {}).items()}

    def encode(self) -> bytes:
        # Never empty (HBase cannot tell an empty cell from an absent one), and canonical, so
        # that equal directories have equal bytes.
        return json.dumps({"active": self.active,
                           "scripts": {n: [e.cell, e.size]
                                       for n, e in sorted(self.scripts.items())}},
                          separators=(",", ":"), sort_keys=True).encode()

    def total_size(self) -> int:
        return sum(e.size for e in self.scripts.values())


def check_script_name(name: str) -> str:
    """``name`` if it can name a script, else InvalidName.

    RFC 5804 1.6: a script name is Net-Unicode (RFC 5198: NFC) and contains no control
    characters (U+0000-U+001F, U+007F-U+009F) and no line or paragraph separator (U+2028,
    U+2029).  Names are compared as given (case-sensitive), after NFC."""
    if not isinstance(name, str) or not name:
        raise InvalidName("script name is empty")
    name = unicodedata.normalize("NFC", name)
    if len(name) > MAX_NAME_CHARS:
        raise InvalidName(f"script name longer than {MAX_NAME_CHARS} characters")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in "\u2028\u2029" for c in name):
        raise InvalidName("script name contains a control character")
    return name


def _new_cell_id(now: float) -> str:
    """A text cell's qualifier: 12 hex digits of milliseconds (so leftovers can be aged), then
    16 random ones."""
    return f"{int(now * 1000):012x}{os.urandom(8).hex()}"


def _cell_age(cell: str, now: float) -> float:
    try:
        return now - int(cell[:12], 16) / 1000
    except ValueError:
        return float("inf")


class SieveScripts:
    """The Sieve scripts of every user of one store (``MailStore.sieve_scripts``).

    ``limits`` applies to :meth:`put`, :meth:`rename` and :meth:`check_space`; ``clock`` gives
    the time (seconds) for the text cells' ids; ``user_exists`` is called with a normalised
    user name before every change and must raise NotFound for an unknown user.
    """

    def __init__(self, backend: Backend, *, limits: ScriptLimits | None = None,
                 clock: Callable[[], float], user_exists: Callable[[str], object],
                 user_keys: keys.UserKeys | None = None):
        self.backend = backend
        self.table = backend.table(SIEVE_SCRIPTS.name)
        self.keys = user_keys or keys.UserKeys()
        self.limits = limits or ScriptLimits()
        self.clock = clock
        self.user_exists = user_exists

    # -- reads -----------------------------------------------------------------------------

    def _directory(self, row: bytes) -> _Directory:
        return _Directory(self.table.row(row, [DIRECTORY]).get(DIRECTORY))

    def list(self, user: str) -> list[tuple[str, bool]]:
        """``(name, active)`` of each of ``user``'s scripts, by name (code point order)."""
        directory = self._directory(self.keys.user_key(names.normalize_user(user)))
        return [(n, n == directory.active) for n in sorted(directory.scripts)]

    def get(self, user: str, name: str) -> str | None:
        """The text of ``user``'s script ``name``, or None if there is none."""
        return self._read(names.normalize_user(user), lambda d: check_script_name(name))

    def active(self, user: str) -> tuple[str, str] | None:
        """``(name, text)`` of ``user``'s active script, or None when none is active.

        What delivery runs.  Two gets (the directory, then the one text cell), not a read of
        the whole row: the row holds every script of the user."""
        found: list[str] = []

        def pick(directory: _Directory) -> str | None:
            found[:] = [directory.active] if directory.active else []
            return directory.active
        text = self._read(names.normalize_user(user), pick)
        return (found[0], text) if text is not None and found else None

    def _read(self, user: str, choose: Callable[[_Directory], str | None]) -> str | None:
        row = self.keys.user_key(user)
        for _ in range(_ATTEMPTS):
            directory = self._directory(row)
            name = choose(directory)
            entry = directory.scripts.get(name) if name is not None else None
            if entry is None:
                return None
            column = SCRIPT_FAMILY + b":" + entry.cell.encode()
            text = self.table.row(row, [column]).get(column)
            if text is not None:
                return text.decode()
            # Replaced or deleted between the two gets: the directory has changed since.
        raise Conflict(f"sieve scripts of {user} keep changing; try again")

    def check_space(self, user: str, name: str, size: int) -> None:
        """Raise what :meth:`put` of a ``size``-octet script called ``name`` would raise for
        the limits now (RFC 5804 2.3 HAVESPACE): TooLarge (over the script size limit),
        TooManyScripts, OverQuota (over the total size); InvalidName."""
        name = check_script_name(name)
        user = names.normalize_user(user)
        self._check_limits(self._directory(self.keys.user_key(user)), name, size)

    def _check_limits(self, directory: _Directory, name: str, size: int) -> None:
        limits = self.limits
        if size > limits.max_script_size:
            raise TooLarge(f"script of {size} octets is over the limit of "
                           f"{limits.max_script_size}")
        old = directory.scripts.get(name)
        if old is None and len(directory.scripts) >= limits.max_scripts:
            raise TooManyScripts(f"at most {limits.max_scripts} scripts")
        total = directory.total_size() - (old.size if old else 0) + size
        if total > limits.max_total_size:
            raise OverQuota(f"scripts would take {total} octets, over the limit of "
                            f"{limits.max_total_size}")

    # -- changes ---------------------------------------------------------------------------

    def _change(self, user: str, change: Callable[[_Directory], list[str]],
                text: tuple[str, bytes] | None = None) -> None:
        """Apply ``change`` to the user's directory by check-and-put, retrying on a race.

        ``change`` edits the directory in place (raising to refuse) and returns the text cells
        it stopped naming, deleted once the new directory is in.  ``text`` is ``(cell id,
        bytes)`` of a new script text, written before the directory that names it."""
        user = names.normalize_user(user)
        self.user_exists(user)
        row = self.keys.user_key(user)
        new_cell = None
        if text is not None:
            new_cell = SCRIPT_FAMILY + b":" + text[0].encode()
            self.table.put(row, {new_cell: text[1]})
        try:
            for _ in range(_ATTEMPTS):
                directory = self._directory(row)
                dropped = change(directory)
                if self.table.check_and_put(row, DIRECTORY, directory.raw, DIRECTORY,
                                            directory.encode()):
                    new_cell = None     # named by the directory now: keep it
                    if dropped:
                        self.table.delete(row, [SCRIPT_FAMILY + b":" + c.encode()
                                                for c in dropped])
                    self.backend.sync()
                    return
            raise Conflict(f"sieve scripts of {user} keep changing; try again")
        finally:
            if new_cell is not None:    # refused or lost: the text is nobody's
                self.table.delete(row, [new_cell])

    def put(self, user: str, name: str, text: str) -> None:
        """Store ``text`` as ``user``'s script ``name``, replacing a script of that name (which
        stays active if it was: RFC 5804 2.6).  Raises NotFound (no such user), InvalidName,
        TooLarge, TooManyScripts, OverQuota (see :meth:`check_space`)."""
        name = check_script_name(name)
        data = text.encode("utf-8")
        now = self.clock()
        cell = _new_cell_id(now)

        def change(directory: _Directory) -> list[str]:
            self._check_limits(directory, name, len(data))
            old = directory.scripts.get(name)
            directory.scripts[name] = _Entry(cell, len(data))
            return [old.cell] if old else []
        self._change(user, change, (cell, data))
        self._sweep_leftovers(names.normalize_user(user), now)

    def activate(self, user: str, name: str | None) -> None:
        """Make ``name`` the one active script, or deactivate every script with None (RFC 5804
        2.8).  Raises NotFound for a name that is not a script of ``user``."""
        if name is not None:
            name = check_script_name(name)

        def change(directory: _Directory) -> list[str]:
            if name is not None and name not in directory.scripts:
                raise NotFound(f"no such script: {name}")
            directory.active = name
            return []
        self._change(user, change)

    def delete(self, user: str, name: str) -> None:
        """Delete ``user``'s script ``name``.  Raises NotFound, and ScriptActive for the active
        script (RFC 5804 2.10)."""
        name = check_script_name(name)

        def change(directory: _Directory) -> list[str]:
            entry = directory.scripts.get(name)
            if entry is None:
                raise NotFound(f"no such script: {name}")
            if directory.active == name:
                raise ScriptActive(f"script {name} is active: deactivate it first")
            del directory.scripts[name]
            return [entry.cell]
        self._change(user, change)

    def rename(self, user: str, old: str, new: str) -> None:
        """Rename ``user``'s script ``old`` to ``new``; the active script stays active under its
        new name (RFC 5804 2.11.1).  Raises NotFound (no ``old``), AlreadyExists (``new`` is
        taken), InvalidName."""
        old, new = check_script_name(old), check_script_name(new)

        def change(directory: _Directory) -> list[str]:
            if old not in directory.scripts:
                raise NotFound(f"no such script: {old}")
            if new in directory.scripts:
                if new == old:
                    return []
                raise AlreadyExists(f"script already exists: {new}")
            directory.scripts[new] = directory.scripts.pop(old)
            if directory.active == old:
                directory.active = new
            return []
        self._change(user, change)

    def delete_all(self, user: str) -> None:
        """Remove every script of ``user`` (their account is being deleted)."""
        self.table.delete(self.keys.user_key(names.normalize_user(user)))

    def _sweep_leftovers(self, user: str, now: float) -> None:
        """Delete text cells no directory names that are older than ``_LEFTOVER_AGE``: those
        of writers that died before their check-and-put.  Run after each put (uploads are
        rare; the read is bounded by the user's total size limit)."""
        row = self.table.row(self.keys.user_key(user))
        named = {e.cell for e in _Directory(row.get(DIRECTORY)).scripts.values()}
        stale = [col for col in row if col.startswith(SCRIPT_FAMILY + b":")
                 and col[2:].decode() not in named
                 and _cell_age(col[2:].decode(), now) > _LEFTOVER_AGE]
        if stale:
            self.table.delete(self.keys.user_key(user), stale)

    # -- fsck ----------------------------------------------------------------------------------

    def check_rows(self, user_exists: Callable[[str], bool], repair: bool = False
                   ) -> list[tuple[str, str, bool]]:
        """fsck (mailstore/fsck.py): every row's directory against its text cells and its
        owner.  Returns ``(user, what is wrong, repaired)``.  Found: a script whose text cell
        is missing (dropped from the directory: it could never be read, and an active one
        would make delivery run nothing), an active name that is no script (deactivated),
        text cells no directory names past ``_LEFTOVER_AGE`` (deleted), a row whose user no
        longer exists (deleted).  Repairs go through the directory's check-and-put, as every
        change does, so a concurrent upload is never undone."""
        found: list[tuple[str, str, bool]] = []
        now = self.clock()
        for key, row in self.table.scan(start=b""):  # every row: a full-table check
            user = self.keys.owner(key, keys.ROW_KEYED)
            if user is None:  # another key format (a migration under way): not ours to judge
                continue
            if not user_exists(user):
                if repair:
                    self.table.delete(key)
                found.append((user, "scripts of a user that does not exist", repair))
                continue
            directory = _Directory(row.get(DIRECTORY))
            cells = {col[2:].decode() for col in row if col.startswith(SCRIPT_FAMILY + b":")}
            missing = sorted(n for n, e in directory.scripts.items() if e.cell not in cells)
            dangling = directory.active is not None and directory.active not in \
                directory.scripts
            named = {e.cell for e in directory.scripts.values()}
            orphans = sorted(c for c in cells - named if _cell_age(c, now) > _LEFTOVER_AGE)
            for name in missing:
                found.append((user, f"script {name!r} has no text cell", repair))
            if dangling:
                found.append((user, f"active script {directory.active!r} does not exist",
                              repair))
            if orphans:
                found.append((user, f"{len(orphans)} script text cell(s) no directory names",
                              repair))
            if not repair:
                continue
            if missing or dangling:
                def change(d: _Directory, key=key) -> list[str]:
                    # The cells as they are now, read after the directory: a script put
                    # meanwhile has its text written before its directory names it.
                    now_cells = {c[2:].decode() for c in self.table.row(key)
                                 if c.startswith(SCRIPT_FAMILY + b":")}
                    for name in list(d.scripts):
                        if d.scripts[name].cell not in now_cells:
                            del d.scripts[name]
                    if d.active is not None and d.active not in d.scripts:
                        d.active = None
                    return []
                self._change(user, change)
            if orphans:
                self.table.delete(key, [SCRIPT_FAMILY + b":" + c.encode() for c in orphans])
        return found
