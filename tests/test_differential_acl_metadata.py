"""Differential scripts for what ACLs (RFC 4314) do to the other extensions' commands, against
Dovecot with its ``acl``/``imap_acl`` plugins and ``imap_metadata`` together (issue 13's
integration): GETMETADATA and SETMETADATA on another user's mailbox (RFC 5464 3.3: ``l`` and
one of ``r s w i p``; private entries are the reader's own), and a hidden mailbox answering as
a missing one (RFC 4314 6).

The accounts and namespaces are those of tests/test_differential_acl.py (session ``A`` owns,
``B`` is the same name with ``b`` appended).  Not compared here, and why:

* NOTIFY on other users' mailboxes: Dovecot 2.3's NOTIFY does not take the metadata events
  (BADEVENT) and its shared namespace has no mailbox-list index to notify from in this
  configuration; tests/test_acl_isolation.py checks ours against RFC 5465 and RFC 4314.
* CATENATE URLs and URLAUTH to other users' mailboxes: Dovecot's URLAUTH needs its
  imap-urlauth service (tests/test_differential_catenate.py explains); the isolation suite
  checks ours.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import differential_known  # noqa: F401  (registers the entries named below)
import pytest
from differential import PASSWORD, Differential, Script, Target, servers

DOVECOT_ACL_METADATA = """\
mail_plugins = $mail_plugins acl
mail_attribute_dict = file:%h/dovecot-attributes
protocol imap {{
  mail_plugins = $mail_plugins imap_acl
  imap_metadata = yes
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


def owner(text: str):
    """A step whose text names the script's users: ``{a}`` the owner, ``{b}`` the other."""
    return lambda user: text.format(a=user, b=user + "b")


def b_login():
    return ("B", lambda user: f"LOGIN {user}b {PASSWORD}")


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    base = tmp_path_factory.mktemp("differential-acl-metadata")
    dict_dir = Path(tempfile.mkdtemp(prefix="dovecot-acl-dict-"))
    dict_dir.chmod(0o777)  # written by Dovecot's mail user (see tests/dovecot.py)
    try:
        with servers(base, DOVECOT_ACL_METADATA.format(dict_dir=dict_dir)) as diff:
            ours_add, dovecot_add = diff.ours.add_user, diff.dovecot.add_user

            def both(add):
                def add_pair(name: str, password: str) -> None:
                    add(name, password)
                    add(name + "b", password)
                return add_pair
            yield Differential(Target("ours", diff.ours.port, both(ours_add)),
                               Target("dovecot", diff.dovecot.port, both(dovecot_add)))
    finally:
        shutil.rmtree(dict_dir, ignore_errors=True)


SCRIPTS = [
    Script("acl-metadata-reader", [
        ("A", "CREATE Team"), ("A", "CREATE Secret"), ("A", "CREATE Seen"),
        ("A", 'SETMETADATA Team (/shared/comment "team" /private/comment "mine")'),
        ("A", 'SETMETADATA Secret (/shared/comment "secret")'),
        ("A", owner("SETACL Team {b} lr")), ("A", owner("SETACL Seen {b} l")),
        b_login(),
        ("B", owner('GETMETADATA "Other Users/{a}/Team" (/shared/comment /private/comment)')),
        ("B", owner('SETMETADATA "Other Users/{a}/Team" (/private/comment "b\'s")')),
        ("B", owner('GETMETADATA "Other Users/{a}/Team" (/shared/comment /private/comment)')),
        ("B", owner('SETMETADATA "Other Users/{a}/Team" (/shared/comment "from b")')),
        ("A", "GETMETADATA Team (/shared/comment /private/comment)"),
        ("B", owner('GETMETADATA "Other Users/{a}/Seen" /shared/comment')),
        ("B", owner('SETMETADATA "Other Users/{a}/Seen" (/shared/comment "x")')),
        ("B", owner('GETMETADATA "Other Users/{a}/Secret" /shared/comment')),
        ("B", owner('GETMETADATA "Other Users/{a}/Nope" /shared/comment')),
        ("B", owner('SETMETADATA "Other Users/{a}/Secret" (/shared/comment "x")')),
        ("B", owner('SETMETADATA "Other Users/{a}/Nope" (/shared/comment "x")')),
        ("A", "GETMETADATA Secret /shared/comment"),
    ], anonymous=("B",), deliberate=("optional-response-codes",),
        doc="RFC 5464 3.3 with RFC 4314 4, 6: l and r read and write a shared mailbox's "
            "entries, /private ones are the reader's own; l alone is refused, no l is a "
            "missing mailbox"),
]


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_script(differential, script):
    """Both servers answer each step the same, once normalised (docs/differential.md)."""
    differential.run(script)
