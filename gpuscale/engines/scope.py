"""A session's engine route: the Dask DataFrame collections computed in its block (``compute()``,
``dask.compute``, ``persist()``) run on the engine :func:`gpuscale.plan.engine.decide` picks,
translated by :mod:`.from_dask`; on Dask where the plan does not translate or the engine fails,
with the reason. Each compute is kept as a :class:`Query` (``Session.queries``).

Open while the session's block is (:meth:`Route.scope`): Dask's compute and persist are routed
through :func:`gpuscale._dask_compat.computes_through` and given back on leaving it.
"""

from __future__ import annotations

import contextlib
import operator
import sys
import time
from dataclasses import dataclass, field, fields
from typing import Any, Iterator

from .. import _dask_compat
from ..decision import Decision
from ..errors import UserError
from ..plan import engine as engine_plan


@dataclass
class Query:
    """One collection computed in the session's block, and the engine that answered it."""

    where: str
    """The user's file:line that computed it."""
    kind: str
    """``DataFrame``, ``Series`` or ``Scalar``."""
    decision: Decision
    """The engine that answered it (:func:`gpuscale.plan.engine.decide`)."""
    seconds: float | None = None
    """The engine's wall time for this compute (shared by the collections computed together)."""
    reads_bytes: int | None = None
    how: str = "compute"
    failed: str | None = None
    """The engine's error, one line, where it failed and Dask answered instead."""
    executor: str | None = None
    """How cudf-polars ran it on one GPU (``in-memory`` or ``streaming``) and why."""

    def as_dict(self) -> dict[str, Any]:
        """The session's record of it: the engine, its rule id and why, beside the rest."""
        d = self.decision
        out = {"where": self.where, "kind": self.kind, "engine": d.value, "rule_id": d.rule_id or ""}
        out["why"] = d.rule or ""
        rest = {f.name: getattr(self, f.name) for f in fields(self)[3:]}
        return {**out, **rest}

    def line(self) -> str:
        took = f" in {self.seconds:.3f} s" if self.seconds is not None else ""
        how = f", {self.executor}" if self.executor else ""
        d = self.decision
        return f"{self.where}: {self.kind} on {d.value}{took} ({d.rule_id}: {d.rule}{how})"


