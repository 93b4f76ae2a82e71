"""Differential scripts for METADATA (RFC 5464, issue 13) against Dovecot with
``imap_metadata = yes`` and a file dict for its attributes (``mail_attribute_dict``).

Compared: GETMETADATA and SETMETADATA on mailboxes and on the server (``""``), private and
shared entries, NIL to delete, literals, empty and 8-bit values, case-insensitive names, the
entry-name errors of 3.2.1 and the option errors of 4.2, MAXSIZE with LONGENTRIES and DEPTH
(4.2.1, 4.2.2), /private/specialuse as Dovecot reports it, annotations that follow RENAME
and go with DELETE, several sessions.  The deliberate differences (tests/differential_known.py,
block "METADATA"): the order of entries inside one METADATA response, values with NUL (ours
stores them, Dovecot's dict refuses), a writable /private/specialuse, the grammar's minimum of
one entry, a value that is an atom, and "/private" or "/shared" themselves as entries.

Not compared here: our limits (Dovecot has none configured by default) and /shared/admin from
the configuration, which tests/test_imap_metadata.py checks against RFC 5464's text; Dovecot
2.3 advertises METADATA but not METADATA-SERVER (RFC 5464 1: METADATA includes the server
entries; we advertise both, so clients that look for METADATA-SERVER find it).
"""

from __future__ import annotations

import pytest
from differential import PASSWORD, Script, Session, lit, lit8, plus, servers

DOVECOT_METADATA = """\
mail_attribute_dict = file:%h/dovecot-attributes
protocol imap {
  imap_metadata = yes
}
"""

CAPABILITIES_JUDGED_HERE = {"METADATA", "METADATA-SERVER"}
"""Advertised by the plain Dovecot of tests/test_differential.py only with imap_metadata
(and never METADATA-SERVER, see the module docstring)."""


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("differential-metadata"), DOVECOT_METADATA) as pair:
        yield pair


FILTERS = ('SETMETADATA INBOX (/private/filters/values/small "SMALLER 5000" '
           '/private/filters/values/boss "FROM boss" /private/filters/values/boss/x "deep")')

