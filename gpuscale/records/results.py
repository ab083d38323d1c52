"""Result records: one versioned JSON file per run, written atomically, never overwritten.

A record holds what ran (workload, parameters, backend and the family it selected, every
tuned choice with its source and rule, protocol, the resolved cluster spec), what it took
(every timing, median, min, start-up and generation), whether it was right (the
validation with each check), and where (versions and hardware), plus a timestamp.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import uuid
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictBool, field_validator

from .. import atomic, fielddocs, trust
from ..errors import RecordNotWritten, UserError
from .report import result_html

SCHEMA = "gpuscale.result"
SCHEMA_VERSION = 1

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A duration in a record: a finite number of seconds, not negative."""


class Result(BaseModel):
    """One run's record (schema ``gpuscale.result``): a field's docstring is its description, and
    the record reference (docs/reference/records.md) is generated from this model."""

    model_config = ConfigDict(populate_by_name=True)

    schema_name: str = Field(SCHEMA, alias="schema")
    """Always ``gpuscale.result``."""
    schema_version: int = SCHEMA_VERSION
    """The schema's version; readers skip records of another."""
    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])
    """A random id, also in the file name."""
    timestamp: str = Field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat())
    """When the run ended (UTC, ISO 8601)."""
    workload: str
    """The workload's name (``gpuscale workloads`` lists them)."""
    params: dict[str, Any]
    """The workload's parameters, defaults filled in."""
    data: dict[str, Any] = Field(default_factory=dict)
    """Your data, when the run was on it: its source, shape or columns, dtypes."""
    backend: str
    """The backend asked for (``auto``, ``cpu``, ``gpu``, ``numpy``...)."""
    family: str
    """The family that ran it (``cpu`` or ``gpu``)."""
    backend_reason: str
    """Why that family: what ``auto`` found, or the flag."""
    protocol: str
    """How the workers talked (``tcp``, ``ucx``)."""
    knobs: dict[str, Any]
    """The tuned values the run used (chunk sizes, plan, threads...)."""
    choices: dict[str, dict[str, Any]]
    """Every tuned choice with its value, source and rule."""
    cluster: dict[str, Any]
    """The resolved cluster spec, its hosts and workers, TLS, the preflight and the transport
    per worker pair."""
    settings_sources: dict[str, str] = Field(default_factory=dict)
    """Where each setting came from (default, profile, env, flag...)."""
    times_s: list[Seconds]
    """Every timed repeat, in seconds."""
    warmup_s: list[Seconds]
    """The warm-up repeats, in seconds."""
    median_s: Seconds
    """Median of the timed repeats (disturbed repeats left out)."""
    min_s: Seconds
    """Fastest timed repeat (disturbed repeats left out)."""
    stdev_s: Seconds | None = None
    """Sample standard deviation of ``times_s`` (None with fewer than 2 repeats, or in older records)."""
    iqr_s: Seconds | None = None
    """Interquartile range of ``times_s`` (Q3 - Q1, inclusive quartiles; None with fewer than 2
    repeats, or in older records)."""
    repeats: dict[str, Any] | None = None
    """How many timed repeats were taken and why they stopped: ``mode`` (fixed / auto),
    ``taken``, ``stopped`` (fixed / target / max-repeats / max-time), ``why`` (a sentence),
    ``relative_error`` of the median, and for auto its target and caps
    (:mod:`gpuscale.runs.repeats`); None in older records."""
    startup_s: Seconds | None = None
    """Seconds to start the cluster, or to connect to a running one."""
    generate_s: Seconds
    """Seconds to generate or load the data."""
    validate_s: Seconds
    """Seconds the validation took."""
    valid: StrictBool | None
    """None when validation was switched off (``--validate off``)."""
    validation: dict[str, Any]
    """Each validation check with its numbers."""
    info: dict[str, Any] = Field(default_factory=dict)
    """More about the run: ``time_split``, ``disturbed_repeats``, ``dask_log``, ``output``..."""
    memory: dict[str, Any] = Field(default_factory=dict)
    """estimate_bytes / capacity_bytes, and the headroom check: the estimate by part, per
    worker, against the smallest worker's limit (``runner.headroom``)."""
    versions: dict[str, Any]
    """Versions of Python, gpuscale, Dask and the chunk libraries."""
    hardware: dict[str, Any]
    """The hardware the run saw: CPU, memory, GPUs."""
    dashboard_link: str | None = None
    """Where the run's dashboard was during the run (None: the cluster had none)."""
    dashboard_link_live: bool | None = None
    """Whether ``dashboard_link`` still led to that dashboard when this object was made: True
    from a session whose cluster is still up; False once gpuscale closed the cluster it started
    (what ``gpuscale run`` prints: the cluster closes before the result is shown, unless
    ``--dashboard`` holds it) and in a record read back from its file; None in a file of a run
    on a running cluster (``--scheduler``), which gpuscale did not close and cannot vouch for
    (:func:`link_live_after_run`)."""
    trace: str | None = None
    """The trace folder of this run (``--trace DIR``), if one was captured."""
    audit: dict[str, Any] | None = None
    """The backend audit (schema ``gpuscale.audit``, :mod:`gpuscale.audit`): task output types
    by prefix, foreign chunks with their fixes, family changes; None in older records."""
    explained: dict[str, dict[str, Any]] | None = None
    """Every tuned knob by scope (cluster / family / workload): value, source and, when a rule
    chose it, the rule with its numbers (:mod:`gpuscale.records.explained`); None in older records."""
    path: str | None = None
    """Where this record was read from or written to."""
    _owner: int | None = PrivateAttr(default=None)

    @field_validator("timestamp")
    @classmethod
    def _iso_time(cls, v: str) -> str:
        _dt.datetime.fromisoformat(v)  # ValueError: not a time
        return v

    @property
    def owner(self) -> int | None:
        """The uid that owns the file this record was read from (None: not read from a file)."""
        return self._owner

    @owner.setter
    def owner(self, uid: int | None) -> None:
        self._owner = uid

    @property
    def foreign(self) -> bool:
        """Read from a file another user owns: its numbers are theirs to make up."""
        return self._owner is not None and self._owner != os.geteuid()

    @classmethod
    def build(cls, **kw) -> "Result":
        return cls(**{**summary(kw["times_s"]), **kw})

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    @property
    def short_id(self) -> str:
        """The id ``results list`` and the run summary show (``results show ID`` takes it)."""
        return self.id[:SHORT_ID]

    def _repr_html_(self) -> str:
        return result_html(self)


