"""SELECT/EXAMINE parameters of CONDSTORE and QRESYNC, and the resync they ask for.

    select-param     = "CONDSTORE" / "QRESYNC" SP "(" uidvalidity SP mod-sequence-value
                       [SP known-uids] [SP seq-match-data] ")"       ; RFC 7162 3.1.8, 3.2.5
    known-uids       = sequence-set            ; "*" is not allowed
    seq-match-data   = "(" known-sequence-set SP known-uid-set ")"

The store says what changed after the client's MODSEQ (mailstore/modseqs.py): flag changes
exactly, expunged UIDs as a superset -- or, past the change log's retention
(docs/decisions/0014), not at all, and then every UID of ``known-uids`` that is not in the
mailbox is reported (RFC 7162 3.2.5.2 allows a superset; the client ignores UIDs it never
had).  seq-match-data is parsed and checked, not needed: the answer is already that exact.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from .context import Bad
from .seqset import SeqSet, parse_seqset
from .wire import Atom


@dataclass
class SelectParams:
    condstore: bool = False
    qresync: tuple[int, int, SeqSet | None] | None = None  # uidvalidity, modseq, known UIDs


def _number(token, what: str, limit: int) -> int:
    text = str(token) if isinstance(token, Atom) else ""
    if not text.isdigit() or not text.isascii() or not 0 < int(text) <= limit:
        raise Bad(f"Invalid QRESYNC parameters: bad {what}")
    return int(text)


def _uid_set(token, what: str) -> SeqSet:
    text = str(token) if isinstance(token, Atom) else ""
    try:
        seqset = parse_seqset(text)
    except ValueError:
        raise Bad(f"Invalid QRESYNC parameters: bad {what}") from None
    if any(n is None for r in seqset.ranges for n in r):
        raise Bad(f"Invalid QRESYNC parameters: '*' in {what}")
    return seqset


def parse_select_params(args: list) -> SelectParams:
    """The parameters after SELECT's mailbox name (RFC 4466 2.1); BAD for anything else."""
    params = SelectParams()
    if not args:
        return params
    if len(args) != 1 or not isinstance(args[0], list) or not args[0]:
        raise Bad("SELECT takes a mailbox and optional (parameters)")
    items = list(args[0])
    while items:
        name = str(items.pop(0)).upper() if isinstance(items[0], Atom) else ""
        if name == "CONDSTORE":
            params.condstore = True
        elif name == "QRESYNC" and items and isinstance(items[0], list):
            params.qresync = _qresync(items.pop(0))
        else:
            raise Bad("Unknown SELECT parameter")
    return params


def _qresync(values: list) -> tuple[int, int, SeqSet | None]:
    if not 2 <= len(values) <= 4:
        raise Bad("Invalid QRESYNC parameters")
    uidvalidity = _number(values[0], "UIDVALIDITY", 2**32 - 1)
    modseq = _number(values[1], "mod-sequence", 2**63 - 1)
    known = None
    rest = values[2:]
    if rest and not isinstance(rest[0], list):
        known = _uid_set(rest.pop(0), "known UIDs")
    if rest:
        match = rest.pop(0)
        if rest or not isinstance(match, list) or len(match) != 2:
            raise Bad("Invalid QRESYNC parameters: bad sequence match data")
        seqs, uids = (_uid_set(t, "sequence match data") for t in match)
        if _count(seqs) != _count(uids):
            raise Bad("Invalid QRESYNC parameters: sequence match data of unequal sizes")
    return uidvalidity, modseq, known


def _count(seqset: SeqSet) -> int:
    return sum(abs(b - a) + 1 for a, b in seqset.ranges)


def _ranges(seqset: SeqSet) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for a, b in sorted(tuple(sorted(r)) for r in seqset.ranges):
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def in_set(seqset: SeqSet | None, uid: int) -> bool:
    """Whether ``uid`` is in a set without "*" (None: every UID)."""
    return seqset is None or any(min(r) <= uid <= max(r) for r in seqset.ranges)


def missing(seqset: SeqSet | None, present, top: int) -> list[tuple[int, int]]:
    """The UIDs of ``seqset`` (None: 1:top) up to ``top`` that are not in ``present`` (an
    ascending array), as ranges: what VANISHED (EARLIER) reports when the change log no
    longer tells (RFC 7162 3.2.5.2 lets it be a superset)."""
    out = []
    for a, b in _ranges(seqset) if seqset is not None else [(1, top)]:
        b = min(b, top)
        low = max(a, 1)
        for uid in present[bisect_left(present, a):bisect_right(present, b)]:
            if uid > low:
                out.append((low, uid - 1))
            low = uid + 1
        if low <= b:
            out.append((low, b))
    return out


def ranges_text(ranges: list[tuple[int, int]]) -> str:
    return ",".join(str(a) if a == b else f"{a}:{b}" for a, b in ranges)


__all__ = ["SelectParams", "in_set", "missing", "parse_select_params", "ranges_text"]
