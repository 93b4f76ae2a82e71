"""Date parts for the date and currentdate tests (RFC 5260 4-5)."""

from __future__ import annotations

import datetime as dt
import email.utils
import re

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def parse_date(value: str) -> tuple[float, int] | None:
    """(UTC timestamp, zone in minutes east) of an RFC 2822 date-time, or None."""
    try:
        parsed = email.utils.parsedate_tz(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed is None:
        return None
    offset = parsed[9] or 0
    try:
        return email.utils.mktime_tz(parsed), offset // 60
    except (OverflowError, ValueError):
        return None


def parse_zone(text: str) -> int | None:
    """``+hhmm`` / ``-hhmm`` (RFC 5260 4.1) in minutes east of UTC."""
    found = re.fullmatch(r"([+-])([0-9]{2})([0-9]{2})", text.strip())
    if not found:
        return None
    minutes = int(found.group(2)) * 60 + int(found.group(3))
    return -minutes if found.group(1) == "-" else minutes


def _zone_text(minutes: int, colon: bool = False) -> str:
    sign = "-" if minutes < 0 else "+"
    hours, mins = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}{':' if colon else ''}{mins:02d}"


def part(timestamp: float, zone: int, name: str) -> str | None:
    """The RFC 5260 4.3 ``name`` date-part of ``timestamp`` seen in ``zone`` (minutes east);
    None for an unknown part name (the test then matches nothing)."""
    local = dt.datetime.fromtimestamp(timestamp, dt.timezone(dt.timedelta(minutes=zone)))
    name = name.lower()
    if name == "year":
        return f"{local.year:04d}"
    if name == "month":
        return f"{local.month:02d}"
    if name == "day":
        return f"{local.day:02d}"
    if name == "date":
        return f"{local.year:04d}-{local.month:02d}-{local.day:02d}"
    if name == "julian":  # Modified Julian Day: days since 1858-11-17
        return str((local.date() - dt.date(1858, 11, 17)).days)
    if name == "hour":
        return f"{local.hour:02d}"
    if name == "minute":
        return f"{local.minute:02d}"
    if name == "second":
        return f"{local.second:02d}"
    if name == "time":
        return f"{local.hour:02d}:{local.minute:02d}:{local.second:02d}"
    if name == "iso8601":
        return (f"{local.year:04d}-{local.month:02d}-{local.day:02d}T{local.hour:02d}:"
                f"{local.minute:02d}:{local.second:02d}"
                f"{'Z' if zone == 0 else _zone_text(zone, colon=True)}")
    if name == "std11":
        return (f"{_DAYS[local.weekday()]}, {local.day:02d} {_MONTHS[local.month - 1]} "
                f"{local.year:04d} {local.hour:02d}:{local.minute:02d}:{local.second:02d} "
                f"{_zone_text(zone)}")
    if name == "zone":
        return _zone_text(zone)
    if name == "weekday":  # 0 is Sunday
        return str((local.weekday() + 1) % 7)
    return None