fielddocs.describe(Result)  # a field's docstring is its description


def summary(times: list[float], disturbed: dict[int, str] | None = None) -> dict[str, float | None]:
    """median / min / stdev / IQR of the timed repeats, leaving out the ``disturbed`` ones
    (index -> why: workers lost or joined, tasks recomputed, other clients' tasks) while at
    least one undisturbed repeat is left; :func:`disturbed_info` says which were left out."""
    clean = [t for i, t in enumerate(times) if i not in (disturbed or {})] or list(times)
    return {"median_s": statistics.median(clean), "min_s": min(clean), **spread(clean)}


def disturbed_info(times: list[float], disturbed: dict[int, str] | None) -> dict[str, Any]:
    """The record's ``info.disturbed_repeats`` (empty dict when none were)."""
    if not disturbed:
        return {}
    left_out = len(disturbed) < len(times)
    return {
        "disturbed_repeats": {
            "repeats": {str(i): why for i, why in sorted(disturbed.items())},
            "left_out_of_median": left_out,
            "note": (
                f"{len(disturbed)} of {len(times)} timed repeat(s) were disturbed (workers lost or "
                f"joined, tasks recomputed, other clients' tasks: each one's reason is under repeats); "
                + (
                    "median, min, stdev and IQR leave them out"
                    if left_out
                    else "every repeat was disturbed, so the statistics keep them all"
                )
            ),
        }
    }


def spread(times: list[float]) -> dict[str, float | None]:
    """How far the repeats spread: sample standard deviation and interquartile range
    (``statistics.quantiles(method="inclusive")``); None for both with fewer than 2 repeats."""
    if len(times) < 2:
        return {"stdev_s": None, "iqr_s": None}
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return {"stdev_s": statistics.stdev(times), "iqr_s": q3 - q1}


def link_live_after_run(r: Result) -> bool | None:
    """``dashboard_link_live`` of a record once its run is over: False when gpuscale started
    (and so closed) the cluster, None for a running cluster it only connected to, None
    without a link."""
    return None if not r.dashboard_link or (r.cluster or {}).get("kind") == "existing" else False


RECORD_SPACE_BYTES = 1 << 20
"""Free space a results dir must have before a run starts (a record is tens of KB; an audit or
many repeats make it larger)."""


