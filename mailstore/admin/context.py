"""What a mailadmin command runs with: its arguments, the configuration and (opened on first
use) the mail store."""

from __future__ import annotations

import argparse

from .. import config as configmod
from ..backends import open_backend
from ..backends.base import Backend
from ..store import MailStore


class Context:
    def __init__(self, args: argparse.Namespace, cfg: configmod.Config):
        self.args = args
        self.cfg = cfg
        self._store: MailStore | None = None

    @property
    def store(self) -> MailStore:
        """The mail store of the configured backend (creating missing tables)."""
        if self._store is None:
            name, options = self.cfg.backend_options()
            self._store = MailStore(open_backend(name, options), **self.cfg.store_options())
        return self._store

    def raw_backend(self) -> Backend:
        """The backend alone, for the commands that are raw by design (init-schema, hbase).
        The caller closes it."""
        name, options = self.cfg.backend_options()
        return open_backend(name, options)

    def user(self, name: str) -> str:
        """The canonical name of an existing user; NotFound (``no such user: bob``) if none."""
        return self.store.user(name).name

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def load_config(args: argparse.Namespace) -> configmod.Config:
    overrides = {"store": {"data_dir": getattr(args, "data_dir", None),
                           "backend": getattr(args, "backend", None)},
                 "hbase": {"host": getattr(args, "hbase_host", None),
                           "port": getattr(args, "hbase_port", None),
                           "api": getattr(args, "hbase_api", None),
                           "table_prefix": getattr(args, "hbase_table_prefix", None)}}
    return configmod.load(getattr(args, "config", None), overrides)
