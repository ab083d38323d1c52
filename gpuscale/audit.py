"""Backend audit: which chunk library each task's output really was, on the workers.

:class:`AuditPlugin`, a worker plugin, counts every task output stored on a worker (copies
fetched from other workers aside) by task prefix and type, with bytes, from the worker's
``TaskState`` bookkeeping (never ``worker.data``: nothing spilled is read back), and every family
change between a task and the dependencies it read. A *chunk* (an output whose type has a
``shape`` and is not a NumPy scalar) is *foreign* when its library (:func:`chunk_libraries`)
belongs to another family than the expected one. :class:`Audit` and :func:`audit` register the
plugin under a name of their own (audits may nest) and collect per phase; :func:`summarize`
builds the ``audit`` dict (schema ``gpuscale.audit`` version 1) that records, trace summaries
and ``gpuscale audit report`` share, naming the session's conversions and host fallbacks.
docs/concepts/audit.md says what the audit sees.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import threading
import uuid
from typing import Any, Iterator

from dask.utils import format_bytes
from distributed.diagnostics.plugin import WorkerPlugin

from . import backends
from .backends import chunk_libraries, host_collections
from .errors import UserError

SCHEMA = "gpuscale.audit"
SCHEMA_VERSION = 1
NOTHING_SEEN = (
    "0 tasks seen: no task ran on the cluster while the audit watched (a lazy collection "
    "is audited where it is computed or persisted inside the block), so nothing is called clean"
)
COUNTED_STARTS = frozenset({"executing", "long-running", "resumed", "released"})
"""Start states of a transition to memory that make a new output here: the task ran here, or
was scattered here (``released``); a copy fetched from another worker (``flight``) is not one."""


# -- Worker side ---------------------------------------------------------------------------
def classify(typ, owners: dict[str, str], kinds=None) -> tuple[str, str | None, str, bool]:
    """(type name, family or None, kind, is a chunk) of an output type. ``kinds``: the chunk
    libraries named as kinds (default: :func:`chunk_libraries`)."""
    if typ is None:
        return "unknown", None, "other", False
    top = (getattr(typ, "__module__", None) or "").partition(".")[0]
    name = f"{top}.{getattr(typ, '__qualname__', getattr(typ, '__name__', '?'))}" if top else str(typ)
    chunk = hasattr(typ, "shape") and not _numpy_scalar(typ)
    if kinds is None:
        kinds = chunk_libraries()
    kind = top if chunk and top in kinds else "other"
    return name, (owners.get(top) if chunk else None), kind, chunk


def _numpy_scalar(typ) -> bool:
    import numpy

    try:
        return issubclass(typ, numpy.generic)
    except TypeError:
        return False


class AuditPlugin(WorkerPlugin):
    """Counts task outputs by (prefix, type) and family changes between a task and its
    dependencies, from the worker's TaskState bookkeeping."""

    def __init__(self, owners: dict[str, str], kinds=None):
        self.owners = dict(owners)
        """top-level module -> family name (the expected family's modules first)."""
        self.kinds = tuple(kinds) if kinds is not None else None
        """The chunk libraries named as kinds (the client's :func:`chunk_libraries`)."""

    def setup(self, worker):
        self._tasks = worker.state.tasks
        self._types: dict = {}
        self._conversion_lock = threading.RLock()
        self._host_copy_keys: dict = {}
        """task key -> conversion, for tasks that output a host copy on purpose (kept across
        resets until that output is counted)."""
        self.reset()

    def reset(self) -> None:
        self.outputs: dict[tuple[str, str], list[int]] = {}
        self.changes: dict[tuple[str, str, str, str], list[int]] = {}
        with getattr(self, "_conversion_lock", contextlib.nullcontext()):
            self.conversions: dict[str, list[int]] = {}
            self.host_copies: dict[tuple[str, str, str], list[int]] = {}

    def note_conversion(self, conversion: str, nbytes: int, key=None) -> None:
        """A block of ``conversion``, from ``nbytes`` of data, was converted on this worker
        (called from the task's thread). ``key``: the running task outputs a host copy on purpose
        (:func:`gpuscale.backends.convert.host_copy`), counted as that conversion's, not foreign."""
        with self._conversion_lock:
            row = self.conversions.setdefault(conversion, [0, 0])
            row[0] += 1
            row[1] += int(nbytes)
            if key is not None:
                self._host_copy_keys[key] = conversion

    def _info(self, typ):
        info = self._types.get(typ)
        if info is None:
            info = self._types[typ] = classify(typ, self.owners, self.kinds)
        return info

    def transition(self, key, start, finish, *args, **kwargs):
        if finish != "memory" or start not in COUNTED_STARTS:
            return
        ts = self._tasks.get(key)
        if ts is None:
            return
        info = self._types.get(ts.type) or self._info(ts.type)
        nbytes = ts.nbytes or 0
        copy = None
        if self._host_copy_keys:
            with self._conversion_lock:
                copy = self._host_copy_keys.pop(key, None)
        if copy is not None:
            row = self.host_copies.setdefault((ts.prefix, info[0], copy), [0, 0])
            row[0] += 1
            row[1] += nbytes
            return
        k = (ts.prefix, info[0])
        row = self.outputs.get(k)
        if row is None:
            self.outputs[k] = [1, nbytes]
        else:
            row[0] += 1
            row[1] += nbytes
        family = info[1]
        if family is None:
            return
        for dep in ts.dependencies:
            d = self._types.get(dep.type) or self._info(dep.type)
            if d[1] is not None and d[1] != family:
                ck = (dep.prefix, d[0], ts.prefix, info[0])
                c = self.changes.get(ck)
                if c is None:
                    self.changes[ck] = [1, dep.nbytes or 0]
                else:
                    c[0] += 1
                    c[1] += dep.nbytes or 0

    def report(self, reset: bool = True) -> dict[str, Any]:
        out = {
            "outputs": [[p, t, n, b] for (p, t), (n, b) in self.outputs.items()],
            "changes": [[dp, dt, p, t, n, b] for (dp, dt, p, t), (n, b) in self.changes.items()],
            "types": {name: [fam, kind, chunk] for name, fam, kind, chunk in self._types.values()},
        }
        with getattr(self, "_conversion_lock", contextlib.nullcontext()):
            out["conversions"] = [[c, n, b] for c, (n, b) in self.conversions.items()]
            out["host_copies"] = [[p, t, c, n, b] for (p, t, c), (n, b) in self.host_copies.items()]
            if reset:
                self.reset()
        return out