def check_writable(results_dir: str | os.PathLike) -> pathlib.Path:
    """Fail before any work starts if records cannot be written there: not writable, or less
    than :data:`RECORD_SPACE_BYTES` free."""
    try:
        d = atomic.own_folder(results_dir, "results dir", flag="--results-dir")  # never another user's
        with tempfile.NamedTemporaryFile(dir=d, prefix=".gpuscale-probe-"):
            pass
        free = shutil.disk_usage(d).free
    except OSError as e:
        d = pathlib.Path(results_dir).expanduser()
        raise UserError(
            f"results dir '{d}' is not writable ({e.strerror or e})",
            "pass --results-dir to a writable folder",
        ) from None
    if free < RECORD_SPACE_BYTES:
        raise UserError(
            f"results dir '{d}' has {free} bytes free, less than the {RECORD_SPACE_BYTES} a record may need",
            "free some space there or pass --results-dir to another disk",
        )
    return d


def write(result: Result, results_dir: str | os.PathLike) -> pathlib.Path:
    """Write ``result`` as JSON under ``results_dir``: atomically (a temp file, removed on any
    failure, then linked to its name), and never over a file. When it cannot be written (the
    disk filled up during the run, the folder went away) raise :class:`RecordNotWritten`,
    which holds the record as one line of JSON so the caller can still show it."""
    d = pathlib.Path(results_dir).expanduser()
    stamp = result.timestamp.replace(":", "").replace("-", "").split(".")[0]
    final = d / f"{stamp}-{result.workload}-{result.family}-{result.protocol}-{result.id}.json"
    result.path = str(final)
    try:
        atomic.own_folder(d, "results dir")  # as checked before the run: it may have changed since
        with atomic.written(final, text=True) as (f, _):  # never over a file
            f.write(result.model_copy(update={"dashboard_link_live": link_live_after_run(result)}).to_json())
    except (OSError, UserError) as e:  # UserError: a link or another user's file where it goes
        result.path = None
        raise RecordNotWritten(
            str(d), getattr(e, "strerror", None) or str(e), json.dumps(result.to_dict(), default=str)
        ) from None
    return final


def find(*paths: str | os.PathLike) -> list[Result]:
    """Every record in these files or folders (folders searched recursively), newest first (by
    timestamp). In a folder, JSON files that are not records are skipped, and a record that
    cannot be read (cut short, edited by hand, of another schema version) is named in one
    warning line; a file given by name that is not a record is a UserError."""
    found: dict[str, Result] = {}
    for root in paths:
        root = pathlib.Path(root).expanduser()
        if not root.exists():
            raise UserError(f"'{root}' does not exist", "give a results folder or a record file")
        named = root.is_file()
        for f in [root] if named else sorted(root.rglob("*.json")):
            if f.name.startswith(".tmp-"):
                continue
            try:
                r = _read(f, named)
            except _Unreadable as e:
                sys.stderr.write(f"gpuscale: warning: skipped {f}: {e}\n")
                continue
            if r is not None:
                found[str(f.resolve())] = r
    return sorted(found.values(), key=lambda r: r.timestamp, reverse=True)


class _Unreadable(ValueError):
    """A file in a results folder that holds, or held, a record that cannot be read: why."""


