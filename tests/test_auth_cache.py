"""The auth cache (docs/decisions/0030-auth-cache.md) and LOGIN (RFC 3501 6.2.3, RFC 9051
6.2.3) answered from it: a wrong password is never accepted from the cache, a changed password
-- by another process too -- stops the old one at once, failures are never remembered, and on
the embedded store a cached LOGIN does not wait behind other sessions' writes."""

from __future__ import annotations

import base64
import sqlite3
import time

import pytest

import mailstore.users as users_mod
from mailstore import config
from mailstore.store import MailStore
from tests.admincli import run
from tests.imapproc import Client, ServerProcess, make_users


@pytest.fixture
def scrypt_calls(monkeypatch):
    """Passwords given to scrypt, in order (the cache's misses)."""
    calls: list[str] = []
    real = users_mod.verify_password
    monkeypatch.setattr(users_mod, "verify_password",
                        lambda pw, stored: calls.append(pw) or real(pw, stored))
    return calls


def test_cache_vouches_only_for_the_verified_password_and_the_current_hash(connect,
                                                                           scrypt_calls):
    """RFC 3501 6.2.3: LOGIN succeeds only with the user's password.  Two stores on one
    backend stand for two processes: a password changed through one (as `mailadmin user
    passwd` does) makes the other's cached login miss at its next check, and the old password
    then fails; a wrong password, an unknown user and a failed login are never answered or
    remembered by the cache."""
    server = MailStore(connect())
    admin = MailStore(connect())
    admin.create_user("alice", "secret")
    assert server.authenticate_cached("alice", "secret") is None  # nothing verified yet
    assert server.authenticate("ALICE", "secret") == "alice"
    assert server.authenticate_cached("Alice", "secret") == "alice"
    assert server.authenticate("alice", "secret") == "alice"
    assert scrypt_calls == ["secret"]  # the second login came from the cache
    for wrong in ("Secret", "secret ", "", "secre"):
        assert server.authenticate_cached("alice", wrong) is None
        assert server.authenticate("alice", wrong) is None
    assert server.authenticate_cached("bob", "secret") is None
    assert server.authenticate("bob", "secret") is None
    assert len(server.users.cache.entries) == 1  # failures were not remembered

    admin.set_password("alice", "new-secret")
    assert server.authenticate_cached("alice", "secret") is None
    assert server.authenticate("alice", "secret") is None
    assert server.authenticate("alice", "new-secret") == "alice"
    assert server.authenticate_cached("alice", "new-secret") == "alice"
    admin.close()
    server.close()


def test_cache_entries_expire_stay_bounded_and_can_be_turned_off(tmp_path, scrypt_calls):
    """The bounds of docs/decisions/0030: an entry is trusted ``auth_cache_ttl`` seconds;
    at most ``auth_cache_size`` are kept; either at 0 turns the cache off (every LOGIN pays
    scrypt)."""
    from mailstore.backends.embedded import EmbeddedBackend
    now = [1000.0]
    store = MailStore(EmbeddedBackend(str(tmp_path / "a"), synchronous="NORMAL"),
                      clock=lambda: now[0], auth_cache_size=3, auth_cache_ttl=60)
    for n in range(5):
        store.create_user(f"u{n}", "pw", default_folders=False)
        assert store.authenticate(f"u{n}", "pw") == f"u{n}"
        assert len(store.users.cache.entries) <= 3
    assert store.authenticate_cached("u4", "pw") == "u4"
    now[0] += 61
    assert store.authenticate_cached("u4", "pw") is None  # expired
    store.close()

    for size, ttl in ((0, 60), (100, 0)):
        off = MailStore(EmbeddedBackend(str(tmp_path / f"off{size}"), synchronous="NORMAL"),
                        auth_cache_size=size, auth_cache_ttl=ttl)
        off.create_user("carol", "pw", default_folders=False)
        del scrypt_calls[:]
        assert [off.authenticate("carol", "pw") for _ in range(3)] == ["carol"] * 3
        assert off.authenticate_cached("carol", "pw") is None
        assert scrypt_calls == ["pw"] * 3 and off.users.cache.entries == {}
        off.close()


def test_simultaneous_logins_of_one_user_pay_one_password_hash(tmp_path, scrypt_calls):
    """Many sessions logging in as one user at once on a cold cache (a restart under load):
    the first check pays scrypt, the others wait for it and find its entry; a wrong password
    tried at the same time is still refused (RFC 3501 6.2.3)."""
    from concurrent.futures import ThreadPoolExecutor

    from mailstore.backends.embedded import EmbeddedBackend
    store = MailStore(EmbeddedBackend(str(tmp_path / "s"), synchronous="NORMAL"))
    store.create_user("dan", "pw", default_folders=False)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda pw: store.authenticate("dan", pw), ["pw"] * 8 + ["no"]))
    assert results == ["dan"] * 8 + [None]
    assert sorted(scrypt_calls) == ["no", "pw"]
    assert store.users.cache.flights == {}
    store.close()


