"""What the remote backends share in shaping an exec's output: cut as the local backend cuts it."""

from __future__ import annotations


def cap_output(data: bytes, limit: int) -> tuple[bytes, bool]:
    """``data`` cut to ``limit`` bytes, and whether it was cut (``ExecResult.truncated``)."""
    return (data[:limit], True) if len(data) > limit else (data, False)
