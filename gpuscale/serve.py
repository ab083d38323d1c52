"""Clusters that outlive one run, for watching the Dask dashboard.

``gpuscale cluster up`` starts the cluster a profile / flags describe (the same
:class:`~gpuscale.cluster.ClusterSpec` as ``cluster show``) and keeps it in the foreground;
``gpuscale cluster down ADDRESS`` stops it from anywhere; ``gpuscale run ... --dashboard``
keeps its cluster up after the run. All three are plain functions here, free of click:

>>> with serve.up(backend="cpu", workers=2) as served:       # doctest: +SKIP
...     print(served.describe())     # scheduler address, dashboard link, workers, ...
...     serve.hold(served.session)   # until Ctrl-C, SIGTERM or `gpuscale cluster down ADDRESS`
>>> serve.down("tcp://127.0.0.1:40000")                         # doctest: +SKIP

The keep-alive is :func:`hold`: it blocks the calling thread until Ctrl-C (SIGINT), SIGTERM
or the scheduler stopping (someone called ``Client.shutdown()``, e.g. ``cluster down``) and
returns which one it was; the caller's ``with`` block then closes what it started.
``api.run(..., on_ready=..., hold=...)`` takes callbacks so the CLI can print the dashboard
link before the work and call :func:`hold` after it without the library knowing about click.
Other processes connect with ``gpuscale.session(scheduler=ADDRESS)``, ``gpuscale run ...
--scheduler ADDRESS`` or ``distributed.Client(scheduler_file=PATH)``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import signal
import threading
import time
import uuid
from typing import Any, Callable, Iterator

from .errors import UserError

DOWN_TIMEOUT_S = 3.0
"""How long ``cluster down`` waits for a scheduler to answer before saying there is none."""


class _Terminated(BaseException):
    """Raised in the main thread by the SIGTERM handler :func:`hold` installs."""


# ---------------------------------------------------------------------------------------
# keep-alive
# ---------------------------------------------------------------------------------------
def scheduler_stopped(session) -> bool:
    """True once the session's scheduler has stopped (or its client lost it for good)."""
    cluster = getattr(session, "cluster", None)
    scheduler = getattr(cluster, "scheduler", None)   # in-process scheduler of a local cluster
    status = getattr(scheduler, "status", None)
    if status is not None and getattr(status, "name", str(status)) in ("closing", "closed", "failed"):
        return True
    client = getattr(session, "client", None)
    if client is None:
        return True
    return str(getattr(client, "status", "running")) not in ("running", "newly-created")


def hold(session, *, before: Callable[[], Any] | None = None, poll_s: float = 0.2,
         timeout_s: float | None = None) -> str:
    """Block until Ctrl-C, SIGTERM or the scheduler stopping; return ``"interrupt"``,
    ``"terminate"``, ``"scheduler stopped"`` (or ``"timeout"`` after ``timeout_s``).

    ``before()`` runs first, inside the hold (say, printing how to stop it): a Ctrl-C that
    arrives while it runs already counts as the stop. SIGTERM is caught only while holding,
    and only in the main thread (elsewhere signals cannot be handled; Ctrl-C / the scheduler
    stopping still end the hold there).
    """
    previous = None
    main = threading.current_thread() is threading.main_thread()
    if main:
        def _on_term(signum, frame):
            raise _Terminated()
        previous = signal.signal(signal.SIGTERM, _on_term)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        if before is not None:
            before()
        while not scheduler_stopped(session):
            if deadline is not None and time.monotonic() >= deadline:
                return "timeout"
            time.sleep(poll_s)
        return "scheduler stopped"
    except KeyboardInterrupt:
        return "interrupt"
    except _Terminated:
        return "terminate"
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


# ---------------------------------------------------------------------------------------
# cluster up
# ---------------------------------------------------------------------------------------
def check_scheduler_file(path: str | os.PathLike) -> pathlib.Path:
    """The scheduler file's path, refused (before anything starts) if it cannot be written."""
    p = pathlib.Path(path).expanduser().resolve()
    if p.is_dir():
        raise UserError(f"--scheduler-file {path} is a folder", "give a file path, e.g. scheduler.json")
    parent = p.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UserError(f"--scheduler-file {path}: folder {parent} does not exist or is not writable",
                        "create the folder or choose another path")
    return p


