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

Everything here runs in the worker thread that runs the refresh.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field

from .esearch import esearch_line, update_items
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
    """One SEARCH RETURN (UPDATE): its tag, its frozen program, and what matches now."""

    tag: str
    program: SearchProgram
    matched: set[int] = field(default_factory=set)

    def line(self, removed: list[int], added: list[int]) -> bytes | None:
        items = update_items(removed, added)
        return esearch_line(self.tag, self.program.uid_mode, items) if items else None


class SearchContexts:
    """The update contexts of one selected mailbox, in the order they were made."""

    def __init__(self):
        self.by_tag: dict[str, UpdateContext] = {}

    def __bool__(self) -> bool:
        return bool(self.by_tag)

    def full(self) -> bool:
        return len(self.by_tag) >= MAX_CONTEXTS

    def add(self, tag: str, program: SearchProgram, uids: list[int], matched: list[int]
            ) -> None:
        """Start a context for the command ``tag`` whose ``program`` matched ``matched`` among
        the session's ``uids``."""
        frozen = SearchProgram(freeze(program.key, uids), program.uid_mode, program.charset)
        self.by_tag[tag] = UpdateContext(tag, frozen, set(matched))

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
            if not ctx.program.uid_mode:
                added = [bisect_left(uids, u) + 1 for u in added]
                removed = [bisect_left(uids, u) + 1 for u in removed]
            line = ctx.line(removed, added)
            if line is not None:
                lines.append(line)
        return lines


def _present(uids: list[int], uid: int) -> bool:
    i = bisect_left(uids, uid)
    return i < len(uids) and uids[i] == uid


__all__ = ["MAX_CONTEXTS", "SearchContexts", "UpdateContext", "freeze"]
