"""Clusters that outlive one run, for watching the Dask dashboard: ``gpuscale cluster up``
(:func:`up`, then :func:`hold`), ``gpuscale cluster down ADDRESS`` (:func:`down`) and ``gpuscale
run ... --dashboard`` (:func:`hold` after the run), as plain functions free of click:

>>> with serve.up(backend="cpu", workers=2) as served:       # doctest: +SKIP
...     print(served.describe())
...     serve.hold(served.session)   # until Ctrl-C, SIGTERM or `gpuscale cluster down ADDRESS`
>>> serve.down("tcp://127.0.0.1:40000")                         # doctest: +SKIP
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
from typing import Any, Callable, Iterator

from .. import atomic, interrupts, trust, workloads
from ..cluster import detach, existing, identity, security
from ..cluster import workers as _workers
from ..errors import UserError
from .heap import settle_heap
from .session import Session

DOWN_TIMEOUT_S = 3.0
"""How long ``cluster down`` waits for a scheduler to answer before saying there is none."""


class _Terminated(BaseException):
    """Raised in the main thread by the SIGTERM handler :func:`hold` installs."""


def scheduler_stopped(session) -> bool:
    """True once the session's scheduler has stopped (or its client lost it for good)."""
    cluster = getattr(session, "cluster", None)
    scheduler = getattr(cluster, "scheduler", None)  # in-process scheduler of a local cluster
    status = getattr(scheduler, "status", None)
    if status is not None and getattr(status, "name", str(status)) in ("closing", "closed", "failed"):
        return True
    client = getattr(session, "client", None)
    return client is None or str(getattr(client, "status", "running")) not in ("running", "newly-created")


def hold(session, *, before: Callable[[], Any] | None = None) -> str:
    """Block until Ctrl-C, SIGTERM (in the main thread) or the scheduler stopping; return
    ``"interrupt"``, ``"terminate"`` or ``"scheduler stopped"``. ``before()`` runs first."""
    previous = None
    main = threading.current_thread() is threading.main_thread()
    if main:

        def _on_term(signum, frame):
            raise _Terminated()

        previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        if before is not None:
            before()
        while not scheduler_stopped(session):
            time.sleep(0.2)
        return "scheduler stopped"
    except KeyboardInterrupt:
        return "interrupt"
    except _Terminated:
        return "terminate"
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def check_scheduler_file(path: str | os.PathLike, credentials: bool = False) -> pathlib.Path:
    """The scheduler file's path (its folder resolved, not the file), refused if it cannot be
    written or a link or another user's file sits where it, its lock or its credentials go."""
    given = pathlib.Path(path).expanduser()
    p = given.absolute().parent.resolve() / given.name
    if p.is_dir() and not p.is_symlink():
        raise UserError(f"--scheduler-file {path} is a folder", "give a file path, e.g. scheduler.json")
    parent = p.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UserError(
            f"--scheduler-file {path}: folder {parent} does not exist or is not writable",
            "create the folder or choose another path",
        )

    atomic.check_target(p, "scheduler file")
    atomic.check_target(_lock_path(p), "lock file")
    if credentials:
        atomic.check_target(security.beside(p), "credentials file")

    trust.warn_if_others_can_change(p, "scheduler file", folder=True)
    return p


def _lock_path(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(f".{path.name}.lock")


def _answers(address: str, timeout_s: float = 1.0) -> bool:
    """Whether something listens at a scheduler address (a TCP connect, no Dask handshake)."""
    import socket

    from distributed.comm import parse_address, parse_host_port

    try:
        host, port = parse_host_port(parse_address(address)[1])
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except (OSError, ValueError, TypeError):
        return False


@contextlib.contextmanager
def claim(path: pathlib.Path) -> Iterator[None]:
    """Hold the scheduler file ``path`` for the block by a ``flock`` on a hidden ``.NAME.lock``
    beside it; refuses a file another ``cluster up`` holds or whose scheduler still answers."""
    import fcntl

    lock = _lock_path(path)
    while True:
        fd = atomic.own_file(lock, "lock file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise UserError(
                f"scheduler file {path} belongs to another `gpuscale cluster up` (pid {owner}), "
                "still running",
                "stop it first (`gpuscale cluster down --scheduler-file "
                f"{path}`) or give this cluster another --scheduler-file",
            ) from None
        try:  # the file we locked may have been removed by its owner as we opened it: lock anew
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        address = None
        if path.exists():
            with contextlib.suppress(UserError):  # not a scheduler file, or not ours: it is replaced
                address = address_from_file(path)
        if address is not None and _answers(address):
            raise UserError(
                f"scheduler file {path} names a scheduler that is running ({address})",
                "stop that scheduler first or give this cluster another --scheduler-file",
            )
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)  # releases the lock


