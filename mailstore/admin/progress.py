"""Progress of long commands on standard error.

On a terminal: one line redrawn in place, with a bar (when the total is known), the count, the
rate and the time left.  Otherwise (a log file, a pipe, cron): a plain line every ``interval``
seconds and one at the end, so that a log shows the command was alive without filling up.
The estimate comes from bytes when they are known (an mbox file: bytes read out of its size),
which stays right when message sizes vary, and from message counts otherwise.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

BAR_WIDTH = 24


def duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class Progress:
    """Report ``count`` of ``noun`` done, and ``done_bytes`` of ``total_bytes`` if known.

    ``tty`` defaults to whether ``stream`` is a terminal; ``enabled=False`` silences it.
    """

    def __init__(self, label: str, total_bytes: int | None = None,
                 total_count: int | None = None, noun: str = "msgs",
                 stream: TextIO | None = None, tty: bool | None = None,
                 interval: float = 10.0, enabled: bool = True,
                 clock: Callable[[], float] = time.monotonic):
        self.label = label
        self.total_bytes = total_bytes or None
        self.total_count = total_count or None
        self.noun = noun
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval = 0.1 if self.tty else interval
        self.enabled = enabled
        self.clock = clock
        self.start = clock()
        self.last = self.start
        self.count = 0
        self.done_bytes = 0
        self._width = 0

    def update(self, count: int, done_bytes: int | None = None) -> None:
        self.count = count
        if done_bytes is not None:
            self.done_bytes = done_bytes
        now = self.clock()
        if self.enabled and now - self.last >= self.interval:
            self.last = now
            self._show(self.line(now))

    def line(self, now: float | None = None, final: bool = False) -> str:
        now = self.clock() if now is None else now
        elapsed = max(now - self.start, 1e-9)
        rate = self.count / elapsed
        parts = [self.label]
        fraction = None
        if self.total_bytes:
            fraction = min(self.done_bytes / self.total_bytes, 1.0)
        elif self.total_count:
            fraction = min(self.count / self.total_count, 1.0)
        if fraction is not None and self.tty:
            filled = int(fraction * BAR_WIDTH)
            parts.append("[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]")
        if fraction is not None:
            parts.append(f"{fraction * 100:3.0f}%")
        parts.append(f"{self.count:,} {self.noun}")
        parts.append(f"{rate:,.0f} {self.noun}/s")
        if self.done_bytes:
            parts.append(f"{human_bytes(self.done_bytes / elapsed)}/s")
        if fraction and fraction < 1 and not final:
            left = elapsed * (1 - fraction) / fraction
            parts.append(f"ETA {duration(left)}")
        return "  ".join(parts)

    def _show(self, text: str) -> None:
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Leave the final figures on their own line."""
        if not self.enabled:
            return
        text = self.line(final=True) + f"  in {duration(self.clock() - self.start)}"
        if self.tty:
            self._show(text)
            self.stream.write("\n")
            self.stream.flush()
        else:
            self._show(text)
