"""SEARCH evaluation: running a :class:`~.search_parse.SearchProgram` over a mailbox.

Semantics (RFC 3501 6.4.4), where the RFC leaves a choice:

* Flags compare case-insensitively (``KEYWORD $junk`` finds ``$Junk``), as in Dovecot.
* BEFORE/ON/SINCE use the internal date as a UTC calendar date.  SENTBEFORE/SENTON/SENTSINCE
  use the day, month and year written in the first Date: field, disregarding time and zone; a
  message without a readable Date: field matches none of them (Dovecot takes it as 1970).
* FROM/TO/CC/BCC/SUBJECT/HEADER look in the decoded values of every field of that name (see
  :mod:`.search_text`), address fields included as written (``"Name" <addr>``).  An empty
  string matches messages that have the field.  FROM/TO/CC/BCC (RFC 3501 6.4.4: "the envelope
  structure's FROM field") also look in the parsed addresses written out again without
  comments and folding (:func:`.search_text.address_text`, Dovecot's form ``"Name"
  <local@domain>, group: <a@b>;``), so ``<user (comment)@ (comment) domain.org>`` is found
  by ``FROM user@domain.org``.  Dovecot looks only there; we keep the text as written as
  well, so ``FROM comment`` still finds it (a superset, as a substring search may be).
* BODY looks in the decoded ``text/*`` and ``message/*`` leaf parts, TEXT in those and in
  every header block: the message's, each part's MIME header, and those of attached
  messages.  Other parts (images, ``application/*``), preambles and epilogues are not searched,
  as in Dovecot without full-text search.

How it keeps a 100,000-message mailbox cheap:

* Keys are sorted into tiers by what they need (see :mod:`.search_parse`): 0 nothing but the
  UID (sequence sets, UID, RECENT, ALL), 1 the commit record and flags, 2 the header block, 3
  the content.  A top-level sequence set or UID set narrows the candidates before anything is
  read.
* Candidates go in batches of ``batch_size`` UIDs.  For each batch the program is evaluated
  with three-valued logic (true, false, unknown) after each tier's data arrives, and only the
  messages still unknown are fetched for the next tier: one :meth:`MailStore.fetch` round trip
  per tier used, with only that tier's columns.  ``SEARCH 1:*`` or ``UID SEARCH UID 5:*``
  touches no store at all; ``SEARCH UNSEEN FROM x`` reads headers only of unseen messages.
* Content is read through :meth:`MailStore.open_message`, one content chunk at a time, only
  the byte ranges of searchable parts (an attachment's chunks are never fetched), decoded on
  the fly, and stops as soon as every string is found.
"""

from __future__ import annotations

import datetime
import re
import time
from bisect import bisect_right
from collections.abc import Callable

from mailstore.messages import BODY, FLAGS, HEADER
from mailstore.mime import header_fields
from mailstore.mime.searchtext import MAX_PART_HEADER, header_text, pieces, segments
from mailstore.objectids import email_id, thread_id
from mailstore.textindex import Candidates, docs_for_content, docs_for_header

from .search_parse import (
    MONTHS,
    AllKey,
    AndKey,
    ContentKey,
    DateKey,
    FlagKey,
    HeaderKey,
    Key,
    ModseqKey,
    NotKey,
    ObjectIdKey,
    OrKey,
    RecentKey,
    SaveDateKey,
    SearchProgram,
    SequenceKey,
    SizeKey,
    WithinKey,
    walk,
)
from .search_text import PartDecoder, StreamMatcher, address_text, decode_field

_FLAG_ONLY = (AllKey, AndKey, FlagKey, NotKey, OrKey, RecentKey, SequenceKey)
BATCH_SIZE = 500
SCAN_ABOVE = 2000
"""Above this many candidates, flags/size/date come from one scan instead of multi-gets."""
"""UIDs per :meth:`MailStore.fetch` round trip."""
_EPOCH_DAY = datetime.date(1970, 1, 1).toordinal()
_SENT_DATE = re.compile(r"(\d{1,2})[\s-]+([A-Za-z]{3})[A-Za-z]*\.?[\s-]+(\d{2,4})(?!\d)")

Test = Callable[["_Message"], "bool | None"]


