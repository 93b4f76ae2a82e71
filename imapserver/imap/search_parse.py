"""SEARCH criteria: parsing RFC 3501's search keys into a program the evaluator runs.

Grammar (RFC 3501 sections 6.4.4 and 9)::

    search          = "SEARCH" [SP "CHARSET" SP astring] 1*(SP search-key)
    search-key      = "ALL" / "ANSWERED" / "BCC" SP astring /
                      "BEFORE" SP date / "BODY" SP astring /
                      "CC" SP astring / "DELETED" / "FLAGGED" /
                      "FROM" SP astring / "KEYWORD" SP flag-keyword /
                      "NEW" / "OLD" / "ON" SP date / "RECENT" / "SEEN" /
                      "SINCE" SP date / "SUBJECT" SP astring /
                      "TEXT" SP astring / "TO" SP astring /
                      "UNANSWERED" / "UNDELETED" / "UNFLAGGED" /
                      "UNKEYWORD" SP flag-keyword / "UNSEEN" /
                      "DRAFT" / "HEADER" SP header-fld-name SP astring /
                      "LARGER" SP number / "NOT" SP search-key /
                      "OR" SP search-key SP search-key /
                      "SENTBEFORE" SP date / "SENTON" SP date /
                      "SENTSINCE" SP date / "SMALLER" SP number /
                      "UID" SP sequence-set / "UNDRAFT" / sequence-set /
                      "(" search-key *(SP search-key) ")"
    search-key      =/ "OLDER" SP nz-number / "YOUNGER" SP nz-number   ; RFC 5032 (WITHIN)
    sequence-set    =/ "$"                  ; RFC 5182 (SEARCHRES): the saved result
    date            = date-text / DQUOTE date-text DQUOTE
    date-text       = date-day "-" date-month "-" date-year     ; e.g. 1-Feb-1994
    flag-keyword    = atom
    header-fld-name = astring
    number          = 1*DIGIT

    search-key      =/ "EMAILID" SP objectid / "THREADID" SP objectid     ; RFC 8474 section 7
    search-key      =/ "SAVEDBEFORE" SP date / "SAVEDON" SP date /
                       "SAVEDSINCE" SP date / "SAVEDATESUPPORTED"         ; RFC 8514 section 5

:func:`parse_search` takes the tokens of :func:`imapserver.imap.wire.tokenize` that follow
``SEARCH`` (or ``UID SEARCH``): atoms (``str``, any case), strings (``bytes``: quoted strings
and literals alike, so a literal may stand wherever an astring or a date may) and parenthesised
groups (``list``).  Keywords are case-insensitive.  Where the grammar wants an atom (a
keyword, a number, a flag) a string is accepted too, as Dovecot does, except for the search
keys themselves.

CHARSET: ``US-ASCII`` and ``UTF-8`` (any case) are accepted and both read the search strings as
UTF-8 (ASCII is a subset, and clients that omit CHARSET commonly send UTF-8 anyway, which
Dovecot accepts too).  Any other charset raises :class:`BadCharset`; a string that is not
UTF-8 raises ValueError.

The result is a tree of small frozen dataclasses (:data:`Key`); every string to look for is
already case-folded (:meth:`str.casefold`), every header name lower-cased and every date a
:class:`datetime.date`.
"""

from __future__ import annotations

import datetime
import re
from bisect import bisect_left
from dataclasses import dataclass

from .seqset import SeqSet, parse_seqset

SUPPORTED_CHARSETS = ("US-ASCII", "UTF-8")
MAX_DEPTH = 256
"""Most levels of NOT/OR/parentheses accepted (the parser and evaluator recurse)."""


class BadCharset(Exception):
    """CHARSET named a charset we cannot search in.

    Not a ValueError on purpose: the handler answers it with
    ``NO [BADCHARSET (US-ASCII UTF-8)]`` (RFC 3501 6.4.4), not with a BAD.
    """

    supported = SUPPORTED_CHARSETS

    def __init__(self, charset: str):
        super().__init__(f"unsupported charset {charset}")
        self.charset = charset


# -- the program ---------------------------------------------------------------------------
# ``tier`` says what a key needs to be decided: 0 nothing but the UID, 1 the commit record and
# flags (SUMMARY), 2 the header block, 3 the content.  The evaluator fetches in that order.

@dataclass(frozen=True, slots=True)
class AllKey:
    """ALL."""

    tier = 0


