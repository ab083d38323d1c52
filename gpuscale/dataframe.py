"""Tuned Dask DataFrame routes: ``groupby_agg``, ``merge`` and ``sort`` on any Dask DataFrame
(pandas or cuDF partitions), with the plan each chose."""

from __future__ import annotations

from .routes.dataframe import (
    AGGREGATIONS,
    FrameRoute,
    GroupbyDecision,
    GroupbyResult,
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
    "GroupbyDecision",
    "GroupbyResult",
    "FrameRoute",
    "AGGREGATIONS",
]
