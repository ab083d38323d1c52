"""Backend families: the one place that says what a ``--backend`` name means.

A *family* (:mod:`.family`) bundles the chunk libraries (NumPy + pandas, or CuPy + cuDF),
whether its chunks live in host or device memory, the cluster kind that runs them, and the
**knobs** that make them fast (chunk and partition sizes, shuffle method, groupby split_out
budget, tree fan-in, RMM pool, threads per worker, device synchronize). Nothing outside this
package branches on backend names: code asks the selected family for its knobs.

Built-in families: ``cpu`` (names cpu, numpy, pandas, :mod:`.cpu`) and ``gpu`` (names gpu,
cupy, cudf, :mod:`.gpu`). Installed packages add families through the ``gpuscale.backends``
entry-point group (:mod:`.registry`); an entry point names a :class:`Family` instance.
Data moves between families in :mod:`.convert` only; :mod:`.host_collections` decides what a
session does with the collections Dask builds from host objects (``session.host-collections``).
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
    """A chunk once the work that makes it has finished (runs inside a task, at its end): a
    device family waits for its device there, so the task's time in the task stream is its
    work's (a route that persists its own result, whose task no family wraps). Host chunks are
    returned as they are. The families are loaded first: a worker that unpickled only a route's
    function has not imported them, and their modules are what register their chunk types."""
    families()
    return finished_by_type(x)
