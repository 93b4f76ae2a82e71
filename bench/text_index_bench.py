"""What the text index costs at append (issue 14, docs/decisions/0026), store level.

    .venv/bin/python bench/text_index_bench.py [--appends 2000] [--rounds 5] [--size 10240]
                                               [--synchronous FULL] [--backend embedded|thrift]
                                               [--modes no,yes,background,lazy]

Stores side by side, with ``text_index`` no, yes, background and lazy (``--modes``), each
appending the same plain-text messages (bench/imap_servers.py's corpus: distinct words, a
needle per message) in alternating rounds, so that a change in the machine's speed weighs on
all alike.  The background store's indexer thread runs during its appends, as in the server
(its CPU and write lock are taken from them), and after each round until it has caught up:
that catching up is reported too, so the work is moved, not hidden.
Each append is acknowledged as the server does (synced).  Prints a Markdown table for
bench/RESULTS.md, and the time ``mailadmin index rebuild`` takes per message.  Figures, never
assertions.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from imap_servers import message  # noqa: E402

from mailstore.backends.embedded import EmbeddedBackend  # noqa: E402
from mailstore.indexer import BackgroundIndexer  # noqa: E402
from mailstore.store import MailStore  # noqa: E402
from mailstore.textindex import LAZY_BATCH  # noqa: E402


def open_backend(kind: str, path: str, synchronous: str):
    if kind == "embedded":
        return EmbeddedBackend(path, synchronous=synchronous), None
    from mailstore.backends.hbase import HBaseBackend
    from mailstore.testing.thrift_gateway import ThriftGateway
    gateway = ThriftGateway(EmbeddedBackend(path, synchronous=synchronous))
    gateway.start()
    return HBaseBackend(host="127.0.0.1", port=gateway.port), gateway


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--appends", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", type=int, default=10 * 1024)
    ap.add_argument("--synchronous", default="FULL")
    ap.add_argument("--backend", default="embedded", choices=["embedded", "thrift"])
    ap.add_argument("--modes", default="no,yes,background,lazy",
                    help="text_index modes to compare, comma-separated")
    args = ap.parse_args()
    mails = [message(i, args.size) for i in range(args.appends)]
    modes = tuple(args.modes.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        stores, gateways = {}, []
        for mode in modes:
            backend, gateway = open_backend(args.backend, os.path.join(tmp, mode),
                                            args.synchronous)
            if gateway:
                gateways.append(gateway)
            stores[mode] = MailStore(backend, text_index=mode)
            stores[mode].create_user("u", "pw", default_folders=False)
        spent = dict.fromkeys(modes, 0.0)
        drained = 0.0
        done = 0
        for r in range(args.rounds):
            batch = mails[done:args.appends * (r + 1) // args.rounds]
            done += len(batch)
            for mode in (modes if r % 2 == 0 else modes[::-1]):
                store = stores[mode]
                indexer = None
                if mode == "background":
                    # The server's indexer thread, running while the appends run (it takes
                    # its CPU and its write lock from them), then until it has caught up.
                    indexer = BackgroundIndexer(store)
                    indexer.start()
                start = time.perf_counter()
                for data in batch:
                    store.append("u", "INBOX", data)
                spent[mode] += time.perf_counter() - start
                if indexer is not None:
                    start = time.perf_counter()
                    indexer.stop()
                    indexer.run_until_empty()
                    drained += time.perf_counter() - start
        rates = {mode: args.appends / spent[mode] for mode in modes}
        if "background" in modes:
            bg = stores["background"]
            box = bg.mailbox("u", "INBOX")
            assert bg.text.check(box.id, bg.uids(box)) == ([], []), "not all indexed"
        catch_up = None
        if "lazy" in modes:
            # The lazy store's first SEARCH: it indexes LAZY_BATCH messages in one transaction.
            lazy = stores["lazy"]
            box = lazy.mailbox("u", "INBOX")
            start = time.perf_counter()
            lazy.text_candidates(box, {"k": (("body",), "needle1", True)}, lazy.uids(box))
            catch_up = time.perf_counter() - start
        caught = min(LAZY_BATCH, args.appends)
        # Rebuild of the unindexed store's INBOX: what `mailadmin index rebuild` does.
        plain = stores["no"]
        plain.text = MailStore(plain.backend, create_tables=False).text
        box = plain.mailbox("u", "INBOX")
        start = time.perf_counter()
        plain.text.index_messages(box.id, plain.uids(box), sync=plain.backend.sync)
        rebuild = time.perf_counter() - start
        for store in stores.values():
            store.close()
        for gateway in gateways:
            gateway.stop()
    print(f"\n{args.appends} appends of {args.size:,}-octet messages, {args.backend}, "
          f"synchronous={args.synchronous}, {args.rounds} alternating rounds, "
          f"load average {os.getloadavg()[0]:.1f}\n")
    print("| measure | figure | note |\n|---|---|---|")
    off = rates["no"]
    print(f"| append, text index off | {off:,.0f}/s | {1000 / off:.2f} ms each |")
    for mode, label in (("yes", "on (at append)"), ("background", "background"),
                        ("lazy", "lazy")):
        if mode in rates:
            rate = rates[mode]
            print(f"| append, text index {label} | {rate:,.0f}/s | {1000 / rate:.2f} ms each, "
                  f"{rate / off:.2f} x off |")
    if "background" in modes:
        whole = args.appends / (spent["background"] + drained)
        print(f"| background: appends, then until all indexed | {whole:,.0f}/s | "
              f"{1000 * drained / args.appends:.2f} ms a message of catching up after the "
              f"appends; {whole / off:.2f} x off |")
    if catch_up is not None:
        print(f"| lazy: first SEARCH indexing {caught} | {1000 * catch_up:,.0f} ms | "
              f"{1000 * catch_up / caught:.2f} ms per message, one transaction |")
    print(f"| index rebuild | {args.appends / rebuild:,.0f} msgs/s | "
          f"{1000 * rebuild / args.appends:.2f} ms each |")


if __name__ == "__main__":
    main()