@dataclass(frozen=True, slots=True)
class SequenceKey:
    """A sequence-set (``uid=False``: message sequence numbers) or ``UID`` sequence-set."""

    seqset: SeqSet
    uid: bool
    tier = 0


@dataclass(frozen=True, slots=True)
class RecentKey:
    """RECENT (NEW is RECENT UNSEEN, OLD is NOT RECENT)."""

    tier = 0


@dataclass(frozen=True, slots=True)
class FlagKey:
    """A flag is set (``present``) or not: ANSWERED, DELETED, ..., KEYWORD, UNKEYWORD.

    ``flag`` is a system flag in its canonical case or a keyword as sent; flags compare
    case-insensitively (Dovecot does too).
    """

    flag: str
    present: bool
    tier = 1


@dataclass(frozen=True, slots=True)
class ModseqKey:
    """MODSEQ [entry-name entry-type-req] mod-sequence-valzer (RFC 7162 3.1.5): the message's
    MODSEQ is at least ``modseq``.  A message has one MODSEQ, not one per flag, so the entry
    name (``"/flags/\\seen"``) and type (``all``/``priv``/``shared``) are checked and then
    stand for the message's (3.1.5 lets a server without per-flag MODSEQs do so)."""

    modseq: int
    tier = 1


@dataclass(frozen=True, slots=True)
class SizeKey:
    """LARGER (``larger``: RFC822.SIZE > octets) or SMALLER (RFC822.SIZE < octets)."""

    larger: bool
    octets: int
    tier = 1


@dataclass(frozen=True, slots=True)
class DateKey:
    """BEFORE/ON/SINCE (``sent=False``: the internal date, as a UTC date) or
    SENTBEFORE/SENTON/SENTSINCE (``sent=True``: the date written in the Date: header).

    ``relation`` is ``"before"`` (earlier than ``day``), ``"on"`` or ``"since"`` (``day`` or
    later).  Times and time zones are disregarded, as RFC 3501 says.
    """

    sent: bool
    relation: str
    day: datetime.date

    @property
    def tier(self) -> int:
        return 2 if self.sent else 1


@dataclass(frozen=True, slots=True)
class WithinKey:
    """OLDER (``older``) or YOUNGER ``seconds`` (RFC 5032 WITHIN): the internal date is more
    than ``seconds`` before the time of the search, or not.  Taken as Dovecot does: OLDER n is
    ``internal date < now - n`` and YOUNGER n its exact complement."""

    older: bool
    seconds: int
    tier = 1


@dataclass(frozen=True, slots=True)
class HeaderKey:
    """A header field contains a string: HEADER, and FROM/TO/CC/BCC/SUBJECT.

    ``field`` is the lower-cased field name, ``needle`` the case-folded string.  An empty
    needle matches every message that has the field (RFC 3501, HEADER).  ``addresses`` is
    set for FROM/TO/CC/BCC, which RFC 3501 6.4.4 defines on the envelope's address
    structure: their needle may also match the parsed addresses (see :mod:`.search_eval`).
    """

    field: str
    needle: str
    addresses: bool = False
    tier = 2


@dataclass(frozen=True, slots=True)
class ContentKey:
    """BODY (``text=False``) or TEXT (``text=True``: headers too); ``needle`` case-folded."""

    needle: str
    text: bool
    tier = 3


@dataclass(frozen=True, slots=True)
class SaveDateKey:
    """SAVEDBEFORE/SAVEDON/SAVEDSINCE (RFC 8514 section 4.3): the save date as a UTC date,
    ``relation`` as in :class:`DateKey`.  A message without a save date (stored before they
    were kept, FETCH SAVEDATE NIL) matches none of the three."""

    relation: str
    day: datetime.date
    tier = 1


@dataclass(frozen=True, slots=True)
class ObjectIdKey:
    """EMAILID (``thread=False``) or THREADID (RFC 8474 section 6): the id equals
    ``objectid`` exactly (ids are case-sensitive)."""

    objectid: str
    thread: bool

    @property
    def tier(self) -> int:
        return 2 if self.thread else 1


@dataclass(frozen=True, slots=True)
class NotKey:
    key: Key
    tier = 0


@dataclass(frozen=True, slots=True)
class OrKey:
    left: Key
    right: Key
    tier = 0


