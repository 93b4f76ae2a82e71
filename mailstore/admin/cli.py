"""mailadmin: provisioning, migration, quotas and repair from scripts, through the mail store's
public API (``hbase scan`` alone reads tables raw, by design).  The manual is docs/mailadmin.md.

Exit codes: 0 ok, 1 problems found (fsck) or the operation failed, 2 bad usage.  Errors name the
thing that was wrong (``no such user: bob``).  Tables by default, ``--json`` for scripts.

This module only parses the command line and dispatches; each command group lives in its own
module (``users_cmd``, ``mailbox_cmd``, ``transfer``, ``queue_cmd``, ``metadata_cmd``,
``sieve_cmd``, ``store_cmd``, ``index_cmd``).
"""

from __future__ import annotations

import argparse
import sys

from .. import config as configmod
from ..errors import MailStoreError
from . import (
    acl_cmd,
    index_cmd,
    mailbox_cmd,
    metadata_cmd,
    queue_cmd,
    sieve_cmd,
    store_cmd,
    transfer,
    users_cmd,
)
from .context import Context, load_config
from .output import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, Failure, UsageError

__all__ = ["EXIT_OK", "EXIT_PROBLEMS", "EXIT_USAGE", "build_parser", "main"]


def _common(suppress: bool) -> argparse.ArgumentParser:
    """The options every command takes.  Sub-commands get them with SUPPRESS defaults, so an
    option given before the command (``mailadmin --json user list``) is not reset by the
    sub-command's own default."""
    common = argparse.ArgumentParser(add_help=False)
    default = {"default": argparse.SUPPRESS} if suppress else {}
    common.add_argument("--config", metavar="FILE",
                        help="configuration file (default: built-in defaults)", **default)
    common.add_argument("--data-dir", metavar="DIR", help="directory of the embedded store",
                        **default)
    common.add_argument("--backend", choices=["embedded", "hbase"], **default)
    common.add_argument("--hbase-host", **default)
    common.add_argument("--hbase-port", type=int, **default)
    common.add_argument("--hbase-api", choices=["thrift1", "thrift2"], **default)
    common.add_argument("--hbase-table-prefix", metavar="PREFIX", **default)
    if suppress:
        common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                            help="machine-readable output")
    else:
        common.add_argument("--json", action="store_true", help="machine-readable output")
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mailadmin", parents=[_common(False)],
                                     description="Administer the HBase mail store.",
                                     epilog="Exit status: 0 ok, 1 problems found or the "
                                     "operation failed, 2 bad usage.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = _common(True)
    # In the order --help lists them: what administrators do most first, raw access last.
    users_cmd.register(sub, common)
    mailbox_cmd.register(sub, common)
    transfer.register(sub, common)
    queue_cmd.register(sub, common)
    sieve_cmd.register(sub, common)
    metadata_cmd.register(sub, common)
    store_cmd.register(sub, common)
    acl_cmd.register(sub, common)
    index_cmd.register(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    except UsageError as exc:  # raised by an option's type, e.g. quota set --storage 12X
        print(f"mailadmin: {exc}", file=sys.stderr)
        return EXIT_USAGE
    ctx = None
    try:
        ctx = Context(args, load_config(args))
        return args.func(ctx)
    except (configmod.ConfigError, UsageError) as exc:
        print(f"mailadmin: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (MailStoreError, Failure) as exc:
        print(f"mailadmin: {exc}", file=sys.stderr)
        return EXIT_PROBLEMS
    except KeyboardInterrupt:
        print("mailadmin: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `mailadmin user list | head`
        return EXIT_OK
    finally:
        if ctx is not None:
            ctx.close()


if __name__ == "__main__":
    sys.exit(main())
