"""Differential scripts for issue 13's QUOTA, CREATE-SPECIAL-USE, UNAUTHENTICATE and LITERAL+
against Dovecot with its quota plugins (``quota`` and ``imap_quota``, the ``count`` backend).

Every account gets the same limits on both servers -- :data:`STORAGE_KIB` KiB and
:data:`MESSAGES` messages (ours through the store, as ``mailadmin quota set`` sets them;
Dovecot's through ``quota_rule``) -- except in scripts named ``unlimited-...``, whose account
has none (Dovecot: ``quota_rule`` 0 for that user, which Dovecot reads as no limit).

Debian's Dovecot is 2.3.19, an RFC 2087 QUOTA server: it has no QUOTA=RES-* capabilities, no
STATUS DELETED / DELETED-STORAGE (RFC 9208 4.1.4: it answers BAD), no UNAUTHENTICATE (BAD,
unknown command) and does not advertise CREATE-SPECIAL-USE.  Those are not compared here (a
script of BADs judges nothing); tests/test_imap_quota.py, test_imap_unauthenticate.py and
test_imap_create_special_use.py hold their RFC-cited transcripts.  What both implement is
compared: GETQUOTAROOT, GETQUOTA, SETQUOTA, OVERQUOTA on APPEND/COPY/MOVE, CREATE with USE,
non-synchronizing literals over 4096 octets.
"""

from __future__ import annotations

import pytest
from differential import (
    CONFIG,
    PASSWORD,
    Differential,
    Script,
    Target,
    append,
    date,
    plus,
)
from dovecot import Dovecot
from imapproc import ServerProcess, make_users
from mailgen import message

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore

STORAGE_KIB = 8
MESSAGES = 4

DOVECOT_QUOTA = f"""\
mail_plugins = $mail_plugins quota
protocol imap {{
  mail_plugins = $mail_plugins imap_quota
}}
plugin {{
  quota = count:User quota
  quota_vsizes = yes
  quota_rule = *:storage={STORAGE_KIB}K:messages={MESSAGES}
}}
"""

CAPABILITIES_JUDGED_HERE = {"QUOTA", "QUOTA=RES-STORAGE", "QUOTA=RES-MESSAGE",
                            "CREATE-SPECIAL-USE", "UNAUTHENTICATE"}
"""What we advertise that the plain Dovecot of tests/test_differential.py does not: QUOTA
needs Dovecot's quota plugins (compared here); the rest Dovecot 2.3 lacks (see above)."""


class QuotaDifferential(Differential):
    """Fresh accounts with the same limits on both servers (none for ``unlimited-`` scripts)."""

    def __init__(self, ours_port: int, data_dir: str, dovecot: Dovecot):
        super().__init__(Target("ours", ours_port, self.add_ours),
                         Target("dovecot", dovecot.port, self.add_dovecot))
        self.data_dir = data_dir
        self.server = dovecot
        self.limited = True  # for the accounts of the script being played

    def transcripts(self, script: Script):
        self.limited = not script.name.startswith("unlimited-")
        return super().transcripts(script)

    def add_ours(self, name: str, password: str) -> None:
        make_users(self.data_dir, (name, password))
        if self.limited:
            store = MailStore(EmbeddedBackend(self.data_dir, synchronous="NORMAL"))
            try:
                store.set_quota(name, STORAGE_KIB * 1024, MESSAGES)
            finally:
                store.close()

    def add_dovecot(self, name: str, password: str) -> None:
        self.server.add_user(name, password)
        if not self.limited:
            # passwd-file's last field holds userdb extra fields; 0 is "no limit" to Dovecot.
            passwd = self.server.dir / "users" / name
            passwd.write_text(passwd.read_text().rstrip("\n")
                              + "userdb_quota_rule=*:storage=0:messages=0\n")


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    base = tmp_path_factory.mktemp("differential-quota")
    conf = base / "imapserver.conf"
    conf.write_text(CONFIG)
    data_dir = str(base / "store")
    make_users(data_dir, ("setup", PASSWORD))  # creates the store before the server opens it
    with ServerProcess(data_dir, config=str(conf)) as ours, \
            Dovecot(base / "dovecot", like_ours=True, extra_config=DOVECOT_QUOTA) as dovecot:
        yield QuotaDifferential(ours.port, data_dir, dovecot)


def sized(n: int, octets: int) -> bytes:
    """Message ``n`` of exactly ``octets`` octets (CRLF line ends, as both servers count)."""
    raw = message(n, size=octets)
    assert len(raw) <= octets, (len(raw), octets)
    return raw[:-2] + b"y" * (octets - len(raw)) + b"\r\n"


