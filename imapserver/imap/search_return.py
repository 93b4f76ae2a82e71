"""SEARCH RETURN options: what an extended SEARCH asks to get back.

Grammar (RFC 4466 2.6.1, RFC 4731 4, RFC 5182 3, RFC 5267 5, RFC 9394 3)::

    search             = "SEARCH" [search-return-opts] SP search-program
    search-return-opts = SP "RETURN" SP "(" [search-return-opt *(SP search-return-opt)] ")"
    search-return-opt  = "MIN" / "MAX" / "ALL" / "COUNT"          ; ESEARCH
                       / "SAVE"                                  ; SEARCHRES
                       / "CONTEXT" / "UPDATE"                    ; CONTEXT=SEARCH
                       / "PARTIAL" SP partial-range
    partial-range      = nz-number ":" nz-number                 ; RFC 5267: 500:400 = 400:500
                       / "-" nz-number ":" "-" nz-number         ; RFC 9394: -1 is the last

``RETURN ()`` means ``RETURN (ALL)`` (RFC 4731 3.1).  At most one of ALL and PARTIAL
(RFC 5267 4.4).  Anything else is a ValueError (a BAD), as Dovecot answers it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .seqset import MAX_NUMBER

_PARTIAL = re.compile(r"(-?)(\d+):(-?)(\d+)\Z")
_SIMPLE = ("MIN", "MAX", "ALL", "COUNT", "SAVE", "CONTEXT", "UPDATE")


@dataclass(frozen=True, slots=True)
class ReturnOptions:
    """The parsed RETURN list.  ``partial`` is ``(first, last)``: 1-based positions in the
    result, ``first <= last``, both negative (counting from the end, -1 the last) or both
    positive."""

    min: bool = False
    max: bool = False
    all: bool = False
    count: bool = False
    save: bool = False
    context: bool = False
    update: bool = False
    partial: tuple[int, int] | None = None

    @property
    def sends_esearch(self) -> bool:
        """RFC 5182 2.1: SAVE alone answers no ESEARCH; every other RETURN does one."""
        return any((self.min, self.max, self.all, self.count, self.context, self.update,
                    self.partial is not None)) or not self.save

    def saved_part(self, matched: list[int]) -> list[int]:
        """What SAVE keeps of ``matched`` (ascending): what the other options return.

        RFC 5182 2.1: with MIN and/or MAX and neither ALL nor COUNT, only those messages; with
        ALL or COUNT (or SAVE alone), all of them.  RFC 9394 3.1 adds PARTIAL: the messages in
        its range, with MIN/MAX beside it as well (Dovecot does the same).
        """
        if self.all or self.count or not (self.min or self.max or self.partial):
            return list(matched)
        picked = set(self.partial_slice(matched)) if self.partial else set()
        if matched and self.min:
            picked.add(matched[0])
        if matched and self.max:
            picked.add(matched[-1])
        return sorted(picked)

    def partial_label(self) -> str:
        first, last = self.partial
        return f"{first}:{last}" if first > 0 else f"{last}:{first}"

    def partial_slice(self, matched: list) -> list:
        """The results at the positions of ``partial`` (RFC 5267 4.4, RFC 9394 3.1), in
        result order; fewer, or none, where the range runs past the end."""
        first, last = self.partial
        if first > 0:
            return matched[first - 1:last]
        # -1 is the last result: -k..-1 are matched[len-k:]; first <= last, both negative.
        count = len(matched)
        start, stop = max(count + first, 0), max(count + last + 1, 0)
        return matched[start:stop]


def split_return(tokens: list) -> tuple[ReturnOptions | None, list]:
    """``(options, the remaining tokens)`` for SEARCH arguments ``tokens``; options is None
    when there is no RETURN (a plain SEARCH answered with ``* SEARCH``).

    Raises ValueError for a malformed RETURN list: not a list, an unknown option, PARTIAL
    without a valid range, PARTIAL with ALL, or PARTIAL twice.
    """
    if not tokens or not isinstance(tokens[0], str) or tokens[0].upper() != "RETURN":
        return None, list(tokens)
    if len(tokens) < 2 or not isinstance(tokens[1], list):
        raise ValueError("RETURN needs a parenthesised list of options")
    words = tokens[1]
    if not words:
        return ReturnOptions(all=True), list(tokens[2:])  # RFC 4731 3.1: () is (ALL)
    seen: dict[str, object] = {}
    i = 0
    while i < len(words):
        word = words[i]
        name = word.upper() if isinstance(word, str) else None
        i += 1
        if name == "PARTIAL":
            if "partial" in seen:
                raise ValueError("PARTIAL given twice")
            if i >= len(words) or not isinstance(words[i], str):
                raise ValueError("PARTIAL needs a range")
            seen["partial"] = _partial_range(str(words[i]))
            i += 1
        elif name in _SIMPLE:
            seen[name.lower()] = True
        else:
            shown = ("(...)" if isinstance(word, list) else
                     word.decode("ascii", "replace") if isinstance(word, bytes) else str(word))
            raise ValueError(f"Unknown SEARCH return option {shown}")
    if "partial" in seen and seen.get("all"):
        raise ValueError("PARTIAL conflicts with ALL")
    return ReturnOptions(**seen), list(tokens[2:])


def _partial_range(text: str) -> tuple[int, int]:
    m = _PARTIAL.match(text)
    if not m or m.group(1) != m.group(3):
        raise ValueError(f"PARTIAL range broken: {text}")
    a, b = int(m.group(2)), int(m.group(4))
    if not (0 < a <= MAX_NUMBER and 0 < b <= MAX_NUMBER):
        raise ValueError(f"PARTIAL range broken: {text}")
    if m.group(1):
        a, b = -a, -b
    return min(a, b), max(a, b)


__all__ = ["ReturnOptions", "split_return"]