def write_scheduler_file(client, path: pathlib.Path) -> None:
    """Dask's scheduler file (``scheduler_info()`` as JSON, like ``dask scheduler
    --scheduler-file``), written atomically; ``Client(scheduler_file=path)`` reads it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(client.scheduler_info(n_workers=-1), indent=2, default=str))
    os.replace(tmp, path)


class Served:
    """A cluster ``up`` started: its open session and the scheduler file written (if any)."""

    def __init__(self, session, scheduler_file: pathlib.Path | None = None, warm_up_s: float | None = None):
        self.session = session
        self.scheduler_file = scheduler_file
        self.warm_up_s = warm_up_s

    @property
    def address(self) -> str:
        return self.session.client.scheduler.address

    def describe(self) -> dict[str, Any]:
        """What ``cluster up`` prints: addresses, link and the live worker / thread counts."""
        s = self.session
        workers = s.client.scheduler_info(n_workers=-1).get("workers", {})
        return {"scheduler": self.address, "dashboard": s.dashboard_link,
                "scheduler_file": str(self.scheduler_file) if self.scheduler_file else None,
                "cls": s.spec.cls, "family": s.family.name, "protocol": s.spec.protocol,
                "workers": len(workers), "threads": sum(w.get("nthreads", 0) for w in workers.values()),
                "warm_up_s": self.warm_up_s, "pid": os.getpid()}


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the main thread for the block (so a cluster being
    started is closed, not orphaned); the previous handler comes back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _on_term(signum, frame):
        raise KeyboardInterrupt()

    previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


@contextlib.contextmanager
def deferred_stop() -> Iterator[None]:
    """Ctrl-C / SIGTERM arriving inside the block take effect when it ends (as
    KeyboardInterrupt), not in the middle of it: for short steps on a running cluster (the
    warm-up) that, cut off inside a ``client.run``, leave workers logging tracebacks about a
    scheduler that went away under them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []

    def _note(signum, frame):
        got.append(signum)

    previous = {sig: signal.signal(sig, _note) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    if got:
        raise KeyboardInterrupt()


@contextlib.contextmanager
def up(*, profile: str | None = None, collection: str | None = None,
       scheduler_file: str | os.PathLike | None = None, start_timeout_s: float = 60,
       warm_up: bool = True, **settings: Any) -> Iterator[Served]:
    """Start the cluster these settings describe (the spec ``cluster show`` prints) and yield a
    :class:`Served` once every planned worker has joined and warmed up (``warm_up``:
    :meth:`gpuscale.backends.Family.warm_up`, so a later run's first task does not pay the
    workers' imports and first kernels); on exit remove the scheduler file (if written) and
    close everything that was started."""
    from . import api
    s = api.Session(profile=profile, collection=collection, **settings)
    if s.spec.kind == "existing":
        raise UserError(f"`cluster up` starts a cluster, but a running scheduler was named "
                        f"({s.spec.scheduler}, from {s.resolved.sources.get('scheduler', 'settings')})",
                        "drop --scheduler (or use a profile without 'scheduler:'); to use a running "
                        "cluster pass --scheduler to `gpuscale run` instead")
    path = check_scheduler_file(scheduler_file) if scheduler_file else None
    with s:
        if s.spec.workers:
            s.client.wait_for_workers(s.spec.workers, timeout=start_timeout_s)
        # kept up for later runs: their first task should not pay the workers' first-use costs
        with deferred_stop():
            warm = s.family.warm_up(s.client) if warm_up else None
        written = False
        try:
            if path is not None:
                write_scheduler_file(s.client, path)
                written = True
            yield Served(s, path, warm)
        finally:
            if written:
                with contextlib.suppress(OSError):
                    path.unlink()


# ---------------------------------------------------------------------------------------
# cluster down
# ---------------------------------------------------------------------------------------
def address_from_file(path: str | os.PathLike) -> str:
    p = pathlib.Path(path).expanduser()
    try:
        address = json.loads(p.read_text())["address"]
    except FileNotFoundError:
        raise UserError(f"scheduler file {path} does not exist",
                        "give the --scheduler-file that `gpuscale cluster up` wrote (is it still running?)") from None
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"scheduler file {path} is not a Dask scheduler file (no 'address')",
                        "give the file `gpuscale cluster up --scheduler-file` or `dask scheduler` wrote") from None
    return str(address)