def write_scheduler_file(client, path: pathlib.Path) -> None:
    """Dask's scheduler file, written atomically, never through a link, writable by its owner only."""
    with atomic.written(
        path, replace=True, text=True, mode=0o644 & ~atomic.umask(), what="scheduler file"
    ) as (f, _):
        f.write(json.dumps(identity(client), indent=2, default=str))


def _remove_if(path: pathlib.Path, still_ours: Callable[[pathlib.Path], bool]) -> None:
    """Remove ``path`` only while it is still what this process wrote (never another's)."""
    with contextlib.suppress(OSError, UserError):
        if still_ours(path):
            path.unlink()


@dataclasses.dataclass(eq=False)
class Served:
    """A cluster ``up`` started: its open session and the scheduler file written (if any)."""

    session: Any
    scheduler_file: pathlib.Path | None = None
    warm_up_s: float | None = None
    credentials: pathlib.Path | None = None

    @property
    def address(self) -> str:
        return self.session.client.scheduler.address

    def describe(self) -> dict[str, Any]:
        """What ``cluster up`` prints: addresses, link, worker and thread counts, the layout's rule."""
        s = self.session
        workers = _workers(s.client)
        return {
            "scheduler": self.address,
            "dashboard": s.dashboard_link,
            "scheduler_file": str(self.scheduler_file) if self.scheduler_file else None,
            "cls": s.spec.cls,
            "family": s.family.name,
            "protocol": s.spec.protocol,
            "workers": len(workers),
            "threads": sum(w.get("nthreads", 0) for w in workers.values()),
            "tls": s.spec.security == "tls",
            "credentials": str(self.credentials) if self.credentials else None,
            "threads_per_worker": s.spec.threads_per_worker,
            "layout": (s.spec.choices.get("threads_per_worker") or {}).get("rule") or "set by you",
            "warm_up_s": self.warm_up_s,
            "pid": os.getpid(),
        }


def sigterm_as_interrupt():
    """SIGTERM raises :class:`gpuscale.interrupts.Terminated` in the main thread for the block."""
    return interrupts.sigterm_raises()


@contextlib.contextmanager
def deferred_stop() -> Iterator[None]:
    """Ctrl-C / SIGTERM arriving inside the block take effect when it ends: a short step cut
    off inside a ``client.run`` leaves workers logging tracebacks about a scheduler gone."""
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
        raise interrupts.Terminated() if signal.SIGTERM in got else KeyboardInterrupt()


@contextlib.contextmanager
def up(
    *,
    profile: str | None = None,
    collection: str | None = None,
    scheduler_file: str | os.PathLike | None = None,
    **settings: Any,
) -> Iterator[Served]:
    """Start the cluster these settings describe and yield a :class:`Served` once every planned
    worker has joined and warmed up; on exit remove the files written here and close it. TLS by
    default (:mod:`gpuscale.cluster.security`), its credentials beside the scheduler file."""
    s = Session(profile=profile, collection=collection, served=True, **settings)
    if s.spec.kind == "existing":
        key = "scheduler" if s.resolved.settings.scheduler else "scheduler-file"
        named = s.spec.scheduler if key == "scheduler" else s.resolved.settings.scheduler_file
        raise UserError(
            f"`cluster up` starts a cluster, but a running scheduler was named "
            f"({named}, from {s.resolved.sources.get(key, 'settings')})",
            "drop --scheduler (or use a profile without 'scheduler:'); to use a running "
            "cluster pass --scheduler to `gpuscale run` instead",
        )
    tls = s.spec.security == "tls"
    path = check_scheduler_file(scheduler_file, credentials=tls) if scheduler_file else None
    creds = security.beside(path) if path is not None and tls else None
    with contextlib.ExitStack() as stack:
        if path is not None:
            stack.enter_context(claim(path))
        if creds is not None:  # before the start: hosts over ssh read them from the file
            s.security = security.temporary()
            pem = security.write(s.security, creds).read_bytes()
            stack.callback(_remove_if, creds, lambda p: p.read_bytes() == pem)
            s.spec = s.spec.model_copy(update={"credentials": str(creds)})
        stack.enter_context(s)
        s.client.register_plugin(detach.QuietOnClose())  # its own close is the end of this process
        if s.spec.workers:
            s.client.wait_for_workers(s.spec.workers, timeout=60)
        with deferred_stop():
            warm = s.family.warm_up(s.client, worker_ready)
        address = s.client.scheduler.address
        if path is not None:
            write_scheduler_file(s.client, path)
            stack.callback(_remove_if, path, lambda p: address_from_file(p, trusted=True) == address)
        yield Served(s, path, warm, creds)