def _read(f: pathlib.Path, named: bool) -> Result | None:
    """The record in ``f``; None for a file of a folder that is not one (another JSON file, a
    FIFO, a device, a runaway file). Raises :class:`_Unreadable` (a folder's file) or UserError
    (``named``: the file asked for) where it is or was a record that cannot be read."""

    def unreadable(why: str):
        if named:
            return UserError(f"{f} is {why}", "give a record as `gpuscale run` wrote it")
        return _Unreadable(why)

    try:
        data, owner = _read_record(f)
    except UserError:
        if named:
            raise
        return None
    except OSError:
        return None
    except ValueError as e:
        raise unreadable(f"not a record: {e}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        if named:
            raise UserError(f"{f} is not a gpuscale result record", "give a file written by `gpuscale run`")
        return None
    if data.get("schema_version") != SCHEMA_VERSION:
        raise unreadable(
            f"a record of schema version {str(data.get('schema_version'))[:20]}; this "
            f"gpuscale reads schema version {SCHEMA_VERSION}"
        )
    try:
        r = Result.model_validate(data)
    except ValueError as e:  # edited by hand
        raise unreadable(_invalid(e)) from None
    r.path = str(f)
    r.owner = owner
    r.dashboard_link_live = link_live_after_run(r)
    return r


def latest(results_dir: str | os.PathLike, *, with_trace: bool = False, with_audit: bool = False) -> Result:
    """ "The latest run": the newest record under ``results_dir`` (by timestamp), or the newest
    whose trace folder is still there (``with_trace``) / that holds a backend audit
    (``with_audit``); what ``trace summarize`` and ``audit report`` read when given no path."""
    d = pathlib.Path(results_dir).expanduser()
    if not d.is_dir():
        raise UserError(
            f"no records: the results dir '{d}' does not exist",
            "run a workload first (gpuscale run WORKLOAD), or give a path",
        )
    recs = find(d)
    if with_trace:
        recs = [
            r for r in recs if r.trace and (pathlib.Path(r.trace).expanduser() / "summary.json").is_file()
        ]
    if with_audit:
        recs = [r for r in recs if r.audit]
    if not recs:
        what = (
            "no record with a trace folder that is still there"
            if with_trace
            else "no record with a backend audit"
            if with_audit
            else "no records"
        )
        fix = (
            "run a workload with --trace DIR, or give a trace folder"
            if with_trace
            else "run a workload first (gpuscale run WORKLOAD), or give a path"
        )
        raise UserError(f"{what} under '{d}'", fix)
    return recs[0]


MAX_RECORD_BYTES = 64 << 20
"""A record is read only up to this size (records are a few KiB to a few MiB)."""


def _read_record(path: str | os.PathLike) -> tuple[Any, int]:
    """A record's JSON, its text free of control characters, and the uid that owns its file: a
    regular file of at most :data:`MAX_RECORD_BYTES` (a FIFO named like a record does not hang
    the reader, a link to ``/dev/zero`` does not fill its memory)."""
    with trust.open_regular(path, "record") as f:
        owner = os.fstat(f.fileno()).st_uid
    data = trust.read_trusted(path, "record", trusted=True, limit=MAX_RECORD_BYTES)
    try:
        return _printable(json.loads(data)), owner
    except RecursionError:
        raise ValueError("its JSON is nested deeper than Python reads") from None
    except ValueError as e:  # cut short, not UTF-8
        raise ValueError(f"not JSON ({str(e)[:100]})") from None


_CONTROL = {c: "\ufffd" for c in [*range(0, 9), *range(11, 32), 127, *range(128, 160)]}
"""Control characters (C0 but tab and newline, DEL, C1) as they read in a record: replaced, so
that a record printed to a terminal cannot send it escape sequences."""


def _printable(x: Any) -> Any:
    if isinstance(x, str):
        return x.translate(_CONTROL)
    if isinstance(x, list):
        return [_printable(v) for v in x]
    if isinstance(x, dict):
        return {_printable(k): _printable(v) for k, v in x.items()}
    return x


def load(path: str | os.PathLike) -> Result:
    """The record in the file ``path``; UserError where it is not one this gpuscale reads."""
    return _read(pathlib.Path(path), named=True)


def _invalid(e: ValueError) -> str:
    """Why a file of the record schema is not a record, in a few words: its first bad field."""
    errs = getattr(e, "errors", None)
    first = errs()[0] if callable(errs) and errs() else None
    if first is None:
        return "not a valid record"
    where = ".".join(str(x) for x in first.get("loc", ())) or "(top level)"
    return f"not a valid record ({where}: {first.get('msg', '')})"[:200]


SHORT_ID = 8
"""Characters of a record's id that tables show (``results list``, the run summary); any
unique prefix of an id names its record (:func:`by_id`)."""


def short_id(r: Result) -> str:
    return r.short_id


def by_id(ref: str, results_dir: str | os.PathLike) -> Result:
    """The record under ``results_dir`` whose id starts with ``ref`` (the id ``results list``
    and the run summary show)."""
    d = pathlib.Path(results_dir).expanduser()
    found = [r for r in find(d) if r.id.startswith(ref)] if d.is_dir() and ref else []
    if len({r.id for r in found}) == 1:  # one record (maybe copied into two folders there)
        return found[0]
    if found:
        raise UserError(
            f"record id '{ref}' is ambiguous under '{d}': "
            + ", ".join(f"{r.id} ({r.workload})" for r in found[:5]),
            "give more of the id",
        )
    raise UserError(
        f"'{ref}' is neither a path nor the id of a record under '{d}'",
        "see `gpuscale results list` for the ids, or give a path",
    )


def locate(ref: str | os.PathLike, results_dir: str | os.PathLike) -> str:
    """A path as given when it exists, else the path of the record whose id it is."""
    if pathlib.Path(ref).expanduser().exists():
        return str(ref)
    return by_id(str(ref), results_dir).path
