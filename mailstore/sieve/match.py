"""Comparators and match types: RFC 5228 2.7, RFC 4790 9.2-9.3, RFC 5231 (relational) and
RFC 2244 / RFC 4790 i;ascii-numeric.

``match(values, keys, match_type, comparator, relation)`` answers one test and, for
``:matches``, returns the wildcard captures the variables extension exposes as ``${0}`` ..
``${9}`` (RFC 5229 3.2).
"""

from __future__ import annotations

import functools
import re

COMPARATORS = ("i;octet", "i;ascii-casemap", "i;ascii-numeric")
RELATIONS = ("gt", "ge", "lt", "le", "eq", "ne")


class MatchError(ValueError):
    """A combination the comparator does not support (e.g. :contains with i;ascii-numeric,
    RFC 4790 9.1.1): a script error."""


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@functools.lru_cache(maxsize=4096)
def casemap(text: str) -> str:
    """i;ascii-casemap: only A-Z fold (RFC 4790 9.2), not other letters.  Cached: the same
    header values and body text are folded by every rule and every recipient's script."""
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


_STAR, _ONE = object(), object()


def _tokens(pattern: str) -> list:
    """A :matches pattern as tokens: ``*`` any run, ``?`` one character, ``\\`` quotes the
    next character (RFC 5228 2.7.1)."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(pattern[i])
        elif ch == "*":
            out.append(_STAR)
        elif ch == "?":
            out.append(_ONE)
        else:
            out.append(ch)
        i += 1
    return out


class MatchBudget(Exception):
    """A :matches comparison ran out of its work allowance (see :class:`Work`)."""


class Work:
    """Loop iterations a wildcard match may still spend: the interpreter turns what is left
    of its step bound into this, so a pathological pattern x value stops the script (RFC 5228
    2.10.6) instead of taking minutes of CPU."""

    __slots__ = ("left",)

    def __init__(self, left: int):
        self.left = left


def _glob_literal(tokens: list, text: str) -> list[tuple[int, int]] | None:
    """``glob`` for a pattern without ``?``: literal segments between ``*``s, each found
    leftmost with ``str.find`` (linear in C), which gives the same shortest ``*`` spans as the
    two-pointer loop.  The first segment is anchored at the start, the last at the end."""
    segments, current = [], []
    for token in tokens:
        if token is _STAR:
            segments.append("".join(current))
            current = []
        else:
            current.append(token)
    segments.append("".join(current))
    if len(segments) == 1:
        return [] if text == segments[0] else None
    first, last = segments[0], segments[-1]
    limit = len(text) - len(last)
    if limit < len(first) or not text.startswith(first) or not text.endswith(last):
        return None
    pos, spans = len(first), []
    for segment in segments[1:-1]:
        found = text.find(segment, pos, limit)
        if found < 0:
            return None
        spans.append((pos, found))
        pos = found + len(segment)
    spans.append((pos, limit))
    return spans


def glob(tokens: list, text: str, work: Work | None = None) -> list[tuple[int, int]] | None:
    """Match ``text`` against ``tokens``; the (start, end) of each wildcard, or None.

    Without ``?`` the segments are found with ``str.find`` (``_glob_literal``).  Otherwise
    the classic two-pointer wildcard match: on a mismatch only the most recent ``*`` grows,
    so the cost is at most len(tokens) x len(text) -- no backtracking blow-up whatever the
    script (a regex engine can take exponential time on patterns like ``*a*a*a*b``) -- and
    each iteration is charged to ``work``, raising MatchBudget when it runs out.  Each
    ``*`` takes as little as it can, which is what RFC 5229 3.2's examples and Pigeonhole
    give for ``${1}``.
    """
    if _ONE not in tokens:
        return _glob_literal(tokens, text)
    spans: dict[int, tuple[int, int]] = {}
    p = t = 0
    star = -1
    star_t = 0
    left = work.left if work is not None else -1
    while t < len(text):
        if left == 0:
            raise MatchBudget("wildcard match too costly")
        left -= 1
        token = tokens[p] if p < len(tokens) else None
        if token is _STAR:
            star, star_t = p, t
            spans[p] = (t, t)
            p += 1
        elif token is _ONE:
            spans[p] = (t, t + 1)
            p += 1
            t += 1
        elif token is not None and token == text[t]:
            p += 1
            t += 1
        elif star >= 0:
            star_t += 1
            spans[star] = (spans[star][0], star_t)
            p, t = star + 1, star_t
        else:
            break
    if work is not None:
        work.left = max(left, 0)
    if t < len(text):
        return None
    while p < len(tokens) and tokens[p] is _STAR:
        spans[p] = (t, t)
        p += 1
    if p != len(tokens):
        return None
    return [spans[i] for i, token in enumerate(tokens) if token is _STAR or token is _ONE]


_PATTERNS: dict[str, list] = {}


def _compiled(pattern: str) -> list:
    found = _PATTERNS.get(pattern)
    if found is None:
        if len(_PATTERNS) > 4096:
            _PATTERNS.clear()
        found = _PATTERNS[pattern] = _tokens(pattern)
    return found


def match(values: list[str], keys: list[str], match_type: str = ":is",
          comparator: str = "i;ascii-casemap", relation: str | None = None,
          work: Work | None = None) -> tuple[bool, list[str] | None]:
    """Whether any of ``values`` matches any of ``keys``; and the captures of the first
    :matches success (``[whole, *wildcards]``) or None.

    ``match_type`` is ``:is``, ``:contains``, ``:matches``, ``:value`` or ``:count`` (the
    caller passes the count as the one value for :count).  ``work`` bounds :matches (see
    :class:`Work`).
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
            tokens = _compiled(casemap(key) if fold else key)
            for value in values:
                spans = glob(tokens, casemap(value) if fold else value, work)
                if spans is not None:
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
