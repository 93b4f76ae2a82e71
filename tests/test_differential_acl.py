"""Differential scripts for ACL (RFC 4314) and the other users' namespace (RFC 2342) against
Dovecot with its ``acl`` and ``imap_acl`` plugins.

Dovecot is configured as close to ours as it goes: ``acl = vfile`` (ACLs per mailbox),
``acl_anyone = allow`` (we accept the ``anyone`` identifier), a ``shared`` namespace with
``prefix = Other Users/%%u/`` and ``list = children``, and ``acl_shared_dict`` so that LIST
finds the mailboxes others shared.  The shared namespace's ``location`` points at the owner's
own mailboxes and index, without ``INDEX=``/``INDEXPVT=`` of the viewer's: sdbox keeps flags in
its index, and a private index would give every viewer flags of their own, where ours are the
mailbox's (docs/acl.md).

Each script has two accounts: the script's user (sessions ``A``, the owner) and the same name
with ``b`` appended (session ``B``, logged in by the script itself), so ``Other Users/<A>/...``
names the same on both servers.

Not compared here, and why:

* LIST-MYRIGHTS (RFC 8440): Dovecot 2.3 has none (``RETURN (MYRIGHTS)`` is BAD there);
  tests/test_imap_acl.py checks RFC 8440's example.
* The ``Shared/`` namespace: Dovecot's public namespaces need a mail location of their own
  and a configured owner; ours is created by ``mailadmin mailbox create --shared``
  (tests/test_acl_store.py).
* MYRIGHTS and LISTRIGHTS of a mailbox of one's own that does not exist: Dovecot answers
  them (all rights), we answer NO [NONEXISTENT] as for every other command on a missing
  mailbox (RFC 4314 3.4, 3.5 speak of existing mailboxes).
* An owner's SETACL on themselves: Dovecot lets an owner take their own rights away (except
  ``a``), ours always has them all (decision 0018).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import differential_known  # noqa: F401  (registers the entries named below)
import pytest
from differential import PASSWORD, Differential, Script, Target, append, plus, servers
from mailgen import message

DOVECOT_ACL = """\
mail_plugins = $mail_plugins acl
protocol imap {{
  mail_plugins = $mail_plugins imap_acl
}}
plugin {{
  acl = vfile
  acl_anyone = allow
  acl_cache_secs = 0
  acl_shared_dict = file:{dict_dir}/shared-mailboxes.db
}}
namespace shared {{
  type = shared
  separator = /
  prefix = Other Users/%%u/
  location = sdbox:%%h/sdbox
  list = children
  subscriptions = no
}}
"""

CAPABILITIES_JUDGED_HERE = {"ACL", "RIGHTS=texk", "LIST-MYRIGHTS"}
"""What we advertise that the plain Dovecot of tests/test_differential.py does not: ACL and
RIGHTS=texk need Dovecot's acl plugins (compared here); LIST-MYRIGHTS Dovecot 2.3 lacks (see
above)."""


def owner(text: str):
    """A step whose text names the script's users: ``{a}`` the owner, ``{b}`` the other."""
    return lambda user: text.format(a=user, b=user + "b")


def b_login():
    return ("B", lambda user: f"LOGIN {user}b {PASSWORD}")


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    base = tmp_path_factory.mktemp("differential-acl")
    # Dovecot's dictionary file must be writable by its mail user (``nobody`` under root),
    # which cannot reach into pytest's tmp_path (see tests/dovecot.py).
    dict_dir = Path(tempfile.mkdtemp(prefix="dovecot-acl-dict-"))
    dict_dir.chmod(0o777)
    try:
        yield from _differential(base, dict_dir)
    finally:
        shutil.rmtree(dict_dir, ignore_errors=True)


def _differential(base, dict_dir):
    with servers(base, DOVECOT_ACL.format(dict_dir=dict_dir)) as diff:
        ours_add, dovecot_add = diff.ours.add_user, diff.dovecot.add_user

        def both(add):
            def add_pair(name: str, password: str) -> None:
                add(name, password)
                add(name + "b", password)
            return add_pair
        yield Differential(Target("ours", diff.ours.port, both(ours_add)),
                           Target("dovecot", diff.dovecot.port, both(dovecot_add)))


