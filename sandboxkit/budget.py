"""How many calls a pool lets in flight: an adaptive limit that backs off when rate limited.

A provider that answers 429 (``RateLimitedError``) is asking for fewer calls at once. Retrying
the refused calls at the same concurrency, however jittered, keeps hitting the limit; so the
budget follows TCP's congestion control (additive increase, multiplicative decrease): the
limit halves on a rate-limit signal and grows by one after a round of calls that got through,
staying between 1 and the pool's ``max_concurrency``. Only calls made while the limit was
reached count towards growth: a limit the pool does not use says nothing about whether the
provider would take more (the tail of a batch would otherwise raise it unchecked).

One wave of calls sent at a limit that was too high comes back as a burst of 429s; it must
halve the limit once, not once per call. A call therefore notes the budget's ``epoch`` when it
starts, and its 429 halves the limit only if no halving happened since: the calls that started
before were sent at the old limit, which has been answered already.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ConcurrencyBudget:
    """The limit on calls in flight, between 1 and ``maximum`` (fixed if not ``adaptive``).

    Its state is plain data, so that ranks sharing one provider account
    (:class:`~sandboxkit.coordination.SharedBudget`) run these same rules on a state they keep
    in a file.
    """

    maximum: int
    _: dataclasses.KW_ONLY
    adaptive: bool = True
    limit: int = 0
    """Calls allowed in flight now (0 at construction: ``maximum``)."""
    signals: int = 0
    """Rate-limit signals seen, those of a wave already answered included."""
    epoch: int = 0
    """Changes at every halving; a call keeps the value it saw when it started."""
    successes: int = 0
    """Calls made at the limit that got through since the limit last changed."""

    def __post_init__(self) -> None:
        if self.maximum < 1:
            raise ValueError(f"the concurrency maximum must be >= 1, got {self.maximum}")
        self.limit = min(self.limit or self.maximum, self.maximum)

    def __repr__(self) -> str:
        return f"<ConcurrencyBudget {self.limit}/{self.maximum}, {self.signals} rate limits>"

    def rate_limited(self, started_in: int) -> bool:
        """A call that started in epoch ``started_in`` was refused for the provider's rate.

        Halves the limit (never below 1) unless a halving came after that call started;
        returns whether it halved.
        """
        self.signals += 1
        if not self.adaptive or started_in != self.epoch:
            return False
        self.limit = max(1, self.limit // 2)
        self.epoch += 1
        self.successes = 0
        return True

    def succeeded(self, *, in_flight: int) -> None:
        """A call got through, with ``in_flight`` calls (itself included) in flight. After
        ``limit`` of them made at the limit since the last change (about one round of calls),
        one more call may be in flight, up to ``maximum``."""
        if self.limit >= self.maximum or in_flight < self.limit:
            return
        self.successes += 1
        if self.successes >= self.limit:
            self.limit += 1
            self.successes = 0
