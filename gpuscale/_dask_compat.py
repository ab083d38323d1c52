"""The one module of gpuscale that reaches into Dask's internals: names Dask does not export
(modules or attributes beginning with ``_``, the expression classes under
``dask.dataframe.dask_expr``, distributed's modules other than what ``distributed`` exports,
``distributed.diagnostics.plugin`` and ``distributed.comm``). Everything else in gpuscale uses
the public APIs of dask and distributed; tests/test_dask_compat.py fails on an internal import
anywhere else.

Checked against dask and distributed ``DASK_CHECKED``. Where Dask moves what a function reads,
its docstring says what it does instead; distributed's helpers (:func:`default_split` ...
:func:`closing_half_built`) then fail at their import, naming distributed's module.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import sys
import threading
from typing import Any, Callable

DASK_CHECKED = "2026.8.0"

# -- the host fallback's classes --------------------------------------------------------
_BINARY = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor")
OPERATORS = (
    "__getitem__",
    *(f"__{side}{op}__" for op in _BINARY for side in ("", "r")),
    *(f"__{op}__" for op in ("lt", "le", "gt", "ge", "eq", "ne", "invert", "neg", "abs")),
)
"""The dunder methods of a collection that build a new one (``df[mask]``, ``a > b``)."""


def classes() -> list[tuple[type, tuple[str, ...]]]:
    """(class, dunder methods to wrap besides its public ones) of every collection-like class
    whose methods the fallback wraps: the frames, then the groupby objects and ``.loc`` (those
    of dask-expr's that Dask moved are left out)."""
    import dask.dataframe as dd

    out: list[tuple[type, tuple[str, ...]]] = [(c, OPERATORS) for c in (dd.DataFrame, dd.Series, dd.Index)]
    with contextlib.suppress(ImportError, AttributeError):
        from dask.dataframe.dask_expr._collection import FrameBase

        out.insert(0, (FrameBase, OPERATORS))
    with contextlib.suppress(ImportError, AttributeError):
        from dask.dataframe.dask_expr._groupby import GroupBy, SeriesGroupBy

        out += [(GroupBy, ("__getitem__", "__getattr__")), (SeriesGroupBy, ())]
    with contextlib.suppress(ImportError, AttributeError):
        from dask.dataframe.dask_expr._indexing import LocIndexer

        out.append((LocIndexer, ("__getitem__",)))
    return out


def indexer_origin(obj) -> tuple[object, str] | None:
    """(the collection, "loc") for a ``df.loc`` indexer, else None."""
    try:
        from dask.dataframe.dask_expr._indexing import LocIndexer
    except ImportError:
        return None
    return (obj.obj, "loc") if isinstance(obj, LocIndexer) else None


# -- task graphs ---------------------------------------------------------------------------
def graph_nodes(dsk) -> dict:
    """``dsk`` (a collection's graph) with every value a ``dask.task_spec`` node: old-style
    ``(function, *arguments)`` tuples become ``Task`` objects, plain values ``DataNode``. Where
    Dask moved its converter, an old-style task raises a ``TypeError`` naming Dask's version."""
    try:
        from dask._task_spec import convert_legacy_graph
    except ImportError:
        return _graph_nodes_public(dsk)
    return convert_legacy_graph(dict(dsk))


def _graph_nodes_public(dsk) -> dict:
    import dask
    from dask.task_spec import DataNode, GraphNode

    dsk = dict(dsk)
    for k, v in dsk.items():
        if dask.istask(v) and not isinstance(v, GraphNode):
            raise TypeError(
                f"dask {dask.__version__} moved convert_legacy_graph (checked: {DASK_CHECKED}) "
                f"and the graph holds an old-style task under {k!r}"
            )
    return {k: v if isinstance(v, GraphNode) else DataNode(k, v) for k, v in dsk.items()}


def task_like(key, func, inner, *args):
    """``Task(key, func, inner, *args)`` that produces data where ``inner`` (a task it wraps)
    does: Dask's ordering schedules such tasks as the graph's roots (a plain ``Task`` where Dask
    moved that hint)."""
    from dask.task_spec import Task

    try:
        return Task(key, func, inner, *args, _data_producer=inner.data_producer)
    except TypeError:
        return Task(key, func, inner, *args)


# -- one-task frames -----------------------------------------------------------------------
def _new_collection():
    try:
        from dask.dataframe.dask_expr._collection import new_collection
    except ImportError:
        return None
    return new_collection


def _from_graph():
    try:
        from dask.dataframe.dask_expr.io.io import FromGraph
    except ImportError:
        return None
    return FromGraph


@functools.cache
def _task_frame_type():
    """The expression class behind :func:`one_task_frame` (``gpuscale._dask_compat.TaskFrame``,
    made on first use so that importing this module does not import ``dask.dataframe``), or
    None where Dask moved ``FromGraph`` or ``new_collection``."""
    FromGraph = _from_graph()
    if FromGraph is None or _new_collection() is None:
        return None
    import dask
    from dask.base import tokenize
    from dask.task_spec import Alias

    class TaskFrame(FromGraph):
        """``FromGraph`` whose output tasks move to the frame's own keys instead of being
        aliased; a key that is not a task of the layer (a future) keeps the alias."""

        def _layer(self):
            dsk = dict(self.operand("layer"))
            for new, old in zip(self.__dask_keys__(), self.operand("keys")):
                dsk[new] = dsk.pop(old) if dask.istask(dsk.get(old)) else Alias(new, old)
            return dsk

        def _like(self, layer: dict, keys: list, token: str):
            return type(self)(
                layer,
                self.operand("_meta"),
                self.operand("divisions"),
                keys,
                self.operand("name_prefix"),
                _determ_token=token,
            )

        def finished_by(self, fn):
            """This expression with ``fn(partition)`` run at the end of each output task, inside
            it; None where an output is not a task here (a future)."""
            layer = dict(self.operand("layer"))
            for k in self.operand("keys"):
                if not dask.istask(layer.get(k)):
                    return None
                layer[k] = (fn, layer[k])
            token = tokenize(self.deterministic_token, fn.__module__, fn.__qualname__)
            return self._like(layer, self.operand("keys"), token)

        def submitted(self, client):
            """This frame persisted on ``client`` through ``client.submit`` of its one task, or
            None where that does not apply (several outputs, inputs that are not all futures)."""
            from distributed import Future

            keys, layer = self.operand("keys"), self.operand("layer")
            futures = {k: v for k, v in layer.items() if isinstance(v, Future)}
            if len(keys) != 1 or set(layer) - set(futures) - set(keys):
                return None
            call = _call_of(layer[keys[0]], futures)
            if call is None:
                return None
            (key,) = self.__dask_keys__()
            future = client.submit(_apply, *call, key=key)
            # named by this future: dask-expr would hand back a live expression of the same
            # name, an earlier submit's frame over an earlier future (of a client since closed)
            return _new_collection()(self._like({key: future}, [key], tokenize(key, "submitted", future)))

    TaskFrame.__qualname__ = "TaskFrame"
    return TaskFrame


def __getattr__(name: str):
    # ``TaskFrame`` by name, for pickle: a frame's expression sent to the scheduler names it.
    if name == "TaskFrame" and _task_frame_type() is not None:
        return _task_frame_type()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def parquet_reader(backend: str) -> Callable:
    """``dd.read_parquet`` of the DataFrame backend named ``backend`` ("pandas", "cudf") without
    setting ``dataframe.backend``, which is global: Dask's creation dispatch, which that setting
    selects from."""
    from dask.dataframe.dask_expr._backends import dataframe_creation_dispatch

    return dataframe_creation_dispatch.dispatch(backend).read_parquet


def _call_of(task, futures: dict):
    """``(wrappers, function, *arguments)`` for :func:`_apply` from a task ``(function,
    *arguments)`` inside any number of ``(wrapper, task)`` (:func:`finished_by`), with the
    keys of ``futures`` in the arguments (alone or in lists) replaced by the futures; None for
    any other shape of task."""
    import dask

    wrappers = []
    while dask.istask(task) and len(task) == 2 and dask.istask(task[1]):
        wrappers.append(task[0])
        task = task[1]
    if not dask.istask(task):
        return None

    def arg(a):
        if isinstance(a, list):
            return [arg(x) for x in a]
        if dask.istask(a):
            raise ValueError(a)
        try:
            return futures.get(a, a)
        except TypeError:  # unhashable: a value, not a key
            return a

    try:
        args = [arg(a) for a in task[1:]]
    except ValueError:
        return None
    return (tuple(reversed(wrappers)), task[0], *args)


def _apply(wrappers, func, *args):
    out = func(*args)
    for w in wrappers:
        out = w(out)
    return out


def one_task_frame(dsk: dict, meta, key, prefix: str, token: str):
    """A one-partition Dask DataFrame whose partition is the task ``dsk[key]`` itself, under the
    frame's own key (``dask.dataframe.from_graph`` keeps the task under ``key`` and adds an
    alias task to it), named by ``token`` (``from_graph`` tokenizes the whole layer and meta).
    Where Dask moved dask-expr's ``FromGraph``, ``from_graph``'s frame, which the other
    one-task-frame functions answer with None (:func:`frame_persisted`: False)."""
    cls = _task_frame_type()
    if cls is None:
        import dask.dataframe as dd

        return dd.from_graph(dsk, meta, (None, None), [key], prefix)
    return _new_collection()(cls(dsk, meta, (None, None), [key], prefix, _determ_token=token))


def _task_frame_expr(collection):
    dd = sys.modules.get("dask.dataframe")  # no frame exists without it
    cls = _task_frame_type() if dd is not None else None
    if cls is None or not isinstance(collection, (dd.DataFrame, dd.Series)):
        return None  # (a Delayed answers every attribute: only frames are asked for ``expr``)
    return collection.expr if isinstance(collection.expr, cls) else None


def finished_by(collection, fn):
    """A frame of :func:`one_task_frame` with ``fn(partition)`` run at the end of each output
    task, inside it (a device family's synchronize: no round trip after the wait); None for
    any other collection, and where an output is not a task (a future)."""
    expr = _task_frame_expr(collection)
    done = expr.finished_by(fn) if expr is not None else None
    return _new_collection()(done) if done is not None else None


def submitted(collection, client):
    """A frame of :func:`one_task_frame` persisted through ``client.submit`` of its one task,
    skipping ``client.persist``'s costs (docs/benchmarks/fixed-cost.md); None for any other
    collection."""
    expr = _task_frame_expr(collection)
    return expr.submitted(client) if expr is not None else None


def frame_persisted(collection) -> bool | None:
    """For a Dask DataFrame, Series, Index or Scalar: whether every output is already a future,
    read off its expression without building its graph; None for every other collection."""
    dd = sys.modules.get("dask.dataframe")  # no frame exists without it
    if dd is None or not isinstance(collection, (dd.DataFrame, dd.Series, dd.Index, dd.Scalar)):
        return None
    FromGraph = _from_graph()
    if FromGraph is None or not isinstance(collection.expr, FromGraph):
        return False
    from dask.core import flatten
    from distributed import Future

    expr = collection.expr
    layer = expr.operand("layer")
    return all(isinstance(layer.get(k), Future) for k in flatten(expr.operand("keys")))


# -- the scheduler's identity ------------------------------------------------------------
def identity(client) -> dict[str, Any]:
    """The scheduler's identity with every worker, as fetched. Not
    ``Client.scheduler_info(n_workers=-1)``: it returns the client's stored copy, which its
    periodic update may replace with one without workers before it returns."""
    return dict(client.sync(client.scheduler.identity, n_workers=-1))


def size(client) -> tuple[int, int]:
    """(workers, threads in all) of the client's cluster from the client's own copy of the
    scheduler's identity (up to ``scheduler-info-interval`` old; one identity call where it has
    none). For choices that change only speed, never an answer."""
    info = getattr(client, "_scheduler_identity", None) or {}
    if "n_workers" not in info or "total_threads" not in info:
        info = identity(client)
        return len(info.get("workers") or {}), int(info.get("total_threads") or 0)
    return int(info["n_workers"]), int(info["total_threads"])


def workers(client) -> dict[str, dict[str, Any]]:
    """Every worker the scheduler lists, by address (see :func:`identity`)."""
    return dict(identity(client).get("workers") or {})


# -- distributed's helpers that it does not export ----------------------------------------
def default_split(cores: int) -> tuple[int, int]:
    """(workers, threads per worker) distributed's ``LocalCluster`` makes of ``cores``."""
    from distributed.deploy.utils import nprocesses_nthreads

    return nprocesses_nthreads(cores)


def memory_limit_bytes(setting, threads: int, cores: int, logger) -> int | None:
    """Per-worker bytes of a ``memory_limit`` setting as a worker reads it; raises
    ``ValueError`` / ``TypeError`` on a setting it cannot read."""
    from distributed.worker_memory import parse_memory_limit

    return parse_memory_limit(setting, threads, cores, logger=logger)


def fetch_from_worker(dask_worker, key, source: str):
    """The coroutine a worker awaits to fetch ``key`` from the worker at ``source``, as it
    fetches a task's input (``distributed.worker.get_data_from_worker`` over its own pool)."""
    from distributed.worker import get_data_from_worker

    return get_data_from_worker(dask_worker.rpc, [key], source, who=dask_worker.address)


def required_packages() -> list[str]:
    """The names of the packages distributed requires to match between client and workers."""
    from distributed.versions import required_packages as names

    return list(names)


def local_versions() -> dict[str, str | None]:
    """Package versions of this process as ``Client.get_versions`` reports a worker's."""
    from distributed.versions import get_versions

    return dict(get_versions()["packages"])


def version_mismatch_warning() -> type[Warning]:
    """The warning a client raises on joining a cluster of other package versions."""
    from distributed.versions import VersionMismatchWarning

    return VersionMismatchWarning


def clock() -> float:
    """Seconds on the clock distributed stamps task start and stop with."""
    from distributed.metrics import time

    return time()


def nvml_status() -> tuple[int, str, str]:
    """(devices, state, minimum WSL driver) as ``distributed.diagnostics.nvml`` sees them; state
    is "on" or why NVML is off. Raises what NVML raises."""
    from distributed.diagnostics import nvml

    count = nvml.device_get_count()
    states = {
        nvml.NVMLState.DISABLED_CONFIG: "disabled-by-config",
        nvml.NVMLState.DISABLED_LIBRARY_NOT_FOUND: "no-nvml-library",
        nvml.NVMLState.DISABLED_WSL_INSUFFICIENT_DRIVER: "wsl-driver",
    }
    return int(count or 0), states.get(nvml.NVML_STATE, "on"), str(nvml.MINIMUM_WSL_VERSION)


def gpu_memory_used() -> int:
    """Bytes in use on this process's GPU (``distributed.diagnostics.nvml.real_time``)."""
    from distributed.diagnostics import nvml

    return int(nvml.real_time()["memory-used"])


@contextlib.contextmanager
def closing_half_built():
    """When the block raises (Ctrl-C included), close every cluster it created and mark it
    closed, so distributed's exit hook does not close it again with workers still in
    ``Status.init`` (``SpecCluster._instances``, the set of live clusters)."""
    from distributed import SpecCluster, Status

    before = set(SpecCluster._instances)
    try:
        yield
    except BaseException:
        for half in set(SpecCluster._instances) - before:
            with contextlib.suppress(BaseException):
                half.close(timeout=10)
            half.status = Status.closed
        raise


# -- addresses ---------------------------------------------------------------------------
def check_address(address: str) -> None:
    """Raises ValueError where distributed cannot read ``address`` as a scheduler's
    ([SCHEME://]HOST:PORT, the port from 1 to 65535 for the host-and-port schemes)."""
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, where = parse_address(address, strict=False)
    if scheme in ("tcp", "tls", "ucx", "ucxx", "ws", "wss"):
        _, port = parse_host_port(where)
        if not 0 < int(port) < 65536:
            raise ValueError(f"port {port} is not from 1 to 65535")


# -- merge metadata ----------------------------------------------------------------------
@contextlib.contextmanager
def while_open(lock, users: list, user, install: Callable[[], Any], uninstall: Callable[[], Any]):
    """``user`` joins ``users`` for the block: the first to join installs a patch, the last to
    leave removes it (blocks may nest, and run in several threads)."""
    with lock:
        users.append(user)
        if len(users) == 1:
            install()
    try:
        yield
    finally:
        with lock:
            users.remove(user)
            if not users:
                uninstall()


MERGE_MODULE = "dask.dataframe.dask_expr._merge"
"""dask-expr's module of ``Merge``: hooked at once when imported, else as it is imported."""


def merge_meta_through(lookup) -> contextlib.AbstractContextManager[None]:
    """While open, every dask-expr ``Merge`` expression (``BlockwiseMerge``, the hash and
    broadcast joins: its subclasses) takes its ``_meta`` from ``lookup(left_meta, right_meta,
    kwargs, compute)``, where ``compute()`` is Dask's own; the innermost open lookup answers.
    Imports nothing: before ``dask.dataframe`` is imported, ``Merge`` is hooked as its module
    is. Where Dask moved ``Merge``, Dask's own metadata."""
    return while_open(
        _MERGE_LOCK, _MERGE_LOOKUPS, lookup, lambda: _on_import(MERGE_MODULE, _hook_merge), _unhook_merge
    )


_MERGE_LOOKUPS: list = []
_MERGE_OWN: list = []  # [(Merge, Dask's own cached_property)] while hooked
_MERGE_LOCK = threading.RLock()


def _hook_merge(module) -> None:
    merge = getattr(module, "Merge", None)
    own = getattr(merge, "__dict__", {}).get("_meta")
    with _MERGE_LOCK:
        if not _MERGE_LOOKUPS or _MERGE_OWN or not isinstance(own, functools.cached_property):
            return
        compute = own.func

        def _meta(self):
            lookups = _MERGE_LOOKUPS
            if not lookups:  # closed while this expression was being made
                return compute(self)
            return lookups[-1](self.left._meta, self.right._meta, self.kwargs, lambda: compute(self))

        hooked = functools.cached_property(_meta)
        hooked.__set_name__(merge, "_meta")
        _MERGE_OWN.append((merge, own))
        merge._meta = hooked


def _unhook_merge() -> None:
    _PENDING.pop(MERGE_MODULE, None)
    if _MERGE_OWN:
        merge, own = _MERGE_OWN.pop()
        merge._meta = own


# -- the user's Parquet reads -------------------------------------------------------------
def reads_through(keep) -> contextlib.AbstractContextManager[None]:
    """While open, ``dask.dataframe.read_parquet(*args, **kwargs)`` returns ``keep(args, kwargs,
    read)``, ``read`` Dask's own function; the innermost open ``keep`` answers. Imports nothing:
    before ``dask.dataframe`` is imported, its ``read_parquet`` is wrapped as it is imported. A
    ``from dask.dataframe import read_parquet`` made before the block keeps Dask's own."""
    return while_open(
        _READ_LOCK, _READ_KEEPERS, keep, lambda: _on_import("dask.dataframe", _wrap_read), _unwrap_read
    )


def _unwrap_read() -> None:
    _PENDING.pop("dask.dataframe", None)
    if _READ_OWN:
        module, own, wrapped = _READ_OWN.pop()
        if module.read_parquet is wrapped:
            module.read_parquet = own


_READ_KEEPERS: list = []
_READ_OWN: list = []  # [(dask.dataframe, Dask's read_parquet, the wrapper)] while wrapped
_READ_LOCK = threading.RLock()


def _wrap_read(module) -> None:
    own = getattr(module, "read_parquet", None)
    with _READ_LOCK:
        if not _READ_KEEPERS or _READ_OWN or own is None:
            return

        @functools.wraps(own)
        def read_parquet(*args, **kwargs):
            keepers = _READ_KEEPERS
            if not keepers:  # closed while this call was being made
                return own(*args, **kwargs)
            return keepers[-1](args, kwargs, own)

        _READ_OWN.append((module, own, read_parquet))
        module.read_parquet = read_parquet


# -- after an import ----------------------------------------------------------------------
_PENDING: dict[str, Any] = {}
"""Module name -> what runs once it is imported (:func:`_on_import`)."""


def _on_import(name: str, then) -> None:
    """``then(module)`` now if ``name`` is imported, else right after it is (once; dropped
    from :data:`_PENDING` by whoever no longer wants it)."""
    if name in sys.modules:
        then(sys.modules[name])
        return
    _PENDING[name] = then
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())