def _collect(name: str, dask_worker=None) -> dict[str, Any] | None:
    plugin = dask_worker.plugins.get(name)
    return plugin.report() if plugin is not None else None


# -- Client side ---------------------------------------------------------------------------
def owners(expected) -> dict[str, str]:
    """top-level module -> family name for every registered family, ``expected``'s first."""
    own = {m: expected.name for m in (expected.array_module, expected.dataframe_module)}
    for fam in backends.families():
        for m in (fam.array_module, fam.dataframe_module):
            own.setdefault(m, fam.name)
    return own


class Audit:
    """Audit the tasks ``client``'s workers run against the ``family`` expected to run them.

    ``start()`` registers the worker plugin; ``collect(phase)`` takes (and resets) what the
    workers counted since the last collect under that phase name; ``stop()`` unregisters it.
    ``summary`` (after :meth:`finish`) is the audit dict (:func:`summarize`).
    """

    def __init__(self, client, family, *, scope: str | None = None):
        self.client = client
        self.family = family
        self.scope = scope
        self.name = f"gpuscale-audit-{uuid.uuid4().hex[:8]}"
        self.raw: dict[str, list[dict]] = {}
        self.notes: list[str] = []
        self.summary: dict[str, Any] | None = None
        self.libraries = chunk_libraries()
        self._started = False

        self._host = host_collections.current()
        """The session block's host-collection scope (its conversions), if this audit runs in one."""
        self._host_first = len(self._host.conversions) if self._host is not None else 0
        self._fallback_first = len(self._host.fallbacks) if self._host is not None else 0

    def start(self) -> "Audit":
        self.client.register_plugin(AuditPlugin(owners(self.family), self.libraries), name=self.name)
        self._started = True
        return self

    def conversions(self) -> list[dict[str, Any]]:
        """The session's conversions (``as_dict``), each marked ``made_in_audit`` or not
        (``summarize`` keeps an earlier one only where its blocks were converted during the audit)."""
        return self._marked("conversions", self._host_first)

    def fallbacks(self) -> list[dict[str, Any]]:
        """The session's host fallbacks (:mod:`gpuscale.backends.fallback`), marked as
        :meth:`conversions` marks conversions."""
        return self._marked("fallbacks", self._fallback_first)

    def _marked(self, kind: str, first: int) -> list[dict[str, Any]]:
        if self._host is None:
            return []
        with self._host.lock:
            made = list(getattr(self._host, kind))
        return [dict(x.as_dict(), made_in_audit=i >= first) for i, x in enumerate(made)]

    def collect(self, phase: str) -> None:
        got = self.client.run(_collect, self.name, on_error="return")
        bucket = self.raw.setdefault(phase, [])
        for addr, value in got.items():
            if isinstance(value, BaseException):
                self.notes.append(
                    f"worker {addr} did not report its {phase} counts ({type(value).__name__}: {value})"
                )
            elif value is None:
                self.notes.append(
                    f"worker {addr} had no audit plugin during {phase} (it joined after the audit started?)"
                )
            else:
                bucket.append(value)

    def stop(self) -> None:
        if self._started:
            self._started = False
            with contextlib.suppress(Exception):
                self.client.unregister_worker_plugin(self.name)

    def finish(self, phase: str | None = None, runs: dict[str, int] | None = None) -> dict[str, Any]:
        """Collect the last phase (if named), stop, and build the summary (``runs``: how many
        times each phase ran, e.g. warm-up + repeats for ``compute``)."""
        try:
            if phase is not None:
                self.collect(phase)
        finally:
            self.stop()
        self.summary = summarize(
            self.raw,
            self.family,
            scope=self.scope,
            notes=self.notes,
            runs=runs,
            libraries=self.libraries,
            conversions=self.conversions(),
            fallbacks=self.fallbacks(),
        )
        return self.summary


