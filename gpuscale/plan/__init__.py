"""The plan of a cluster: settings and the machine's facts turned into frozen
:class:`Decision` records.
"""

from __future__ import annotations

from ..decision import Decision
from .layout import Facts, Layout, layout

__all__ = ["Decision", "Facts", "Layout", "layout"]
