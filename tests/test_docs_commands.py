"""The commands in README.md and docs/ work as written: each is read from the document's text
and run, so the documents and this test cannot drift apart (issue 17, part 5).

Run where they can be here: README's twistd line in a fresh shell (its greeting is RFC 3501
section 7.1.1's OK; its LOGIN, section 6.2.3, by README's own user) and its mailadmin line;
every ``$`` example of docs/mailadmin.md with its output; every mailadmin synopsis of both
against the real argument parser; docs/postfix.md's store-side configuration and its swaks
LMTP check (RFC 2033 section 4.2).  Postfix itself is not installed here, so its commands are
not run; the journal search's pattern is checked against the log line the document shows.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from mailstore import config as configmod
from tests.admincli import mailadmin_cmd, run
from tests.imapproc import Client, ServerProcess

ROOT = os.path.join(os.path.dirname(__file__), "..")
VENV_BIN = os.path.dirname(sys.executable)
# A fresh login shell's PATH: no virtualenv on it.
FRESH_PATH = "/usr/local/bin:/usr/bin:/bin"


def read(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def code_blocks(text: str) -> list[str]:
    """Fenced blocks and indented (four-space) blocks, in document order."""
    blocks = [m.group(1) for m in re.finditer(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)]
    for m in re.finditer(r"(?:^(?: {4}|\t).*\n?)+", text, re.M):
        blocks.append("\n".join(line[4:] for line in m.group(0).splitlines()))
    return blocks


def shell_env(tmp_path, path: str) -> dict[str, str]:
    env = {"PATH": path, "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    # The code under test: in a checkout the venv's editable install finds it; a worktree's
    # test run points PYTHONPATH at it.
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def checkout(tmp_path) -> None:
    """Make tmp_path look like the checkout README speaks from: ``.venv`` is there."""
    os.symlink(os.path.dirname(VENV_BIN), tmp_path / ".venv")


# -- README -------------------------------------------------------------------------------------

def readme_line(pattern: str) -> str:
    lines = [line.strip() for line in read("README.md").splitlines() if re.search(pattern, line)]
    assert len(lines) == 1, lines
    return lines[0]


def test_readme_twistd_line_serves_imap_from_a_fresh_shell(tmp_path):
    """README's twistd line, run by bash in the checkout with no virtualenv on PATH, starts the
    server; README's mailadmin line creates alice while it runs; README's session logs in as
    alice; SIGTERM stops it cleanly.  (README's ports are fixed; the test adds flags that let
    the kernel pick them, which override nothing README sets.)"""
    checkout(tmp_path)
    twistd = readme_line(r"^\s+\S*twistd -n ")
    adduser = readme_line(r"^\s+echo \S+ \| \S*mailadmin user add ")
    login = re.search(r"C: a1 (LOGIN \S+ \S+)", read("README.md")).group(1)
    env = shell_env(tmp_path, FRESH_PATH)
    proc = subprocess.Popen(["bash", "-c", f"exec {twistd} --imap-port auto "
                             "--imaps-port 0 --smtp-port 0 --lmtp-port 0 --sieve-port 0"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    output = b""
    try:
        port = None
        deadline = time.monotonic() + 30
        os.set_blocking(proc.stdout.fileno(), False)
        while port is None and time.monotonic() < deadline and proc.poll() is None:
            chunk = proc.stdout.read() or b""
            output += chunk
            m = re.search(rb"imap listening on [\d.]+:(\d+)", output)
            port = int(m.group(1)) if m else None
            if port is None and not chunk:
                time.sleep(0.05)
        assert port, output.decode(errors="replace")
        added = subprocess.run(["bash", "-c", adduser], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=120)
        assert added.returncode == 0, added.stderr
        client = Client(port)
        assert client.greeting.startswith(b"* OK [CAPABILITY IMAP4rev1")
        assert client.cmd("a1", login)[-1].startswith(b"a1 OK")
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        proc.stdout.close()
    # twistd stops cleanly on SIGTERM, then re-raises it so its exit status tells why.
    assert proc.returncode in (0, -signal.SIGTERM), output.decode(errors="replace")


def synopses() -> list[str]:
    """Every mailadmin command line the documents show in general form."""
    found = []
    for block in code_blocks(read("README.md")) + code_blocks(read("docs/mailadmin.md")):
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("mailadmin ") and "COMMAND" not in line:
                found.append(line[len("mailadmin "):])
    for m in re.finditer(r"^\| `([a-z][^`]*)`(?:, `([a-z][^`]*)`)? \|",
                         read("docs/mailadmin.md"), re.M):
        found += [g for g in m.groups() if g]
    return found


def commands_of(synopsis: str) -> list[tuple[list[str], list[str]]]:
    """``user add NAME [--x] | passwd | del [--yes]`` -> each command's words and options
    (a bare word after ``|`` belongs to the first command's group)."""
    out = []
    group = None
    for alternative in synopsis.split(" | "):
        tokens = alternative.split()
        words = []
        for token in tokens:
            if not re.fullmatch(r"[a-z][a-z-]*", token):
                break
            words.append(token)
        if group is None:
            group = words[0] if words else ""  # no words: the common options
        elif words and words[0] != group and len(words) == 1:
            words = [group, *words]
        options = re.findall(r"--[a-z][a-z-]*", alternative)
        out.append((words, options))
    return out


def test_every_documented_mailadmin_synopsis_is_a_real_command():
    """Each mailadmin command README and docs/mailadmin.md name exists, with every option
    they give it."""
    seen = set()
    checked = 0
    for synopsis in synopses():
        for words, options in commands_of(synopsis):
            key = (tuple(words), tuple(options))
            if key in seen:
                continue
            seen.add(key)
            helped = subprocess.run([*mailadmin_cmd(), *words, "--help"], capture_output=True,
                                    text=True, timeout=60)
            assert helped.returncode == 0, (synopsis, words, helped.stderr)
            usage = helped.stdout.split("\n\n", 1)[0]
            assert usage.startswith(" ".join(["usage: mailadmin", *words]) + " "), usage
            for option in options:
                assert option in helped.stdout, (synopsis, option)
            checked += 1
    assert checked >= 20  # user x5, mailbox x7, quota x3, import, export, fsck, stats, ...


# -- docs/mailadmin.md ---------------------------------------------------------------------------

VALUE = r"(?:\d[\d,]*(?:\.\d+)?(?: (?:B|KiB|MiB|GiB|TiB))?|unlimited)"


def output_pattern(line: str) -> re.Pattern:
    """A documented output line as a pattern: numbers, sizes and limits may differ, the
    words, the columns' order and the punctuation may not."""
    parts = []
    for i, piece in enumerate(re.split(f"({VALUE})", line.strip())):
        if i % 2:
            parts.append(VALUE)
        else:
            parts.append(r"\s+".join(re.escape(word) for word in re.split(r"\s+", piece)))
    return re.compile("".join(parts))


def examples(text: str) -> list[tuple[str, list[str]]]:
    """``$ command`` lines of fenced blocks, each with the output lines shown under it."""
    found = []
    for block in code_blocks(text):
        for line in block.splitlines():
            if line.startswith("$ "):
                found.append((line[2:], []))
            elif found and line.strip() and block.lstrip().startswith("$ "):
                found[-1][1].append(line)
    return found


def make_maildir(root) -> None:
    """A small Maildir++ tree: two messages in INBOX, one in the folder .Lists.Python."""
    for folder, names in (("", ["1.host:2,S", "2.host:2,"]), (".Lists.Python", ["3.host:2,"])):
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(root, folder, sub), exist_ok=True)
        for n, name in enumerate(names):
            with open(os.path.join(root, folder, "cur", name), "wb") as f:
                f.write(b"Subject: %d\n\nbody\n" % n)