def down(address: str, *, timeout_s: float = DOWN_TIMEOUT_S) -> dict[str, Any]:
    """Stop the scheduler at ``address`` and its workers (``Client.shutdown()``).

    Returns ``{"scheduler": address, "workers": n}`` (workers it had). Raises
    :class:`UserError` when nothing answers within ``timeout_s``.
    """
    from distributed import Client
    if "://" not in address:
        address = f"tcp://{address}"
    try:
        client = Client(address, timeout=timeout_s, set_as_default=False)
    except (OSError, TimeoutError):
        raise UserError(f"no scheduler answered at {address} within {timeout_s:g} s",
                        "check the address `gpuscale cluster up` printed (is that cluster still "
                        "running?) or raise --timeout") from None
    except ValueError as e:
        raise UserError(f"cannot connect to {address!r} ({e})",
                        "give a scheduler address like tcp://127.0.0.1:8786") from None
    try:
        workers = len(client.scheduler_info(n_workers=-1).get("workers", {}))
        client.shutdown()
    finally:
        with contextlib.suppress(Exception):
            client.close()
    return {"scheduler": address, "workers": workers}


# ---------------------------------------------------------------------------------------
# the runner in the cluster
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Placement:
    """Where ``gpuscale run`` runs its runner (generate, repeats, validation, the record): in
    this process (``"client"``) or in a task on a worker of the running cluster
    (``"cluster"``), with the setting's source and the rule that decided."""

    where: str
    source: str
    rule: str
    worker: str | None = None

    def entry(self) -> dict[str, Any]:
        """The record's ``explained.cluster.runner`` (value, source, rule)."""
        value = f"cluster (worker {self.worker})" if self.worker else self.where
        return {"value": value, "source": self.source, "rule": self.rule}

    def describe(self) -> dict[str, Any]:
        """The record's ``info.runner`` (the runner in the cluster adds its timings)."""
        return {"where": self.where, "worker": self.worker}


IN_CLUSTER_WHY = ("the runner goes to a worker of the running cluster, which has imported the chunk "
                  "libraries and holds the device context already, so this process imports neither; "
                  "the record comes back here and is written here")


def placement(resolved, spec, *, trace: Any = None, data: Any = None, output: Any = None,
              hooks: bool = False) -> Placement:
    """Where ``api.run`` runs the runner, from the ``run.in-cluster`` setting (auto / true /
    false): auto takes the cluster when the run joins a running scheduler and writes no files
    of its own but the record (no ``--trace``, ``--output``, ``--dashboard``; ``data`` a path,
    not a collection of this process). ``true`` with any of those is a UserError naming it."""
    setting = resolved.settings.run.in_cluster
    source = resolved.sources.get("run.in-cluster", "default")
    if setting is False:
        return Placement("client", source, "run.in-cluster is false: the runner stays in this process")
    if spec.kind != "existing":
        if setting is True:
            raise UserError("--in-cluster runs the runner on a running cluster's worker, but no scheduler "
                            "was named", "add --scheduler ADDRESS (e.g. from `gpuscale cluster up`) or drop "
                                         "--in-cluster")
        return Placement("client", source, "auto: this run starts its own cluster, whose workers are as "
                                           "new as this process; the runner stays here")
    blockers = [why for why, present in (
        ("--trace writes its folder from this process", trace is not None),
        ("--output writes the result file from this process", output is not None),
        ("--dashboard holds the cluster from this process", hooks),
        ("data= is a collection in this process", data is not None and not isinstance(data, (str, os.PathLike))),
    ) if present]
    if blockers:
        if setting is True:
            raise UserError(f"--in-cluster cannot run this: {'; '.join(blockers)}",
                            "drop --in-cluster (the runner then stays in this process)")
        return Placement("client", source, f"auto: {'; '.join(blockers)}, so the runner stays here")
    return Placement("cluster", source, ("auto: a running scheduler was named; " if setting == "auto" else
                                         "run.in-cluster is true: ") + IN_CLUSTER_WHY)


