# Everything a fresh Debian machine with Python 3 needs is installed from here: the venv, the
# Python packages and the Debian packages the tests use.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DATA    ?= data
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Debian packages the tests and the bench run: swaks (an SMTP/LMTP client), Dovecot's LMTP
# server (the bench's yardstick) and its IMAP server (the reference the FETCH rendering is
# compared with, tests/test_imap_render.py), and the real IMAP clients the server is tried with
# (isync's mbsync, fetchmail, offlineimap3: tests/test_imap_clients.py,
# tests/test_real_clients_tls.py), and systemd for `systemd-analyze security/verify` of
# conf/imapserver.service (with libseccomp2, which tests/sandbox.py runs the server under:
# tests/test_deploy_unit.py), and Pigeonhole (dovecot-sieve's sieve-test, dovecot-managesieved)
# and sieve-connect, the outside judges of Sieve and ManageSieve.  Installed by the venv step,
# only those missing.
DEBIAN_TEST_PKGS := swaks dovecot-core dovecot-lmtpd dovecot-imapd isync fetchmail offlineimap3 \
                    systemd libseccomp2 dovecot-sieve dovecot-managesieved sieve-connect

.PHONY: run test check-long lint bench schema clean venv debian-test-pkgs

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	@# Debian's python3 ships venv without ensurepip; install python3-venv only when missing.
	@# A working venv is kept: re-running venv with another python3 on PATH (pyenv's, say)
	@# would point it at that interpreter's library while its binary stays the old one.
	@$(BIN)/python -c '' 2>/dev/null || $(PY) -m venv $(VENV) 2>/dev/null || { rm -rf $(VENV); \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq python3-venv >/dev/null && \
	  $(PY) -m venv $(VENV); }
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]' --config-settings editable_mode=compat
	@$(MAKE) --no-print-directory debian-test-pkgs
	@touch $(STAMP)

debian-test-pkgs:
	@missing=$$(for p in $(DEBIAN_TEST_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  $(SUDO) apt-get update -qq && \
	  PATH="$$PATH:/usr/sbin:/sbin" DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

run: $(STAMP)
	$(BIN)/imapserver --data-dir $(DATA)

test: $(STAMP) debian-test-pkgs
	$(BIN)/python -m pytest -q -m "not slow"

# Every test, the slow ones too (loops of kills and faults, the long differential runs).
check-long: $(STAMP) debian-test-pkgs
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check mailstore imapserver tests bench

schema: $(STAMP)
	$(BIN)/mailadmin init-schema --print > hbase-schema/schema.hbase

bench: $(STAMP) debian-test-pkgs
	@# Every bench/*_bench.py present, with its defaults (bench/RESULTS.md has each command).
	@set -e; for script in bench/*_bench.py; do echo "== $$script"; $(BIN)/python $$script; done

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
