"""One explained choice: ``{"value", "source", "rule"}``, the shape every layer records its
decisions in (the cluster layer as :class:`gpuscale.plan.Decision` records on its
:class:`~gpuscale.cluster.ClusterSpec`, workloads with ``Context.choose``) and
:mod:`gpuscale.records.explained` lays out.

Sources: ``default`` / ``user-yaml`` / ``profile`` / ``env`` / ``dask.config`` / ``flag`` /
``keyword`` (the settings layer the value came from), ``family`` (the backend family's
default), ``rule`` (chosen by a rule: ``rule`` says which, with its numbers), ``cluster``
(whatever a running cluster has).
"""

from __future__ import annotations

from typing import Any


def choice(value: Any, source: str, rule: str | None = None, **extra: Any) -> dict[str, Any]:
    """A recorded choice; ``extra`` keys (e.g. the raw ``setting``) follow the three."""
    return {"value": value, "source": source, "rule": rule, **extra}
