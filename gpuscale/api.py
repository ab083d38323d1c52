"""The Python API: ``gpuscale.session(...)`` for notebooks, ``gpuscale.run(...)`` one-shot,
``gpuscale.explain(...)`` to see a run's plan first.

>>> import gpuscale
>>> with gpuscale.session(backend="cpu") as s:          # doctest: +SKIP
...     r = s.run("svd", rows=100_000, cols=50)
...     print(r.median_s, r.valid, s.dashboard_link)

Keywords are the same names as the CLI flags (``config.KEYWORDS`` maps both onto settings).
"""

from __future__ import annotations

from .runs.explain import explain
from .runs.run import run
from .runs.session import Session, configure, finish, session

__all__ = ["Session", "session", "run", "explain", "configure", "finish"]
