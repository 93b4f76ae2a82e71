"""COMPRESS (RFC 4978).

    compress    = "COMPRESS" SP algorithm                            ; RFC 4978 5
    algorithm   = "DEFLATE"

Valid in the authenticated and selected states (RFC 4978 3).  The tagged OK goes out
uncompressed; everything after it, both ways, is raw DEFLATE (imap/compress.py, the
connection's transport wrapper).  A second COMPRESS is ``NO [COMPRESSIONACTIVE]``; an unknown
mechanism is BAD.  STARTTLS after COMPRESS is refused (auth.py): TLS goes below compression,
never above it (RFC 4978 4).
"""

from __future__ import annotations

from ..context import AUTH, SELECTED, Bad, No, command


@command("COMPRESS", AUTH, SELECTED)
def compress(ctx):
    ctx.expect_args(1)
    mechanism = str(ctx.args[0]).upper()
    if mechanism != "DEFLATE":
        raise Bad(f"Unknown compression mechanism {mechanism}")
    if ctx.conn.deflate is not None:
        raise No("DEFLATE active via COMPRESS", "COMPRESSIONACTIVE")
    ctx.finish(b"OK", "DEFLATE active")
    ctx.conn.start_compression()
