"""Test-only pieces for the backend audit: a chunk library, a backend family and a workload.

* ``auditfam`` (this module) is a tiny "chunk library": :class:`TagArray` is NumPy data whose
  type lives in module ``auditfam``, with ``asarray`` to make one (all that
  ``gpuscale.backends.convert`` needs of a family's array module).
* :func:`family` is the ``audittest`` backend family: the CPU family, except that its array
  chunks are ``auditfam.TagArray``. Under it, plain NumPy chunks belong to another family
  (cpu), exactly as NumPy chunks do under the GPU family: the case the audit exists for,
  on a machine without a GPU.
* ``audit_mixed`` is a workload that builds its data either the wrong way
  (``da.from_array(numpy_array)``: NumPy chunks, ``--from-host``) or the right way
  (``Session.to_backend`` / ``from_memory``: TagArray chunks), then adds it to TagArray data,
  so the wrong way also makes a family change (NumPy -> TagArray) in every ``add`` task.

* :func:`device_family` is the ``auditdevice`` family: the "device" family of CI (no GPU), for
  ``session.host-collections`` (gpuscale/backends/host_collections.py). Its arrays are TagArray
  and its frames :class:`TagFrame` / :class:`TagSeries` (pandas data whose types live in
  ``auditfam``), its memory is "device", and ``array.backend`` is ``auditfam``, a Dask array
  backend registered here the way CuPy's is (``da.ones`` / ``zeros`` / ``empty`` / ``full`` /
  ``arange`` make TagArray blocks), with Dask's array dispatches (concatenate, tensordot, einsum)
  registered for TagArray as CuPy registers its own: what the GPU family has, on a CPU. Its
  frames have no Dask backend (``dataframe.backend`` stays pandas): every DataFrame Dask builds
  in its session is pandas until the session converts it.

Workers import this module by name to unpickle TagArray: the tests directory is on
``sys.path`` (pytest's rootdir insertion, or ``tests/audit_cli.py`` run as a script), and
spawned worker processes inherit the parent's ``sys.path``.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import dask.array as da
import numpy as np
import pandas as pd
import pyarrow as pa
from distributed.protocol import dask_deserialize, dask_serialize
from distributed.protocol.numpy import deserialize_numpy_ndarray, serialize_numpy_ndarray
from pydantic import Field, PositiveInt

from gpuscale.backends.family import LossyWriter

ROWS, COLS, CHUNK = 400, 50, 100
"""audit_mixed's defaults: 4 chunks of 100 x 50 float64 = 40,000 B each."""
CHUNK_BYTES = CHUNK * COLS * 8
NCHUNKS = ROWS // CHUNK


class TagArray(np.ndarray):
    """NumPy data that belongs to the audittest family (its type's module is ``auditfam``).

    NumPy functions of TagArrays return TagArrays (as CuPy's return CuPy arrays): ufuncs keep a
    subclass by themselves, and ``__array_function__`` tags what ``np.stack``, ``np.linalg.qr``
    and the like return as plain ndarrays."""

    def __array_function__(self, func, types, args, kwargs):
        return _tag_all(super().__array_function__(func, types, args, kwargs))


def _tag_all(out):
    if type(out) is np.ndarray:
        return out.view(TagArray)
    if isinstance(out, tuple) and hasattr(out, "_fields"):  # QRResult, SVDResult...
        return type(out)(*map(_tag_all, out))
    if type(out) in (tuple, list):
        return type(out)(map(_tag_all, out))
    return out


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


# ---------------------------------------------------------------------------------------
# The device family's frames, array backend and dispatches
# ---------------------------------------------------------------------------------------
class TagSeries(pd.Series):
    """pandas data that belongs to the auditdevice family (its type's module is ``auditfam``)."""

    @property
    def _constructor(self):
        return TagSeries

    @property
    def _constructor_expanddim(self):
        return TagFrame

    def idxmax(self, *args, **kwargs):
        unsupported("idxmax")
        return super().idxmax(*args, **kwargs)

    def __arrow_array__(self, type=None):
        """Like cuDF's columns: no implicit conversion to a host PyArrow array where
        "to_parquet" is listed (Dask's pyarrow Parquet writer fails as on cuDF partitions)."""
        unsupported("to_parquet")
        return pa.Array.from_pandas(pd.Series(self), type=type)


