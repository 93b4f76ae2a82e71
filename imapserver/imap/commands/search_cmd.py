"""SEARCH (RFC 3501 6.4.4) and UID SEARCH (6.4.8); the search itself is in ../search*.py.

    search = "SEARCH" [SP "CHARSET" SP astring] 1*(SP search-key)
"""

from __future__ import annotations

from twisted.internet import defer

from ..context import SELECTED, Bad, No, command
from ..search import BadCharset, answerable_from_flags, evaluate, parse_search
from ..search_parse import ModseqKey, walk
from .common import enable_condstore


@defer.inlineCallbacks
def search_command(ctx, uid_mode: bool):
    if not ctx.args:
        raise Bad("SEARCH needs at least one search key")
    try:
        program = parse_search(list(ctx.args), uid_mode=uid_mode)
    except BadCharset:
        raise No("Unsupported charset", "BADCHARSET (US-ASCII UTF-8)") from None
    except ValueError as exc:
        raise Bad(str(exc)) from None
    selected = ctx.session.selected
    uids = list(selected.uids)
    recent = set(selected.recent)
    with_modseq = any(isinstance(k, ModseqKey) for k in walk(program.key))
    if with_modseq:
        yield enable_condstore(ctx)  # RFC 7162 3.1: a CONDSTORE-enabling command

    def run():
        # Keys on system flags only (UNSEEN, DELETED, ...): answered from the session's index.
        flag_sets = selected.flag_sets() if answerable_from_flags(program) else None
        matched = evaluate(program, ctx.store, selected.mailbox, uids, recent,
                           flag_sets=flag_sets)
        highest = 0
        if with_modseq and matched:
            # RFC 7162 3.1.5: the highest MODSEQ of the messages found.
            highest = max((v.modseq for v in ctx.store.fetch(selected.mailbox, matched)),
                          default=0)
        return matched, highest
    matched, highest = yield ctx.call(run)
    numbers = program.response_numbers(matched, uids)
    ctx.untagged(b"SEARCH" + b"".join(b" %d" % n for n in numbers)
                 + (b" (MODSEQ %d)" % highest if highest else b""))


@command("SEARCH", SELECTED)
def search(ctx):
    return search_command(ctx, uid_mode=False)
