"""The plan of a cluster: settings and the machine's facts turned into frozen
:class:`Decision` records. The worker layout is decided once (:func:`layout`) for every
cluster kind; text is rendered at the edge (:mod:`gpuscale.records.explained`).
"""

from __future__ import annotations

from ..decision import Decision
from .layout import Facts, Layout, layout

__all__ = ["Decision", "Facts", "Layout", "layout"]
