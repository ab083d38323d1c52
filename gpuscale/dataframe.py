"""Tuned Dask DataFrame routes: ``groupby_agg``, ``merge`` and ``sort`` on any Dask DataFrame
(pandas or cuDF partitions), with the plan each chose."""

from __future__ import annotations

from .routes import Routed
from .routes.dataframe import (
    AGGREGATIONS,
    choose_groupby,
    groupby_agg,
    merge,
    sort,
)

__all__ = [
    "groupby_agg",
    "merge",
    "sort",
    "choose_groupby",
    "Routed",
    "AGGREGATIONS",
]