@contextlib.contextmanager
def audit(
    client, family, *, phase: str = "user", scope: str | None = None, strict: bool = False
) -> Iterator[Audit]:
    """Audit everything ``client``'s cluster runs inside the block as one phase. After the
    block ``.summary`` holds the audit; with ``strict`` foreign chunks raise
    :func:`strict_error` on leaving. An error inside the block stops the audit and
    propagates (no summary)."""
    a = Audit(client, family, scope=scope or f"code inside the audit block (phase '{phase}')").start()
    try:
        yield a
        wait_for_pending(client)  # x.persist() returns at once: its tasks belong to this block
    except BaseException:
        a.stop()
        raise
    a.finish(phase)
    if strict and a.summary["foreign_tasks"]:
        raise strict_error(a.summary)


def wait_for_pending(client) -> None:
    """Wait until every task this client has asked for so far (futures still pending, e.g.
    from ``persist()``) has finished, so an audit sees the work its block started."""
    from distributed import Future, wait

    pending = [
        Future(key, client) for key, state in list(client.futures.items()) if state.status == "pending"
    ]
    if pending:
        wait(pending)


def verdict(summary: dict[str, Any]) -> str:
    """``"clean"`` (tasks seen, none of another family), ``"foreign"`` or ``"nothing seen"``
    (no task ran on the cluster while the audit watched: nothing to call clean)."""
    if summary["foreign_tasks"]:
        return "foreign"
    return "clean" if summary["tasks"] else "nothing seen"


# -- Outputs of another family by design ---------------------------------------------------
ALLOWED: dict[str, str] = {}
"""task prefix -> why its output may be of another family (shown as ``allowed``, never
foreign): e.g. a one-float host value the client reads to choose a route."""


def allow(prefix: str, why: str) -> None:
    """Declare that tasks of ``prefix`` produce another family's chunks on purpose (small
    values the client reads, say); the audit lists them as ``allowed`` with ``why``."""
    ALLOWED[prefix] = why


# -- Fix hints -----------------------------------------------------------------------------
FIXES: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("array", "from_array", "from-array"),
        "from_array produced {type}: pass the data through s.to_backend (x = s.to_backend(a) "
        "instead of da.from_array(a))",
    ),
    (
        ("frompandas", "from_pandas", "from-pandas"),
        "from_pandas produced {type}: pass the frame through s.to_backend (ddf = s.to_backend(df) "
        "instead of dd.from_pandas(df))",
    ),
    (
        (
            "readparquet",
            "read_parquet",
            "read-parquet",
            "readcsv",
            "read_csv",
            "read-csv",
            "readjson",
            "read_json",
            "fromarrow",
            "from_arrow",
        ),
        "{prefix} read the data into {type}: read it inside the session (where dataframe.backend "
        "is the {expected} family's) or convert the collection with s.to_backend(ddf)",
    ),
    (
        ("ndarray", "dataframe", "series"),
        "{prefix} holds scattered {type} data: convert it with s.to_backend before scattering, or "
        "build it on the workers",
    ),
)


