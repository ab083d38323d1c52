"""How many timed repeats a run takes: a fixed number, or ``auto`` (pyperf's idea).

After each timed repeat the runner asks :meth:`Policy.stop` for the reason to stop, or None.
Auto stops once the median's relative error (from order statistics) is at most
``target-error``, or at ``max-repeats`` or ``max-time`` (:class:`gpuscale.config.AutoRepeatSettings`).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

from ..config import AutoRepeatSettings

COVERAGE = 0.6827
"""The interval's coverage: that of +-1 standard error of a normal estimate."""


def median_interval(times: list[float]) -> tuple[float, float] | None:
    """The narrowest distribution-free interval ``(x_(j), x_(n+1-j))`` holding the median with
    at least :data:`COVERAGE`; None with fewer than 3 repeats."""
    n = len(times)
    xs = sorted(times)
    best = None
    for j in range(1, n // 2 + 1):  # 1-based order statistics x_(j) .. x_(n+1-j)
        covered = sum(math.comb(n, i) for i in range(j, n - j + 1)) / 2**n
        if covered < COVERAGE:
            break
        best = (xs[j - 1], xs[n - j])
    return best


def relative_error(times: list[float]) -> float | None:
    """Half-width of :func:`median_interval` over the median; None with fewer than 3 repeats."""
    ci = median_interval(times)
    med = statistics.median(times) if times else 0
    if ci is None or med <= 0:
        return None
    return (ci[1] - ci[0]) / 2 / med


@dataclasses.dataclass(frozen=True)
class Policy:
    """``repeat``: a whole number (fixed) or ``"auto"`` with its settings."""

    repeat: int | str
    target_error: float
    min_repeats: int
    max_repeats: int
    max_time_s: float

    @property
    def auto(self) -> bool:
        return self.repeat == "auto"

    @property
    def most(self) -> int:
        """The most timed repeats this policy can take (the progress bar's length)."""
        return self.max_repeats if self.auto else int(self.repeat)

    def stop(self, times: list[float], elapsed_s: float) -> str | None:
        """Why to stop now (``fixed``, ``target``, ``max-repeats``, ``max-time``), or None to
        take another repeat; ``elapsed_s``: seconds since the first timed repeat started."""
        n = len(times)
        if not self.auto:
            return "fixed" if n >= int(self.repeat) else None
        if n == 0:
            return None
        err = relative_error(times)
        if n >= self.min_repeats and err is not None and err <= self.target_error:
            return "target"
        if n >= self.max_repeats:
            return "max-repeats"
        if elapsed_s >= self.max_time_s or elapsed_s + statistics.median(times) > self.max_time_s:
            return "max-time"
        return None

    def describe(self, times: list[float], stopped: str) -> dict[str, Any]:
        """The record's ``repeats``: what was asked, how many taken, why they stopped."""
        err = relative_error(times)
        d: dict[str, Any] = {
            "mode": "auto" if self.auto else "fixed",
            "taken": len(times),
            "stopped": stopped,
            "relative_error": err,
        }
        if not self.auto:
            d["why"] = f"{self.repeat} repeat(s) asked"
            return d
        shown = "-" if err is None else f"{err * 100:.2f}%"
        target = f"target {self.target_error * 100:g}%"
        d.update({k: v for k, v in dataclasses.asdict(self).items() if k != "repeat"})
        d["why"] = {
            "target": f"relative error of the median {shown} <= {target}",
            "max-repeats": f"max-repeats {self.max_repeats} reached; relative error {shown} > {target}",
            "max-time": f"max-time {self.max_time_s:g} s reached (or the next repeat would pass it); "
            f"relative error {shown} > {target}",
        }[stopped]
        return d


def policy(repeat: int | str, settings=None) -> Policy:
    """The policy of ``repeat`` (a whole number or ``"auto"``) with ``settings`` (None: defaults)."""
    settings = settings or AutoRepeatSettings()
    return Policy(
        "auto" if repeat == "auto" else int(repeat),
        target_error=settings.target_error,
        min_repeats=settings.min_repeats,
        max_repeats=settings.max_repeats,
        max_time_s=settings.max_time,
    )
