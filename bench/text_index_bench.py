"""What the text index costs at append (issue 14, docs/decisions/0026), store level.

    .venv/bin/python bench/text_index_bench.py [--appends 2000] [--rounds 5] [--size 10240]
                                               [--synchronous FULL] [--backend embedded|thrift]

Three stores side by side, with ``text_index`` yes, lazy and no, each appending the same
plain-text messages (bench/imap_servers.py's corpus: distinct words, a needle per
message) in alternating rounds, so that a change in the machine's speed weighs on both alike.
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
from mailstore.store import MailStore  # noqa: E402


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
    args = ap.parse_args()
    mails = [message(i, args.size) for i in range(args.appends)]
    with tempfile.TemporaryDirectory() as tmp:
        stores, gateways = {}, []
        modes = ("yes", "lazy", "no")
        for mode in modes:
            backend, gateway = open_backend(args.backend, os.path.join(tmp, mode),
                                            args.synchronous)
            if gateway:
                gateways.append(gateway)
            stores[mode] = MailStore(backend, text_index=mode)
            stores[mode].create_user("u", "pw", default_folders=False)
        spent = dict.fromkeys(modes, 0.0)
        done = 0
        for r in range(args.rounds):
            batch = mails[done:args.appends * (r + 1) // args.rounds]
            done += len(batch)
            for mode in (modes if r % 2 == 0 else modes[::-1]):
                start = time.perf_counter()
                for data in batch:
                    stores[mode].append("u", "INBOX", data)
                spent[mode] += time.perf_counter() - start
        with_rate, without_rate = args.appends / spent["yes"], args.appends / spent["no"]
        lazy_rate = args.appends / spent["lazy"]
        # The lazy store's first SEARCH: it indexes LAZY_BATCH messages in one transaction.
        from mailstore.textindex import LAZY_BATCH
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
          f"synchronous={args.synchronous}, {args.rounds} alternating rounds\n")
    print("| measure | figure | note |\n|---|---|---|")
    print(f"| append, text index off | {without_rate:,.0f}/s | "
          f"{1000 / without_rate:.2f} ms each |")
    print(f"| append, text index on | {with_rate:,.0f}/s | {1000 / with_rate:.2f} ms each, "
          f"{with_rate / without_rate:.2f} x off |")
    print(f"| append, text index lazy | {lazy_rate:,.0f}/s | {1000 / lazy_rate:.2f} ms each, "
          f"{lazy_rate / without_rate:.2f} x off |")
    print(f"| lazy: first SEARCH indexing {caught} | {1000 * catch_up:,.0f} ms | "
          f"{1000 * catch_up / caught:.2f} ms per message, one transaction |")
    print(f"| index rebuild | {args.appends / rebuild:,.0f} msgs/s | "
          f"{1000 * rebuild / args.appends:.2f} ms each |")


if __name__ == "__main__":
    main()
