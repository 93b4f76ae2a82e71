"""The relay sender in real ``imapserver`` processes: crashes, two drainers, mailadmin queue.

Entries are enqueued by this test through the store API (as another frontend's delivery would:
the server learns of them at its next scan), the sink is a real aiosmtpd server
(tests/smtpsink.py), the servers are real subprocesses killed with SIGKILL.

SMTP cannot hand a message over exactly once (RFC 5321 6.1): a sender that dies after the
relay's 250 and before it records that 250 sends the message again after restart.  These tests
pin the window to exactly that: a crash anywhere before the relay took the data gives one
copy, a crash after it at most two, and none is ever lost.
"""

from __future__ import annotations

import json
import threading
import urllib.request

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.admincli import run
from tests.deliveryserver import ServerProcess
from tests.smtpsink import Sink
from tests.test_relay import MESSAGE, wait_for


def write_config(tmp_path, port: int, **more) -> str:
    values = {"relay_host": "127.0.0.1", "relay_port": port, "relay_starttls": "no",
              "relay_backoff_base": 0.3, "relay_backoff_max": 1, "relay_poll_interval": 0.2,
              "relay_timeout": 5, "relay_claim_timeout": 2, "hostname": "mx.test",
              "domains": "example.com"}
    values.update(more)
    path = tmp_path / "relay.conf"
    path.write_text("[delivery]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))
    return str(path)


def numbered(i: int) -> bytes:
    """The test message with Message-ID <r{i}@example.com>."""
    return MESSAGE.replace(b"<r1@", b"<r%d@" % i)


def enqueue(data_dir: str, count: int = 1, rcpts=("bob@example.net",)) -> list[str]:
    store = MailStore(EmbeddedBackend(data_dir))
    try:
        return [store.outbox.enqueue("alice@example.com", list(rcpts), numbered(i), "redirect")
                for i in range(count)]
    finally:
        store.close()


def queued(data_dir: str) -> list:
    store = MailStore(EmbeddedBackend(data_dir))
    try:
        return store.outbox.entries()
    finally:
        store.close()


def crash_at(tmp_path, gate_name: str) -> tuple[Sink, str]:
    """Enqueue one message, let the server send it, hold the sink inside RCPT or DATA, kill
    the server there (SIGKILL), release the sink, restart the server; return the sink once the
    queue is empty again."""
    data = str(tmp_path / "store")
    sink = Sink().start()
    gate = threading.Event()
    setattr(sink, gate_name, gate)
    conf = write_config(tmp_path, sink.port)
    server = ServerProcess(data, config_file=conf).start()
    try:
        [qid] = enqueue(data)
        (sink.in_rcpt if gate_name == "hold_rcpt" else sink.in_data).wait(20)
        server.kill()                 # the claim is held by a dead process now
        gate.set()
        assert [e.id for e in queued(data)] == [qid]        # never lost
        with ServerProcess(data, config_file=conf):
            wait_for(lambda: queued(data) == [], what="the queue to empty after restart")
    finally:
        server.kill()
        sink.stop()
    return sink, qid


def test_crash_before_the_relay_took_the_data_sends_once(tmp_path):
    """SIGKILL while the relay is answering RCPT (the claim held, nothing handed over): the
    claim expires, the restarted server sends the message, exactly once."""
    sink, _ = crash_at(tmp_path, "hold_rcpt")
    assert [m.data for m in sink.messages()] == [numbered(0)]


def test_crash_after_the_relay_took_the_data_duplicates_at_most_once(tmp_path):
    """SIGKILL after the relay received the whole message and before the server recorded the
    250 (the window RFC 5321 6.1 leaves to every SMTP sender): the message is sent again after
    restart, so the relay holds it twice, never more, never none."""
    sink, _ = crash_at(tmp_path, "hold_data")
    assert [m.data for m in sink.messages()] == [numbered(0), numbered(0)]


def test_two_processes_draining_one_store_send_each_entry_once(tmp_path):
    """Two servers scanning the same queue every 0.2 s: every entry reaches the relay exactly
    once (claims are check-and-puts on one cell)."""
    data = str(tmp_path / "store")
    with Sink() as sink:
        conf = write_config(tmp_path, sink.port)
        enqueue(data, 0)
        with ServerProcess(data, config_file=conf), ServerProcess(data, config_file=conf):
            ids = enqueue(data, 20)
            wait_for(lambda: len(sink.messages()) >= 20 and queued(data) == [], timeout=60,
                     what="twenty messages")
        ids_seen = [m.data.split(b"Message-ID: <", 1)[1].split(b"@", 1)[0]
                    for m in sink.messages()]
    assert len(ids) == 20
    assert sorted(ids_seen) == sorted(b"r%d" % i for i in range(20))


def test_mailadmin_queue_list_retry_delete_and_metrics(tmp_path):
    """What an operator sees with the relay down: `mailadmin queue list` shows the entry with
    its error; `retry` makes it due at once; `delete` removes another; the metrics count the
    deferral and the send (docs/metrics.md)."""
    data = str(tmp_path / "store")
    sink = Sink()                       # reserved, not listening: the relay is down
    conf = write_config(tmp_path, sink.port, relay_backoff_base=3600, relay_backoff_max=3600)
    [keep, drop] = enqueue(data, 2)
    with ServerProcess(data, "--metrics-port", "auto", config_file=conf) as server:
        wait_for(lambda: all(e.attempts for e in queued(data)), what="two failed attempts")
        listing = run("queue", "list", "--json", data_dir=data)
        assert listing.returncode == 0, listing.stderr
        rows = json.loads(listing.stdout)
        assert [r["id"] for r in rows] == [keep, drop]
        assert rows[0]["pending"] == ["bob@example.net"] and rows[0]["reason"] == "redirect"
        assert "refused" in rows[0]["last_error"].lower() and rows[0]["attempts"] == 1
        text = run("queue", "list", data_dir=data).stdout
        assert keep in text and "LAST ERROR" in text
        deleted = run("queue", "delete", drop, data_dir=data)
        assert deleted.returncode == 0 and f"{drop}: deleted" in deleted.stdout
        missing = run("queue", "delete", drop, data_dir=data)
        assert missing.returncode == 1 and "not in the queue" in missing.stderr
        sink.start()                    # the relay comes up; the entry waits an hour...
        assert run("queue", "retry", keep, data_dir=data).returncode == 0   # ...or not
        wait_for(sink.messages, what="the retried message")
        wait_for(lambda: queued(data) == [], what="the queue to empty")
        scrape = urllib.request.urlopen(
            f"http://127.0.0.1:{server.ports['metrics']}/metrics", timeout=10).read().decode()
    sink.stop()
    assert run("queue", "list", data_dir=data).stdout.strip() == "the queue is empty"
    assert "hbaseimap_relay_sent_total 1.0" in scrape
    assert "hbaseimap_relay_deferred_total 2.0" in scrape


def test_workers_send_each_entry_once(tmp_path):
    """With --workers 2 one worker scans the queue (the other only sends what it queued
    itself): entries queued from outside all arrive, each once."""
    data = str(tmp_path / "store")
    with Sink() as sink:
        conf = write_config(tmp_path, sink.port)
        enqueue(data, 0)
        with ServerProcess(data, "--workers", "2", config_file=conf):
            enqueue(data, 5)
            wait_for(lambda: len(sink.messages()) >= 5 and queued(data) == [], timeout=60,
                     what="five messages")
        assert sorted(m.data for m in sink.messages()) == sorted(numbered(i) for i in range(5))


def test_settings_that_cannot_work_stop_start_up(tmp_path):
    """AUTH configured with TLS off (RFC 4954 4: no password in clear) or a CA file that
    cannot be read: the server refuses to start and says which setting, instead of queuing
    mail it can never send."""
    import pytest
    data = str(tmp_path / "store")
    for more, named in (({"relay_username": "u", "relay_password": "p"},
                         "relay_username needs relay_starttls = required"),
                        ({"relay_starttls": "required",
                          "relay_ca_file": str(tmp_path / "missing.pem")}, "No such file")):
        conf = write_config(tmp_path, 25, **{"relay_starttls": "no", **more})
        server = ServerProcess(data, config_file=conf)
        with pytest.raises(RuntimeError) as failed:
            server.start()
        assert "cannot start" in str(failed.value) and named in str(failed.value)