def evaluate(program: SearchProgram, store, mailbox, uids: list[int],
             recent: set[int] | None = None, *, batch_size: int = BATCH_SIZE,
             flag_sets: dict[str, tuple[bool, set[int]]] | None = None,
             now: float | None = None) -> list[int]:
    """The UIDs of the messages that match ``program``, ascending.

    ``store`` is the :class:`~mailstore.store.MailStore` and ``mailbox`` the selected
    :class:`~mailstore.mailboxes.Mailbox`.  ``uids`` is the session's UID list (ascending;
    index + 1 is the message sequence number); only those messages are searched, and one
    expunged by another session meanwhile matches nothing.  ``recent`` holds the UIDs that are
    \\Recent in this session.  ``flag_sets`` (lower-case system flag -> ``(True, UIDs that
    have it)`` or ``(False, UIDs that lack it)``), when given, answers a program made only of
    flag, sequence and RECENT keys by set algebra, reading nothing.  Store errors
    (:mod:`mailstore.errors`) propagate.
    """
    recent = recent or set()
    if flag_sets is not None and answerable_from_flags(program):
        return _resolve_sets(_from_sets(program.key, uids, recent, flag_sets), uids)
    possible = _text_candidates(program.key, store, mailbox, uids)
    test = _compile(program.key, uids, recent, time.time() if now is None else now, possible)
    tiers = program.tiers
    content_keys = sorted({k for k in walk(program.key)
                           if isinstance(k, ContentKey) and k.needle},
                          key=lambda k: (k.needle, k.text))
    stages: list[tuple[int, list[bytes]]] = []
    if 1 in tiers:
        stages.append((1, [FLAGS]))
    if 2 in tiers:
        stages.append((2, [HEADER]))
    if 3 in tiers and content_keys:
        text = any(k.text for k in content_keys)
        stages.append((3, [BODY, HEADER] if text and 2 not in tiers else [BODY]))
    candidates = _candidates(program.key, uids, possible)
    summaries = None
    if stages and stages[0][0] == 1 and len(candidates) > SCAN_ABOVE:
        # Many candidates: one bounded scan of the small commit and flag cells beats a
        # multi-get per batch (a profile of UNSEEN on 100,000 messages: 3x faster).
        low, high = candidates[0], candidates[-1]
        if all(isinstance(k, _FLAG_ONLY) for k in walk(program.key)):
            # Only flags matter: (UID, flags) pairs, no per-message record or view at all.
            summaries = {uid: _FlagsOnly(flags) for uid, flags in store.uid_flags(mailbox, high)
                         if uid >= low}
        else:
            summaries = {v.uid: v for v in store.scan(mailbox, low_uid=low, high_uid=high,
                                                      columns=[FLAGS])}
    matched: list[int] = []
    for start in range(0, len(candidates), batch_size):
        batch = [_Message(uid) for uid in candidates[start:start + batch_size]]
        matched += _run_batch(batch, test, stages, store, mailbox, content_keys, summaries)
    return matched


_SYSTEM = frozenset(("\\seen", "\\deleted", "\\flagged", "\\answered", "\\draft"))


def answerable_from_flags(program: SearchProgram) -> bool:
    """Whether only system flags, sequence sets and RECENT matter (UNSEEN, DELETED, NOT
    FLAGGED, OR ANSWERED DRAFT, ...): a session's index can answer that alone."""
    return all(isinstance(k, _FLAG_ONLY) and (not isinstance(k, FlagKey)
                                              or k.flag.lower() in _SYSTEM)
               for k in walk(program.key))


def _from_sets(key: Key, uids: list[int], recent: set[int],
               sets: dict[str, tuple[bool, set[int]]]) -> tuple[bool, set[int]]:
    """Evaluate a flag-only key by set algebra: ``(True, S)`` means the UIDs in S, ``(False,
    S)`` every UID *but* those in S.  Complements are never built here, so UNSEEN on 100,000
    messages touches the unseen UIDs only."""
    if isinstance(key, AllKey):
        return False, set()
    if isinstance(key, RecentKey):
        return True, recent
    if isinstance(key, SequenceKey):
        out: set[int] = set()
        for start, stop in key.seqset.slices(uids, key.uid, strict=False):
            out.update(uids[start:stop])
        return True, out
    if isinstance(key, FlagKey):
        has, members = sets.get(key.flag.lower(), (True, set()))
        return (has, members) if key.present else (not has, members)
    if isinstance(key, NotKey):
        positive, members = _from_sets(key.key, uids, recent, sets)
        return not positive, members
    parts = ([key.left, key.right] if isinstance(key, OrKey) else list(key.keys))
    results = [_from_sets(k, uids, recent, sets) for k in parts]
    if isinstance(key, OrKey):
        (pa, a), (pb, b) = results
        if pa and pb:
            return True, a | b
        if pa:
            return False, b - a
        if pb:
            return False, a - b
        return False, a & b
    positive, acc = False, set()   # AND over nothing: everything
    for pb, b in results:
        if positive and pb:
            acc = acc & b
        elif positive:
            acc = acc - b
        elif pb:
            positive, acc = True, b - acc
        else:
            acc = acc | b
    return positive, acc