SCRIPTS = [
    Script("acl-owner", [
        ("A", "MYRIGHTS INBOX"), ("A", "GETACL INBOX"), ("A", "CREATE Team"),
        ("A", "GETACL Team"), ("A", owner("SETACL Team {b} lr")), ("A", "GETACL Team"),
        ("A", owner("SETACL Team {b} +c")), ("A", "GETACL Team"),
        ("A", owner("SETACL Team {b} +d")), ("A", "GETACL Team"),
        ("A", owner("SETACL Team {b} -lr")), ("A", "GETACL Team"),
        ("A", owner("SETACL Team -{b} w")), ("A", "GETACL Team"),
        ("A", owner('SETACL Team {b} ""')), ("A", owner("DELETEACL Team -{b}")),
        ("A", owner("DELETEACL Team {b}")), ("A", owner("SETACL Team anyone lr")),
        ("A", "GETACL Team"), ("A", "DELETEACL Team anyone"), ("A", "GETACL Team"),
        ("A", owner("LISTRIGHTS Team {b}")), ("A", owner("MYRIGHTS Team")),
        ("A", owner("SETACL Team {b} lrz")), ("A", owner("SETACL Nope {b} l")),
        ("A", "GETACL Nope"), ("A", "DELETEACL Nope anyone"),
    ], deliberate=("acl-rights-order",)),
    Script("acl-other-user-reads", [
        ("A", "CREATE Team"), ("A", "CREATE Secret"),
        ("A", append("Team", message(1), "\\Flagged")),
        ("A", append("Team", message(2), "")),
        ("A", owner("SETACL Team {b} lr")),
        b_login(),
        ("B", "NAMESPACE"),
        ("B", 'LIST "" "*"'), ("B", 'LIST "" "Other Users/%"'),
        ("B", owner('LIST "" "Other Users/{a}/%"')),
        ("B", owner('MYRIGHTS "Other Users/{a}/Team"')),
        ("B", owner('GETACL "Other Users/{a}/Team"')),
        ("B", owner('STATUS "Other Users/{a}/Team" (MESSAGES UNSEEN)')),
        ("B", owner('SELECT "Other Users/{a}/Team"')),
        ("B", "FETCH 1:* FLAGS"), ("B", "STORE 1 +FLAGS (\\Flagged)"),
        ("B", "EXPUNGE"),
        ("B", owner('SELECT "Other Users/{a}/Secret"')),
        ("B", owner('SELECT "Other Users/{a}/Nope"')),
        ("B", owner('STATUS "Other Users/{a}/Secret" (MESSAGES)')),
        ("B", owner('STATUS "Other Users/{a}/Nope" (MESSAGES)')),
        ("B", owner('MYRIGHTS "Other Users/{a}/Secret"')),
        ("B", owner('GETACL "Other Users/{a}/Nope"')),
        ("B", owner('DELETE "Other Users/{a}/Team"')),
        ("B", owner('CREATE "Other Users/{a}/Team/Child"')),
        ("B", lambda user: (f'APPEND "Other Users/{user}/Team" ', plus(message(3)))),
    ], anonymous=("B",), deliberate=(
        "dovecot-marked", "namespace-shared", "optional-response-codes",
        "read-only-refuses-changes"),
        doc="RFC 4314 4 and 6: what l and r allow, and nothing shows what is hidden"),
    Script("acl-other-user-writes", [
        ("A", "CREATE Team"),
        ("A", append("Team", message(1), "")), ("A", append("Team", message(2), "")),
        ("A", owner("SETACL Team {b} lrsw")),
        b_login(),
        ("B", owner('SELECT "Other Users/{a}/Team"')),
        ("B", "STORE 1 +FLAGS (\\Seen \\Flagged \\Deleted)"),
        ("B", "STORE 2 FLAGS ($Work)"), ("B", "FETCH 1:* FLAGS"),
        ("B", "EXPUNGE"),
        ("B", owner('COPY 1 "Other Users/{a}/Team"')),
        ("B", "LOGOUT"),
        # A new session after the change: Dovecot's session keeps the rights it read.
        ("A", owner("SETACL Team {b} +ite")),
        ("C", lambda user: f"LOGIN {user}b {PASSWORD}"),
        ("C", owner('SELECT "Other Users/{a}/Team"')),
        ("C", "STORE 1 +FLAGS (\\Deleted)"), ("C", "EXPUNGE"),
        ("C", owner('COPY 1 "Other Users/{a}/Team"')),
        ("A", "SELECT Team"), ("A", "FETCH 1:* (FLAGS)"),
    ], anonymous=("B", "C"), deliberate=("acl-expunge-noperm",),
        doc="RFC 4314 4: s, w, t and e on STORE and EXPUNGE; i on COPY; flags are shared"),
]


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_script(differential, script):
    """Both servers answer each step the same, once normalised (docs/differential.md)."""
    differential.run(script)
