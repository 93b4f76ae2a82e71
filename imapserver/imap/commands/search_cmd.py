"""SEARCH (RFC 3501 6.4.4) and UID SEARCH (6.4.8); the search itself is in ../search*.py.

    search = "SEARCH" [SP "CHARSET" SP astring] 1*(SP search-key)
"""

from __future__ import annotations

from twisted.internet import defer

from ..context import SELECTED, Bad, No, command
from ..search import BadCharset, answerable_from_flags, evaluate, parse_search


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

    def run():
        # Keys on system flags only (UNSEEN, DELETED, ...): answered from the session's index.
        flag_sets = selected.flag_sets() if answerable_from_flags(program) else None
        return evaluate(program, ctx.store, selected.mailbox, uids, recent,
                        flag_sets=flag_sets)
    matched = yield ctx.call(run)
    numbers = program.response_numbers(matched, uids)
    ctx.untagged(b"SEARCH" + b"".join(b" %d" % n for n in numbers))


@command("SEARCH", SELECTED)
def search(ctx):
    return search_command(ctx, uid_mode=False)
