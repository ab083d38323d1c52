"""Tuned Dask routes: each returns its lazy result with the decision of how it runs."""

from __future__ import annotations

from typing import Any, NamedTuple

from ..decision import Decision


class Routed(NamedTuple):
    """A route's lazy result and its decision: how it runs (``value``), why (``rule``) and the
    numbers it used."""

    result: Any
    decision: Decision


def routed(result: Any, how: str, why: str, source: str = "rule", **numbers: Any) -> Routed:
    return Routed(result, Decision(how, source, why, None, numbers))
