"""The plan of a cluster: settings and the machine's facts turned into decisions.

Each decision is a frozen :class:`Decision` (value, source, rule with its id, the numbers it
used). The worker layout is decided once (:func:`layout`) and every cluster kind reads it; the
kinds in :mod:`gpuscale.cluster` only turn a plan into their class's arguments. ``explain``
and a record's ``explained`` section lay the decisions out (:mod:`gpuscale.records.explained`),
and text is rendered there, at the edge.
"""

from __future__ import annotations

from .decision import Decision
from .layout import Facts, Layout, layout

__all__ = ["Decision", "Facts", "Layout", "layout"]
