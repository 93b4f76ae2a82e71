"""conf/ and hbase-schema/ agree with the code that they document."""

from __future__ import annotations

import configparser
import os

import pytest

from mailstore import config
from mailstore.schema import TABLES, ddl

ROOT = os.path.join(os.path.dirname(__file__), "..")


def test_every_setting_is_in_the_commented_config_file_with_its_default():
    path = os.path.join(ROOT, "conf", "imapserver.conf")
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path)
    documented = {(s, k) for s in parser.sections() for k in parser[s]}
    declared = {(s, k) for s, keys in config.SCHEMA.items() for k in keys}
    assert documented == declared
    with open(path) as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if "=" in line and not line.startswith("#"):
            assert lines[i - 1].startswith("#") or "=" in lines[i - 1], \
                f"setting without a comment: {line}"
    loaded = config.load(path)
    for section, keys in config.SCHEMA.items():
        for key, spec in keys.items():
            assert loaded[section][key] == spec.default, (section, key)


def test_bad_settings_are_refused_by_name(tmp_path):
    conf = tmp_path / "c.conf"
    for text, named in (("[store]\nbackend = mysql\n", "store.backend"),
                        ("[hbase]\nport = ninety\n", "hbase.port"),
                        ("[nope]\nx = 1\n", "[nope]"),
                        ("[store]\nsynchronous = sometimes\n", "store.synchronous")):
        conf.write_text(text)
        with pytest.raises(config.ConfigError, match=named.replace("[", r"\[")):
            config.load(str(conf))
    with pytest.raises(config.ConfigError, match="not found"):
        config.load(str(tmp_path / "missing.conf"))


def test_overrides_beat_the_file(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text("[store]\ndata_dir = /from/file\n")
    cfg = config.load(str(conf), {"store": {"data_dir": "/from/flag"}})
    assert cfg.backend_options() == ("embedded", {"data_dir": "/from/flag",
                                                  "synchronous": "FULL",
                                                  "allow_shared_permissions": False})


def test_hbase_schema_file_is_generated_from_the_code():
    with open(os.path.join(ROOT, "hbase-schema", "schema.hbase")) as f:
        assert f.read() == ddl() + "\n"
    for table in TABLES:
        assert table.purpose and table.row_key and table.access and table.families