@dataclass(frozen=True, slots=True)
class AndKey:
    """A parenthesised list, or the top-level list of keys: all must match."""

    keys: tuple[Key, ...]
    tier = 0


Key = (AllKey | SequenceKey | RecentKey | FlagKey | SizeKey | DateKey | WithinKey | HeaderKey
       | ContentKey | SaveDateKey | ObjectIdKey | NotKey | OrKey | AndKey | ModseqKey)


def walk(key: Key):
    """Every key of the tree, ``key`` first (depth first, in order)."""
    yield key
    if isinstance(key, NotKey):
        yield from walk(key.key)
    elif isinstance(key, OrKey):
        yield from walk(key.left)
        yield from walk(key.right)
    elif isinstance(key, AndKey):
        for child in key.keys:
            yield from walk(child)


@dataclass(frozen=True, slots=True)
class SearchProgram:
    """A parsed SEARCH command.

    ``key`` is the root (an :class:`AndKey` of the top-level keys, or the only one).
    ``uid_mode`` is set for UID SEARCH; it only changes the numbers *returned*: sequence-set
    keys are message sequence numbers in UID SEARCH too (RFC 3501 6.4.8).  ``charset`` is the
    CHARSET given (upper-cased), ``"US-ASCII"`` when none was.
    """

    key: Key
    uid_mode: bool
    charset: str = "US-ASCII"

    @property
    def tiers(self) -> frozenset[int]:
        """What the program needs: 0 (UIDs only) to 3 (content), see the key classes."""
        return frozenset(k.tier for k in walk(self.key))

    def response_numbers(self, matched: list[int], uids: list[int]) -> list[int]:
        """The numbers to send in ``* SEARCH``: ``matched`` (UIDs) for UID SEARCH, otherwise
        their message sequence numbers in ``uids`` (the session's ascending UID list)."""
        if self.uid_mode:
            return list(matched)
        return [bisect_left(uids, uid) + 1 for uid in matched]


# -- parsing -------------------------------------------------------------------------------

MONTHS = {m: i for i, m in enumerate(
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), 1)}
"""Month numbers by upper-case English abbreviation (IMAP dates and RFC 5322 dates)."""
_DATE = re.compile(r"(\d{1,2})-([A-Za-z]{3})-(\d{4})\Z")
_FLAG_KEYS = {"ANSWERED": ("\\Answered", True), "DELETED": ("\\Deleted", True),
              "DRAFT": ("\\Draft", True), "FLAGGED": ("\\Flagged", True),
              "SEEN": ("\\Seen", True), "UNANSWERED": ("\\Answered", False),
              "UNDELETED": ("\\Deleted", False), "UNDRAFT": ("\\Draft", False),
              "UNFLAGGED": ("\\Flagged", False), "UNSEEN": ("\\Seen", False)}
_ADDRESS_KEYS = {"FROM": "from", "TO": "to", "CC": "cc", "BCC": "bcc", "SUBJECT": "subject"}
_DATE_KEYS = {"BEFORE": (False, "before"), "ON": (False, "on"), "SINCE": (False, "since"),
              "SENTBEFORE": (True, "before"), "SENTON": (True, "on"),
              "SENTSINCE": (True, "since")}
_ATOM_TEXT = re.compile(r"[^\x00-\x20\x7f(){%*\"\\\]]+\Z")
_SAVED_KEYS = {"SAVEDBEFORE": "before", "SAVEDON": "on", "SAVEDSINCE": "since"}
_OBJECTID = re.compile(r"[A-Za-z0-9_-]{1,255}\Z")


def parse_search(tokens: list, *, uid_mode: bool, saved: list[int] | None = None
                 ) -> SearchProgram:
    """Parse the arguments of SEARCH / UID SEARCH into a :class:`SearchProgram`.

    ``tokens`` are the command's arguments after the command name (and after any RETURN
    options, see :mod:`.search_return`), as :func:`imapserver.imap.wire.tokenize` gives them.
    ``uid_mode`` is True for UID SEARCH.  ``saved`` is the session's saved search result (RFC
    5182, UIDs ascending): ``$`` -- alone or after ``UID`` -- stands for those messages; with
    ``None`` (no SEARCHRES) ``$`` is a ValueError.

    Raises :class:`BadCharset` for a CHARSET other than US-ASCII or UTF-8, and ValueError,
    with the reason, for anything malformed (unknown key, missing argument, bad date or
    number, string not UTF-8, empty parentheses, nesting deeper than :data:`MAX_DEPTH`).
    """
    tokens = list(tokens)
    charset = "US-ASCII"
    if tokens and isinstance(tokens[0], str) and tokens[0].upper() == "CHARSET":
        if len(tokens) < 2 or isinstance(tokens[1], list):
            raise ValueError("CHARSET needs a charset name")
        charset = _text(tokens[1], "charset name").upper()
        if charset not in SUPPORTED_CHARSETS:
            raise BadCharset(charset)
        tokens = tokens[2:]
    if not tokens:
        raise ValueError("SEARCH needs at least one search key")
    keys = _Parser(tokens, saved).keys_until_end(depth=0)
    return SearchProgram(keys[0] if len(keys) == 1 else AndKey(tuple(keys)), uid_mode, charset)