def fix_hint(prefix: str, type_name: str, expected, family: str | None) -> str:
    """The likely fix for a prefix that produced foreign ``type_name`` chunks."""
    parts = set(prefix.split("-")) | {prefix}
    modules = f"{expected.array_module} / {expected.dataframe_module}"
    for names, text in FIXES:
        if parts & set(names):
            return text.format(prefix=prefix, type=type_name, expected=expected.name, modules=modules)
    return (
        f"{prefix} returned {type_name} ({family} family) under the {expected.name} family: "
        f"build its chunks with {modules}, or convert its input with s.to_backend "
        "(NumPy / pandas data and Dask collections)"
    )


# -- The summary ---------------------------------------------------------------------------
def _direction(from_kind: str, to_kind: str, from_family: str, to_family: str, memory: dict[str, str]) -> str:
    a, b = memory.get(from_kind), memory.get(to_kind)
    if a and b and a != b:
        return f"{a} -> {b}"
    return f"{from_family} -> {to_family}"


def _tally(table: dict, key: tuple, row: dict, count: str, n: int, nbytes: int) -> None:
    r = table.setdefault(key, row)
    r[count] += n
    r["bytes"] += nbytes


def summarize(
    raw: dict[str, list[dict]],
    family,
    *,
    scope: str | None = None,
    notes: list[str] | None = None,
    runs: dict[str, int] | None = None,
    libraries: dict[str, str] | None = None,
    conversions: list[dict[str, Any]] | None = None,
    fallbacks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The audit dict from what the workers reported, per phase (see ``Audit.collect``).
    ``libraries``: the chunk libraries named as kinds, with their memory (default:
    :func:`chunk_libraries`). ``conversions``: the session's recorded conversions
    (:meth:`Audit.conversions`), named in ``conversions`` with what the workers converted.
    ``fallbacks``: the session's host fallbacks (:meth:`Audit.fallbacks`): named in
    ``fallbacks`` with the bytes moved each way; their host tasks' outputs are ``allowed``."""
    if libraries is None:
        libraries = chunk_libraries()
    types: dict[str, list] = {}
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    changes: dict[tuple, dict[str, Any]] = {}
    for phase, reports in raw.items():
        for rep in reports:
            types.update(rep["types"])
            for prefix, tname, n, b in rep["outputs"]:
                row = dict(phase=phase, prefix=prefix, type=tname, tasks=0, bytes=0)
                _tally(rows, (phase, prefix, tname), row, "tasks", n, b)
            for prefix, tname, conv, n, b in rep.get("host_copies", ()):
                row = dict(phase=phase, prefix=prefix, type=tname, tasks=0, bytes=0, host_copy=conv)
                _tally(rows, (phase, prefix, tname, conv), row, "tasks", n, b)
            for dp, dt, p, t, n, b in rep["changes"]:
                row = dict(
                    phase=phase, from_prefix=dp, from_type=dt, to_prefix=p, to_type=t, count=0, bytes=0
                )
                _tally(changes, (phase, dp, dt, p, t), row, "count", n, b)
    kinds = {k: 0 for k in (*libraries, "other")}
    foreign = []
    allowed = []
    out_rows = sorted(rows.values(), key=lambda r: (r["phase"], -r["bytes"], r["prefix"]))
    for r in out_rows:
        fam, kind, chunk = types.get(r["type"], [None, "other", False])
        other = bool(chunk and fam is not None and fam != family.name)
        why = (
            _host_copy_why(r.get("host_copy"), conversions or [])
            if "host_copy" in r
            else ALLOWED.get(r["prefix"]) or _fallback_why(r["prefix"], fallbacks or [])
        )
        r.update(kind=kind, family=fam, chunk=bool(chunk), foreign=other and why is None)
        kinds[kind] = kinds.get(kind, 0) + r["tasks"]
        if other and not r["foreign"]:
            r["allowed"] = why
            allowed.append({k: r[k] for k in ("phase", "prefix", "type", "tasks", "bytes", "allowed")})
        if r["foreign"]:
            r["fix"] = fix_hint(r["prefix"], r["type"], family, fam)
            foreign.append(
                {k: r[k] for k in ("phase", "prefix", "type", "kind", "family", "tasks", "bytes", "fix")}
            )
    transfers = sorted(changes.values(), key=lambda c: (c["phase"], -c["bytes"]))
    for c in transfers:
        ff, fk, _ = types.get(c["from_type"], [None, "other", False])
        tf, tk, _ = types.get(c["to_type"], [None, "other", False])
        c["direction"] = _direction(fk, tk, str(ff), str(tf), libraries)
    foreign_tasks = sum(f["tasks"] for f in foreign)
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "expected": {
            "family": family.name,
            "modules": sorted({family.array_module, family.dataframe_module}),
        },
        "scope": scope,
        "phases": list(raw),
        "runs": {ph: (runs or {}).get(ph, 1) for ph in raw},
        "workers": max(map(len, raw.values()), default=0),
        "tasks": sum(r["tasks"] for r in out_rows),
        "bytes": sum(r["bytes"] for r in out_rows),
        "kinds": kinds,
        "clean": foreign_tasks == 0 and bool(out_rows),
        "foreign_tasks": foreign_tasks,
        "foreign_bytes": sum(f["bytes"] for f in foreign),
        "foreign": foreign,
        "allowed": allowed,
        "transfer_count": sum(c["count"] for c in transfers),
        "transfer_bytes": sum(c["bytes"] for c in transfers),
        "transfers": transfers,
        "prefixes": out_rows,
        "notes": list(notes or []) + ([] if out_rows else [NOTHING_SEEN]),
        "conversions": _conversions(raw, conversions or []),
        "fallbacks": _fallbacks(raw, fallbacks or []),
    }


