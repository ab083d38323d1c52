"""Backend families: the one place that says what a ``--backend`` name means.

A *family* (:mod:`.family`) bundles the chunk libraries, where its chunks live, the cluster
kind that runs them and its knobs. Nothing outside this package branches on backend names.
Built-ins: ``cpu`` (:mod:`.cpu`) and ``gpu`` (:mod:`.gpu`); installed packages add families
through the ``gpuscale.backends`` entry-point group (:mod:`.registry`). Data moves between
families in :mod:`.convert` only.
"""

from __future__ import annotations

from .convert import finished_by_type, to_host
from .family import Family, Knobs
from .registry import (
    Selection,
    aliases,
    choices,
    chunk_libraries,
    families,
    family_of,
    names,
    register,
    select,
    unregister,
    vocabulary,
)

__all__ = [
    "Family",
    "Knobs",
    "Selection",
    "aliases",
    "choices",
    "chunk_libraries",
    "families",
    "family_of",
    "names",
    "register",
    "select",
    "unregister",
    "vocabulary",
    "to_host",
    "finished",
]


def finished(x):
    """``x`` once the device work that makes it has finished (runs inside a task, at its end);
    host chunks are returned as they are. Loads the families first: their modules register the
    chunk types."""
    families()
    return finished_by_type(x)
