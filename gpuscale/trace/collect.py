"""The capture object: a context manager around any code on any ``distributed.Client``.

On entry it notes where the task stream, the scheduler's monitor and the workers' P2P counters
stand and starts sampling each worker's memory (host, and device through nvml); on exit it
collects the window and writes the folder (see :mod:`gpuscale.trace`). Times are the
scheduler's clock: Dask shifts the workers' logs to it, and the client's phase marks are
shifted by an offset measured on entry (:meth:`Capture._sync_clock`). No GPU library is
imported at module level.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import tempfile
import uuid
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from .. import _dask_compat, atomic
from ..errors import UserError
from ..interrupts import TEMP_PATHS, signals_deferred
from . import events, intervals, render, summary

P2P_SENT = ("background-comms", "process", "bytes")
"""Tail of the worker digest key (``("p2p", span, *P2P_SENT)``) that counts P2P bytes sent."""
CLOCK_NOTE_S = 0.01
"""A worker whose clock correction varies more than this during a window gets a note."""


def check_dir(directory: str | os.PathLike) -> pathlib.Path:
    """Fail (UserError) unless ``directory`` can become a new trace folder: it must not exist
    or be an empty folder of this user's (never a link), and its nearest existing parent must
    be writable. Writes nothing."""
    d = pathlib.Path(directory).expanduser().absolute()
    try:
        str(d).encode("utf-8")  # the folder is named to the scheduler, whose messages are UTF-8
    except UnicodeEncodeError:
        raise UserError(
            f"trace dir {str(d)!r} is not a UTF-8 name (a byte the locale cannot decode)",
            "pass --trace a folder whose name is UTF-8",
        ) from None
    atomic.check_target(d, "trace dir", folder=True)  # a link, or another user's folder
    if d.exists() or d.is_symlink():
        if not d.is_dir():
            raise UserError(
                f"trace dir '{d}' exists and is not a folder", "pass --trace a new or empty folder"
            )
        if any(d.iterdir()):
            raise UserError(
                f"trace dir '{d}' exists and is not empty",
                "pass --trace a new or empty folder (one folder per run)",
            )
    parent = d.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(
            f"trace dir '{d}' cannot be created: '{parent}' is not a folder",
            "pass --trace a folder under a writable folder",
        )
    try:
        probe = tempfile.mkdtemp(dir=parent, prefix=".gpuscale-probe-")
        os.rmdir(probe)
    except OSError as e:
        raise UserError(
            f"trace dir '{d}' is not writable ({e.strerror or e})",
            "pass --trace a folder under a writable folder",
        ) from None
    return d


def _write_text(path: pathlib.Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _write_json(path: pathlib.Path, data: Any) -> None:
    _write_text(path, json.dumps(data, indent=1, default=str))


# Run on the scheduler / workers (gpuscale must be importable there)
class MemorySampler(WorkerPlugin):
    """Samples its worker's process memory (and GPU device memory where the worker's system
    monitor found a GPU, through ``distributed.diagnostics.nvml``) every 100 ms on the worker's
    event loop."""

    def setup(self, worker):
        from tornado.ioloop import PeriodicCallback

        self.worker = worker
        self.host_peak = 0
        self.samples = 0
        self.gpu = bool(getattr(worker.monitor, "gpu_name", None))
        self.gpu_peak = 0
        self.gpu_error: str | None = None
        self.delay_range = [worker.scheduler_delay, worker.scheduler_delay]
        self.sample()
        self._callback = PeriodicCallback(self.sample, 100)
        self._callback.start()

    def sample(self) -> None:
        self.samples += 1
        delay = self.worker.scheduler_delay
        self.delay_range = [min(self.delay_range[0], delay), max(self.delay_range[1], delay)]
        self.host_peak = max(self.host_peak, self.worker.monitor.get_process_memory())
        if self.gpu:
            try:
                self.gpu_peak = max(self.gpu_peak, _dask_compat.gpu_memory_used())
            except Exception as e:  # noqa: BLE001 - keep sampling host memory
                self.gpu, self.gpu_error = False, f"{type(e).__name__}: {e}"

    def result(self) -> dict[str, Any]:
        self.sample()
        out: dict[str, Any] = {"host_peak_bytes": int(self.host_peak), "samples": self.samples}
        if self.gpu:
            out["gpu_peak_bytes"] = int(self.gpu_peak)
        if self.gpu_error:
            out["gpu_error"] = self.gpu_error
        return out

    def clock(self) -> dict[str, Any]:
        """The range of the worker's ``scheduler_delay`` (the clock correction Dask adds to its
        task and transfer times, re-estimated at every heartbeat) seen during the window."""
        return {"scheduler_delay_s": list(self.delay_range)}

    def teardown(self, worker):
        if getattr(self, "_callback", None) is not None:
            self._callback.stop()


def _p2p_sent(worker) -> int:
    return int(
        sum(
            v
            for k, v in list(worker.digests_total.items())
            if isinstance(k, tuple) and len(k) == 2 + len(P2P_SENT) and k[0] == "p2p" and k[2:] == P2P_SENT
        )
    )


def _scheduler_mark(dask_scheduler=None) -> dict[str, Any]:
    return {
        "time": _dask_compat.clock(),
        "index": dask_scheduler.get_task_stream_index(),
        "monitor_count": dask_scheduler.monitor.count,
    }


def _worker_mark(dask_worker=None) -> dict[str, Any]:
    return {"p2p_sent": _p2p_sent(dask_worker)}


def _scheduler_collect(start_index: int, t0: float, dask_scheduler=None) -> dict[str, Any]:
    """The window's task stream (compact) and the workers' facts."""
    from dask.utils import key_split

    plugin = dask_scheduler._task_stream_plugin()
    records = dask_scheduler.get_task_stream(start_index=start_index)
    lost = max(0, (plugin.index - start_index) - len(records))
    tasks = []
    for r in records:
        stops = [
            {k: s[k] for k in ("action", "start", "stop", "source") if k in s}
            for s in r.get("startstops", ())
            if s["stop"] >= t0
        ]
        if stops:
            tasks.append(
                {
                    "key": str(r["key"]),
                    "group": key_split(r["key"]),
                    "worker": r.get("worker"),
                    "thread": r.get("thread"),
                    "status": r.get("status"),
                    "startstops": stops,
                }
            )
    workers = {
        addr: {"name": str(ws.name), "nthreads": ws.nthreads, "memory_limit": ws.memory_limit}
        for addr, ws in dask_scheduler.workers.items()
    }
    return {"tasks": tasks, "lost_tasks": lost, "workers": workers, "address": dask_scheduler.address}


def _worker_collect(t0: float, plugin_name: str, dask_worker=None) -> dict[str, Any]:
    """Incoming transfers that ended after ``t0``, P2P bytes sent, and the memory peaks."""
    log = list(dask_worker.transfer_incoming_log)
    maxlen = dask_worker.transfer_incoming_log.maxlen
    incoming = [
        {
            "source": e["who"],
            "start": e["start"],
            "stop": e["stop"],
            "bytes": int(e["total"]),
            "keys": len(e["keys"]),
        }
        for e in log
        if e["stop"] >= t0
    ]
    # a full log that starts inside the window may have dropped earlier entries
    truncated = bool(maxlen and len(log) >= maxlen and log and log[0]["start"] > t0)
    plugin = dask_worker.plugins.get(plugin_name)
    return {
        "incoming": incoming,
        "transfer_log_truncated": truncated,
        "p2p_sent": _p2p_sent(dask_worker),
        "memory": plugin.result() if plugin else None,
        "clock": plugin.clock() if plugin else None,
    }


class Capture:
    """Trace everything the cluster of ``client`` does between ``__enter__`` and ``__exit__``
    into ``directory`` (see :mod:`gpuscale.trace`).

    ``workload``, ``backend``, ``family``, ``protocol`` and ``result_id`` only label the summary
    (:meth:`annotate` sets them later); ``nvtx=True`` pushes an NVTX range (domain ``gpuscale``)
    around every phase when the ``nvtx`` package is importable. After exit, ``summary`` holds
    the :class:`~gpuscale.trace.Summary` and ``path`` the folder."""

    def __init__(
        self,
        client,
        directory: str | os.PathLike,
        *,
        workload: str | None = None,
        backend: str | None = None,
        family: str | None = None,
        protocol: str | None = None,
        nvtx: bool = False,
    ):
        self.client = client
        self.path = check_dir(directory)
        self.labels: dict[str, Any] = {
            "workload": workload,
            "backend": backend,
            "family": family,
            "protocol": protocol,
            "result_id": None,
        }
        self.nvtx = nvtx
        self.phases: list[dict[str, Any]] = []
        self.summary = None
        self.audit: dict[str, Any] | None = None
        """The backend audit of the window (:mod:`gpuscale.audit`), set by Session.run /
        Session.trace before exit; summary.json's ``audit`` section."""
        self.notes: list[str] = []
        """Lines a caller adds to the summary's notes (a session: the Dask settings it applied)."""
        self._depth = 0
        self._offset = 0.0
        self.clock: dict[str, float] = {}
        self._tmp: pathlib.Path | None = None
        self._made: list[pathlib.Path] = []
        self._plugin: str | None = None
        self._collected: dict[str, Any] | None = None
        self._open = False

    def annotate(self, **labels: Any) -> None:
        """Set summary labels (workload, backend, family, protocol, result_id) before exit."""
        unknown = set(labels) - set(self.labels)
        if unknown:
            raise TypeError(f"unknown trace labels: {', '.join(sorted(unknown))}")
        self.labels.update(labels)

    @contextlib.contextmanager
    def phase(self, name: str, **args: Any):
        """Mark a named phase (a track of the ``gpuscale`` process in trace.json; nested
        phases go one track down). Also an NVTX range when this capture was asked for them."""
        with contextlib.ExitStack() as stack:
            if self.nvtx:
                stack.enter_context(_nvtx_range(name))
            depth = self._depth
            self._depth += 1
            start = _dask_compat.clock() + self._offset
            try:
                yield
            finally:
                self._depth -= 1
                self.phases.append(
                    {
                        "name": name,
                        "start": start,
                        "stop": _dask_compat.clock() + self._offset,
                        "depth": depth,
                        "args": args,
                    }
                )

    def __enter__(self) -> "Capture":
        if self._open or self._collected is not None:
            raise RuntimeError("a Capture traces one window; make a new one")
        try:
            self._make_tmp()
            self._plugin = f"gpuscale-trace-{uuid.uuid4().hex[:8]}"
            self.client.register_plugin(MemorySampler(), name=self._plugin)
            self._p2p0 = self.client.run(_worker_mark)
            self._mark = self._sync_clock()
            self.t0 = _dask_compat.clock() + self._offset
        except BaseException:
            self._discard()
            raise
        self._open = True
        return self

    def stop(self) -> None:
        """End the window now and collect from the cluster (``__exit__`` does it if not
        called); labels can still be set until exit, which writes the folder."""
        if self._collected is not None:
            return
        self.t1 = _dask_compat.clock() + self._offset
        c = self.client
        sched = c.run_on_scheduler(_scheduler_collect, self._mark["index"], self.t0)
        workers = c.run(_worker_collect, self.t0, self._plugin)
        with contextlib.suppress(Exception):
            c.unregister_worker_plugin(self._plugin)
        self._plugin = None
        notes: list[str] = []
        report = None
        what = self.labels.get("workload")
        code = f"gpuscale run {what} --trace {self.path}" if what else f"gpuscale trace capture: {self.path}"
        try:
            report = c.sync(
                c.scheduler.performance_report,
                start=self.t0,
                last_count=self._mark["monitor_count"],
                code=code,
                mode="inline",
            )
        except Exception as e:  # noqa: BLE001 - e.g. bokeh missing on the scheduler
            notes.append(f"performance report not written: {type(e).__name__}: {e}")
        self._collected = {"scheduler": sched, "workers": workers, "report": report, "notes": notes}

    def __exit__(self, exc_type, exc, tb) -> None:
        self._open = False
        if exc_type is not None:
            self._discard()
            return
        try:
            self.stop()
            self._write()
        except BaseException:
            self._discard()
            raise

    def _sync_clock(self, rounds: int = 5) -> dict[str, Any]:
        """Offset of the scheduler's clock from ours, from the round trip with the smallest
        delay (as NTP does); 0 when the offset is within that round trip's uncertainty
        (same host: one clock). Returns the last scheduler mark."""
        best = None
        for _ in range(rounds):
            before = _dask_compat.clock()
            mark = self.client.run_on_scheduler(_scheduler_mark)
            after = _dask_compat.clock()
            if best is None or after - before < best[0]:
                best = (after - before, mark["time"] - (before + after) / 2)
        rtt, offset = best
        self._offset = 0.0 if abs(offset) <= rtt / 2 else offset
        self.clock = {"offset_s": self._offset, "measured_offset_s": offset, "round_trip_s": rtt}
        return mark

    def _make_tmp(self) -> None:
        missing = []
        p = self.path.parent
        while not p.exists():
            missing.append(p)
            p = p.parent
        try:
            with signals_deferred():  # a signal between a mkdir and its note would orphan the folder
                for m in reversed(missing):
                    m.mkdir()
                    self._made.append(m)
                tmp = self.path.parent / f".{self.path.name}.tmp-{uuid.uuid4().hex[:8]}"
                tmp.mkdir()  # not mkdtemp: the folder gets the usual (umask) permissions
                self._tmp = tmp
                TEMP_PATHS.add(str(tmp))
        except OSError as e:
            raise UserError(
                f"trace dir '{self.path}' cannot be written ({e.strerror or e})",
                "pass --trace a folder under a writable folder",
            ) from None

    def _discard(self) -> None:
        if self._plugin is not None:
            with contextlib.suppress(Exception):
                self.client.unregister_worker_plugin(self._plugin)
            self._plugin = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            TEMP_PATHS.discard(str(self._tmp))
            self._tmp = None
        for m in reversed(self._made):
            with contextlib.suppress(OSError):
                m.rmdir()
        self._made = []

    def _write(self) -> None:
        col = self._collected
        window = (self.t0, self.t1)
        tasks, workers = intervals.one_task_per_thread(col["scheduler"]["tasks"]), col["scheduler"]["workers"]
        transfers = {addr: w["incoming"] for addr, w in col["workers"].items()}
        files: dict[str, str] = {}
        tmp = self._tmp
        if col["report"] is not None:
            _write_text(tmp / "performance-report.html", col["report"])
            files["performance_report"] = "performance-report.html"
        files.update(trace="trace.json", comm="comm.json", index="index.html", summary="summary.json")
        _write_json(
            tmp / "trace.json",
            events.chrome_trace(window, self.phases, tasks, transfers, workers, clock=self.clock),
        )
        comm = summary.comm_matrix(
            window,
            transfers,
            workers,
            {a: w["p2p_sent"] - self._p2p0.get(a, {}).get("p2p_sent", 0) for a, w in col["workers"].items()},
        )
        _write_json(tmp / "comm.json", comm)
        notes = list(col["notes"]) + self.notes
        if col["scheduler"]["lost_tasks"]:
            notes.append(
                f"{col['scheduler']['lost_tasks']} task(s) fell out of the scheduler's task "
                "stream buffer (distributed.scheduler.dashboard.tasks.task-stream-length)"
            )
        if any(w["transfer_log_truncated"] for w in col["workers"].values()):
            notes.append(
                "a worker's transfer log overflowed during the window "
                "(distributed.admin.low-level-log-length): bytes moved are a lower bound"
            )
        for addr, w in sorted(col["workers"].items()):
            lo, hi = (w.get("clock") or {}).get("scheduler_delay_s", (0.0, 0.0))
            if hi - lo > CLOCK_NOTE_S:
                notes.append(
                    f"worker {workers.get(addr, {}).get('name', addr)}'s clock correction "
                    f"(Dask's scheduler_delay) varied by {(hi - lo) * 1e3:.0f} ms during the "
                    "window: its task and transfer times are uncertain by about that much"
                )
        s = summary.build(
            window,
            self.phases,
            tasks,
            workers,
            transfers,
            comm,
            {a: w["memory"] for a, w in col["workers"].items() if w["memory"]},
            labels={
                **self.labels,
                "protocol": self.labels["protocol"] or col["scheduler"]["address"].split("://")[0],
            },
            scheduler=col["scheduler"]["address"],
            files=files,
            notes=notes,
            clock={
                "client": self.clock,
                "workers": {a: w["clock"] for a, w in sorted(col["workers"].items()) if w["clock"]},
            },
        )
        if self.audit is not None:
            s.audit = self.audit
        _write_text(tmp / "index.html", render.index_html(s))
        _write_text(tmp / "summary.json", s.to_json())  # last: its presence marks a whole folder
        try:
            os.rename(tmp, self.path)  # replaces an empty folder; fails on a non-empty one
        except OSError as e:
            raise UserError(
                f"trace dir '{self.path}' could not be written ({e.strerror or e}); "
                "was it filled while the run went on",
                "pass --trace a new folder",
            ) from None
        TEMP_PATHS.discard(str(tmp))
        self._tmp = None
        self._made = []
        self.summary = s


def capture(client, directory: str | os.PathLike, **kw: Any) -> Capture:
    """A :class:`Capture` of ``client``'s cluster into ``directory`` (use it in a ``with``)."""
    return Capture(client, directory, **kw)


@contextlib.contextmanager
def _nvtx_range(name: str):
    try:
        import nvtx
    except ImportError:
        yield
        return
    with nvtx.annotate(name, domain="gpuscale"):
        yield
