"""Comparators and match types: RFC 5228 2.7, RFC 4790 9.2-9.3, RFC 5231 (relational) and
RFC 2244 / RFC 4790 i;ascii-numeric.

``match(values, keys, match_type, comparator, relation)`` answers one test and, for
``:matches``, returns the wildcard captures the variables extension exposes as ``${0}`` ..
``${9}`` (RFC 5229 3.2).
"""

from __future__ import annotations

import re

COMPARATORS = ("i;octet", "i;ascii-casemap", "i;ascii-numeric")
RELATIONS = ("gt", "ge", "lt", "le", "eq", "ne")


class MatchError(ValueError):
    """A combination the comparator does not support (e.g. :contains with i;ascii-numeric,
    RFC 4790 9.1.1): a script error."""


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def casemap(text: str) -> str:
    """i;ascii-casemap: only A-Z fold (RFC 4790 9.2), not other letters."""
    return text.translate(_ASCII_LOWER)


def _numeric(text: str) -> float:
    """i;ascii-numeric (RFC 4790 9.1): the number made of the leading digits; a string that
    does not start with a digit is positive infinity."""
    digits = re.match(r"[0-9]*", text).group(0)
    return int(digits) if digits else float("inf")


def _key(text: str, comparator: str):
    if comparator == "i;ascii-casemap":
        return casemap(text)
    if comparator == "i;ascii-numeric":
        return _numeric(text)
    return text


def _relate(a, b, relation: str) -> bool:
    return {"gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b, "eq": a == b,
            "ne": a != b}[relation]


def _glob(pattern: str) -> re.Pattern:
    """A :matches pattern as a regex: ``*`` any run (as short as possible, so ``${1}`` of
    "* *" on "a b c" is "a"), ``?`` one character, ``\\`` quotes the next one."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        elif ch == "*":
            out.append("(.*?)")
        elif ch == "?":
            out.append("(.)")
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


_GLOBS: dict[str, re.Pattern] = {}


def _compiled(pattern: str) -> re.Pattern:
    found = _GLOBS.get(pattern)
    if found is None:
        if len(_GLOBS) > 4096:
            _GLOBS.clear()
        found = _GLOBS[pattern] = _glob(pattern)
    return found


def match(values: list[str], keys: list[str], match_type: str = ":is",
          comparator: str = "i;ascii-casemap", relation: str | None = None
          ) -> tuple[bool, list[str] | None]:
    """Whether any of ``values`` matches any of ``keys``; and the captures of the first
    :matches success (``[whole, *wildcards]``) or None.

    ``match_type`` is ``:is``, ``:contains``, ``:matches``, ``:value`` or ``:count`` (the
    caller passes the count as the one value for :count).
    """
    if comparator == "i;ascii-numeric" and match_type in (":contains", ":matches"):
        raise MatchError(f"comparator {comparator} does not support {match_type}")
    if match_type in (":value", ":count"):
        for value in values:
            left = _key(value, comparator)
            for key in keys:
                if _relate(left, _key(key, comparator), relation or "eq"):
                    return True, None
        return False, None
    if match_type == ":matches":
        fold = comparator == "i;ascii-casemap"
        for key in keys:
            # casemap keeps lengths (A-Z to a-z), so spans found in the folded value are
            # the captures' spans in the original.
            glob = _compiled(casemap(key) if fold else key)
            for value in values:
                found = glob.match(casemap(value) if fold else value)
                if found:
                    spans = [found.span(i) for i in range(1, (found.lastindex or 0) + 1)]
                    return True, [value, *(value[a:b] for a, b in spans)]
        return False, None
    for value in values:
        left = _key(value, comparator)
        for key in keys:
            right = _key(key, comparator)
            if match_type == ":contains":
                if right in left:
                    return True, None
            elif left == right:
                return True, None
    return False, None