def saved_key(saved: list[int]) -> SequenceKey:
    """The saved result ``saved`` (UIDs, ascending) as a UID set key.  Consecutive UIDs
    become one range; a UID the mailbox no longer has matches nothing, as RFC 5182 2.1 wants
    of expunged messages."""
    ranges = []
    for uid in saved:
        if ranges and ranges[-1][1] == uid - 1:
            ranges[-1][1] = uid
        else:
            ranges.append([uid, uid])
    return SequenceKey(SeqSet(tuple((a, b) for a, b in ranges)), True)


class _Parser:
    def __init__(self, tokens: list, saved: list[int] | None = None):
        self.tokens = tokens
        self.saved = saved
        self.pos = 0

    def keys_until_end(self, depth: int) -> list[Key]:
        keys = []
        while self.pos < len(self.tokens):
            keys.append(self.key(depth))
        return keys

    def next(self, what: str):
        if self.pos >= len(self.tokens):
            raise ValueError(f"missing {what}")
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def key(self, depth: int) -> Key:
        if depth >= MAX_DEPTH:
            raise ValueError(f"search keys nested more than {MAX_DEPTH} deep")
        token = self.next("search key")
        if isinstance(token, list):
            if not token:
                raise ValueError("empty parenthesised list of search keys")
            keys = _Parser(token, self.saved).keys_until_end(depth + 1)
            return keys[0] if len(keys) == 1 else AndKey(tuple(keys))
        if not isinstance(token, str):
            raise ValueError("expected a search key, got a string")
        name = token.upper()
        if name in _FLAG_KEYS:
            return FlagKey(*_FLAG_KEYS[name])
        if name in _ADDRESS_KEYS:
            return HeaderKey(_ADDRESS_KEYS[name], self.string(name), name != "SUBJECT")
        if name in _DATE_KEYS:
            sent, relation = _DATE_KEYS[name]
            return DateKey(sent, relation, self.date(name))
        if name == "ALL":
            return AllKey()
        if name in _SAVED_KEYS:
            return SaveDateKey(_SAVED_KEYS[name], self.date(name))
        if name == "SAVEDATESUPPORTED":
            # RFC 8514 4.3: every message if the mailbox keeps save dates, and ours all do.
            return AllKey()
        if name in ("EMAILID", "THREADID"):
            objectid = _text(self.next(f"object id after {name}"), f"{name} object id")
            if not _OBJECTID.match(objectid):
                raise ValueError(f"invalid object id {objectid!r} after {name}")
            return ObjectIdKey(objectid, name == "THREADID")
        if name == "RECENT":
            return RecentKey()
        if name == "NEW":
            return AndKey((RecentKey(), FlagKey("\\Seen", False)))
        if name == "OLD":
            return NotKey(RecentKey())
        if name in ("KEYWORD", "UNKEYWORD"):
            flag = _text(self.next(f"flag after {name}"), f"{name} flag")
            if not _ATOM_TEXT.match(flag):  # flag-keyword is an atom: no \Seen here
                raise ValueError(f"invalid keyword {flag!r} after {name}")
            return FlagKey(flag, name == "KEYWORD")
        if name in ("LARGER", "SMALLER"):
            return SizeKey(name == "LARGER", self.number(name))
        if name == "MODSEQ":
            return self.modseq()
        if name == "BODY" or name == "TEXT":
            return ContentKey(self.string(name), name == "TEXT")
        if name == "HEADER":
            field = self.next("header field name after HEADER")
            if isinstance(field, list):
                raise ValueError("expected a header field name after HEADER")
            field_name = (field.decode("latin-1") if isinstance(field, bytes) else field).lower()
            return HeaderKey(field_name, self.string("HEADER " + field_name))
        if name == "NOT":
            return NotKey(self.key(depth + 1))
        if name == "OR":
            left = self.key(depth + 1)
            return OrKey(left, self.key(depth + 1))
        if name in ("OLDER", "YOUNGER"):
            seconds = self.number(name)
            if not 0 < seconds <= 2**32 - 1:  # RFC 5032 4: nz-number
                raise ValueError(f"Invalid search interval parameter after {name}")
            return WithinKey(name == "OLDER", seconds)
        if name == "UID":
            text = _text(self.next("sequence set after UID"), "UID set")
            return self.saved_set(text) if text == "$" else SequenceKey(parse_seqset(text), True)
        if token == "$":
            return self.saved_set(token)
        if token[:1].isdigit() or token[:1] == "*":
            return SequenceKey(parse_seqset(str(token)), False)
        raise ValueError(f"unknown search key {str(token)!r}")

    def modseq(self) -> ModseqKey:
        token = self.next("mod-sequence after MODSEQ")
        if isinstance(token, bytes) or (isinstance(token, str) and not token.isdigit()):
            # search-modseq-ext: entry-name (a quoted "/flags/" + flag) and entry-type-req.
            entry = _text(token, "entry name after MODSEQ")
            if not entry.lower().startswith("/flags/") or len(entry) == len("/flags/"):
                raise ValueError(f"invalid MODSEQ entry name {entry!r}")
            kind = _text(self.next("entry type after MODSEQ"), "entry type after MODSEQ")
            if kind.lower() not in ("all", "priv", "shared"):
                raise ValueError(f"invalid MODSEQ entry type {kind!r}")
        else:
            self.pos -= 1
        return ModseqKey(self.number("MODSEQ"))

    def saved_set(self, text: str) -> SequenceKey:
        if self.saved is None:
            return SequenceKey(parse_seqset(text), False)  # raises: $ is not supported
        return saved_key(self.saved)

    def string(self, key: str) -> str:
        token = self.next(f"string after {key}")
        if isinstance(token, list):
            raise ValueError(f"expected a string after {key}, got a list")
        if isinstance(token, bytes):
            try:
                text = token.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"the string after {key} is not valid UTF-8") from None
        elif isinstance(token, str):
            text = str(token)
        else:  # a literal spooled to a file: far too long to be a search string
            raise ValueError(f"the string after {key} is too long")
        return text.casefold()

    def date(self, key: str) -> datetime.date:
        text = _text(self.next(f"date after {key}"), f"date after {key}")
        m = _DATE.match(text)
        month = MONTHS.get(m.group(2).upper()) if m else None
        if month is None:
            raise ValueError(f"invalid date {text!r} after {key} (expected d-Mon-yyyy)")
        try:
            return datetime.date(int(m.group(3)), month, int(m.group(1)))
        except ValueError:
            raise ValueError(f"invalid date {text!r} after {key}") from None

    def number(self, key: str) -> int:
        text = _text(self.next(f"number after {key}"), f"number after {key}")
        if not text.isascii() or not text.isdigit():
            raise ValueError(f"invalid number {text!r} after {key}")
        value = int(text)
        # RFC 3501 says 32 bits; Dovecot takes more, and so do we, within what a size can be.
        if value >= 2**63:
            raise ValueError(f"number {text} after {key} is too large")
        return value


def _text(token, what: str) -> str:
    """An atom or a string as text, for charset names, flags, numbers, dates and sets."""
    if isinstance(token, str):
        return str(token)
    if isinstance(token, bytes):
        try:
            return token.decode("ascii")
        except UnicodeDecodeError:
            raise ValueError(f"{what} is not ASCII") from None
    raise ValueError(f"expected {what}")


__all__ = [
    "MAX_DEPTH",
    "MONTHS",
    "SUPPORTED_CHARSETS",
    "AllKey",
    "AndKey",
    "BadCharset",
    "ContentKey",
    "DateKey",
    "FlagKey",
    "HeaderKey",
    "Key",
    "ModseqKey",
    "NotKey",
    "ObjectIdKey",
    "OrKey",
    "RecentKey",
    "SaveDateKey",
    "SearchProgram",
    "SequenceKey",
    "SizeKey",
    "WithinKey",
    "parse_search",
    "saved_key",
    "walk",
]