class TagFrame(pd.DataFrame):
    """pandas data that belongs to the auditdevice family (its type's module is ``auditfam``)."""

    @property
    def _constructor(self):
        return TagFrame

    @property
    def _constructor_sliced(self):
        return TagSeries

    @property
    def loc(self):
        unsupported("loc")
        return super().loc

    def rename(self, *args, **kwargs):
        unsupported("rename")
        return super().rename(*args, **kwargs)

    def groupby(self, *args, **kwargs):
        gb = super().groupby(*args, **kwargs)
        if "groupby.size" in _unsupported():
            gb.size = functools.partial(unsupported, "groupby.size")
        return gb

    def to_csv(self, *args, **kwargs):
        """Like cuDF's CSV writer (rapidsai/cudf#6418): float64 with 9 significant digits. The
        family declares the loss (``lossy_writers``); a session writes through pandas."""
        kwargs.setdefault("float_format", "%.9g")
        return super().to_csv(*args, **kwargs)


TagSeries.__module__ = TagFrame.__module__ = "auditfam"

UNSUPPORTED = "AUDITFAM_UNSUPPORTED"
"""Environment variable: the TagFrame operations that raise, comma-separated ("rename",
"groupby.size"), as operations cuDF lacks raise on the GPU: in the client (Dask's meta) and,
since spawned workers inherit it, on the workers. Unset: none (TagFrame is pandas)."""


def _unsupported() -> set[str]:
    return set(filter(None, os.environ.get(UNSUPPORTED, "").split(",")))


def unsupported(op: str, *args, **kwargs):
    """Raise where ``op`` is listed in :data:`UNSUPPORTED` (the test family's gap)."""
    if op in _unsupported():
        raise TypeError(
            f"auditfam: {op} is not supported on TagFrame (the test family's stand-in for a cuDF gap)"
        )


def from_pandas(obj):
    """A pandas frame or series as the device family's (what convert_frame calls)."""
    if isinstance(obj, pd.DataFrame):
        return TagFrame(obj)
    if isinstance(obj, pd.Series):
        return TagSeries(obj)
    return obj  # an Index stays pandas


def _untag(x):
    return np.asarray(x) if isinstance(x, np.ndarray) else x


def _register_dispatches() -> None:
    from dask.array.dispatch import concatenate_lookup, einsum_lookup, tensordot_lookup
    from dask.dataframe.dispatch import meta_nonempty

    from gpuscale.backends.convert import to_host

    concatenate_lookup.register(TagArray)(
        lambda seq, axis=0, **kw: asarray(np.concatenate([_untag(a) for a in seq], axis=axis, **kw))
    )
    tensordot_lookup.register(TagArray)(
        lambda a, b, axes=2: asarray(np.tensordot(_untag(a), _untag(b), axes))
    )
    einsum_lookup.register(TagArray)(lambda *a, **kw: asarray(np.einsum(*map(_untag, a), **kw)))
    # Dask builds the meta of an operation on a non-empty sample of the chunk library's type (as
    # dask-cudf registers for cuDF), so a TagFrame operation that raises fails building the meta
    meta_nonempty.register(TagFrame)(lambda x: TagFrame(meta_nonempty(pd.DataFrame(x))))
    meta_nonempty.register(TagSeries)(lambda x: TagSeries(meta_nonempty(pd.Series(x))))
    to_host.register(TagArray)(np.asarray)
    to_host.register(TagFrame)(pd.DataFrame)
    to_host.register(TagSeries)(pd.Series)


_register_dispatches()


def _backend_entrypoint():
    import dask
    from dask.array.backends import ArrayBackendEntrypoint

    def numpy_then_tag(attr, *args, **kwargs):
        kwargs.pop("meta", None)
        with dask.config.set({"array.backend": "numpy"}):
            x = getattr(da, attr)(*args, **kwargs)
        return x.map_blocks(asarray, dtype=x.dtype, meta=asarray(np.empty((0,) * x.ndim, dtype=x.dtype)))

    class AuditfamBackend(ArrayBackendEntrypoint):
        """``array.backend = "auditfam"``: Dask's creation functions make TagArray blocks."""

        @classmethod
        def to_backend_dispatch(cls):
            return asarray

        @classmethod
        def to_backend(cls, data, **kwargs):
            return data if isinstance(data._meta, TagArray) else data.map_blocks(asarray, **kwargs)

        @property
        def RandomState(self):
            return np.random.RandomState

        @property
        def default_bit_generator(self):
            return np.random.PCG64

        @staticmethod
        def ones(*args, **kwargs):
            return numpy_then_tag("ones", *args, **kwargs)

        @staticmethod
        def zeros(*args, **kwargs):
            return numpy_then_tag("zeros", *args, **kwargs)

        @staticmethod
        def empty(*args, **kwargs):
            return numpy_then_tag("empty", *args, **kwargs)

        @staticmethod
        def full(*args, **kwargs):
            return numpy_then_tag("full", *args, **kwargs)

        @staticmethod
        def arange(*args, **kwargs):
            kwargs.pop("like", None)
            return numpy_then_tag("arange", *args, **kwargs)

    return AuditfamBackend()


