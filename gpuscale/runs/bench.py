"""A benchmark sweep described in YAML (``gpuscale bench SPEC.yaml --out DIR``).

The spec (``workflows/library.yaml``, ``workflows/tiny.yaml``)::

    name: tiny                     # names the report
    backends: [cpu, gpu]           # each a --backend value
    protocols: [auto]              # each a --protocol value
    workers: [null, 2]             # null: the family's default
    repeat: 5                      # timed repeats per case (default 3), or auto (run.auto-repeat)
    warmup: 1                      # untimed runs per case (default 1)
    memory_check: true             # refuse sizes that cannot fit (default true)
    cluster: {threads_per_worker: 1}   # other cluster settings (config.KEYWORDS), every cluster
    workloads:
      transpose_sum:
        sizes: [{n: 400}, {n: 800}]    # each a size: the parameters that set it
        grid: {dtype: [float32, float64]}   # more parameters, every combination
        params: {seed: 1}              # fixed parameters

Cases are workloads x sizes x grid x backends x protocols x worker counts; one cluster serves
every case of one (backend, protocol, workers, collection). A failing case is recorded in the
ledger (:mod:`gpuscale.records.folder`) and the sweep goes on; a re-run into the same folder
runs only the cases without a record.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import pathlib
import re
from typing import Any, Callable, ContextManager, Iterator, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, field_validator

from .. import config, trust, workloads
from ..errors import UserError, shown
from ..records import folder, results
from ..records.table import size_label
from . import session as session_mod


class WorkloadSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sizes: list[dict[str, Any]] = Field(default_factory=lambda: [{}], min_length=1)
    """Each a size: the parameters that set it (the charts' labels)."""
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    """More parameters: every combination of their values."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Fixed parameters, every case."""


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "bench"
    workloads: dict[str, WorkloadSpec | None] = Field(min_length=1)
    backends: list[str] = Field(default_factory=lambda: ["cpu"], min_length=1)
    protocols: list[str] = Field(default_factory=lambda: ["auto"], min_length=1)
    workers: list[int | None] = Field(default_factory=lambda: [None], min_length=1)
    repeat: Union[PositiveInt, Literal["auto"]] = 3
    warmup: int = Field(1, ge=0)
    memory_check: bool = True
    cluster: dict[str, Any] = Field(default_factory=dict)
    """Other cluster settings for every cluster, by their keyword names (``threads_per_worker``)."""

    @field_validator("repeat", mode="before")
    @classmethod
    def _repeat(cls, v):
        return config.repeat_value(v)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        """A name, not a path: it names the default bench folder (``bench-NAME``)."""
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}", v) or ".." in v:
            raise ValueError(
                "must be a name of letters, digits, '.', '_' and '-' (no '/' or '..'), at most 80 "
                "characters: it names the default folder bench-NAME"
            )
        return v


SWEEP_SETS = ("results_dir", "strict_backend", "in_cluster")
"""Run keywords the sweep sets itself (records under ``--out``, the runner in this process)."""


def cluster_keywords() -> list[str]:
    """The keywords ``cluster:`` may hold: every setting's but the spec's own and :data:`SWEEP_SETS`."""
    own = {k for k in config.KEYWORDS if k in Spec.model_fields or f"{k}s" in Spec.model_fields}
    return sorted(set(config.KEYWORDS) - own - set(SWEEP_SETS))


def _spec_error(path: str, e: ValidationError) -> UserError:
    err = e.errors()[0]
    loc = list(err["loc"])
    if loc and loc[-1] in ("WorkloadSpec",):
        loc = loc[:-1]
    where = ".".join(shown(x, 80)[1:-1] if isinstance(x, str) else str(x) for x in loc) or "(top level)"
    if err["type"] == "extra_forbidden":
        parent = Spec if len(loc) == 1 else WorkloadSpec
        return UserError(
            f"{path}: unknown key {shown(loc[-1], 80)} at {where}",
            f"allowed keys there: {', '.join(parent.model_fields)}",
        )
    if err["type"] == "missing":
        return UserError(
            f"{path}: the key '{where}' is missing", "e.g. workloads: {svd: {sizes: [{rows: 20000}]}}"
        )
    return UserError(
        f"{path}: {where}: {err['msg'].removeprefix('Value error, ')} (got {shown(err.get('input'))})",
        "see the spec format in gpuscale/runs/bench.py or workflows/tiny.yaml",
    )


