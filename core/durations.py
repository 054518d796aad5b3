"""Durations as people type them on a command line: 90d, 12h, 30m, 45s, 2w."""

import re
from datetime import timedelta

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_duration(text: str) -> timedelta:
    """'90d' → 90 days. A bare number is refused: the unit must be said."""
    match = DURATION.match(text or "")
    if not match:
        raise ValueError(f"{text!r} is not a duration like 90d, 12h, 30m, 45s or 2w")
    return timedelta(seconds=float(match.group(1)) * UNITS[match.group(2)])
