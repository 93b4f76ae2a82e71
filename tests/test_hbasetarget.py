"""The fixture that isolates HBase-path tests (tests/hbasetarget.py): a prefix given back is
lent again empty, with the schema's tables and nothing else, so that no test sees another's rows
although no test creates or drops the schema (issue 16: 20-30 s per test on a real HBase)."""

from __future__ import annotations

from mailstore.schema import TABLES
from mailstore.store import MailStore
from tests.hbasetarget import KEPT, Lease


def test_a_prefix_comes_back_empty_with_only_the_schema_tables(hbase_target):
    prefix = hbase_target.lease()
    lease = Lease(hbase_target, prefix)
    store = MailStore(lease.backend())
    try:
        store.create_user("ann", "pw")
        store.append("ann", "INBOX", b"Subject: s\r\n\r\nbody\r\n")
        store.backend.create_table("EXTRA", {"m": {"max_versions": 1}})
        store.backend.table("EXTRA").put(b"r", {b"m:a": b"1"})
    finally:
        store.close()
    hbase_target.give_back(prefix)
    again = hbase_target.lease()
    try:
        assert again == prefix      # reused, not a new set of tables
        backend = lease.backend()
        try:
            assert {t.name for t in TABLES} <= set(backend.tables()) <= KEPT
            for name in backend.tables():
                assert list(backend.table(name).scan(start=b"", stop=b"\xff" * 40)) == [], name
            fresh = MailStore(backend)
            assert fresh.list_users() == []
            # The row a delete marker covered can be written again at once.
            fresh.create_user("ann", "pw")
            fresh.append("ann", "INBOX", b"Subject: t\r\n\r\nx\r\n")
            assert fresh.mailbox("ann", "INBOX").messages == 1
        finally:
            backend.close()
    finally:
        hbase_target.give_back(again)
