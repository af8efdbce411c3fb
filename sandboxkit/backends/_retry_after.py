"""What the HTTP backends share in reading a rate limit's wait: a ``Retry-After`` value."""

from __future__ import annotations

import email.utils
from datetime import datetime, timezone


def retry_after_seconds(value: str) -> float | None:
    """The seconds a ``Retry-After`` header asks for: a number, or an HTTP date from now
    (never negative); None for anything else."""
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())
