"""What mailadmin prints: tables for people, JSON for scripts, and its exit codes.

Every command builds plain data (dicts and lists) first and then hands it to :func:`emit`, so
the table and the ``--json`` output can never disagree about what is there.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence

from .progress import human_bytes

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """The command line asks for something that cannot be done as asked (exit status 2)."""


class Failure(Exception):
    """The command could not do its work: a file that cannot be read, a directory in the way
    (exit status 1, like the store's own errors)."""


class Column:
    """A table column: the key in each row, its heading, and how to show a value."""

    def __init__(self, key: str, heading: str | None = None,
                 show: Callable[[object], str] | None = None, right: bool | None = None):
        self.key = key
        self.heading = heading or key.upper().replace("_", " ")
        self.show = show or _plain
        self.right = right

    def text(self, row: dict) -> str:
        return self.show(row.get(self.key))


def _plain(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def size(value: object) -> str:
    return "-" if value is None else human_bytes(int(value))  # type: ignore[arg-type]


def limit(value: object) -> str:
    return "unlimited" if value is None else str(value)


def size_limit(value: object) -> str:
    return "unlimited" if value is None else human_bytes(int(value))  # type: ignore[arg-type]


def table(rows: Sequence[dict], columns: Sequence[Column]) -> str:
    """Rows as aligned columns under upper-case headings; numbers are right-aligned."""
    cells = [[c.text(r) for c in columns] for r in rows]
    widths = [max([len(c.heading)] + [len(row[i]) for row in cells])
              for i, c in enumerate(columns)]
    right = [c.right if c.right is not None else _numeric(rows, c.key) for c in columns]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if r else v.ljust(w)
                         for v, w, r in zip(values, widths, right, strict=True)).rstrip()
    return "\n".join([line([c.heading for c in columns])] + [line(row) for row in cells])


def _numeric(rows: Sequence[dict], key: str) -> bool:
    values = [r.get(key) for r in rows if r.get(key) is not None]
    return bool(values) and all(isinstance(v, int | float) and not isinstance(v, bool)
                                for v in values)


def fields(pairs: Sequence[tuple[str, str]]) -> str:
    """``name: value`` lines with the values aligned (for ``show`` commands)."""
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(f"{k + ':':<{width + 1}} {v}" for k, v in pairs)


def emit(args, data: object, render: Callable[[], str] | None = None) -> None:
    """Print ``data`` as JSON with ``--json``, else the text ``render`` makes."""
    if getattr(args, "json", False) or render is None:
        print(json.dumps(data, indent=None, sort_keys=False))
    else:
        text = render()
        if text:
            print(text)


def warn(text: str) -> None:
    print(f"mailadmin: {text}", file=sys.stderr)


def confirm(question: str, yes: bool) -> None:
    """Go on if ``yes`` (``--yes``) or a person at a terminal answers y; else UsageError."""
    if yes:
        return
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise UsageError(f"{question}: refusing without --yes (not asked: no terminal)")
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise UsageError("not confirmed; nothing was changed")


def parse_size(text: str) -> int | None:
    """``10M``, ``1.5G``, ``4096``, ``unlimited`` -> bytes (binary units) or None."""
    value = text.strip().lower()
    if value in ("unlimited", "none", "-1", "-"):
        return None
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    scale = 1
    for suffix in ("ib", "b"):
        if value.endswith(suffix) and len(value) > len(suffix) and \
                (suffix == "ib" or value[-2:-1] in units or value[-2:-1].isdigit()):
            value = value[:-len(suffix)]
            break
    if value and value[-1] in units:
        scale = units[value[-1]]
        value = value[:-1]
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"not a size: {text!r} (say e.g. 500M, 2G or unlimited)") from None
    if number < 0:
        raise UsageError(f"not a size: {text!r}")
    return int(number * scale)


def parse_count(text: str) -> int | None:
    value = text.strip().lower()
    if value in ("unlimited", "none", "-1", "-"):
        return None
    try:
        number = int(value.replace("_", "").replace(",", ""))
    except ValueError:
        raise UsageError(f"not a number of messages: {text!r}") from None
    if number < 0:
        raise UsageError(f"not a number of messages: {text!r}")
    return number