def _resolve_sets(result: tuple[bool, set[int]], uids: list[int]) -> list[int]:
    """The session's UIDs that ``result`` (from :func:`_from_sets`) names, ascending."""
    positive, members = result
    if positive:
        found = []
        for uid in sorted(members):
            i = bisect_right(uids, uid) - 1
            if i >= 0 and uids[i] == uid:
                found.append(uid)
        return found
    return [u for u in uids if u not in members]


class _FlagsOnly:
    """Stands in for a MessageView when only the flags are needed."""

    __slots__ = ("flags",)

    def __init__(self, flags):
        self.flags = flags


def _run_batch(batch: list[_Message], test: Test, stages, store, mailbox,
               content_keys: list[ContentKey], summaries: dict | None = None) -> list[int]:
    matched: list[int] = []
    pending = _settle(batch, test, matched)
    for tier, columns in stages:
        if not pending:
            break
        if tier == 1 and summaries is not None:
            views = summaries
        else:
            views = {v.uid: v for v in store.fetch(mailbox, [m.uid for m in pending],
                                                   columns)}
        alive = []
        for m in pending:
            view = views.get(m.uid)
            if view is None:
                continue  # expunged meanwhile: it matches nothing
            if m.view is None:
                m.view = view
            if HEADER in columns:
                m.header = view.header or b""
            if tier == 3:
                m.content = _scan_content(store, m, view.body, content_keys)
            alive.append(m)
        pending = _settle(alive, test, matched)
    matched.sort()
    return matched


def _settle(messages: list[_Message], test: Test, matched: list[int]) -> list[_Message]:
    """Add the messages that match to ``matched``; return those still undecided."""
    undecided = []
    for m in messages:
        verdict = test(m)
        if verdict is None:
            undecided.append(m)
        elif verdict:
            matched.append(m.uid)
    return undecided


def _text_candidates(key: Key, store, mailbox, uids: list[int]) -> dict[Key, Candidates]:
    """The text index's answer (:meth:`MailStore.text_candidates`): for each text key it
    can narrow, the messages it matched and those it does not cover.  A message it covers
    and did not match does not match; one it matched does if the index is exact for that key,
    else the key's own test decides, as it does for every message not covered."""
    queries = {}
    for k in walk(key):
        if isinstance(k, HeaderKey) and k.needle:
            docs, exact = docs_for_header(k.field, k.addresses)
            queries[k] = (docs, k.needle, exact)
        elif isinstance(k, ContentKey) and k.needle:
            docs, exact = docs_for_content(k.text)
            queries[k] = (docs, k.needle, exact)
    lookup = getattr(store, "text_candidates", None)
    if not queries or lookup is None:
        return {}
    return lookup(mailbox, queries, uids)


def _candidates(key: Key, uids: list[int],
                possible: dict[Key, Candidates] | None = None) -> list[int]:
    """``uids``, narrowed by the most selective top-level sequence set if there is one, and
    by the text index's candidates for the top-level text keys."""
    operands = key.keys if isinstance(key, AndKey) else (key,)
    narrowing = [possible[k].possible() for k in operands if possible and k in possible]
    if narrowing:
        allowed = min(narrowing, key=len)
        for other in narrowing:
            if other is not allowed:
                allowed = allowed & other
        uids = [uid for uid in uids if uid in allowed]
    if isinstance(key, SequenceKey):
        sets = [key]
    elif isinstance(key, AndKey):
        sets = [k for k in key.keys if isinstance(k, SequenceKey)]
    else:
        sets = []
    if not sets or not uids:
        return uids
    best = min((k.seqset.slices(uids, k.uid, strict=False) for k in sets),
               key=lambda slices: sum(stop - start for start, stop in slices))
    out: list[int] = []
    for start, stop in best:
        out += uids[start:stop]
    return out


# -- one message -----------------------------------------------------------------------------