def _id(case: dict[str, Any]) -> str:
    """A case's id: a hash of what it runs, its labels (size, family, collection) left out."""
    body = {k: v for k, v in case.items() if k not in ("size", "family", "collection")}
    return hashlib.sha1(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:12]


def load_spec(path: str | os.PathLike) -> tuple[Spec, list[dict[str, Any]]]:
    """Read and check a spec; returns it and its cases (dicts: id, workload, size, params,
    backend, family, protocol, workers, collection, ...). Starts nothing."""
    import yaml

    p = pathlib.Path(path)
    if not p.is_file():
        raise UserError(f"no spec file '{p}'", "give a YAML file, e.g. workflows/tiny.yaml")

    trust.warn_if_others_can_change(p, "bench spec")
    try:
        raw = trust.load_yaml(trust.read_bounded(p, "bench spec"), f"bench spec {p}")
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise UserError(
            f"{p}: not valid YAML{at} ({getattr(e, 'problem', None) or e})", "fix the YAML syntax"
        ) from None
    if not isinstance(raw, dict):
        raise UserError(
            f"{p}: the spec must be a mapping with a 'workloads' key",
            "e.g. workloads: {svd: {sizes: [{rows: 20000}]}}",
        )
    try:
        spec = Spec.model_validate(raw)
    except ValidationError as e:
        raise _spec_error(str(p), e) from None
    allowed = cluster_keywords()
    bad = sorted(set(spec.cluster) - set(allowed))
    if bad:
        raise UserError(
            f"{p}: unknown key {shown(bad[0], 80)} at cluster",
            f"cluster settings: {', '.join(allowed)}; backends / protocols / workers / repeat / "
            "warmup / memory_check are top-level keys",
        )
    families = {}
    clusters = list(itertools.product(spec.backends, spec.protocols, spec.workers))
    for backend, protocol, workers in clusters:
        try:
            _, selection, _ = session_mod.configure(
                check=False, backend=backend, protocol=protocol, workers=workers, **spec.cluster
            )
        except UserError as e:
            raise UserError(f"{p}: backends / protocols / workers / cluster: {e.problem}", e.fix) from None
        families[backend] = selection.family.name
    cases = []
    for name, wspec in spec.workloads.items():
        try:
            cls = workloads.get(name)
        except UserError as e:
            raise UserError(f"{p}: workloads.{name}: {e.problem}", e.fix) from None
        wspec = wspec or WorkloadSpec()
        grid_keys = list(wspec.grid)
        known = set(cls.Params.model_fields)
        sections = [
            ("params", wspec.params),
            *((f"sizes[{i}]", s) for i, s in enumerate(wspec.sizes)),
            ("grid", wspec.grid),
        ]
        for section, keys in sections:
            for k in keys:
                if str(k).replace("-", "_") not in known:
                    raise UserError(
                        f"{p}: unknown parameter '{k}' at workloads.{name}.{section}",
                        f"{name}'s parameters: {', '.join(sorted(known))}",
                    )
        for si, size in enumerate(wspec.sizes):
            for combo in itertools.product(*(wspec.grid[k] for k in grid_keys)):
                params = {**wspec.params, **size, **dict(zip(grid_keys, combo))}
                try:
                    cls.parse(params)
                except UserError as e:
                    raise UserError(
                        f"{p}: workloads.{name} (sizes[{si}] with params / grid: {shown(params, 200)}): "
                        f"{e.problem}",
                        e.fix,
                    ) from None
                label = size_label({**size, **dict(zip(grid_keys, combo))})
                for backend, protocol, workers in clusters:
                    case = {
                        "workload": name,
                        "size": label,
                        "params": params,
                        "backend": backend,
                        "family": families[backend],
                        "protocol": protocol,
                        "workers": workers,
                        "collection": cls.collection,
                        "cluster": spec.cluster,
                        "repeat": spec.repeat,
                        "warmup": spec.warmup,
                        "memory_check": spec.memory_check,
                    }
                    case["id"] = _id(case)
                    cases.append(case)
    return spec, cases