def _fallback_why(prefix: str, fallbacks: list[dict[str, Any]]) -> str | None:
    for f in fallbacks:
        if prefix in f.get("prefixes", ()):
            return f"host fallback of {f['operation']} at {f['where']}: {f['error']}"
    return None


def _fallbacks(raw: dict[str, list[dict]], recorded: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``fallbacks`` list: each host fallback made during the audit or whose partitions moved
    during it, with the bytes copied to the host (``bytes_to_host``) and back (``bytes_to_device``)."""
    moved = _converted(raw)
    out = []
    for f in recorded:
        to_host, back = moved.get(f["to_host"], (0, 0)), moved.get(f["back"], (0, 0))
        if not f.get("made_in_audit") and not (to_host[0] or back[0]):
            continue
        out.append(
            {
                **{k: f[k] for k in ("operation", "where", "file", "line", "error", "family", "partitions")},
                "blocks_to_host": to_host[0],
                "bytes_to_host": to_host[1],
                "blocks_to_device": back[0],
                "bytes_to_device": back[1],
                "made_in_audit": bool(f.get("made_in_audit")),
                "id": f["id"],
            }
        )
    return out


def _host_copy_why(conversion: str, recorded: list[dict[str, Any]]) -> str:
    for c in recorded:
        if c["id"] == conversion and c.get("action") == "fallback":
            return f"copied to {c['to_module']} for the {c['function']} at {c['where']}: {c.get('why') or ''}"
        if c["id"] == conversion:
            return (
                f"written through {c['to_module']} by {c['function']} at {c['where']}: {c.get('why') or ''}"
            ).rstrip(": ")
    return f"host copies of conversion {conversion}, which another session recorded"


def _converted(raw: dict[str, list[dict]]) -> dict[str, list]:
    """Conversion id -> [blocks, bytes, phases] the workers converted for it."""
    done: dict[str, list] = {}
    for phase, reports in raw.items():
        for rep in reports:
            for conv, n, b in rep.get("conversions", ()):
                row = done.setdefault(conv, [0, 0, []])
                row[0] += n
                row[1] += b
                if phase not in row[2]:
                    row[2].append(phase)
    return done


_CONVERSION_KEYS = ("function", "where", "file", "line", "collection", "from_type", "to_module", "partitions")


def _conversions(raw: dict[str, list[dict]], recorded: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``conversions`` list: each recorded conversion made during the audit or with blocks
    converted during it, in order, with those blocks (``converted_blocks``: one computed twice
    counts twice), their host ``bytes`` and phases; another session's are listed with
    ``function`` None."""
    done = _converted(raw)
    known = {c["id"] for c in recorded}
    out = []
    for c in [*recorded, *({"id": conv} for conv in done if conv not in known)]:
        n, b, phases = done.get(c["id"], (0, 0, []))
        if c.get("made_in_audit") or n or c["id"] not in known:
            out.append(
                {
                    **{k: c.get(k) for k in _CONVERSION_KEYS},
                    "converted_blocks": n,
                    "bytes": b,
                    "phases": phases,
                    "made_in_audit": bool(c.get("made_in_audit")),
                    "why": c.get("why", ""),
                    "id": c["id"],
                }
            )
    return out


def describe_foreign(summary: dict[str, Any], limit: int = 3) -> str:
    """One line: which prefixes produced foreign chunks, with counts, bytes and the fix."""
    fam = summary["expected"]["family"]
    items = summary["foreign"]
    memory = chunk_libraries()
    places = {memory.get(f["kind"]) for f in items} or {"host"}
    where = places.pop() if places in ({"host"}, {"device"}) else "foreign"
    merged: dict[tuple[str, str], dict] = {}
    for f in items:
        m = merged.setdefault((f["prefix"], f["type"]), {**f, "tasks": 0, "bytes": 0, "phases": []})
        m["tasks"] += f["tasks"]
        m["bytes"] += f["bytes"]
        m["phases"].append(f["phase"])
    parts = [
        f"{m['prefix']} ({m['tasks']} task(s), {format_bytes(m['bytes'])} of {m['type']}, "
        f"in {'+'.join(m['phases'])}): {m['fix']}"
        for m in sorted(merged.values(), key=lambda m: -m["bytes"])[:limit]
    ]
    more = f"; and {len(merged) - limit} more prefix(es)" if len(merged) > limit else ""
    return (
        f"backend audit: under the {fam} family {len(merged)} task prefix(es) produced {where} "
        f"chunks ({summary['foreign_tasks']} task(s), {format_bytes(summary['foreign_bytes'])}): "
        + "; ".join(parts)
        + more
    )


def strict_error(summary: dict[str, Any], record: str | None = None) -> UserError:
    """The ``--strict-backend`` failure: one line naming prefixes, counts, bytes and fixes."""
    where = f" (the result record, with this audit, was written to {record})" if record else ""
    return UserError(
        describe_foreign(summary) + where,
        "fix those tasks as suggested, or run without --strict-backend "
        "(strict_backend=False) to only report them",
    )


# -- Reading an audit back (gpuscale audit report) -----------------------------------------
def load(path: str) -> tuple[dict[str, Any], str]:
    """The audit of a result record (JSON file) or a trace folder (its summary.json):
    (audit dict, description of where it came from)."""
    p = pathlib.Path(path).expanduser()
    if p.is_dir():
        f = p / "summary.json"
        if not f.is_file():
            raise UserError(
                f"'{path}' is a folder without a summary.json, so not a trace folder",
                "give a result record (.json) or a folder written by `run --trace DIR`",
            )
        what = "trace folder"
    elif p.is_file():
        f, what = p, "result record"
    else:
        raise UserError(
            f"'{path}' does not exist",
            "give a result record (.json) or a trace folder written by `run --trace DIR`",
        )
    try:
        data = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(
            f"'{f}' is not a JSON file ({type(e).__name__})",
            "give a result record (.json) or a trace folder written by `run --trace DIR`",
        ) from None
    if not isinstance(data, dict) or data.get("schema") not in ("gpuscale.result", "gpuscale.trace"):
        raise UserError(
            f"'{f}' is neither a gpuscale result record nor a trace summary",
            "give a file written by `gpuscale run` or a folder written by `run --trace DIR`",
        )
    aud = data.get("audit")
    if not isinstance(aud, dict) or aud.get("schema") != SCHEMA:
        raise UserError(
            f"the {what} '{f}' holds no backend audit (written before audits existed?)",
            "run the workload again with this gpuscale version",
        )
    if aud.get("schema_version") != SCHEMA_VERSION:
        raise UserError(
            f"the audit in '{f}' has schema version {aud.get('schema_version')!r}; this "
            f"gpuscale reads version {SCHEMA_VERSION}",
            "read it with the gpuscale that wrote it",
        )
    label = f"{what} {f}"
    if data.get("workload"):
        label += f" ({data['workload']} on {data.get('family')}, {data.get('backend')})"
    return aud, label