SCRIPTS = [
    Script("metadata-rfc-examples", [
        ("A", 'SETMETADATA INBOX (/private/comment "My own comment" '
              '/shared/comment "Shared comment")'),
        ("A", 'GETMETADATA "INBOX" (/shared/comment /private/comment)'),
        ("A", "GETMETADATA INBOX /private/comment"),
        ("A", 'GETMETADATA "" /shared/comment'),
        ("A", ("SETMETADATA INBOX (/private/comment ",
               lit(b"My new comment across\r\ntwo lines."), ")")),
        ("A", "GETMETADATA INBOX /private/comment"),
        ("A", "SETMETADATA INBOX (/private/comment NIL)"),
        ("A", "GETMETADATA INBOX (/private/comment /shared/comment /private/nothing)"),
    ], doc="RFC 5464 4.2, 4.3, 4.4.1: the RFC's examples; a value as a synchronizing literal "
           "over two lines, NIL to delete, NIL for an entry without a value."),

    Script("metadata-depth-maxsize", [
        ("A", FILTERS),
        ("A", "GETMETADATA (DEPTH 0) INBOX (/private/filters/values /private/nothing)"),
        ("A", "GETMETADATA (DEPTH 1) INBOX (/private/filters/values)"),
        ("A", "GETMETADATA (DEPTH 1) INBOX /private/filters/values/boss"),
        ("A", "GETMETADATA (DEPTH infinity) INBOX (/private/filters)"),
        ("A", "GETMETADATA (DEPTH infinity) INBOX /private"),
        ("A", "GETMETADATA (DEPTH infinity) INBOX /shared"),
        ("A", "GETMETADATA (MAXSIZE 5) INBOX (/private/filters/values/small "
              "/private/filters/values/boss)"),
        ("A", "GETMETADATA (MAXSIZE 5 DEPTH infinity) INBOX (/private/filters)"),
        ("A", "GETMETADATA (MAXSIZE 100) INBOX /private/filters/values/small"),
    ], deliberate=("metadata-entry-order",),
        doc="RFC 5464 4.2.1 (MAXSIZE leaves out longer values, OK [METADATA LONGENTRIES n]) "
            "and 4.2.2 (DEPTH 0, 1, infinity; a subtree's root without a value is not "
            "listed)."),

    Script("metadata-names-and-options", [
        ("A", 'SETMETADATA INBOX (/Private/Comment "Up")'),
        ("A", "GETMETADATA INBOX /PRIVATE/COMMENT"),
        ("A", "GETMETADATA INBOX /private/a*b"), ("A", "GETMETADATA INBOX /private/a%"),
        ("A", "GETMETADATA INBOX /private/a/"), ("A", "GETMETADATA INBOX /privatex"),
        ("A", "GETMETADATA INBOX /private//x"), ("A", "GETMETADATA INBOX private/x"),
        ("A", 'SETMETADATA INBOX (/public/x "1")'), ("A", 'SETMETADATA INBOX (/shared/x/ "1")'),
        ("A", "GETMETADATA (DEPTH 2) INBOX /private"),
        ("A", "GETMETADATA (MAXSIZE x) INBOX /private"),
        ("A", "GETMETADATA (FOO 1) INBOX /private"),
        ("A", "SETMETADATA INBOX (/private/x)"),
        ("A", "GETMETADATA INBOX /private/x"),
    ], doc="RFC 5464 3.2.1 (names are case-insensitive; no '*' or '%', no '//', no trailing "
           "'/', only /private or /shared at the top: BAD) and 4.2's options (BAD for an "
           "unknown option or value), 4.3 (a value is required)."),

    Script("metadata-values", [
        ("A", 'SETMETADATA INBOX (/shared/empty "")'),
        ("A", ("SETMETADATA INBOX (/shared/utf8 ", plus("é ü".encode()), ")")),
        ("A", ("SETMETADATA INBOX (/shared/big ", plus(b"x" * 5000), ")")),
        ("A", "GETMETADATA INBOX (/shared/empty /shared/utf8 /shared/big)"),
        ("A", ("SETMETADATA INBOX (/shared/nul ", lit8(b"a\x00b"), ")")),
        ("A", "GETMETADATA INBOX /shared/nul"),
    ], deliberate=("metadata-binary-values",),
        doc="RFC 5464 5: value = nstring / literal8: an empty string, 8-bit octets, a value "
            "of 5000 octets (LITERAL+), a literal8 holding NUL (stored here, refused by "
            "Dovecot's dict)."),

    Script("metadata-server", [
        ("A", 'SETMETADATA "" (/private/vendor/vendor.example/theme "dark")'),
        ("A", 'GETMETADATA "" (/private/vendor/vendor.example/theme /shared/comment)'),
        ("A", 'GETMETADATA "" /shared/admin'),
        ("A", 'SETMETADATA "" (/shared/comment "x")'),
        ("A", 'GETMETADATA "" /shared/comment'),
        ("B", 'GETMETADATA "" /private/vendor/vendor.example/theme'),
    ], doc="RFC 5464 3.1, 4.2, 4.3 with the mailbox \"\": private server entries are the "
           "user's, in every session of theirs; the server's shared entries are not the "
           "users' to set (NO [CANNOT] from both)."),

    Script("metadata-rename-delete", [
        ("A", "CREATE Old"),
        ("A", 'SETMETADATA Old (/shared/comment "kept" /private/comment "mine")'),
        ("A", "RENAME Old New"),
        ("A", "GETMETADATA New (/shared/comment /private/comment)"),
        ("A", "GETMETADATA Old /shared/comment"),
        ("A", "DELETE New"), ("A", "CREATE New"),
        ("A", "GETMETADATA New (/shared/comment /private/comment)"),
        ("A", "GETMETADATA Nowhere /private/comment"),
        ("A", 'SETMETADATA Nowhere (/private/comment "x")'),
    ], deliberate=("optional-response-codes",),
        doc="RFC 5464 3.1: a mailbox's annotations follow RENAME and go with DELETE (a new "
            "mailbox of the same name starts bare); a mailbox that does not exist is NO."),

    Script("metadata-specialuse", [
        ("A", "GETMETADATA Sent /private/specialuse"),
        ("A", "GETMETADATA (DEPTH infinity) Drafts /private"),
        ("A", "GETMETADATA INBOX /private/specialuse"),
        ("A", 'SETMETADATA Sent (/private/specialuse "\\\\Drafts")'),
    ], deliberate=("metadata-specialuse-writable",),
        doc="RFC 6154 3: /private/specialuse reflects the mailbox's special use (NIL for "
            "none); ours can be set (Dovecot 2.3's is read-only)."),

    Script("metadata-sessions", [
        ("A", 'SETMETADATA INBOX (/shared/comment "from A")'),
        ("B", "GETMETADATA INBOX /shared/comment"),
        ("B", "SELECT INBOX"),
        ("B", 'SETMETADATA INBOX (/private/comment "from B")'),
        ("A", "GETMETADATA INBOX (/private/comment /shared/comment)"),
        ("B", "NOOP"),
    ], doc="RFC 5464 3.2.2: what one session sets, another of the same user reads, selected "
           "or not; no unsolicited METADATA without NOTIFY (4.4.2)."),

    Script("metadata-grammar", [
        ("A", "GETMETADATA INBOX ()"), ("A", "SETMETADATA INBOX ()"),
        ("A", "SETMETADATA INBOX (/private/x FOO)"),
        ("A", 'SETMETADATA INBOX (/shared/vendor/vendor.example "x")'),
        ("A", 'SETMETADATA INBOX (/private "x")'),  # last: it breaks Dovecot's later sets
    ], deliberate=("metadata-strict-grammar",),
        doc="RFC 5464 5: entries and entry-values hold at least one entry, a value is "
            "nstring / literal8, and /private itself holds no value, nor does a vendor's top "
            "/shared/vendor/<vendor-token> (3.2.1): BAD here."),
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_script(differential, script):
    """Our answers equal Dovecot's (with imap_metadata), after normalising what the RFCs
    leave to the server and the deliberate differences each script names."""
    differential.run(script)


def test_script_names_are_unique():
    names = [s.name for s in SCRIPTS]
    assert len(names) == len(set(names))


def test_dovecot_with_imap_metadata_advertises_metadata(differential):
    """The judge of the scripts above is a METADATA server (RFC 5464 1)."""
    differential.dovecot.add_user("capabilities", PASSWORD)
    session = Session("A", differential.dovecot.port)
    session.conn.read_response()
    session.play(f"LOGIN capabilities {PASSWORD}")
    event = session.play("CAPABILITY")
    session.conn.close()
    line = next(r for r in event.responses if r.kind == "data")
    assert b"METADATA" in line.data[1:]