class _Message:
    """What is known of one candidate so far; ``None`` members are not loaded yet."""

    __slots__ = ("uid", "view", "header", "content", "_fields", "_values", "_addresses",
                 "_flags")

    def __init__(self, uid: int):
        self.uid = uid
        self.view = None                        # MessageView with record and flags
        self.header: bytes | None = None        # the raw header block
        self.content: set[ContentKey] | None = None  # the content keys found
        self._fields: dict[str, list[bytes]] | None = None
        self._values: dict[str, list[str]] = {}
        self._addresses: dict[str, list[str]] = {}
        self._flags: frozenset[str] | None = None

    def flags(self) -> frozenset[str]:
        if self._flags is None:
            self._flags = frozenset(name.lower() for name in self.view.flags.names)
        return self._flags

    def fields(self, name: str) -> list[bytes]:
        if self._fields is None:
            self._fields = {}
            for field, raw in header_fields(self.header):
                if field:
                    self._fields.setdefault(field.lower(), []).append(raw)
        return self._fields.get(name, [])

    def values(self, name: str) -> list[str]:
        """The decoded, case-folded values of the fields called ``name`` (lower case)."""
        values = self._values.get(name)
        if values is None:
            values = self._values[name] = [decode_field(raw).casefold()
                                           for raw in self.fields(name)]
        return values

    def addresses(self, name: str) -> list[str]:
        """:meth:`values` and, for each field, its addresses as :func:`address_text` writes
        them (case-folded)."""
        values = self._addresses.get(name)
        if values is None:
            values = self._addresses[name] = self.values(name) + [
                address_text(raw).casefold() for raw in self.fields(name)]
        return values

    def sent_day(self) -> int | None:
        """The proleptic ordinal of the day written in the first Date: field, if readable."""
        dates = self.fields("date")
        return _day_of_date_field(decode_field(dates[0])) if dates else None


def _day_of_date_field(value: str) -> int | None:
    """RFC 5322 ``[day-of-week ","] day month year ...``: the date's ordinal, or None."""
    m = _SENT_DATE.search(value)
    if not m or m.group(2).upper() not in MONTHS:
        return None
    year = int(m.group(3))
    if len(m.group(3)) == 2:  # RFC 5322 4.3: obsolete two- and three-digit years
        year += 2000 if year < 50 else 1900
    elif len(m.group(3)) == 3:
        year += 1900
    try:
        return datetime.date(year, MONTHS[m.group(2).upper()], int(m.group(1))).toordinal()
    except ValueError:
        return None


# -- compiling keys to tests -----------------------------------------------------------------

def _subtree_tier(key: Key) -> int:
    return max(k.tier for k in walk(key))


def _flatten(key: Key, kind: type) -> list[Key]:
    """The operands of a chain of ANDs or ORs (``OR a OR b c`` is any of a, b, c)."""
    out, stack = [], [key]
    while stack:
        k = stack.pop()
        if kind is OrKey and isinstance(k, OrKey):
            stack += [k.right, k.left]
        elif kind is AndKey and isinstance(k, AndKey):
            stack += reversed(k.keys)
        else:
            out.append(k)
    # Cheap operands first, so that the expensive ones are not even looked at when a cheap
    # one decides (and so that their data need not be fetched).
    return sorted(out, key=_subtree_tier)


def _compile(key: Key, uids: list[int], recent: set[int], now: float,
             possible: dict[Key, Candidates] | None = None) -> Test:
    """A function of a message giving True, False or None (not decidable with what is
    loaded yet).  ``possible``: the text index's candidates per text key; a message outside
    them does not match that key, decided before anything is read."""
    if possible and key in possible:
        verdict, inner = possible[key].verdict, _compile(key, uids, recent, now)

        def indexed(m):
            found = verdict(m.uid)
            return inner(m) if found is None else found
        return indexed
    if isinstance(key, AllKey):
        return lambda m: True
    if isinstance(key, RecentKey):
        return lambda m: m.uid in recent
    if isinstance(key, SequenceKey):
        slices = key.seqset.slices(uids, key.uid, strict=False)
        firsts = [uids[start] for start, _ in slices]
        lasts = [uids[stop - 1] for _, stop in slices]

        def in_set(m):
            i = bisect_right(firsts, m.uid) - 1
            return i >= 0 and m.uid <= lasts[i]
        return in_set
    if isinstance(key, FlagKey):
        flag, present = key.flag.lower(), key.present
        return lambda m: None if m.view is None else (flag in m.flags()) == present
    if isinstance(key, ModseqKey):
        modseq = key.modseq
        return lambda m: None if m.view is None else m.view.modseq >= modseq
    if isinstance(key, SizeKey):
        octets = key.octets
        if key.larger:
            return lambda m: None if m.view is None else m.view.record.size > octets
        return lambda m: None if m.view is None else m.view.record.size < octets
    if isinstance(key, DateKey):
        return _compile_date(key)
    if isinstance(key, SaveDateKey):
        return _compile_save_date(key)
    if isinstance(key, ObjectIdKey):
        wanted = key.objectid
        if key.thread:
            return lambda m: (None if m.header is None
                              else thread_id(m.header, m.view.record.content) == wanted)
        return lambda m: None if m.view is None else email_id(m.view.record.content) == wanted
    if isinstance(key, WithinKey):
        cutoff = now - key.seconds  # RFC 5032: OLDER is before it, YOUNGER the rest
        if key.older:
            return lambda m: None if m.view is None else m.view.record.internal_date < cutoff
        return lambda m: None if m.view is None else m.view.record.internal_date >= cutoff
    if isinstance(key, HeaderKey):
        field, needle = key.field, key.needle
        if not needle:
            return lambda m: None if m.header is None else bool(m.fields(field))
        if key.addresses:
            return lambda m: (None if m.header is None
                              else any(needle in value for value in m.addresses(field)))
        return lambda m: (None if m.header is None
                          else any(needle in value for value in m.values(field)))
    if isinstance(key, ContentKey):
        if not key.needle:
            return lambda m: True  # every text contains the empty string
        return lambda m: None if m.content is None else key in m.content
    if isinstance(key, NotKey):
        inner = _compile(key.key, uids, recent, now, possible)

        def negation(m):
            verdict = inner(m)
            return None if verdict is None else not verdict
        return negation
    if isinstance(key, OrKey | AndKey):
        return _compile_junction(key, uids, recent, now, possible)
    raise TypeError(f"not a search key: {key!r}")


