"""SORT and THREAD (RFC 5256), SORT=DISPLAY (RFC 5957), ESORT (RFC 5267 3); UID forms too.

    sort            = ["UID" SP] "SORT" [SP sort-return-opts] SP sort-criteria SP
                      search-criteria
    sort-return-opts = "RETURN" SP "(" [sort-return-opt *(SP sort-return-opt)] ")"
    sort-return-opt = "MIN" / "MAX" / "ALL" / "COUNT"         ; RFC 5267 3, as ESEARCH
    sort-criteria   = "(" sort-criterion *(SP sort-criterion) ")"
    sort-criterion  = ["REVERSE" SP] sort-key
    sort-key        = "ARRIVAL" / "CC" / "DATE" / "FROM" / "SIZE" / "SUBJECT" / "TO" /
                      "DISPLAYFROM" / "DISPLAYTO"              ; RFC 5957
    thread          = ["UID" SP] "THREAD" SP thread-alg SP search-criteria
    thread-alg      = "ORDEREDSUBJECT" / "REFERENCES"
    search-criteria = charset 1*(SP search-key)               ; charset is not optional here

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
from ..esearch_render import RETURN_OPTIONS, correlated, returned_data
from ..search import (
    SUPPORTED_CHARSETS,
    BadCharset,
    answerable_from_flags,
    evaluate,
    parse_search,
)
from ..wire import Atom

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


def _program(ctx, tokens: list, uid_mode: bool):
    """The search program of ``charset 1*(SP search-key)``."""
    if len(tokens) < 2:
        raise Bad(f"{ctx.name if ctx.uid_command is None else ctx.uid_command} needs a "
                  "charset and search criteria")
    try:
        return parse_search(["CHARSET", *tokens], uid_mode=uid_mode)
    except BadCharset:
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


@defer.inlineCallbacks
def sort_command(ctx, uid_mode: bool):
    args = list(ctx.args)
    returns = None
    if args and isinstance(args[0], Atom) and args[0].upper() == "RETURN":
        # RFC 5267 3: ESORT.
        if len(args) < 2 or not isinstance(args[1], list):
            raise Bad("RETURN needs a parenthesised list of options")
        returns = [_word(t, "a RETURN option") for t in args[1]]
        unknown = [r for r in returns if r not in RETURN_OPTIONS]
        if unknown:
            raise Bad(f"unknown RETURN option {unknown[0]}")
        args = args[2:]
    if not args:
        raise Bad("SORT needs sort criteria")
    criteria = parse_criteria(args[0])
    program = _program(ctx, args[1:], uid_mode)
    selected = ctx.session.selected
    uids = list(selected.uids)
    recent = set(selected.recent)
    mailbox = selected.mailbox

    def run():
        matched = _matching(program, ctx, selected, uids, recent)

        def compute() -> bytes:
            entries = ctx.store.sort_keys(mailbox, matched, uids)
            order = mailthreads.sort_uids(entries, matched, criteria)
            numbers = _numbers(uid_mode, order, uids)
            if returns is not None:
                return returned_data(uid_mode, returns, numbers)
            return b"SORT" + b"".join(b" %d" % n for n in numbers)
        return _answer((mailbox.id, "SORT", tuple(criteria), tuple(returns or ()),
                        returns is None), matched, uids, uid_mode, compute)
    data = yield ctx.call(run)
    ctx.untagged(data if returns is None else correlated(ctx.tag, data))


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
