"""Operators' view: metrics that move with traffic, structured logs without secrets, and a
broken config that stops start-up naming the setting."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    values = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def test_metrics_move_and_logs_are_structured_without_secrets(tmp_path):
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("max", "s3cret-pass"))
    log_file = tmp_path / "server.log"
    conf = tmp_path / "c.conf"
    conf.write_text(f"[log]\nformat = json\nfile = {log_file}\n")
    with ServerProcess(data_dir, "--metrics-port", "auto", "--lmtp-port", "auto",
                       config=str(conf)) as server:
        before = scrape(server.ports["metrics"])
        client = Client(server.port)
        client.cmd("a", "LOGIN max wrong-guess")
        client.cmd("b", "LOGIN max s3cret-pass")
        data = message(1, body=b"TOP-SECRET-BODY\r\n")
        client.send(b"c APPEND INBOX {%d+}\r\n" % len(data) + data + b"\r\n")
        client.until_tagged("c")
        client.cmd("d", "SELECT INBOX")
        client.cmd("e", "FETCH 1 BODY[]")
        client.cmd("f", "FROB")
        client.cmd("g", "LOGOUT")
        client.close()
        import smtplib
        with smtplib.LMTP("127.0.0.1", server.ports["lmtp"], timeout=10) as lmtp:
            lmtp.sendmail("x@example.org", ["max@localhost"], message(2))
        after = scrape(server.ports["metrics"])
    def moved(name):
        return after.get(name, 0) - before.get(name, 0)
    assert moved('hbaseimap_imap_commands_total{command="LOGIN",outcome="NO"}') == 1
    assert moved('hbaseimap_imap_commands_total{command="LOGIN",outcome="OK"}') == 1
    assert moved('hbaseimap_imap_commands_total{command="unknown",outcome="BAD"}') == 1
    assert moved('hbaseimap_imap_command_seconds_count{command="FETCH"}') == 1
    assert moved("hbaseimap_imap_connections_total") == 1
    assert moved('hbaseimap_store_call_seconds_count{operation="append"}') >= 1
    assert moved('hbaseimap_deliveries_total{outcome="delivered",protocol="lmtp"}') == 1
    assert moved('hbaseimap_store_call_seconds_count{operation="deliver"}') == 1
    # JSON lines: one object per line (tests/test_logs.py checks the events in detail).
    events = [json.loads(line) for line in log_file.read_text().splitlines()]
    text = log_file.read_text()
    assert "s3cret-pass" not in text and "wrong-guess" not in text
    assert "TOP-SECRET-BODY" not in text
    assert any(e["event"] == "login_failed" for e in events)
    assert any(e.get("user") == "max" and e.get("mechanism") == "LOGIN" for e in events)
    assert any(e["component"] == "imap" and e.get("remote") == "127.0.0.1" for e in events)


def test_broken_config_stops_startup_naming_the_setting(tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text("[imap]\nmax_conections = 5\n")
    result = subprocess.run([sys.executable, "-m", "imapserver.main", "--config", str(conf),
                             "--data-dir", str(tmp_path / "s")], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert "imap.max_conections" in result.stderr