class _AfterImport(importlib.abc.MetaPathFinder):
    """A finder that finds nothing itself: for a module named in :data:`_PENDING` it takes
    the spec the other finders give and runs the pending call after the module's code."""

    def find_spec(self, fullname, path, target=None):
        then = _PENDING.pop(fullname, None)
        if then is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _ThenLoader(spec.loader, then)
                return spec
        return None


class _ThenLoader(importlib.abc.Loader):
    """``loader``, with ``then(module)`` after it runs the module (everything else its own)."""

    def __init__(self, loader, then):
        self._loader, self._then = loader, then

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._then(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


# -- computes routed ---------------------------------------------------------------------
def computes_through(router) -> contextlib.AbstractContextManager[None]:
    """While open, ``dask.compute``, ``dask.persist``, a collection's ``compute()`` and a
    DataFrame's ``persist()`` ask ``router(how, call, args, kwargs)`` first: ``how`` is
    ``compute``, ``persist`` (``dask.persist``: a tuple back) or ``persist-one`` (a
    collection's method), ``call`` Dask's own function for the same arguments. The innermost
    open router answers; a compute started while a router runs (in its thread) goes straight
    to Dask. Replaced: ``dask.base.compute`` / ``persist`` (and their ``dask.`` names) and
    dask-expr's ``FrameBase.persist`` (which optimizes before ``dask.persist``); a
    ``from dask import compute`` made before the block keeps Dask's own."""
    return while_open(_ROUTE_LOCK, _ROUTERS, router, _route_install, _route_uninstall)


_ROUTERS: list = []
_ROUTE_LOCK = threading.RLock()
_ROUTE_OWN: dict[tuple[Any, str], Any] = {}
_ROUTING = threading.local()


def _routed(how: str, own):
    @functools.wraps(own)
    def call(*args, **kwargs):
        routers = _ROUTERS
        if not routers or getattr(_ROUTING, "busy", False):
            return own(*args, **kwargs)
        _ROUTING.busy = True
        try:
            return routers[-1](how, own, args, kwargs)
        finally:
            _ROUTING.busy = False

    call.__gpuscale_own__ = own
    return call


COLLECTION_MODULE = "dask.dataframe.dask_expr._collection"
"""dask-expr's module of ``FrameBase``: its ``persist`` is routed once it is imported (a block
that never imports ``dask.dataframe`` does not pay for it)."""


def _route_install() -> None:
    import dask
    import dask.base

    for owner, name in ((dask.base, "compute"), (dask.base, "persist"), (dask, "compute"), (dask, "persist")):
        _route_one(owner, name, name, getattr(dask.base, name))
    _on_import(COLLECTION_MODULE, _route_frame_persist)


def _route_frame_persist(module) -> None:
    base = getattr(module, "FrameBase", None)
    with _ROUTE_LOCK:
        if base is not None and _ROUTERS:
            _route_one(base, "persist", "persist-one", base.__dict__["persist"])


def _route_one(owner, name: str, how: str, own) -> None:
    own = getattr(own, "__gpuscale_own__", own)
    if (owner, name) not in _ROUTE_OWN:
        _ROUTE_OWN[owner, name] = owner.__dict__.get(name, getattr(owner, name))
    setattr(owner, name, _routed(how, own))


def _route_uninstall() -> None:
    _PENDING.pop(COLLECTION_MODULE, None)
    for (owner, name), own in _ROUTE_OWN.items():
        setattr(owner, name, own)
    _ROUTE_OWN.clear()


def expr_collections(args, traverse: bool = True):
    """``(collections, repack)`` of ``args`` as ``dask.compute`` unpacks them."""
    from dask.base import unpack_collections

    return unpack_collections(*args, traverse=traverse)


def is_frame_collection(obj) -> bool:
    """A Dask DataFrame, Series or Scalar of ``dask.dataframe`` (an expression collection)."""
    with contextlib.suppress(ImportError):
        from dask.dataframe.dask_expr._collection import FrameBase

        return isinstance(obj, FrameBase)
    return False
