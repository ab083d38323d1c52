"""The pieces every benchmark in workflows/ shares: its common flags, one timing function, sides
compared in one process, their ratios with a verdict, and versioned JSON.

* :func:`add_common` declares ``--json``, ``--repeat``, ``--warmup``, ``--rounds``, ``--max-time``
  and ``--resume`` once, :func:`add_cluster` ``--backend``, ``--protocol``, ``--gpus`` and
  ``--workers`` (a script adds its own sizes and ``--sides``, checked by :func:`pick_sides`).
* :func:`bench_once` times one callable: warm-ups, then up to ``repeat`` timed calls, fewer where
  the next would take them past ``max_time`` seconds.
* A :class:`Side` is a name, an optional context opened around its calls (a cluster, a session)
  and ``build(env, case) -> (run, check)``: the callable to time and the check of its answer.
* A :class:`Study` times every case on every side in one process, either side after side (each
  side's context opened once) or in rounds that alternate the sides' order, so a drift of the
  machine hits every side alike. A cell is ``{"median_s", "times_s", "valid", "diff",
  "wall_s", "check_s"}`` (and ``rounds``), or ``{"error", "wall_s"}`` where a side cannot run a
  case (``wall_s``: until it failed; a hung case or one not run is ``{"error"}`` alone).
* :func:`ratio` is side B's time over side A's with the interval of
  :mod:`gpuscale.records.compare` (Hodges-Lehmann on log times, Welch's t with few repeats):
  ``not significant`` when the interval holds 1, i.e. the spread cannot tell the sides apart.
* :func:`write` stamps ``schema`` and ``version`` and replaces the file atomically (every cell
  measured survives an interruption); :func:`load` reads any version through :func:`migrate`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import pathlib
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, NoReturn

SCHEMA = "gpuscale-workflow"
VERSION = 2
"""Version 1: the files written before the harness (no ``schema`` / ``version`` keys)."""


# ---------------------------------------------------------------------------------------
# Flags
# ---------------------------------------------------------------------------------------
def add_common(
    ap: argparse.ArgumentParser,
    *,
    repeat: int = 3,
    warmup: int = 1,
    rounds: int | None = None,
    max_time: float | None = None,
    hang_after: float | None = None,
    resume: bool = False,
) -> argparse.ArgumentParser:
    """The flags every benchmark reads the same way; ``rounds``, ``max_time``, ``hang_after``
    and ``resume`` only where the script uses them (their default given)."""
    ap.add_argument("--json", default=None, metavar="OUT", help="write every timing and check here")
    ap.add_argument("--repeat", type=int, default=repeat, help="timed runs per cell after the warm-up")
    ap.add_argument("--warmup", type=int, default=warmup, help="untimed runs before the timed ones")
    if rounds is not None:
        ap.add_argument(
            "--rounds", type=int, default=rounds, help="rounds, each running every side, in alternating order"
        )
    if max_time is not None:
        ap.add_argument(
            "--max-time",
            type=float,
            default=max_time,
            help="fewer timed runs where the next would take them past this many seconds (at least one)",
        )
    if hang_after is not None:
        ap.add_argument(
            "--hang-after",
            type=float,
            default=hang_after,
            metavar="SECONDS",
            help="a run of one case past this many seconds is a hang: the case is an error, the side's "
            "other cases are not run and its cluster is closed (0: no limit)",
        )
    if resume:
        ap.add_argument(
            "--resume",
            default=None,
            metavar="JSON",
            help="keep the cells an interrupted run wrote to JSON (same data and sides) and time the rest",
        )
    return ap


def add_cluster(
    ap: argparse.ArgumentParser,
    backend: str = "auto",
    *,
    protocol: bool = False,
    gpus: bool = False,
    workers: bool | int = False,
) -> argparse.ArgumentParser:
    """The cluster flags of ``gpuscale.session``: ``--backend`` (default ``backend``), and where
    asked ``--protocol``, ``--gpus`` and ``--workers`` (``True``: default None, the session's
    choice; a number: that default)."""
    ap.add_argument("--backend", default=backend, help=f"cpu, gpu or auto (default: {backend})")
    if protocol:
        ap.add_argument("--protocol", default=None, help="tcp, ucx, ... (default: the session's)")
    if gpus:
        ap.add_argument("--gpus", default=None, help="which GPUs, e.g. 0 or 0,1 (default: every one)")
    if workers is not False:
        ap.add_argument(
            "--workers", type=int, default=None if workers is True else workers, help="worker processes"
        )
    return ap


def pick_sides(
    text: str | None, known: tuple[str, ...], default: list[str], options: dict | None = None
) -> list[str]:
    """``--sides a,b`` as a list; ``default`` without one. A side may be a variant of a known
    one, ``BASE:OPTION=VALUE...``, where ``options`` maps OPTION to (the sides that take it,
    what it takes, a check of VALUE). A name that is neither ends the script in one line (exit 2)."""
    sides = [s.strip() for s in text.split(",") if s.strip()] if text else list(default)
    for name in sides:
        side_spec(name, known, options or {})
    return sides


def side_base(name: str) -> str:
    """The side a name is a variant of (the name itself where it is no variant); any stored
    name reads, checked or not."""
    return name.split(":", 1)[0]


def side_spec(name: str, known: tuple[str, ...], options: dict) -> tuple[str, dict[str, str]]:
    """A side's name as (its base side, its options) (:func:`pick_sides`)."""
    base, *opts = name.split(":")
    if base not in known:
        usage_error(f"unknown side {base!r}: choose from {', '.join(known)}")
    kw = {}
    for o in opts:
        key, _, value = o.partition("=")
        sides, _, good = options.get(key, ((), "", None))
        if base not in sides or not good(value):
            offered = "; ".join(f"{k}: {w}" for k, (b, w, _) in options.items() if base in b) or "none"
            usage_error(f"side {name!r}: {o!r} is not an option of {base} (its options: {offered})")
        kw[key] = value
    return base, kw