def test_mailadmin_manual_examples_run_as_shown(tmp_path):
    """Every ``$`` example of docs/mailadmin.md, in order, in a shell whose PATH has the
    installed mailadmin, HOME and the working directory a fresh temporary directory (so the
    store is ``./data``, the default): each exits 0 and prints the lines shown (the progress
    bar, drawn only on a terminal, aside)."""
    make_maildir(tmp_path / "old-mail" / "Maildir")
    env = dict(shell_env(tmp_path, f"{VENV_BIN}:{FRESH_PATH}"), PASSWORD="correct horse")
    ran = 0
    for command, shown in examples(read("docs/mailadmin.md")):
        out = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (command, out.stderr)
        printed = [line.strip() for line in out.stdout.splitlines()]
        for line in shown:
            if "[#" in line:
                continue
            pattern = output_pattern(line)
            assert any(pattern.fullmatch(p) for p in printed), (command, line, out.stdout)
        ran += 1
    assert ran >= 3
    assert os.path.isdir(tmp_path / "data")


# -- docs/postfix.md -----------------------------------------------------------------------------

def test_postfix_store_side_config_loads_and_its_swaks_check_delivers(tmp_path):
    """docs/postfix.md's ``[delivery]``/``[store]`` block is a valid configuration, and its
    swaks LMTP check, against a server started with it, gets the documented
    ``250 2.0.0 <alice@example.com> delivered as ...`` (RFC 2033 4.2: one reply per
    recipient after DATA)."""
    text = read("docs/postfix.md")
    ini = re.search(r"^```ini\n(.*?)^```", text, re.M | re.S).group(1)
    conf = tmp_path / "imapserver.conf"
    conf.write_text(ini)
    cfg = configmod.load(str(conf))
    assert cfg["delivery"]["lmtp_port"] == 2424
    data_dir = str(tmp_path / "store")
    assert run("user", "add", "alice", data_dir=data_dir,
               extra=("--config", str(conf))).returncode == 0
    swaks = next(cmd for cmd, _ in examples(text) if "--protocol LMTP" in cmd)
    shown = next(out for cmd, out in examples(text) if cmd == swaks)
    reply = next(line for line in shown if "delivered as" in line)
    with ServerProcess(data_dir, "--lmtp-port", "auto", config=str(conf)) as server:
        port = server.ports["lmtp"]
        assert "--port 2424" in swaks
        out = subprocess.run(["bash", "-c", swaks.replace("--port 2424", f"--port {port}")],
                             capture_output=True, text=True, timeout=60,
                             env=shell_env(tmp_path, FRESH_PATH))
    assert out.returncode == 0, out.stdout + out.stderr
    head = reply.split(" delivered as ")[0]  # "<-  250 2.0.0 <alice@example.com>"
    wanted = r"\s+".join(map(re.escape, head.split())) + r" delivered as [0-9A-F]+"
    assert re.search(wanted, out.stdout), (wanted, out.stdout)


