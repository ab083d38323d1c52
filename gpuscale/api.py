"""The Python API: ``gpuscale.session(...)`` for notebooks, ``gpuscale.run(...)`` one-shot,
``gpuscale.explain(...)`` to see a run's plan first.

>>> import gpuscale
>>> with gpuscale.session(backend="cpu") as s:          # doctest: +SKIP
...     r = s.run("svd", rows=100_000, cols=50)
...     print(r.median_s, r.valid, s.dashboard_link)

Keywords are the same names as the CLI flags (``config.KEYWORDS`` maps both onto settings).
"""

from __future__ import annotations

from typing import Any

from .runs.oneshot import run
from .runs.preview import preview
from .runs.session import Session, configure, finish, session

__all__ = ["Session", "session", "run", "explain", "configure", "finish"]


def explain(
    workload: str,
    *,
    backend: str | None = None,
    protocol: str | None = None,
    profile: str | None = None,
    cluster_settings: dict | None = None,
    trace: str | None = None,
    output: str | None = None,
    dashboard: bool = False,
    **params: Any,
) -> dict[str, Any]:
    """The plan of ``run(workload, ...)`` with the same arguments, starting nothing: the
    cluster spec (as ``gpuscale cluster show``), every knob with its value, source and rule,
    where the runner would run, the workload's choices, the memory headroom and the audit
    settings (a plain dict; see :func:`gpuscale.runs.preview.preview`). ``repeat`` / ``warmup`` /
    ``memory_check`` / ``strict_backend`` / ``in_cluster`` go in ``cluster_settings`` like the
    other settings; ``trace`` / ``output`` / ``dashboard`` only change where the runner runs."""
    return preview(
        workload,
        backend=backend,
        protocol=protocol,
        profile=profile,
        cluster_settings=cluster_settings,
        placement_args={"trace": trace, "output": output, "hooks": dashboard},
        **params,
    )
