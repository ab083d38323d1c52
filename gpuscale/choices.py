"""One explained choice: ``{"value", "source", "rule"}``, the shape every layer records its
decisions in. Sources: a settings layer (``default`` / ``user-yaml`` / ``profile`` / ``env`` /
``dask.config`` / ``flag`` / ``keyword``), ``family``, ``rule`` or ``cluster``.
"""

from __future__ import annotations

from typing import Any


def choice(value: Any, source: str, rule: str | None = None, **extra: Any) -> dict[str, Any]:
    """A recorded choice; ``extra`` keys (e.g. the raw ``setting``) follow the three."""
    return {"value": value, "source": source, "rule": rule, **extra}