CaseProgress = Callable[[str, int], ContextManager[Callable[[dict[str, Any]], None]]]
"""How a caller watches the cases: a context manager around the sweep yielding the function
called after each case with its ledger entry (:func:`gpuscale.records.report.sweep_progress`)."""


@contextlib.contextmanager
def _silent(description: str, total: int) -> Iterator[Callable[[dict[str, Any]], None]]:
    yield lambda case: None


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def run(
    spec_path: str | os.PathLike, out: str | os.PathLike, *, progress: CaseProgress | None = None
) -> dict[str, Any]:
    """Run the sweep of ``spec_path`` into ``out`` (resuming what is there), then write the
    table, charts and report.html: ``{"cases", "ran", "skipped", "failed", "not_here",
    "outputs"}``. Cases that cannot run on this machine are ``not here``, not failed."""
    spec, cases = load_spec(spec_path)
    out = pathlib.Path(out)
    previous = folder.read_ledger(out) if out.exists() else None
    old = {c["id"]: c for c in (previous or {}).get("cases", [])}

    results.check_writable(folder.records_dir(out))
    ledger = []
    for c in cases:
        prev = old.get(c["id"])
        ledger.append(
            {**c, **{k: prev.get(k) for k in ("status", "record", "error", "median_s", "valid")}}
            if prev is not None and folder.finished(prev, out)
            else {**c, "status": None}
        )
    spec_dict = spec.model_dump(mode="json")
    folder.write_ledger(out, spec_dict, ledger)
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for c in ledger:
        groups.setdefault((c["backend"], c["protocol"], c["workers"], c["collection"]), []).append(c)
    counts = {"ran": 0, "skipped": 0, "failed": 0, "not_here": 0}
    with (progress or _silent)(f"bench {spec.name}", len(ledger)) as advance:
        for (backend, protocol, workers, collection), group in groups.items():
            todo = [c for c in group if not folder.finished(c, out)]
            for c in group:
                if folder.finished(c, out):
                    counts["skipped"] += 1
                    advance({**c, "status": "skipped"})
            if not todo:
                continue
            _run_group(
                spec, out, ledger, spec_dict, todo, backend, protocol, workers, collection, advance, counts
            )
    return {"cases": ledger, **counts, "outputs": folder.redraw(out)}


def _run_group(spec, out, ledger, spec_dict, todo, backend, protocol, workers, collection, advance, counts):
    def done(c, **what):
        c.update(what)
        counts["failed" if c["status"] == "failed" else "ran"] += 1
        folder.write_ledger(out, spec_dict, ledger)
        advance(c)

    where = {"backend": backend, "protocol": protocol, "workers": workers, **spec.cluster}
    try:
        session_mod.configure(collection=collection, **where)  # can the family run here at all?
    except UserError as e:
        why = (str(e).splitlines() or [""])[0]
        for i, c in enumerate(todo):
            c.update(status="not here", error=None, record=None, why=why, group=len(todo) if i == 0 else 0)
            counts["not_here"] += 1
            advance(c)
        folder.write_ledger(out, spec_dict, ledger)
        return
    try:
        s = session_mod.Session(collection=collection, results_dir=str(out), **where)
        s.__enter__()
    except Exception as e:  # noqa: BLE001 - the sweep goes on without this cluster
        why = f"cluster did not start: {_one_line(e)}"
        for c in todo:
            done(c, status="failed", error=why, record=None)
        return
    with contextlib.closing(s):
        for c in todo:
            try:
                r = s.run(
                    c["workload"],
                    repeat=spec.repeat,
                    warmup=spec.warmup,
                    memory_check=spec.memory_check,
                    results_dir=str(folder.records_dir(out)),
                    **c["params"],
                )
            except Exception as e:  # noqa: BLE001 - one failing case must not stop the sweep
                done(c, status="failed", error=_one_line(e), record=None)
                continue
            failed = [x["name"] for x in r.validation.get("checks", []) if not x.get("ok")]
            done(
                c,
                status="ok",
                record=os.path.relpath(r.path, out),
                median_s=r.median_s,
                valid=r.valid,
                error=None
                if r.valid is not False
                else "failed validation: " + (", ".join(failed) or "see the record"),
            )