def address_from_file(path: str | os.PathLike, trusted: bool = False) -> str:
    """The address in a scheduler file (:func:`gpuscale.cluster.existing.address_from_file`)."""
    return existing.address_from_file(path, trusted=trusted)


def _in_flight(me: str, dask_scheduler=None) -> dict[str, Any]:
    """On the scheduler: the other clients that hold tasks, and the tasks being processed."""
    s = dask_scheduler
    clients = {cid: len(cs.wants_what) for cid, cs in s.clients.items() if cid != me and cs.wants_what}
    processing = sum(len(ws.processing) for ws in s.workers.values())
    return {"clients": clients, "tasks": sum(clients.values()), "processing": processing}


def down(
    address: str,
    *,
    timeout_s: float = DOWN_TIMEOUT_S,
    force: bool = False,
    credentials: str | os.PathLike | None = None,
    trusted: bool = False,
) -> dict[str, Any]:
    """Stop the scheduler at ``address`` and its workers (``Client.shutdown()``), a ``tls://``
    one with the ``credentials`` file (refused when another user can change it, unless
    ``trusted``): ``{"scheduler": address, "workers": n, "in_flight": {...}}``. Raises
    :class:`UserError` when nothing answers within ``timeout_s`` and, unless ``force``, while
    runs are in flight there."""
    from distributed import Client

    if "://" not in address:
        address = f"tcp://{address}"
    kw = {}
    if address.startswith("tls://"):
        if credentials is None:
            raise UserError(
                f"the scheduler at {address} accepts TLS clients only",
                "pass --credentials PATH (the *.tls.pem file beside its scheduler file) or "
                "--scheduler-file PATH",
            )
        security.check_credentials(pathlib.Path(credentials).expanduser(), trusted)
        kw["security"] = security.load(credentials)
    try:
        client = Client(address, timeout=timeout_s, set_as_default=False, **kw)
    except (OSError, TimeoutError):
        raise UserError(
            f"no scheduler answered at {address} within {timeout_s:g} s",
            "check the address `gpuscale cluster up` printed (is that cluster still "
            "running?) or raise --timeout",
        ) from None
    except ValueError as e:
        raise UserError(
            f"cannot connect to {address!r} ({e})", "give a scheduler address like tcp://127.0.0.1:8786"
        ) from None
    try:
        workers = len(_workers(client))
        busy = client.run_on_scheduler(_in_flight, client.id)
        if not force and (busy["clients"] or busy["processing"]):
            raise UserError(
                f"runs are in flight on the cluster at {address}: {len(busy['clients'])} "
                f"other client(s) hold {busy['tasks']} task(s), {busy['processing']} being "
                f"processed",
                "wait for them to finish, or pass --force to stop it anyway "
                "(those runs then end with exit 4)",
            )
        client.shutdown()
    finally:
        with contextlib.suppress(Exception):
            client.close()
    return {"scheduler": address, "workers": workers, "in_flight": busy}


def worker_ready() -> None:
    """On each worker of a cluster kept up: the workload registry loaded, the heap settled."""
    workloads.names()
    settle_heap()