def test_postfix_lmtp_over_starttls_config_and_its_swaks_check(tmp_path):
    """docs/postfix.md's network LMTP block (the second ``ini`` one) is a valid configuration
    whose certificate the LMTP listener offers with STARTTLS (RFC 2033, RFC 3207), and its
    ``swaks --tls --tls-verify`` check, run as written (the host, port and CA file of this
    test put in), shows the lines the document shows."""
    from tests.tlscert import make_cert

    text = read("docs/postfix.md")
    ini = re.findall(r"^```ini\n(.*?)^```", text, re.M | re.S)[1]
    cert, key = make_cert(str(tmp_path))
    ini = (ini.replace("/etc/hbase-imap/tls.crt", cert).replace("/etc/hbase-imap/tls.key", key)
           .replace("host = 192.0.2.10", "host = 127.0.0.1"))
    conf = tmp_path / "imapserver.conf"
    conf.write_text(ini)
    cfg = configmod.load(str(conf))
    assert cfg["imap"]["tls_cert"] == cert and cfg["delivery"]["lmtp_port"] == 2424
    data_dir = str(tmp_path / "store")
    assert run("user", "add", "alice", data_dir=data_dir,
               extra=("--config", str(conf))).returncode == 0
    swaks, shown = next((cmd, out) for cmd, out in examples(text) if "--tls" in cmd)
    with ServerProcess(data_dir, "--lmtp-port", "auto", config=str(conf)) as server:
        port = server.ports["lmtp"]
        command = (swaks.replace("--server store.example.com", "--server 127.0.0.1")
                   .replace("--port 2424", f"--port {port}")
                   .replace("/etc/postfix/store-ca.pem", cert))
        assert command.count(cert) == 1 and f"--port {port}" in command
        out = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                             timeout=60, env=shell_env(tmp_path, FRESH_PATH))
    assert out.returncode == 0, out.stdout + out.stderr
    for line in shown:
        if line == "...":
            continue
        wanted = re.escape(line)
        wanted = re.sub(r"TLSv1\\.3:TLS_AES_256_GCM_SHA384:256", r"TLSv1\\.[23]:\\S+", wanted)
        wanted = re.sub(r"0C4B5E7A3D2F1890", "[0-9A-F]{16}", wanted)
        assert re.search(wanted, out.stdout), (wanted, out.stdout)


def test_postfix_log_search_is_journald_and_matches_the_line_shown():
    """Debian 12 without rsyslog has no /var/log/mail.log: the document searches the journal
    of Postfix's instance units, and its pattern (journalctl --grep, PCRE2; this one is
    plain enough to read the same in Python's re) finds the log line it shows."""
    text = read("docs/postfix.md")
    assert "/var/log/mail.log" not in text.replace("no `/var/log/mail.log`", "")
    command, shown = next((cmd, out) for cmd, out in examples(text)
                          if cmd.startswith("journalctl "))
    assert "-u 'postfix@*'" in command
    pattern = re.search(r"--grep '([^']+)'", command).group(1)
    assert re.search(pattern, shown[0]), (pattern, shown[0])
    help_text = subprocess.run(["journalctl", "--help"], capture_output=True, text=True,
                               timeout=30).stdout
    assert "--grep=PATTERN" in help_text


@pytest.mark.parametrize("doc", ["README.md", "docs/deploy.md", "docs/postfix.md"])
def test_imapserver_flags_in_docs_exist(doc):
    """Every ``imapserver --flag`` the documents use is one the server accepts."""
    helped = subprocess.run([sys.executable, "-m", "imapserver.main", "--help"],
                            capture_output=True, text=True, timeout=60).stdout
    for block in code_blocks(read(doc)):
        for m in re.finditer(r"imapserver((?: +\[?--[a-z-]+[^\]\n]*\]?)+)", block):
            for flag in re.findall(r"--[a-z][a-z-]*", m.group(1)):
                assert flag in helped, (doc, flag)