def _compile_junction(key: OrKey | AndKey, uids: list[int], recent: set[int],
                      now: float, possible: dict[Key, Candidates] | None = None) -> Test:
    kind = type(key)
    tests = [_compile(k, uids, recent, now, possible) for k in _flatten(key, kind)]
    decisive = kind is OrKey  # the verdict that settles an OR (True) or an AND (False)

    def junction(m):
        unknown = False
        for test in tests:
            verdict = test(m)
            if verdict is None:
                unknown = True
            elif verdict is decisive:
                return decisive
        return None if unknown else not decisive
    return junction


def _day_test(relation: str, day: int) -> Callable[[int], bool]:
    if relation == "before":
        return lambda d: d < day
    if relation == "on":
        return lambda d: d == day
    return lambda d: d >= day


def _compile_save_date(key: SaveDateKey) -> Test:
    """RFC 8514 4.3: the save date's UTC day, as BEFORE/ON/SINCE use the internal date's."""
    holds = _day_test(key.relation, key.day.toordinal())

    def saved(m):
        if m.view is None:
            return None
        when = m.view.record.save_date
        return when is not None and holds(_EPOCH_DAY + int(when // 86400))
    return saved


def _compile_date(key: DateKey) -> Test:
    holds = _day_test(key.relation, key.day.toordinal())
    if not key.sent:
        return lambda m: (None if m.view is None
                          else holds(_EPOCH_DAY + int(m.view.record.internal_date // 86400)))

    def sent(m):
        if m.header is None:
            return None
        d = m.sent_day()
        return d is not None and holds(d)
    return sent


# -- content -----------------------------------------------------------------------------------

def _scan_content(store, m: _Message, body: dict | None,
                  keys: list[ContentKey]) -> set[ContentKey]:
    """The content keys whose string the message contains (see the module docstring)."""
    body_needles = {k.needle for k in keys if not k.text}
    in_bodies = StreamMatcher(k.needle for k in keys)   # BODY and TEXT strings
    in_headers = StreamMatcher(k.needle for k in keys if k.text)

    def found() -> set[ContentKey]:
        return {k for k in keys if k.needle in in_bodies.found
                or (k.text and k.needle in in_headers.found)}

    record = m.view.record
    reader = None
    try:
        for is_header, start, end, encoding, charset in segments(body, record.header_size,
                                                                   record.size):
            if len(found()) == len(keys):
                break
            if start >= end:
                continue
            if is_header:
                if in_headers.done:
                    continue
                if start == 0 and m.header is not None:
                    block = m.header
                else:
                    reader = reader or store.open_message(m.view)
                    block = b"".join(pieces(reader, start, min(end, start + MAX_PART_HEADER)))
                in_headers.reset()
                in_headers.feed(header_text(block))
                # A TEXT string found in a header need not be looked for in the bodies.
                in_bodies.needles -= in_headers.found - body_needles
                continue
            if in_bodies.done:
                continue
            reader = reader or store.open_message(m.view)
            decoder = PartDecoder(encoding, charset)
            in_bodies.reset()
            for data in pieces(reader, start, end):
                in_bodies.feed(decoder.feed(data))
                if in_bodies.done:
                    break
            else:
                in_bodies.feed(decoder.feed(b"", final=True))
    finally:
        if reader is not None:
            reader.close()
    return found()


__all__ = ["BATCH_SIZE", "MAX_PART_HEADER", "evaluate"]
