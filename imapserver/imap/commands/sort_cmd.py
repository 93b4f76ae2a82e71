"""SORT and THREAD (RFC 5256), SORT=DISPLAY (RFC 5957), ESORT (RFC 5267 3); UID forms too.

    sort            = ["UID" SP] "SORT" [SP sort-return-opts] SP sort-criteria SP
                      search-criteria
    sort-return-opts = "RETURN" SP "(" [sort-return-opt *(SP sort-return-opt)] ")"
    sort-return-opt = "MIN" / "MAX" / "ALL" / "COUNT"         ; RFC 5267 3, as ESEARCH
                    / "PARTIAL" SP partial-range              ; RFC 5267 4.4, RFC 9394
                    / "CONTEXT" / "UPDATE"                    ; RFC 5267 4.2, 4.3 (CONTEXT=SORT)
    sort-criteria   = "(" sort-criterion *(SP sort-criterion) ")"
    sort-criterion  = ["REVERSE" SP] sort-key
    sort-key        = "ARRIVAL" / "CC" / "DATE" / "FROM" / "SIZE" / "SUBJECT" / "TO" /
                      "DISPLAYFROM" / "DISPLAYTO"              ; RFC 5957
    thread          = ["UID" SP] "THREAD" SP thread-alg SP search-criteria
    thread-alg      = "ORDEREDSUBJECT" / "REFERENCES"
    search-criteria = charset 1*(SP search-key)               ; charset is not optional here

The RETURN list is parsed as SEARCH's (../search_return.py).  SAVE and ``$`` (RFC 5182) work
as in SEARCH, as Dovecot has them: MIN, MAX and PARTIAL pick from the sorted result, and what
is saved is a set of UIDs (no order).  ``RETURN (UPDATE)`` leaves a sort context in the selection's
:class:`SearchContexts` (../search_updates.py), the one mechanism SEARCH's contexts use, and
CANCELUPDATE ends either kind.

The messages are chosen by the SEARCH evaluator; their keys come from the store
(:meth:`MailStore.sort_keys`, kept per process) and the order and the threads from
:mod:`mailstore.threading`.  Charsets: UTF-8 and US-ASCII; any other is ``NO [BADCHARSET]``.
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from bisect import bisect_left
from collections import OrderedDict

from twisted.internet import defer

from mailstore import threads as mailthreads

from ..context import SELECTED, Bad, No, command
from ..esearch import esearch_line, result_items
from ..rev2 import check_keys, check_sort_charset
from ..search import (
    SUPPORTED_CHARSETS,
    BadCharset,
    answerable_from_flags,
    evaluate,
    parse_search,
)
from ..search_parse import ModseqKey, walk
from ..search_return import split_return
from ..search_updates import noupdate_line
from ..wire import Atom
from .common import enable_condstore
from .search_cmd import mentions_saved

THREAD_ALGORITHMS = ("ORDEREDSUBJECT", "REFERENCES")
RESULTS_KEPT = 16
"""Answers remembered per process (see :func:`_answer`)."""

_results: OrderedDict[tuple, bytes] = OrderedDict()
_results_lock = threading.Lock()


def _digest(uids) -> bytes:
    data = uids.tobytes() if isinstance(uids, array) else array("Q", uids).tobytes()
    return hashlib.blake2b(data, digest_size=16).digest()


def _answer(key: tuple, matched, uids, uid_mode: bool, compute) -> bytes:
    """``compute()``, remembered per process.  An answer depends only on the messages
    matched (their keys never change: a UID is never reused in a mailbox) and, for sequence
    numbers, on the session's UID list, so those (as digests) are in the key with the mailbox,
    the command's parameters and ``uid_mode``: a client that sorts a big mailbox again
    unchanged gets the answer without it being sorted and written out again."""
    key = (*key, uid_mode, _digest(matched), None if uid_mode else _digest(uids))
    with _results_lock:
        found = _results.get(key)
        if found is not None:
            _results.move_to_end(key)
            return found
    found = compute()
    with _results_lock:
        _results[key] = found
        while len(_results) > RESULTS_KEPT:
            _results.popitem(last=False)
    return found


def _word(token, what: str) -> str:
    if not isinstance(token, Atom):
        raise Bad(f"expected {what}")
    return token.upper()


def parse_criteria(tokens) -> list[tuple[str, bool]]:
    """``(REVERSE DATE SUBJECT)`` as ``[("DATE", True), ("SUBJECT", False)]``; a REVERSE
    without a key after it is BAD."""
    if not isinstance(tokens, list) or not tokens:
        raise Bad("SORT needs a parenthesised list of sort criteria")
    out: list[tuple[str, bool]] = []
    reverse = False
    for token in tokens:
        word = _word(token, "a sort key")
        if word == "REVERSE":
            # RFC 5256's grammar has one REVERSE per key; Dovecot takes a second as undoing
            # the first, and so do we (the outside judge, and harmless).
            reverse = not reverse
            continue
        if word not in mailthreads.SORT_KEYS:
            raise Bad(f"unknown sort key {word}")
        out.append((word, reverse))
        reverse = False
    if reverse:
        raise Bad("REVERSE needs a sort key after it")
    return out


def _program(ctx, tokens: list, uid_mode: bool, save: bool = False):
    """The search program of ``charset 1*(SP search-key)``; ``save``: the command has RETURN
    (SAVE), so a NO empties the saved result (RFC 5182 2.1, as SEARCH)."""
    if len(tokens) < 2:
        raise Bad(f"{ctx.name if ctx.uid_command is None else ctx.uid_command} needs a "
                  "charset and search criteria")
    check_sort_charset(ctx.session, tokens[0])  # RFC 6855 3, erratum 4029
    selected = ctx.session.selected
    try:
        saved = selected.saved_uids() if mentions_saved(tokens) else []
        program = parse_search(["CHARSET", *tokens], uid_mode=uid_mode, saved=saved)
        check_keys(ctx.session, program)  # no RECENT/NEW/OLD in IMAP4rev2 (RFC 9051 9)
        return program
    except BadCharset:
        if save:
            selected.saved = []
        raise No("Unsupported charset",
                 "BADCHARSET (" + " ".join(SUPPORTED_CHARSETS) + ")") from None
    except ValueError as exc:
        raise Bad(str(exc)) from None


def _matching(program, ctx, selected, uids: list[int], recent: set[int]) -> list[int]:
    """The UIDs the search criteria select, as SEARCH finds them (keys on system flags only
    are answered from the session's index, reading nothing)."""
    flag_sets = selected.flag_sets() if answerable_from_flags(program) else None
    return evaluate(program, ctx.store, selected.mailbox, uids, recent, flag_sets=flag_sets)


def _numbers(uid_mode: bool, order: list[int], uids: list[int]) -> list[int]:
    if uid_mode:
        return order
    return [bisect_left(uids, uid) + 1 for uid in order]


def _sort_returns(args: list):
    """The RETURN options of an ESORT (RFC 5267 3, 4) and the arguments after them."""
    try:
        return split_return(args)
    except ValueError as exc:
        raise Bad(str(exc)) from None


@defer.inlineCallbacks
def sort_command(ctx, uid_mode: bool):
    options, args = _sort_returns(list(ctx.args))
    selected = ctx.session.selected
    if options is not None and options.update and ctx.tag in selected.contexts.by_tag:
        raise Bad("Tag reuse")  # RFC 5267 4.3: the tag names a context still updating
    if not args:
        raise Bad("SORT needs sort criteria")
    criteria = parse_criteria(args[0])
    save = options is not None and options.save
    program = _program(ctx, args[1:], uid_mode, save)
    uids = list(selected.uids)
    recent = set(selected.recent)
    mailbox = selected.mailbox
    with_modseq = _uses_modseq(program)
    if with_modseq:
        yield enable_condstore(ctx)  # RFC 7162 3.1: a MODSEQ search criterion enables it

    def sorted_uids(matched):
        entries = ctx.store.sort_keys(mailbox, matched, uids)
        return mailthreads.sort_uids(entries, matched, criteria)

    def render(order):
        """``* SORT`` as bytes, or ESORT's return data items (sent with the tag, which is
        not part of what :func:`_answer` remembers)."""
        numbers = _numbers(uid_mode, order, uids)
        if options is None:
            return b"SORT" + b"".join(b" %d" % n for n in numbers)
        partial = None
        if options.partial is not None:
            partial = (options.partial_label(), options.partial_slice(numbers))
        items = result_items(numbers, want_min=options.min, want_max=options.max,
                             want_all=options.all, want_count=options.count, partial=partial,
                             sorted_result=True)
        return tuple(items)

    def run():
        matched = _matching(program, ctx, selected, uids, recent)
        highest = 0
        if with_modseq and (options is None or options.sends_esearch):
            # RFC 7162 3.1.5 and its sort-data grammar (search-sort-mod-seq): the highest
            # MODSEQ of the messages returned, as SEARCH gives it.
            returned = matched if options is None else options.saved_part(matched)
            if returned:
                highest = max((v.modseq for v in ctx.store.fetch(mailbox, returned)),
                              default=0)
        if options is not None and (options.update or options.save):
            # The context or SAVE needs the order itself: the remembered answers are no help.
            order = sorted_uids(matched)
            return render(order), order, highest
        return _answer((mailbox.id, "SORT", tuple(criteria), options), matched, uids,
                       uid_mode, lambda: render(sorted_uids(matched))), None, highest
    try:
        data, order, highest = yield ctx.call(run)
    except Exception:
        if save:
            selected.saved = []
        raise
    if highest:
        data = (data + b" (MODSEQ %d)" % highest if options is None
                else (*data, ("MODSEQ", str(highest))))
    if options is None:
        ctx.untagged(data)
        return
    if save:
        selected.saved = sorted(options.saved_part(order))
    if options.sends_esearch:
        ctx.untagged(esearch_line(ctx.tag, uid_mode, data))
    if options.update:
        if selected.contexts.full():
            # RFC 5267 4.3.1: the other options are still answered, only UPDATE is refused.
            ctx.untagged(noupdate_line(ctx.tag))
        else:
            selected.contexts.add(ctx.tag, program, uids, order, criteria)


@defer.inlineCallbacks
def thread_command(ctx, uid_mode: bool):
    args = list(ctx.args)
    if not args:
        raise Bad("THREAD needs an algorithm")
    algorithm = _word(args[0], "a threading algorithm")
    if algorithm not in THREAD_ALGORITHMS:
        raise Bad(f"unknown threading algorithm {algorithm}")
    program = _program(ctx, args[1:], uid_mode)
    selected = ctx.session.selected
    uids = list(selected.uids)
    recent = set(selected.recent)
    mailbox = selected.mailbox
    if _uses_modseq(program):
        # RFC 7162 3.1: CONDSTORE-enabling; thread-data has no MODSEQ (RFC 5256 5), so the
        # answer is as without it.
        yield enable_condstore(ctx)

    def run():
        matched = _matching(program, ctx, selected, uids, recent)

        def compute() -> bytes:
            entries = ctx.store.sort_keys(mailbox, matched, uids)
            if algorithm == "REFERENCES":
                threads = mailthreads.references(entries, matched)
            else:
                threads = mailthreads.orderedsubject(entries, matched)
            if not uid_mode:
                _renumber(threads, uids)
            return mailthreads.render(threads)
        return _answer((mailbox.id, "THREAD", algorithm), matched, uids, uid_mode, compute)
    data = yield ctx.call(run)
    ctx.untagged(b"THREAD" + (b" " + data if data else b""))


def _uses_modseq(program) -> bool:
    return any(isinstance(k, ModseqKey) for k in walk(program.key))


def _renumber(threads, uids: list[int]) -> None:
    """UIDs in the trees replaced by sequence numbers."""
    stack = list(threads)
    while stack:
        node = stack.pop()
        if node.uid is not None:
            node.uid = bisect_left(uids, node.uid) + 1
        stack.extend(node.children)


@command("SORT", SELECTED)
def sort(ctx):
    return sort_command(ctx, uid_mode=False)


@command("THREAD", SELECTED)
def thread(ctx):
    return thread_command(ctx, uid_mode=False)