class NotServed(Exception):
    """The cluster's workers cannot run this gpuscale's runner (not installed, another
    version); ``api.run`` runs it in this process instead (or fails, when it was asked for)."""


def run_in_cluster(session, workload: str, where: Placement, *, data: Any = None,
                   validate: str | None = None, params: dict[str, Any]):
    """Run ``session.record(workload, ...)`` in a task on a worker of the running cluster the
    session names and return the record it built (not written: the caller writes it). The task
    secedes from the worker's thread pool and opens its own client, so the runner's tasks run
    beside it; it stops between repeats once this process's client has gone (Ctrl-C).

    Raises :class:`NotServed` when the workers cannot import this version of gpuscale."""
    from . import __version__
    from .cluster import existing
    t0 = time.perf_counter()
    _, client = existing.start(session.spec)
    try:
        connect_s = time.perf_counter() - t0
        if isinstance(data, (str, os.PathLike)):
            data = os.path.abspath(os.fspath(data))  # the worker's working folder is not ours
        request = {"version": __version__, "resolved": session.resolved, "selection": session.selection,
                   "spec": session.spec, "collection": session.collection, "workload": workload,
                   "placement": where, "client": client.id, "data": data, "validate": validate,
                   "params": params}
        t1 = time.perf_counter()
        future = client.submit(_runner, request, pure=False, key=f"gpuscale-runner-{workload}-{uuid.uuid4().hex[:8]}")
        try:
            result = future.result()
        except ImportError as e:
            if (getattr(e, "name", None) or "").split(".")[0] == "gpuscale":
                raise NotServed(f"the workers cannot import gpuscale ({e})") from None
            raise
        except RuntimeError as e:  # the scheduler unpickles the task first
            if "deserialization of the task graph" in str(e):
                cause = e.__cause__ or e.__context__
                raise NotServed(f"the scheduler cannot read this gpuscale's runner task "
                                f"({type(cause).__name__}: {cause}; another gpuscale version there?)") from None
            raise
        round_trip_s = time.perf_counter() - t1
    finally:
        with contextlib.suppress(Exception):
            client.close()
    runner = result.info.setdefault("runner", {})
    runner.update(client_connect_s=connect_s, round_trip_s=round_trip_s,
                  dispatch_s=max(0.0, round_trip_s - runner.get("runner_s", 0.0)))
    result.startup_s = connect_s + (result.startup_s or 0.0)
    return result


def _runner(request: dict[str, Any]):
    """The task ``run_in_cluster`` submits (runs on a worker)."""
    from distributed import get_worker, secede

    from . import __version__, api
    if request["version"] != __version__:
        raise NotServed(f"the workers have gpuscale {__version__}, this process {request['version']}")
    t0 = time.perf_counter()
    secede()  # the runner's own tasks need this worker's thread(s)
    worker = get_worker()
    address = worker.scheduler.address  # as this worker reaches the scheduler
    spec = request["spec"]
    spec = spec.model_copy(update={"scheduler": address, "kwargs": {**spec.kwargs, "address": address}})
    s = api.Session.planned(request["resolved"], request["selection"], spec, request["collection"])
    s.placement = dataclasses.replace(request["placement"], worker=worker.address)
    client_id = request["client"]
    with s:
        def cancelled() -> bool:
            return not s.client.run_on_scheduler(_has_client, client_id)

        result = s.record(request["workload"], data=request["data"], validate=request["validate"],
                          cancelled=cancelled, **request["params"])
    result.info["runner"].update(pid=os.getpid(), runner_s=time.perf_counter() - t0)
    return result


def _has_client(client_id: str, dask_scheduler=None) -> bool:
    return client_id in dask_scheduler.clients
