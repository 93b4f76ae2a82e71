"""SEARCH (RFC 3501 6.4.4): what the command handler calls.

Grammar: see :mod:`.search_parse` (search-key, date, CHARSET) and :mod:`.seqset`
(sequence-set).  The work is split three ways: :mod:`.search_parse` turns the command's tokens
into a :class:`SearchProgram`, :mod:`.search_eval` runs it over the selected mailbox in batches
through the mail store's public API, :mod:`.search_text` decodes headers and bodies for
string matching.

A handler does::

    try:
        program = parse_search(arguments, uid_mode=is_uid_command)
    except BadCharset:
        ...  # tagged NO [BADCHARSET (US-ASCII UTF-8)]
    except ValueError as exc:
        ...  # tagged BAD str(exc)
    matched = evaluate(program, store, mailbox, session_uids, session_recent)  # in a thread
    numbers = program.response_numbers(matched, session_uids)  # for "* SEARCH"
"""

from __future__ import annotations

from .search_eval import BATCH_SIZE, answerable_from_flags, evaluate
from .search_parse import SUPPORTED_CHARSETS, BadCharset, SearchProgram, parse_search

__all__ = ["BATCH_SIZE", "SUPPORTED_CHARSETS", "BadCharset", "SearchProgram",
           "answerable_from_flags", "evaluate", "parse_search"]
