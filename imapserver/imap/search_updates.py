"""CONTEXT=SEARCH update contexts (RFC 5267 4.3): searches that keep the client told.

``SEARCH RETURN (UPDATE ...)`` leaves a context behind in the selected mailbox: the search
program and the UIDs it matched.  Each time the session learns of changes (the refresh of
:mod:`.selected`, run by NOOP, IDLE and every command that reports changes, and the session's
own STORE and EXPUNGE) the context is brought up to date and the difference goes out as
``* ESEARCH (TAG "t") [UID] REMOVEFROM (0 set) ADDTO (0 set)``:

* a matched message that is expunged: REMOVEFROM, numbered as the client still numbers it,
  sent *before* the EXPUNGE (RFC 5267 4.3.4: so that the number is still valid);
* a new message, or one whose flags changed, is tested again -- only those, never the whole
  mailbox (the strategy of RFC 5267 appendix B) -- and ADDTO or REMOVEFROM follows *after*
  EXISTS and FETCH (4.3.3: an added number must be valid), in mailbox order, position 0.

Message sequence numbers (and ``*``) in the program are evaluated when the command runs (RFC
5267 4.3, after the RFC 3501 erratum): :func:`freeze` turns every sequence-set key into the
UIDs it named then.  Contexts end with the selection, with CANCELUPDATE, or never start when a
session already has :data:`MAX_CONTEXTS` (then ``* NO [NOUPDATE "tag"]``, 4.3.1).

CONTEXT=SORT (RFC 5267 4.1, 4.3.2-4.3.4): ``SORT RETURN (UPDATE ...)`` makes the same kind of
context, which also keeps the matched UIDs in sort order.  Its updates carry positions in that
order, so that the client can keep its sorted view without sorting: ``REMOVEFROM (p set)``
removes the messages of ``set``, found at positions p, p+1, ... of the list as it stands
before that pair; ``ADDTO (p set)`` inserts them so that they stand at p, p+1, ... after it
(the reading of 4.3.2's example, where ``ADDTO (1 2733 1 2732 1 2731)`` equals ``ADDTO (1
2731:2733)``).  REMOVEFROM pairs go highest position first and ADDTO pairs lowest first, so a
pair's positions hold whether the client applies the pairs one by one or all at once.  A
message's sort keys never change (its header and date are fixed), so only messages that join
or leave the result move; the others keep their relative order.

Everything here runs in the worker thread that runs the refresh.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field

from mailstore import threads as mailthreads

from .esearch import esearch_line, sequence_set, update_items
from .search_eval import evaluate
from .search_parse import AndKey, Key, NotKey, OrKey, SearchProgram, SequenceKey
from .seqset import SeqSet

MAX_CONTEXTS = 16
"""Update contexts per session (RFC 5267 4.3.1: at least one; each costs a re-test of the
changed messages at every refresh)."""


def freeze(key: Key, uids: list[int]) -> Key:
    """``key`` with every sequence-set key replaced by the UIDs it names in ``uids`` now.

    A range of the session's UID list is written as the UIDs at its two ends: no message that
    arrives later can fall inside, since new UIDs are always higher than every UID in use."""
    if isinstance(key, SequenceKey):
        slices = key.seqset.slices(uids, key.uid, strict=False)
        return SequenceKey(SeqSet(tuple((uids[a], uids[b - 1]) for a, b in slices)), True)
    if isinstance(key, NotKey):
        return NotKey(freeze(key.key, uids))
    if isinstance(key, OrKey):
        return OrKey(freeze(key.left, uids), freeze(key.right, uids))
    if isinstance(key, AndKey):
        return AndKey(tuple(freeze(k, uids) for k in key.keys))
    return key


@dataclass
class UpdateContext:
    """One SEARCH or SORT RETURN (UPDATE): its tag, its frozen program, and what matches now;
    for SORT also its criteria and the matched UIDs in sort order (``order``)."""

    tag: str
    program: SearchProgram
    matched: set[int] = field(default_factory=set)
    criteria: tuple[tuple[str, bool], ...] | None = None
    order: list[int] = field(default_factory=list)

    def line(self, removed: list[int], added: list[int]) -> bytes | None:
        items = update_items(removed, added)
        return esearch_line(self.tag, self.program.uid_mode, items) if items else None

    def sorted_line(self, removed: list[tuple[int, list[int]]],
                    added: list[tuple[int, list[int]]]) -> bytes | None:
        """RFC 5267 4.3.2-4.3.4 for a SORT context: ``(position, numbers)`` runs, REMOVEFROM
        before ADDTO (the order of 4.3.3's example)."""
        items = []
        if removed:
            items.append(("REMOVEFROM", _pairs(removed)))
        if added:
            items.append(("ADDTO", _pairs(added)))
        return esearch_line(self.tag, self.program.uid_mode, items) if items else None

    def drop(self, gone: set[int], number: Callable[[int], int]) -> list[tuple[int, list[int]]]:
        """Remove ``gone`` from a SORT context's order; the REMOVEFROM runs saying so, highest
        position first, each run's positions counted in the list before it is removed."""
        runs: list[tuple[int, list[int]]] = []
        kept: list[int] = []
        for pos, uid in enumerate(self.order, start=1):
            if uid not in gone:
                kept.append(uid)
            elif runs and runs[-1][0] + len(runs[-1][1]) == pos:
                runs[-1][1].append(number(uid))
            else:
                runs.append((pos, [number(uid)]))
        self.order = kept
        runs.reverse()
        return runs


class SearchContexts:
    """The update contexts of one selected mailbox, in the order they were made."""

    def __init__(self):
        self.by_tag: dict[str, UpdateContext] = {}

    def __bool__(self) -> bool:
        return bool(self.by_tag)

    def full(self) -> bool:
        return len(self.by_tag) >= MAX_CONTEXTS

    def add(self, tag: str, program: SearchProgram, uids: list[int], matched: list[int],
            criteria=None) -> None:
        """Start a context for the command ``tag`` whose ``program`` matched ``matched`` among
        the session's ``uids``.  For a SORT, ``criteria`` are its sort criteria and
        ``matched`` is in their order."""
        frozen = SearchProgram(freeze(program.key, uids), program.uid_mode, program.charset)
        context = UpdateContext(tag, frozen, set(matched))
        if criteria is not None:
            context.criteria = tuple(criteria)
            context.order = list(matched)
        self.by_tag[tag] = context

    def cancel(self, tag: str) -> bool:
        """CANCELUPDATE (4.3.5); False when no context has that tag."""
        return self.by_tag.pop(tag, None) is not None

    def expunged(self, gone: set[int], seq_of: Callable[[int], int | None]) -> list[bytes]:
        """REMOVEFROM lines for the matched messages in ``gone`` (about to be expunged from
        the session's view); ``seq_of`` gives their numbers as the client knows them now."""
        lines = []
        for ctx in self.by_tag.values():
            hit = ctx.matched & gone
            if not hit:
                continue
            ctx.matched -= hit
            if ctx.criteria is not None:
                line = ctx.sorted_line(ctx.drop(hit, _numbering(ctx, seq_of)), [])
                if line is not None:
                    lines.append(line)
                continue
            numbers = sorted(hit) if ctx.program.uid_mode else sorted(seq_of(u) for u in hit)
            lines.append(ctx.line(numbers, []))
        return lines

    def retest(self, store, mailbox, uids: list[int], recent: set[int], touched: set[int]
               ) -> list[bytes]:
        """ADDTO/REMOVEFROM lines for the messages in ``touched`` (new, or flags changed)
        that now match or no longer match; ``uids`` is the session's UID list after the
        refresh, and the numbers sent are in that numbering."""
        candidates = sorted(u for u in touched if _present(uids, u))
        if not candidates:
            return []
        lines = []
        for ctx in self.by_tag.values():
            now = set(evaluate(ctx.program, store, mailbox, candidates, recent))
            added = [u for u in candidates if u in now and u not in ctx.matched]
            removed = [u for u in candidates if u not in now and u in ctx.matched]
            ctx.matched.difference_update(removed)
            ctx.matched.update(added)
            if ctx.criteria is not None:
                line = self._resort(ctx, store, mailbox, uids, set(removed), added)
                if line is not None:
                    lines.append(line)
                continue
            if not ctx.program.uid_mode:
                added = [bisect_left(uids, u) + 1 for u in added]
                removed = [bisect_left(uids, u) + 1 for u in removed]
            line = ctx.line(removed, added)
            if line is not None:
                lines.append(line)
        return lines


    @staticmethod
    def _resort(ctx: UpdateContext, store, mailbox, uids: list[int], removed: set[int],
                added: list[int]) -> bytes | None:
        """A SORT context's update: ``removed`` taken out of its order, ``added`` put in.

        The new messages are placed by binary search (:func:`mailthreads.insert_sorted`),
        reading the keys of only O(log n) placed messages each from the store's per-process
        cache.  Should one of those have no keys any more (expunged, and dropped from the
        cache, before this session has seen the expunge), every placed message's keys are
        read, those without are removed now (REMOVEFROM, so the client's view stays right)
        and the whole result is sorted again."""
        def number(uid: int) -> int:
            return uid if ctx.program.uid_mode else bisect_left(uids, uid) + 1
        dropped = ctx.drop(removed, number) if removed else []
        if not added:
            return ctx.sorted_line(dropped, [])

        def keys_of(wanted):
            return store.sort_keys(mailbox, wanted)
        try:
            order = mailthreads.insert_sorted(list(ctx.order), added, keys_of, ctx.criteria)
        except KeyError:
            entries = store.sort_keys(mailbox, sorted({*ctx.order, *added}), uids)
            gone = {u for u in ctx.order if u not in entries}
            if gone:
                dropped += ctx.drop(gone, number)
            order = mailthreads.sort_uids(entries, sorted({*ctx.order, *added}), ctx.criteria)
        ctx.order = order
        ctx.matched = set(order)  # a new message gone meanwhile has no keys: not placed
        new = set(added)
        runs: list[tuple[int, list[int]]] = []
        for pos, uid in enumerate(order, start=1):
            if uid not in new:
                continue
            if runs and runs[-1][0] + len(runs[-1][1]) == pos:
                runs[-1][1].append(number(uid))
            else:
                runs.append((pos, [number(uid)]))
        return ctx.sorted_line(dropped, runs)


def noupdate_line(tag: str) -> bytes:
    """The untagged NO of RFC 5267 4.3.1 refusing the UPDATE of command ``tag``."""
    return b'NO [NOUPDATE "' + tag.encode() + b'"] Too many update contexts'


def _numbering(ctx: UpdateContext, seq_of: Callable[[int], int | None]):
    return (lambda uid: uid) if ctx.program.uid_mode else seq_of


def _pairs(runs: list[tuple[int, list[int]]]) -> str:
    """``(p1 set1 p2 set2 ...)``: each set in sort order, only ascending runs as ranges."""
    return "(" + " ".join(f"{pos} {sequence_set(numbers, ordered=False)}"
                          for pos, numbers in runs) + ")"


def _present(uids: list[int], uid: int) -> bool:
    i = bisect_left(uids, uid)
    return i < len(uids) and uids[i] == uid


__all__ = ["MAX_CONTEXTS", "SearchContexts", "UpdateContext", "freeze", "noupdate_line"]