def usage_error(message: str) -> NoReturn:
    """End the script on a wrong command line: one line on stderr, exit 2 (as argparse does)."""
    print(f"{pathlib.Path(sys.argv[0]).name}: {message}", file=sys.stderr)
    raise SystemExit(2)


# ---------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------
def bench_once(
    run: Callable[[], Any],
    repeat: int,
    warmup: int = 1,
    max_time: float = math.inf,
    first: list[float] | None = None,
) -> tuple[list[float], Any]:
    """(the timed runs' seconds, the last answer): ``warmup`` untimed calls, then up to
    ``repeat`` timed ones, fewer where the next would take the timed runs past ``max_time``
    seconds (at least one). ``first`` gets the warm-up calls' seconds (the first is the case's
    first run: a cold one)."""
    for _ in range(warmup):
        t0 = time.perf_counter()
        run()
        if first is not None:
            first.append(time.perf_counter() - t0)
    times: list[float] = []
    got = None
    while len(times) < max(repeat, 1) and (not times or sum(times) + times[-1] <= max_time):
        t0 = time.perf_counter()
        got = run()
        times.append(time.perf_counter() - t0)
    return times, got


class Hung(Exception):
    """One run of a case passed its time limit (``--hang-after``): the side's cluster may be
    stuck, so the side's other cases are not run and its context is closed."""


class OutOfMemory(Exception):
    """The side's workers passed their memory limit and were restarted :data:`MEMORY_RESTARTS`
    times during one run of a case: Dask would compute and lose the same task again until the hang
    limit, so the run is cancelled and the case is an error; the side's next case runs."""


MEMORY_RESTARTS = 2
"""Restarts of the side's workers for memory during one run that end it (:class:`OutOfMemory`)."""


