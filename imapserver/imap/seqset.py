"""Message sets: RFC 3501's sequence-set, resolved against a session's list of UIDs.

Grammar (RFC 3501 section 9)::

    sequence-set = (seq-number / seq-range) *("," sequence-set)
    seq-range    = seq-number ":" seq-number
    seq-number   = nz-number / "*"          ; nz-number: 1 to 4294967295
                   ; "*" is the largest number in use: the message count for message
                   ; sequence numbers, the highest UID for UIDs.  "a:b" and "b:a" are the same.

FETCH, STORE, COPY, MOVE, SEARCH and their UID forms all take one.  A set is parsed once
(:func:`parse_seqset`) and resolved against the session's UID list, which is ascending and whose
index + 1 is the message sequence number.  Resolving never expands a range number by number:
each range becomes a slice of the UID list found with :mod:`bisect`, so ``1:*`` over a
100,000-message mailbox costs two binary searches and one list copy.

Out-of-range numbers, following RFC 3501 and Dovecot:

* UIDs that are not in the list are ignored; ``n:*`` with ``n`` above the highest UID still
  matches the highest UID (RFC 3501 6.4.8).  An empty mailbox gives an empty result.
* A message sequence number above the message count -- ``*`` in an empty mailbox included --
  makes FETCH/STORE/COPY a BAD (RFC 3501 section 9, "seq-number"; Dovecot answers
  ``BAD Error in IMAP command FETCH: Invalid messageset``): :meth:`SeqSet.resolve_uids` raises
  ValueError.  SEARCH is lenient instead (Dovecot answers ``SEARCH 5`` in a 3-message mailbox
  with an empty ``* SEARCH``): it passes ``strict=False`` and such numbers match nothing.

RFC 5182's ``$`` (SEARCHRES, the saved search result) is not a set of numbers and is not
parsed here: the commands resolve it first (``commands/message_cmds.resolve``, the SEARCH
parser), and :func:`parse_seqset` refuses it.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

MAX_NUMBER = 2**32 - 1
_ELEMENT = re.compile(r"(\d+|\*)(?::(\d+|\*))?\Z")


def _number(text: str, whole: str) -> int | None:
    """A seq-number: ``None`` for ``*``."""
    if text == "*":
        return None
    value = int(text)  # leading zeros are accepted, as Dovecot does
    if value == 0:
        raise ValueError(f"invalid message set {whole!r}: 0 is not a message number")
    if value > MAX_NUMBER:
        raise ValueError(f"invalid message set {whole!r}: {text} is out of range")
    return value


def parse_seqset(text: str) -> SeqSet:
    """Parse a sequence-set such as ``1:4,7,10:*``.

    ``text`` is the atom as sent.  Raises ValueError, saying what is wrong, for anything that
    is not a sequence-set (empty elements, ``0``, numbers above 2**32-1, ``$``, spaces).
    """
    if not text:
        raise ValueError("empty message set")
    if text == "$":
        raise ValueError("the $ message set (SEARCHRES) is not allowed here")
    ranges = []
    for element in text.split(","):
        m = _ELEMENT.match(element)
        if not m:
            raise ValueError(f"invalid message set {text!r}: bad element {element!r}")
        first = _number(m.group(1), text)
        last = first if m.group(2) is None else _number(m.group(2), text)
        ranges.append((first, last))
    return SeqSet(tuple(ranges))


def _merge(slices: list[tuple[int, int]]) -> list[tuple[int, int]]:
    slices.sort()
    merged: list[tuple[int, int]] = []
    for start, stop in slices:
        if merged and start <= merged[-1][1]:
            if stop > merged[-1][1]:
                merged[-1] = (merged[-1][0], stop)
        else:
            merged.append((start, stop))
    return merged


@dataclass(frozen=True, slots=True)
class SeqSet:
    """A parsed sequence-set: its ranges as written, ``None`` standing for ``*``.

    A single number ``n`` is the range ``(n, n)``; ranges keep the order they were written in
    and may be reversed or overlap.
    """

    ranges: tuple[tuple[int | None, int | None], ...]

    def __str__(self) -> str:
        def show(n: int | None) -> str:
            return "*" if n is None else str(n)
        return ",".join(show(a) if a == b else f"{show(a)}:{show(b)}" for a, b in self.ranges)

    def slices(self, uids: list[int], uid_mode: bool, *, strict: bool = True
               ) -> list[tuple[int, int]]:
        """The set as half-open slices ``(start, stop)`` of ``uids``: ascending, disjoint,
        non-adjacent, never empty.

        ``uids`` is the session's UID list (ascending).  With ``uid_mode`` the numbers are
        UIDs, otherwise message sequence numbers (index + 1 into ``uids``).  With ``strict``
        (the default), a message sequence number above ``len(uids)`` raises ValueError; see
        the module docstring.
        """
        count = len(uids)
        out: list[tuple[int, int]] = []
        if uid_mode:
            if not count:
                return []
            top = uids[-1]
            for first, last in self.ranges:
                low, high = sorted((top if first is None else first, top if last is None else last))
                start, stop = bisect_left(uids, low), bisect_right(uids, high)
                if start < stop:
                    out.append((start, stop))
            return _merge(out)
        for first, last in self.ranges:
            low, high = sorted((count if first is None else first,
                                count if last is None else last))
            if strict and (high > count or low < 1):
                raise ValueError("invalid message sequence number"
                                 + (" (the mailbox is empty)" if not count else
                                    f" {high} (the mailbox has {count} messages)"))
            start, stop = max(low, 1) - 1, min(high, count)
            if start < stop:
                out.append((start, stop))
        return _merge(out)

    def resolve_uids(self, uids: list[int], uid_mode: bool, *, strict: bool = True
                     ) -> list[int]:
        """The UIDs of ``uids`` that the set names, ascending, each once.

        Arguments as for :meth:`slices`.  Raises ValueError ("invalid message sequence
        number ...") for a message sequence number out of range when ``strict``.
        """
        out: list[int] = []
        for start, stop in self.slices(uids, uid_mode, strict=strict):
            out += uids[start:stop]
        return out


__all__ = ["MAX_NUMBER", "SeqSet", "parse_seqset"]
