"""SEARCH (RFC 3501 6.4.4) and UID SEARCH (6.4.8), extended; CANCELUPDATE.

    search         = "SEARCH" [search-return-opts] [SP "CHARSET" SP astring]
                     1*(SP search-key)                  ; RFC 3501, RFC 4466 2.6.1
    search-return-opts: see ../search_return.py  (ESEARCH RFC 4731, SEARCHRES RFC 5182,
                     CONTEXT=SEARCH RFC 5267, PARTIAL RFC 9394)
    command-select =/ "CANCELUPDATE" 1*(SP quoted)      ; RFC 5267 4.3.5
    search-key     =/ "MODSEQ" [search-modseq-ext] SP mod-sequence-valzer  ; RFC 7162 3.1.5
    search-return-data =/ "MODSEQ" SP mod-sequence-value              ; RFC 4731 3.2

A search with a MODSEQ key is CONDSTORE-enabling; its answer carries the highest MODSEQ of
the messages returned (``* SEARCH 2 5 (MODSEQ 917)``, or ``MODSEQ 917`` in the ESEARCH).

The search itself is in ../search*.py, the ESEARCH response in ../esearch.py, update contexts
in ../search_updates.py.  Without RETURN the answer is ``* SEARCH``; with it, one ``* ESEARCH``
(none for ``RETURN (SAVE)`` alone, RFC 5182 2.1).  Once IMAP4rev2 is enabled a SEARCH
without RETURN is RETURN (ALL): ``* ESEARCH (TAG "a1") [UID] ALL ...`` (RFC 9051 6.4.4).

The saved result (``$``), RFC 5182 2.1 and as Dovecot does it: a SEARCH with SAVE that
succeeds replaces it; one answered NO (unsupported charset, store failure) empties it; one
answered BAD (not understood, so not run) leaves it as it was.
"""

from __future__ import annotations

from twisted.internet import defer

from ..context import SELECTED, Bad, No, command
from ..esearch import esearch_line, result_items
from ..rev2 import check_charset, check_keys, rev2
from ..search import BadCharset, answerable_from_flags, evaluate, parse_search
from ..search_parse import ModseqKey, walk
from ..search_return import ReturnOptions, split_return
from ..search_updates import noupdate_line
from .common import enable_condstore


@defer.inlineCallbacks
def search_command(ctx, uid_mode: bool):
    if not ctx.args:
        raise Bad("SEARCH needs at least one search key")
    selected = ctx.session.selected
    try:
        options, rest = split_return(list(ctx.args))
    except ValueError as exc:
        raise Bad(str(exc)) from None
    if options is not None and options.update and ctx.tag in selected.contexts.by_tag:
        raise Bad("Tag reuse")  # RFC 5267 4.3: the tag names a context still updating
    check_charset(ctx.session, rest)  # RFC 6855 3: BAD after ENABLE UTF8=ACCEPT
    if options is None and rev2(ctx.session):
        # RFC 9051 6.4.4: an IMAP4rev2 SEARCH without RETURN is RETURN (ALL), answered by
        # ESEARCH (the SEARCH response is IMAP4rev1's only, Appendix E).
        options = ReturnOptions(all=True)
    try:
        # The saved result is looked up only when "$" is used: it may be long.
        saved = selected.saved_uids() if mentions_saved(rest) else []
        program = parse_search(rest, uid_mode=uid_mode, saved=saved)
    except BadCharset:
        if options is not None and options.save:
            selected.saved = []
        raise No("Unsupported charset", "BADCHARSET (US-ASCII UTF-8)") from None
    except ValueError as exc:
        raise Bad(str(exc)) from None
    check_keys(ctx.session, program)  # no RECENT/NEW/OLD in IMAP4rev2 (RFC 9051 9)
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
        if with_modseq and (options is None or options.sends_esearch):
            # RFC 7162 3.1.5, RFC 4731 3.2: the highest MODSEQ of the messages returned --
            # all found, or with MIN/MAX/PARTIAL and neither ALL nor COUNT only those (the
            # ones SAVE would keep); none when nothing is returned.
            returned = matched if options is None else options.saved_part(matched)
            if returned:
                highest = max((v.modseq for v in ctx.store.fetch(selected.mailbox, returned)),
                              default=0)
        return matched, highest
    try:
        matched, highest = yield ctx.call(run)
    except Exception:
        if options is not None and options.save:
            selected.saved = []
        raise
    numbers = program.response_numbers(matched, uids)
    if options is None:
        ctx.untagged(b"SEARCH" + b"".join(b" %d" % n for n in numbers)
                     + (b" (MODSEQ %d)" % highest if highest else b""))
        return
    if options.save:
        selected.saved = options.saved_part(matched)
    if options.sends_esearch:
        partial = None
        if options.partial is not None:
            partial = (options.partial_label(), options.partial_slice(numbers))
        items = result_items(numbers, want_min=options.min, want_max=options.max,
                             want_all=options.all, want_count=options.count, partial=partial)
        if highest:
            items.append(("MODSEQ", str(highest)))
        ctx.untagged(esearch_line(ctx.tag, uid_mode, items))
    if options.update:
        if selected.contexts.full():
            # RFC 5267 4.3.1: the other options are still answered, only UPDATE is refused.
            ctx.untagged(noupdate_line(ctx.tag))
        else:
            selected.contexts.add(ctx.tag, program, uids, matched)


def mentions_saved(tokens: list) -> bool:
    """Whether ``$`` (RFC 5182) is among the search keys, at any depth."""
    return any(mentions_saved(t) if isinstance(t, list) else t in ("$", b"$") for t in tokens)


@command("SEARCH", SELECTED)
def search(ctx):
    return search_command(ctx, uid_mode=False)


@command("CANCELUPDATE", SELECTED)
def cancel_update(ctx):
    """RFC 5267 4.3.5: stop the updates of the contexts named by their commands' tags."""
    if not ctx.args or not all(isinstance(a, bytes) for a in ctx.args):
        raise Bad("CANCELUPDATE takes one or more quoted tags")
    contexts = ctx.session.selected.contexts
    unknown = [tag for tag in ctx.args
               if not contexts.cancel(tag.decode("utf-8", "replace"))]
    if unknown:
        raise No("Unknown tag")