@dataclass
class Route:
    """The engine route of one session: its cluster's facts, the setting, and what it ran."""

    client: Any
    family: Any
    where: engine_plan.Where
    setting: str
    source: str
    queries: list[Query] = field(default_factory=list)
    _warming: Any = None
    _gpus: Any = None
    """cudf-polars' ``DaskEngine`` (:class:`gpuscale.engines.run.GpuWorkers`), made when first
    asked."""

    @classmethod
    def of(cls, session) -> Route:
        """The route of an open ``session``: its cluster's facts (:class:`engine_plan.Where`)
        and its ``session.engine`` setting."""
        workers = _dask_compat.workers(session.client)
        family = session.family
        where = engine_plan.Where(
            family.name,
            family.on_device,
            session.spec.kind,
            len(workers),
            _capacity(session, workers),
            _unavailable(family),
        )
        source = session.resolved.sources.get(engine_plan.SETTING, "default")
        return cls(session.client, family, where, session.settings.session.engine, source)

    @contextlib.contextmanager
    def scope(self) -> Iterator[Route]:
        self._warming = self._warm()  # kept while the block is open
        try:
            with _dask_compat.computes_through(self):
                yield self
        finally:
            if self._gpus is not None:
                self._gpus.close()

    def _warm(self):
        """Each GPU worker's cudf-polars made ready in the background as the block opens
        (futures, kept while the block is open; None where there is nothing to warm)."""
        if self.setting == "dask" or self.decide(None, None).value not in ("polars-gpu", "polars-gpus"):
            return None
        from . import run

        # over several GPU workers a plan one GPU holds runs on one of them (rule engine.one-gpu)
        return [
            self.client.submit(run.warm_gpu_worker, pure=False, workers=[w], allow_other_workers=False)
            for w in _dask_compat.workers(self.client)
        ]

    # -- the router ------------------------------------------------------------------
    def __call__(self, how: str, call, args: tuple, kwargs: dict):
        site = _user_site()
        if site is None:
            return call(*args, **kwargs)
        if kwargs.get("scheduler") is not None:  # another scheduler, asked for by name
            return call(*args, **kwargs)
        if how == "persist-one":
            colls, repack = [args[0]], lambda subs: (subs[0],)
        else:
            colls, repack = _dask_compat.expr_collections(args, kwargs.get("traverse", True))
        picked = [i for i, c in enumerate(colls) if _dask_compat.is_frame_collection(c)]
        if how != "compute":
            picked = [i for i in picked if _kind(colls[i]) != "Scalar"]
        if not picked:
            return call(*args, **kwargs)
        subs = list(colls)
        for i, value in self._answer(how, [colls[i] for i in picked], site).items():
            subs[picked[i]] = value
        new = repack(subs)
        if how == "persist-one":
            return call(new[0], *args[1:], **kwargs)
        return call(*new, **kwargs)

    def _answer(self, how: str, colls: list, site: str) -> dict[int, Any]:
        """Each collection's answer (compute) or its engine-made collection (persist), by its
        position in ``colls``; those left out run on Dask."""
        if self.setting == "dask":
            for c in colls:
                d = self.decide(None, None)
                self.queries.append(Query(site, _kind(c), d, how=how))
            return {}
        from . import answer, footprint
        from .from_dask import Translator, Untranslatable

        t = Translator()
        lowered, reasons = {}, {}
        for i, c in enumerate(colls):
            try:
                lowered[i] = t.lower(c.expr)
            except Untranslatable as e:
                reasons[i] = str(e)
            except Exception as e:  # noqa: BLE001 - a translation that breaks is no translation
                reasons[i] = f"the translation failed ({type(e).__name__}: {_one_line(e)})"
        reads = footprint.read_bytes(t.reads) if lowered else None
        decided = {i: self.decide(reasons.get(i), reads) for i in range(len(colls))}
        if self.setting == "polars":
            for i, why in reasons.items():
                raise UserError(
                    f"{site}: session.engine is polars, and this {_kind(colls[i])} has {why}",
                    "set engine='auto' (Dask runs what Polars cannot) or change that step",
                )
        engine_of = {i: d.value for i, d in decided.items() if d.value != "dask"}
        out: dict[int, Any] = {}
        failed = None
        seconds = None
        executor = None
        if engine_of:
            chosen = [i for i in engine_of]
            plans = [answer.plan(lowered[i], colls[i]._meta) for i in chosen]
            engine = next(iter(engine_of.values()))
            if engine == "polars-gpu":
                executor = engine_plan.executor(self.where, reads)
            t0 = time.perf_counter()
            try:
                made = self._run(engine, plans, how, colls, chosen, executor)
            except UserError:
                raise
            except Exception as e:  # noqa: BLE001 - the engine cannot: Dask answers instead
                failed = f"{type(e).__name__}: {_one_line(e)}"
                for i in chosen:
                    decided[i] = Decision(
                        "dask",
                        "rule",
                        f"{engine_of[i]} failed ({failed}); Dask answered",
                        "engine.failed",
                        dict(decided[i].numbers),
                        documented=True,
                    )
            else:
                seconds = time.perf_counter() - t0
                out = dict(zip(chosen, made))
        for i, d in decided.items():
            self.queries.append(
                Query(
                    site,
                    _kind(colls[i]),
                    d,
                    seconds if i in out else None,
                    reads,
                    "persist" if how == "persist-one" else how,
                    failed if d.rule_id == "engine.failed" else None,
                    _executor(executor) if i in out else None,
                )
            )
        return out

    def decide(self, untranslatable: str | None, reads: int | None) -> Decision:
        return engine_plan.decide(self.setting, self.source, self.where, untranslatable, reads)

    def _run(self, engine: str, plans: list, how: str, colls: list, chosen: list[int], executor) -> list:
        from . import run

        if engine == "polars":
            answers = run.on_cpu(plans)
            if how == "compute":
                return answers
            import dask.dataframe as dd

            return [dd.from_pandas(a, npartitions=1) for a in answers]
        if engine == "polars-gpu":
            fut = self.client.submit(run.on_gpu_worker, plans, executor.value, pure=False)
            if how == "compute":
                return fut.result()
            import dask.dataframe as dd

            fut.result()  # the engine's error here, not in the user's next compute
            return [
                dd.from_delayed(
                    [self.client.submit(operator.getitem, fut, k, pure=False)],
                    meta=colls[i]._meta,
                    verify_meta=False,
                )
                for k, i in enumerate(chosen)
            ]
        if self._gpus is None:
            self._gpus = run.GpuWorkers(self.client)
        answers = self._gpus.collect(plans)
        if how == "compute":
            return answers
        import dask.dataframe as dd

        return [dd.from_pandas(a, npartitions=1) for a in answers]

    # -- what it says ----------------------------------------------------------------
    def explain(self, collection) -> dict[str, Any]:
        """The engine a compute of ``collection`` would take here and why, with Polars' plan
        where it has one; nothing runs."""
        if not _dask_compat.is_frame_collection(collection):
            raise UserError(
                f"explain takes a Dask DataFrame, Series or scalar, got {type(collection).__name__}",
                "give the collection you would compute",
            )
        from . import answer, footprint
        from .from_dask import Translator, Untranslatable

        t = Translator()
        plan_text = reason = None
        try:
            lowered = t.lower(collection.expr)
            plan_text = answer.plan(lowered, collection._meta).lf.explain()
        except Untranslatable as e:
            reason = str(e)
        except Exception as e:  # noqa: BLE001
            reason = f"the translation failed ({type(e).__name__}: {_one_line(e)})"
        reads = footprint.read_bytes(t.reads) if reason is None else None
        d = self.decide(reason, reads)
        ex = engine_plan.executor(self.where, reads) if d.value == "polars-gpu" else None
        return {
            "engine": d.value,
            "rule_id": d.rule_id,
            "why": d.rule,
            "source": d.source,
            "reads_bytes": reads,
            "numbers": dict(d.numbers),
            "executor": _executor(ex),
            "plan": plan_text,
        }


