"""Fault injection shared by the emulators: latency, error answers, dropped connections,
sandboxes that die mid-exec, a cap on live sandboxes (as on a provider's free tier) and one on
execs in flight (as a provider's rate limit)."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field


@dataclass
class Faults:
    latency_ms: float = 0.0
    """Added to every API call."""
    create_latency_ms: float = 0.0
    """Added to sandbox creation, on top of ``latency_ms``."""
    error_rate: float = 0.0
    """Share of calls answered with a transient error (half rate-limited, half server error)."""
    drop_rate: float = 0.0
    """Share of calls whose connection is cut without an answer."""
    die_rate: float = 0.0
    """Share of execs during which the sandbox dies."""
    max_sandboxes: int | None = None
    """Live sandboxes allowed at once; creation beyond it is refused as rate limiting."""
    max_concurrent_execs: int | None = None
    """Execs allowed in flight at once; an exec beyond it is refused as rate limiting."""
    retry_after: float | None = None
    """Seconds that rate-limit answers ask the client to wait (Daytona: a ``Retry-After``
    header; Aviato: a ``RetryInfo`` detail); None: they do not say."""
    seed: int | None = None
    operations: frozenset[str] | None = None
    """Operations (``create``, ``exec``, ...) that errors and drops hit; None: all of them."""
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("error_rate", "drop_rate", "die_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        self.rng = random.Random(self.seed)

    async def delay(self, *, create: bool = False) -> None:
        total = self.latency_ms + (self.create_latency_ms if create else 0.0)
        if total > 0:
            await asyncio.sleep(total / 1000)

    def transient_error(self) -> str | None:
        """``"rate_limited"``, ``"server_error"`` or None for this call."""
        if self.error_rate and self.rng.random() < self.error_rate:
            return "rate_limited" if self.rng.random() < 0.5 else "server_error"
        return None

    def applies_to(self, operation: str) -> bool:
        return self.operations is None or operation in self.operations

    def drop(self) -> bool:
        return bool(self.drop_rate) and self.rng.random() < self.drop_rate

    def dies(self) -> bool:
        return bool(self.die_rate) and self.rng.random() < self.die_rate

    def at_capacity(self, live: int) -> bool:
        return self.max_sandboxes is not None and live >= self.max_sandboxes

    def too_many_execs(self, in_flight: int) -> bool:
        """Whether an exec that finds ``in_flight`` others running is refused."""
        return self.max_concurrent_execs is not None and in_flight >= self.max_concurrent_execs