def compute_within(collection: Any, seconds: float | None, restarts: int = MEMORY_RESTARTS) -> Any:
    """``dask.compute(collection)[0]`` on the current client, raising :class:`Hung` when it has
    not finished in ``seconds`` (None: no limit) and :class:`OutOfMemory` once the nannies have
    restarted ``restarts`` workers for memory since it began (their ``worker-restart-memory``
    events); either way the work is cancelled."""
    import dask

    if seconds is None:
        return dask.compute(collection)[0]
    from distributed import get_client

    client = get_client()
    topic = "worker-restart-memory"
    seen = len(client.get_events(topic))
    deadline = time.monotonic() + seconds
    future = client.compute(collection)
    done = threading.Event()  # set from distributed's callback thread: no gather left waiting
    future.add_done_callback(lambda _: done.set())

    def out_of_memory() -> None:
        n = len(client.get_events(topic)) - seen
        if n >= restarts:
            raise OutOfMemory(
                f"the workers passed their memory limit and were restarted {n} times during one run"
            )

    try:
        while not done.wait(timeout=max(0.0, min(1.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                raise Hung(f"one run took more than {seconds:g} s")
            out_of_memory()
        if future.status == "error":  # a KilledWorker from those restarts is the memory's too
            out_of_memory()
        return future.result()
    except BaseException:  # a hang, the memory, Ctrl-C: the work is let go, as dask.compute lets it go
        future.cancel()
        raise


def call_within(fn: Callable[[], Any], seconds: float | None) -> Any:
    """``fn()``, raising :class:`Hung` when it has not returned in ``seconds`` (None: no limit).
    It runs in a thread of its own (with this context's variables), which is left to finish:
    the side is closed after a hang."""
    if seconds is None:
        return fn()
    import contextvars

    out: dict[str, Any] = {}
    ctx = contextvars.copy_context()

    def target() -> None:
        try:
            out["value"] = ctx.run(fn)
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
            out["error"] = e

    t = threading.Thread(target=target, daemon=True, name="call-within")
    t.start()
    t.join(seconds)
    if t.is_alive():
        raise Hung(f"one run took more than {seconds:g} s")
    if "error" in out:
        raise out["error"]
    return out["value"]


HUNG, NOT_RUN = "hung: ", "not run: the side hung on "
NOT_STARTED = "not run: the side did not start: "


def retry(c: dict) -> bool:
    """A cell a resumed run times again: one that hung, was not run after a hang, or whose side
    did not start."""
    return str(c.get("error", "")).startswith((HUNG, NOT_RUN, NOT_STARTED))


def cell(times: list[float], diff: str | None, **extra) -> dict:
    """A measured cell: the median, every time, and whether the answer was right."""
    return {
        "median_s": statistics.median(times),
        "times_s": times,
        "valid": diff is None,
        "diff": diff,
        **extra,
    }


def error_cell(e: BaseException) -> dict:
    """A side that cannot run a case is a row, not a stop."""
    return {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:600]}"}


# ---------------------------------------------------------------------------------------
# Sides and studies
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Side:
    name: str
    build: Callable[[Any, Any], tuple[Callable[[], Any], Callable[[Any], str | None]]]
    """``build(env, case) -> (run, check)``: ``run()`` is timed, ``check(answer)`` returns None
    when the answer is right, else what differs in one line."""
    open: Callable[[Any], ContextManager] | None = None
    """``open(env)``: the context (a cluster, a session) around the side's calls; its value is the
    ``env`` that ``build`` gets. None: ``build`` gets the study's ``env``."""
    notes: Callable[[Any], dict] | None = None
    """``notes(answer)``: more keys for the cell (how the answer was made), or None."""
    self_timed: bool = False
    """``run()`` times its own runs and warm-ups (gpuscale's runner does) and returns a
    :class:`Timed`: it is called once per cell (per round) and its seconds count, not the wall
    clock around the call."""


@dataclass(frozen=True)
class Timed:
    """What a self-timed side's ``run()`` returns: its timed runs' seconds and its answer."""

    times_s: list[float]
    answer: Any


@dataclass
class Study:
    sides: list[Side]
    cases: list[Any]
    key: Callable[[Any], str] = str
    """A case's name in the cells' keys (``"{key(case)}|{side}"``)."""
    repeat: int = 3
    warmup: int = 1
    max_time: float = math.inf
    rounds: int | None = None
    """None: side after side, each side's context opened once and every case timed by
    :func:`bench_once`. A number: that many rounds, the sides' order alternating; each round opens
    each side's context again and adds ``repeat`` timed runs to every cell (warm-ups in every
    round), and the cell keeps each round's median, wall time and notes in ``rounds``
    (:func:`per_round`). Every cell's ``wall_s`` is its whole measurement: build, warm-ups and
    timed runs; ``check_s`` the check of its answer after them."""

    def run(
        self, env: Any = None, cells: dict | None = None, on_cell: Callable[[str, dict], None] | None = None
    ):
        """Every cell (those in ``cells``, from an earlier run, are kept and not timed);
        ``on_cell(key, cell)`` after each one measured."""
        cells = dict(cells or {})
        kept = set(cells)
        hung: dict[str, str] = {}  # side -> the case it hung on
        if self.rounds is None:
            for side in self.sides:
                todo = [c for c in self.cases if f"{self.key(c)}|{side.name}" not in cells]
                if todo:
                    self._side(side, env, todo, cells, on_cell, hung, lambda old, new: new)
            return cells
        for r in range(self.rounds):
            for side in self.sides if r % 2 == 0 else self.sides[::-1]:
                todo = [c for c in self.cases if f"{self.key(c)}|{side.name}" not in kept]
                if todo:
                    self._side(side, env, todo, cells, on_cell, hung, _merged)
        return cells

    def _side(self, side: Side, env: Any, todo: list, cells: dict, on_cell, hung: dict, merge) -> None:
        """Time ``todo`` on one side in one opening of its context. After a run that hangs
        (:class:`Hung`) the side's other cases are errors, in this round and later ones. A side
        whose context does not open (its cluster refused, its engine missing) makes its cases
        errors naming why, and the next side runs; one whose context fails to close keeps the
        cells it measured."""

        def put(k: str, c: dict) -> None:
            cells[k] = merge(cells.get(k), c)
            if on_cell:
                on_cell(k, cells[k])

        if side.name in hung:
            for case in todo:
                put(f"{self.key(case)}|{side.name}", {"error": NOT_RUN + hung[side.name]})
            return
        opened = False
        try:
            with _opened(side, env) as senv:
                opened = True
                for case in todo:
                    k = f"{self.key(case)}|{side.name}"
                    if side.name in hung:
                        put(k, {"error": NOT_RUN + hung[side.name]})
                        continue
                    try:
                        put(k, self._time(side, senv, case))
                    except Hung as e:
                        hung[side.name] = self.key(case)
                        put(k, {"error": f"{HUNG}{e}"})
        except Exception as e:  # noqa: BLE001 - a side that cannot start is its rows, not a stop
            why = error_cell(e)["error"]
            print(f"{side.name}: {'did not close' if opened else 'did not start'}: {why}", file=sys.stderr)
            if not opened:
                for case in todo:
                    put(f"{self.key(case)}|{side.name}", {"error": NOT_STARTED + why})

    def _time(self, side: Side, env: Any, case: Any) -> dict:
        try:
            t0 = time.perf_counter()
            run, check = side.build(env, case)
            warm = {}
            if side.self_timed:
                timed = run()
                times, got = list(timed.times_s), timed.answer
            else:
                first: list[float] = []
                times, got = bench_once(run, self.repeat, self.warmup, self.max_time, first)
                warm = {"warmup": self.warmup}  # a cell resumed into a run of other settings keeps its own
                if first:
                    warm["first_s"] = first[0]
            wall = time.perf_counter() - t0
            diff = check(got)
            checked = time.perf_counter() - t0 - wall
            notes = side.notes(got) if side.notes else {}
            return cell(times, diff, wall_s=wall, check_s=round(checked, 3), **warm, **notes)
        except Hung:
            raise
        except Exception as e:  # noqa: BLE001 - a side that cannot run a case is a row, not a stop
            return {**error_cell(e), "wall_s": round(time.perf_counter() - t0, 3)}  # until it failed


def session_side(
    name: str,
    repeat: int,
    warmup: int = 1,
    *,
    run_kw: Callable[[Any], dict] | None = None,
    check: Callable[[Any, Any], str | None] | None = None,
    notes: Callable[[Any], dict] | None = None,
    open: Callable[[Any], ContextManager] | None = None,
) -> Side:
    """A side that runs a case ``(workload, params)`` with ``Session.run`` in the session it is
    given (``env``, or what ``open`` yields), the runner timing its own repeats (validated, no
    record written): ``run_kw(case)`` adds keywords to the call (``trace=``, ``audit=``),
    ``check(case, result)`` more than the runner's validation, ``notes(result)`` keys for the
    cell."""

    def build(s, case):
        workload, params = case

        def run():
            kw = run_kw(case) if run_kw else {}
            res = s.run(workload, repeat=repeat, warmup=warmup, write=False, **kw, **params)
            return Timed(res.times_s, res)

        def checked(res):
            if not res.valid:
                return f"{workload} did not validate"
            return check(case, res) if check else None

        return run, checked

    return Side(name, build, open=open, notes=notes, self_timed=True)


PEER_PRELOAD = [str(pathlib.Path(__file__).resolve())]
"""The peer clusters' worker preload (this file). dask-cuda's ``LocalCUDACluster`` gives its
workers a ``preload`` of its own, which overrides ``distributed.worker.preload``: pass it this
as its ``preload`` keyword."""


@contextlib.contextmanager
def peer_cluster_config() -> Any:
    """Dask config for a cluster a side starts as its user would (plain Dask, dask-cudf by hand)
    that leaves what it computes alone: its worker processes leave the terminal's process group
    as they start (this file is their preload, :func:`dask_setup`), so Ctrl-C or ``timeout -s
    INT`` reaches only this process, which closes them, and no worker prints a traceback; the
    scheduler's WARNING lines about each P2P shuffle it starts and ends are dropped."""
    import logging

    import dask

    log = logging.getLogger("distributed.shuffle")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with dask.config.set({"distributed.worker.preload": PEER_PRELOAD}):
            yield
    finally:
        log.setLevel(level)


def dask_setup(worker=None) -> None:
    """Worker preload of :func:`peer_cluster_config`: a process group of its own (a worker still
    ends when its nanny's pipe closes or its cluster closes it), and none of the records a
    worker logs as its cluster closes under it (gpuscale's own workers drop the same ones)."""
    from gpuscale.cluster.detach import leave_terminal_group
    from gpuscale.cluster.logs import quiet_task_failures

    leave_terminal_group()
    quiet_task_failures()


@contextlib.contextmanager
def _opened(side: Side, env: Any) -> Any:
    """The side's context (its cluster, session or engine), its opening and closing times on
    stderr: with the cells' ``wall_s`` and ``check_s`` they account for a run's time."""
    if not side.open:
        yield env
        return
    t0 = time.perf_counter()
    with side.open(env) as senv:
        print(f"{side.name}: opened in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        try:
            yield senv
        except KeyboardInterrupt:  # the run ends: its cluster closes under work in flight, quietly
            from gpuscale.interrupts import quiet_exit_logs

            quiet_exit_logs()
            raise
        finally:
            t1 = time.perf_counter()
    print(f"{side.name}: closed in {time.perf_counter() - t1:.1f} s", file=sys.stderr)


def _merged(old: dict | None, new: dict) -> dict:
    """A cell over rounds: every timed run, right only if every round was, and ``rounds``: each
    round's cell but its times (median, check, wall time, notes); an error in any round stays
    the cell's."""
    if old is not None and "error" in old:
        return old
    if "error" in new:
        return new
    this = {k: v for k, v in new.items() if k != "times_s"}
    if old is None:
        return {**cell(new["times_s"], new["diff"]), "rounds": [this]}
    return {
        **cell(old["times_s"] + new["times_s"], old["diff"] or new["diff"]),
        "rounds": old["rounds"] + [this],
    }


def per_round(c: dict, key: str = "median_s") -> list:
    """One value of a cell per round (a cell timed side after side is one round)."""
    return [r[key] for r in c["rounds"]] if "rounds" in c else [c[key]]


# ---------------------------------------------------------------------------------------
# Ratios
# ---------------------------------------------------------------------------------------
def ratio(a: dict, b: dict, confidence: float = 0.95) -> dict:
    """B's time over A's (two cells): the estimate, its interval and a verdict, ``faster``
    (B takes less), ``slower`` or ``not significant`` (the interval holds 1, or too few
    runs). The unit is the round where both cells hold two or more rounds, else the timed run."""
    from gpuscale.records import compare

    if "error" in a or "error" in b or not (a.get("valid") and b.get("valid")):
        return {"ratio": None, "lo": None, "hi": None, "verdict": "n/a"}
    ta, tb = per_round(a), per_round(b)
    if len(ta) < 2 or len(tb) < 2:
        ta, tb = a["times_s"], b["times_s"]
    est, lo, hi = compare.hodges_lehmann(ta, tb, confidence)
    if lo is None:
        w = compare.welch(ta, tb, confidence)
        est, lo, hi = w["est"], w["lo"], w["hi"]
    lo, hi = (None, None) if lo is None else (math.exp(lo), math.exp(hi))
    v = compare.verdict(lo, hi, 0.0)
    return {
        "ratio": math.exp(est),
        "lo": lo,
        "hi": hi,
        "verdict": v if v in ("faster", "slower") else "not significant",
    }


def ratio_text(r: dict) -> str:
    """``1.23 (1.10..1.40)``, ``1.02 (0.90..1.15) not significant``, or ``-``."""
    if r["ratio"] is None:
        return "-"
    band = f" ({r['lo']:.2f}..{r['hi']:.2f})" if r["lo"] is not None else ""
    return f"{r['ratio']:.2f}{band}" + (" not significant" if r["verdict"] == "not significant" else "")


def geomean(xs) -> float:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


# ---------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------
def write(path: str | pathlib.Path, kind: str, d: dict) -> None:
    """``d`` with ``schema`` (``gpuscale-workflow/KIND``) and ``version``, written to a
    temporary file and moved over ``path``."""
    out = {"schema": f"{SCHEMA}/{kind}", "version": VERSION, **d}
    tmp = pathlib.Path(f"{path}.tmp")
    tmp.write_text(json.dumps(out, indent=1, default=str))
    tmp.replace(path)


def load(path: str | pathlib.Path, kind: str | None = None) -> dict:
    """A results file of any version, as the current version; with ``kind``, one of another
    kind ends the script in one line (exit 2)."""
    try:
        d = migrate(json.loads(pathlib.Path(path).read_text()))
    except (ValueError, KeyError, TypeError, AttributeError) as e:  # empty, cut short, other JSON
        usage_error(f"{path} is not a results file of these scripts ({type(e).__name__}: {str(e)[:80]})")
    if kind and d["schema"] != f"{SCHEMA}/{kind}":
        raise SystemExit(f"{path} holds {d['schema']}, not {SCHEMA}/{kind}: give a file this script wrote")
    return d


def migrate(d: dict) -> dict:
    """Any version to :data:`VERSION`. Version 1 (no ``version`` key) is recognised by its
    keys: ``sets`` and ``cells`` are a user-query run, ``rows`` with ``plain_s`` a TLS run."""
    v = d.get("version", 1)
    if v > VERSION:
        raise SystemExit(f"results of version {v}, newer than this harness's {VERSION}: update workflows/")
    if v == 1:
        if "sets" in d and "cells" in d:
            kind = "user_queries"
        elif any("plain_s" in r for r in d.get("rows", [])):
            kind = "tls_overhead"
        else:
            kind = "unknown"
        d = {"schema": f"{SCHEMA}/{kind}", "version": VERSION, **d}
    return d