def device_family():
    """The ``auditdevice`` family: TagArray and TagFrame chunks, in "device" memory."""
    return dataclasses.replace(
        family(),
        name="auditdevice",
        names=("auditdevice",),
        dataframe_module="auditfam",
        array_backend="auditfam",
        memory="device",
        lossy_writers={
            "to_csv": LossyWriter(
                "TagFrame's CSV writer keeps 9 significant digits of float64 values, like cuDF's",
                ("float64",),
            )
        },
        description="test-only: NumPy / pandas data in auditfam.TagArray / TagFrame "
        "chunks, standing in for CuPy / cuDF",
    )


def _dataframe_backend():
    """``dataframe.backend = "auditfam"``: Dask's pandas creation functions, except that
    ``read_parquet`` refuses ``engine=`` as dask-cudf's does (``NotImplementedError: engine=pyarrow
    is not supported by the 'cudf' backend``): a creation function the family's Dask backend
    cannot run, for the host fallback."""
    from dask.dataframe.dask_expr._backends import dataframe_creation_dispatch  # Dask's own (dask-expr)

    pandas = dataframe_creation_dispatch.dispatch("pandas")
    backend = type(pandas)()
    backend.__dict__.update(vars(pandas))  # the pandas backend's functions (registered in place)

    def read_parquet(*args, engine=None, **kwargs):
        if engine not in (None, "auditfam"):
            raise NotImplementedError(f"engine={engine} is not supported by the 'auditfam' backend")
        return pandas.read_parquet(*args, **kwargs)

    backend.read_parquet = read_parquet
    return backend


def reader_family():
    """The ``auditreader`` family: the device family with a Dask DataFrame backend of its own
    (:func:`_dataframe_backend`), as the GPU family has dask-cudf's."""
    return dataclasses.replace(
        device_family(),
        name="auditreader",
        names=("auditreader",),
        dataframe_backend="auditfam",
        description="test-only: the auditdevice family with a Dask DataFrame backend",
    )


def register_reader() -> None:
    """Register the auditreader family and the ``auditfam`` Dask DataFrame backend (idempotent)."""
    from dask.dataframe.dask_expr._backends import dataframe_creation_dispatch

    from gpuscale import backends

    register_device()
    dataframe_creation_dispatch.register_backend("auditfam", _dataframe_backend())
    backends.register(reader_family())


def unregister_reader() -> None:
    from gpuscale import backends

    backends.unregister("auditreader")
    unregister_device()


def register_device() -> None:
    """Register the auditdevice family and the ``auditfam`` Dask array backend (idempotent)."""
    from dask.array.backends import array_creation_dispatch

    from gpuscale import backends

    array_creation_dispatch.register_backend("auditfam", _backend_entrypoint())
    backends.register(device_family())


def unregister_device() -> None:
    from gpuscale import backends

    backends.unregister("auditdevice")


def family():
    from gpuscale import backends

    cpu = backends.select("cpu").family
    return dataclasses.replace(
        cpu,
        name="audittest",
        names=("audittest",),
        array_module="auditfam",
        description="test-only: NumPy data in auditfam.TagArray chunks",
        auto_priority=-10,
    )


def make_workload():
    from gpuscale.backends.convert import from_memory
    from gpuscale.workloads import Check, Context, Output, Params, Validation, Workload

    class MixedParams(Params):
        rows: PositiveInt = Field(ROWS, description="rows")
        cols: PositiveInt = Field(COLS, description="columns")
        chunk_rows: PositiveInt = Field(CHUNK, description="rows per chunk")
        from_host: bool = Field(
            True, description="build x with da.from_array(numpy) (the bug) instead of to_backend"
        )
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
            x = da.from_array(a, chunks=chunks) if p.from_host else from_memory(a, ctx.family, chunks=chunks)
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