def _capacity(session, workers: dict) -> int | None:
    """Memory an engine has for one plan: the GPUs' (the GPU family), else this machine's
    available memory (a cluster started here); None: unknown."""
    if session.family.on_device:
        from .. import machine

        by_index = {g["index"]: g["memory_bytes"] for g in machine.gpus()}
        return sum(by_index.get(i, 0) for i in (session.spec.gpus or [])) or None
    if session.spec.kind != "local":
        return None
    import psutil

    return int(psutil.virtual_memory().available)


def _unavailable(family) -> str | None:
    """Why ``family``'s engine for translated DataFrame plans cannot run here; None: it can
    (Polars for a host family, cudf-polars for one of cuDF DataFrames)."""
    import importlib.util

    if not family.on_device:
        return None
    if family.dataframe_module != "cudf":
        return f"the {family.name} family's DataFrames are {family.dataframe_module}'s, not cuDF's"
    if importlib.util.find_spec("cudf_polars") is None:
        return "cudf-polars is not installed (pip install cudf-polars-cu13)"
    return None


def _executor(d: Decision | None) -> str | None:
    return f"{d.value} ({d.rule_id}: {d.rule})" if d is not None else None


def _kind(c) -> str:
    name = type(c).__name__
    return name if name in ("DataFrame", "Series", "Scalar") else "DataFrame"


def _one_line(e: BaseException) -> str:
    return ((str(e).strip().splitlines() or [""])[0])[:200]


_OWN = ("gpuscale._dask_compat", "gpuscale.engines")


def _user_site() -> str | None:
    """``file:line`` of the user's code that computed; None when gpuscale's own code did
    (its workloads run their own Dask plans)."""
    from ..backends.host_collections import call_site

    f = sys._getframe(1)
    while f is not None and any((f.f_globals.get("__name__") or "").startswith(m) for m in _OWN):
        f = f.f_back
    site = call_site(f) if f is not None else None
    return f"{site[0]}:{site[1]}" if site else None
