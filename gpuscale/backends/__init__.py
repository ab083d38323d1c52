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

from .convert import finished, to_host
from .family import Family, Knobs
from .registry import (Selection, chunk_libraries, families, family_of, names, register, select,
                       unregister)

__all__ = ["Family", "Knobs", "Selection", "chunk_libraries", "families", "family_of", "names",
           "register", "select", "unregister", "to_host", "finished"]
