# Everything a fresh Debian machine with Python 3 needs is installed from here: the venv, the
# Python packages and the Debian packages the tests use.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DATA    ?= data
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test lint bench schema clean venv

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	@# Debian's python3 ships venv without ensurepip; install python3-venv only when missing.
	@$(PY) -m venv $(VENV) 2>/dev/null || { rm -rf $(VENV); \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq python3-venv >/dev/null && \
	  $(PY) -m venv $(VENV); }
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/imapserver --data-dir $(DATA)

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check mailstore imapserver tests bench

schema: $(STAMP)
	$(BIN)/mailadmin init-schema --print > hbase-schema/schema.hbase

bench: $(STAMP)
	$(BIN)/python bench/store_bench.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