def test_auth_cache_settings_are_read_and_checked(tmp_path):
    """`[store] auth_cache_size` and `auth_cache_ttl` reach the store; bad values stop
    start-up with a message naming the key."""
    conf = tmp_path / "c.conf"
    conf.write_text("[store]\nauth_cache_size = 0\nauth_cache_ttl = 30\n")
    options = config.load(str(conf)).store_options()
    assert (options["auth_cache_size"], options["auth_cache_ttl"]) == (0, 30)
    conf.write_text("[store]\nauth_cache_ttl = -1\n")
    with pytest.raises(config.ConfigError, match="auth_cache_ttl"):
        config.load(str(conf))


def _login(client: Client, tag: str, user: str, password: str) -> bytes:
    return client.cmd(tag, f"LOGIN {user} {password}")[-1]


def test_login_after_mailadmin_passwd_refuses_the_old_password_at_once(tmp_path):
    """RFC 3501 6.2.3 / RFC 9051 6.2.3: LOGIN answers NO [AUTHENTICATIONFAILED] to a wrong
    password.  A password changed by `mailadmin user passwd` (another process) while the
    server runs is refused at the very next LOGIN though the server had the old one cached;
    the new one works; a wrong password after a cached right one still waits the
    failed-login delay."""
    data_dir = str(tmp_path / "data")
    make_users(data_dir, ("eve", "old-pw"))
    conf = tmp_path / "imapserver.conf"
    conf.write_text("[imap]\nauth_failure_delay = 0.5\n")
    with ServerProcess(data_dir, config=str(conf)) as server:
        client = Client(server.port)
        for n in range(2):  # the second is answered from the cache
            assert _login(client, f"a{n}", "eve", "old-pw").startswith(b"a%d OK" % n)
            assert client.cmd(f"u{n}", "UNAUTHENTICATE")[-1].startswith(b"u%d OK" % n)
        start = time.monotonic()
        assert _login(client, "w", "eve", "old-pwx") == \
            b"w NO [AUTHENTICATIONFAILED] Authentication failed"
        assert time.monotonic() - start >= 0.45
        changed = run("user", "passwd", "eve", "--password-stdin", data_dir=data_dir,
                      stdin="new-pw\n")
        assert changed.returncode == 0, changed.stderr
        assert _login(client, "b", "eve", "old-pw") == \
            b"b NO [AUTHENTICATIONFAILED] Authentication failed"
        assert _login(client, "c", "eve", "new-pw").startswith(b"c OK [CAPABILITY ")
        # AUTHENTICATE PLAIN (RFC 4616, SASL-IR) takes the same path.
        assert client.cmd("u", "UNAUTHENTICATE")[-1].startswith(b"u OK")
        for tag, password, answer in (("p1", "old-pw", b"p1 NO [AUTHENTICATIONFAILED]"),
                                      ("p2", "new-pw", b"p2 OK [CAPABILITY ")):
            plain = base64.b64encode(f"\0eve\0{password}".encode()).decode()
            assert client.cmd(tag, f"AUTHENTICATE PLAIN {plain}")[-1].startswith(answer)
        client.close()


def test_cached_login_is_answered_while_the_pool_waits_for_the_write_lock(tmp_path):
    """RFC 3501 6.2.3 LOGIN, under load: another process holds the store's write lock, and
    every thread of the server's pool waits for it with a CREATE (more CREATEs queued
    behind).  A LOGIN whose password the server verified before is answered meanwhile (on
    the embedded store the cache is read in the reactor's thread); one it must hash, and the
    CREATEs, are answered once the lock is let go."""
    data_dir = str(tmp_path / "data")
    make_users(data_dir, ("zed", "pw"), ("yan", "pw2"))
    with ServerProcess(data_dir) as server:
        busy = []
        for _ in range(24):  # the pool has 20 threads
            client = Client(server.port)
            assert _login(client, "l", "zed", "pw").startswith(b"l OK")
            busy.append(client)
        blocker = sqlite3.connect(f"{data_dir}/store.sqlite3", timeout=10)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            for n, client in enumerate(busy):
                client.send(f"c CREATE box{n}\r\n")
            hashing = Client(server.port)
            hashing.send("h LOGIN yan pw2\r\n")
            # Not needed for the fixed server to pass; gives the CREATEs time to fill the
            # pool, so that a LOGIN going through it (the code before) fails here.
            time.sleep(0.2)
            cached = Client(server.port, timeout=10)
            start = time.monotonic()
            assert _login(cached, "l", "zed", "pw").startswith(b"l OK")
            assert time.monotonic() - start < 5
        finally:
            blocker.rollback()
            blocker.close()
        hashing.sock.settimeout(10)
        assert hashing.until_tagged("h")[-1].startswith(b"h OK")
        for client in busy:
            assert client.until_tagged("c")[-1].startswith(b"c OK")
            client.close()
        cached.close()
        hashing.close()