SCRIPTS = [
    Script("quota-thunderbird", [
        ("A", 'SELECT "INBOX"'), ("A", 'GETQUOTAROOT "INBOX"'),
        ("A", append("INBOX", sized(1, 1500), "", date(1))),
        ("A", append("INBOX", sized(2, 2048), "\\Seen", date(2))),
        ("A", "NOOP"), ("A", 'GETQUOTAROOT "INBOX"'), ("A", 'GETQUOTA "User quota"'),
        ("B", 'GETQUOTAROOT "INBOX"'), ("B", "GETQUOTAROOT Sent"),
        ("B", "GETQUOTAROOT Not/There"), ("B", "GETQUOTAROOT inbox"),
    ], doc="RFC 9208 4.1.1, 4.1.2, 4.2.1, 4.2.2, 5.1 (KiB), 5.2: the exchange Thunderbird's "
           "quota bar makes after SELECT; STORAGE and MESSAGE follow what is stored, in "
           "every mailbox and every session."),

    Script("quota-unknown-root-and-setquota", [
        ("A", 'GETQUOTA "User quota"'), ("A", 'GETQUOTA ""'), ("A", "GETQUOTA nosuch"),
        ("A", 'SETQUOTA "User quota" (STORAGE 100000)'), ("A", 'GETQUOTA "User quota"'),
    ], deliberate=("optional-response-codes",),
        doc="RFC 9208 4.1.1 (NO for no such quota root), 4.1.3 and 3.2 (SETQUOTA may fail; "
            "limits are the administrator's, unchanged)."),

    Script("quota-overquota-append", [
        ("A", append("INBOX", sized(1, STORAGE_KIB * 1024 + 1), "", date(1))),
        ("A", "STATUS INBOX (MESSAGES)"),
        *[("A", append("INBOX", sized(n, 300), "", date(n))) for n in range(2, 2 + MESSAGES)],
        ("A", append("INBOX", sized(9, 300), "", date(9))),
        ("A", 'GETQUOTAROOT INBOX'), ("A", "STATUS INBOX (MESSAGES)"),
    ], doc="RFC 9208 4.3.1: APPEND over the STORAGE or the MESSAGE limit is NO [OVERQUOTA] and "
           "stores nothing."),

    Script("quota-overquota-copy-and-move", [
        *[("A", append("INBOX", sized(n, 1000), "", date(n))) for n in range(1, 4)],
        ("A", "SELECT INBOX"), ("A", "COPY 1:2 Archive"), ("A", "STATUS Archive (MESSAGES)"),
        ("A", "COPY 1 Archive"), ("A", "GETQUOTAROOT INBOX"),
        ("A", "MOVE 3 Archive"), ("A", "GETQUOTAROOT INBOX"), ("A", "STATUS Archive (MESSAGES)"),
    ], doc="RFC 9208 4.3.1: COPY that would exceed a limit is NO [OVERQUOTA], nothing copied; "
           "MOVE within the quota root adds nothing and works at the limit (RFC 6851)."),

    Script("unlimited-quotaroot", [
        ("A", 'SELECT "INBOX"'), ("A", 'GETQUOTAROOT "INBOX"'), ("A", 'GETQUOTA "User quota"'),
        ("A", append("INBOX", sized(1, 20000), "", date(1))),
    ], deliberate=("quota-root-of-unlimited-user",),
        doc="RFC 9208 4.1.2, 4.2.2: a user without limits has no quota root."),

    Script("create-with-use", [
        ("A", "CREATE Old/Stuff (USE (\\Archive))"), ("A", "CREATE Plain (USE ())"),
        ("A", 'LIST "" (Old/Stuff Plain)'), ("A", "CREATE Plain (USE (\\Junk))"),
    ], deliberate=("list-extra-attributes",),
        doc="RFC 6154 3, RFC 4466 create-params: CREATE with a USE parameter creates the "
            "mailbox (Dovecot 2.3 then ignores the use; see test_dovecot_ignores_create_use)."),

    Script("literal-plus-over-4096", [
        ("A", append("INBOX", sized(1, 6000), "", date(1), literal=plus)),
        ("A", "SELECT INBOX"), ("A", ("SEARCH BODY ", plus(b"y" * 5000))),
        ("A", ("SEARCH BODY ", plus(b"Body"))),
    ], doc="RFC 7888 3, 5: LITERAL+ literals of any size (4096 octets is LITERAL-'s limit); "
           "no continuation request."),
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_script(differential, script):
    """Our answers equal Dovecot's (with its quota plugins), after normalising what the RFCs
    leave to the server and the deliberate differences each script names."""
    differential.run(script)


def test_script_names_are_unique():
    names = [s.name for s in SCRIPTS]
    assert len(names) == len(set(names))


def test_dovecot_with_quota_plugins_advertises_quota(differential):
    """The judge of the scripts above is a QUOTA server (RFC 9208 1: the QUOTA capability)."""
    from differential import Session

    differential.limited = True
    differential.dovecot.add_user("capabilities", PASSWORD)
    session = Session("A", differential.dovecot.port)
    session.conn.read_response()
    session.play(f"LOGIN capabilities {PASSWORD}")
    event = session.play("CAPABILITY")
    session.conn.close()
    line = next(r for r in event.responses if r.kind == "data")
    assert b"QUOTA" in line.data[1:]


def test_dovecot_ignores_create_use(differential):
    """Why USEATTR is not compared: Debian's Dovecot (2.3) does not advertise
    CREATE-SPECIAL-USE and takes any USE parameter without giving the use (RFC 6154 3 would
    have it answer NO [USEATTR] for one it cannot give).  Should a newer Dovecot implement it,
    this fails, and the refusals of tests/test_imap_create_special_use.py get a script here."""
    from differential import Session

    differential.limited = True
    differential.dovecot.add_user("create-use", PASSWORD)
    session = Session("A", differential.dovecot.port)
    session.conn.read_response()
    session.play(f"LOGIN create-use {PASSWORD}")
    created = session.play("CREATE Unknown (USE (\\Bogus))")
    session.conn.close()
    assert [r.status for r in created.responses if r.kind == "tagged"] == [b"OK"]
