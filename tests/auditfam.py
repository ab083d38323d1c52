"""Test-only pieces for the backend audit: a chunk library, a backend family and a workload.

* ``auditfam`` (this module) is a tiny "chunk library": :class:`TagArray` is NumPy data whose
  type lives in module ``auditfam``, with ``asarray`` to make one (all that
  ``gpuscale.backends.convert`` needs of a family's array module).
* :func:`family` is the ``audittest`` backend family: the CPU family, except that its array
  chunks are ``auditfam.TagArray``. Under it, plain NumPy chunks belong to another family
  (cpu), exactly as NumPy chunks do under the GPU family: the case the audit exists for,
  on a machine without a GPU.
* ``audit_mixed`` is a workload that builds its data either the wrong way
  (``da.from_array(numpy_array)``: NumPy chunks, ``--host``) or the right way
  (``Session.to_backend`` / ``from_memory``: TagArray chunks), then adds it to TagArray data,
  so the wrong way also makes a family change (NumPy -> TagArray) in every ``add`` task.

Workers import this module by name to unpickle TagArray: the tests directory is on
``sys.path`` (pytest's rootdir insertion, or ``tests/audit_cli.py`` run as a script), and
spawned worker processes inherit the parent's ``sys.path``.
"""
from __future__ import annotations

import dataclasses

import dask.array as da
import numpy as np
from distributed.protocol import dask_deserialize, dask_serialize
from distributed.protocol.numpy import deserialize_numpy_ndarray, serialize_numpy_ndarray
from pydantic import Field, PositiveInt

ROWS, COLS, CHUNK = 400, 50, 100
"""audit_mixed's defaults: 4 chunks of 100 x 50 float64 = 40,000 B each."""
CHUNK_BYTES = CHUNK * COLS * 8
NCHUNKS = ROWS // CHUNK


class TagArray(np.ndarray):
    """NumPy data that belongs to the audittest family (its type's module is ``auditfam``)."""


TagArray.__module__ = "auditfam"  # also when this file is imported as tests.auditfam


def asarray(x):
    return np.asarray(x).view(TagArray)


# Moving between workers keeps the type, as a real chunk library's serializers do (distributed's
# NumPy serializer alone would hand back a plain ndarray). Registered wherever this module is
# imported: workers import it when they unpickle the type.
@dask_serialize.register(TagArray)
def _serialize(x):
    return serialize_numpy_ndarray(x.view(np.ndarray))


@dask_deserialize.register(TagArray)
def _deserialize(header, frames):
    return deserialize_numpy_ndarray(header, frames).view(TagArray)


def family():
    from gpuscale import backends
    cpu = backends.select("cpu").family
    return dataclasses.replace(cpu, name="audittest", names=("audittest",), array_module="auditfam",
                               description="test-only: NumPy data in auditfam.TagArray chunks",
                               auto_priority=-10)


def make_workload():
    from gpuscale.backends.convert import from_memory
    from gpuscale.workloads import Check, Context, Output, Params, Validation, Workload

    class MixedParams(Params):
        rows: PositiveInt = Field(ROWS, description="rows")
        cols: PositiveInt = Field(COLS, description="columns")
        chunk_rows: PositiveInt = Field(CHUNK, description="rows per chunk")
        host: bool = Field(True, description="build x with da.from_array(numpy) (the bug) instead of "
                                             "to_backend")
        seed: int = Field(0, description="random seed")

    class Mixed(Workload):
        name = "audit_mixed"
        description = "test-only: from_array(numpy) data (or to_backend data) + backend data"
        collection = "array"
        Params = MixedParams

        def plan(self, p, ctx: Context) -> None:
            ctx.choose("chunk_rows", p.chunk_rows, "flag")

        def estimate_bytes(self, p, ctx: Context) -> int:
            return 3 * p.rows * p.cols * 8

        def generate(self, p, ctx: Context):
            a = np.random.default_rng(p.seed).random((p.rows, p.cols))
            chunks = (p.chunk_rows, p.cols)
            x = da.from_array(a, chunks=chunks) if p.host else from_memory(a, ctx.family, chunks=chunks)
            return {"x": x, "t": from_memory(a, ctx.family, chunks=chunks), "a": a}

        def compute(self, data, p, ctx: Context) -> Output:
            return Output({"y": data["x"] + data["t"]})

        def validate(self, out: Output, data, p, ctx: Context) -> Validation:
            y = np.asarray(out.collections["y"].compute())
            err = float(np.abs(y - 2 * data["a"]).max())
            return Validation("y = 2a on the host", [Check("y = 2a", err == 0.0, err, 0.0)])

    return Mixed


def register() -> None:
    """Register the family and the workload (idempotent)."""
    from gpuscale import backends, workloads
    backends.register(family())
    workloads.register(make_workload())


def unregister() -> None:
    from gpuscale import backends, workloads
    backends.unregister("audittest")
    workloads.unregister("audit_mixed")
