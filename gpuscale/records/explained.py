"""Every tuned choice explained: the record's ``explained`` section, laid out from what each
layer recorded (nothing is decided here).

:func:`explained` lays the knobs of one run out by scope, each as ``{"value", "source",
"rule"}`` (:meth:`gpuscale.decision.Decision.record`):

``cluster``
    backend and family, then ``ClusterSpec.choices`` (protocol, transports, GPUs, workers,
    threads, memory limit, RMM pool) and where the runner ran.
``family``
    the backend family's knobs.
``session``
    the Dask settings the session applies to all the work in its block
    (:mod:`gpuscale.backends.session_knobs`).
``workload``
    the workload's own choices (``Context.choose``); one a route settles at run time
    (``Context.decide``) shows the decision, with ``planned`` / ``planned_rule`` keeping the
    plan.

``gpuscale explain`` shows the same section for a run that has not happened.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..decision import Decision

FAMILY_KNOBS = {
    "chunk_bytes": "target bytes of one array chunk (row block)",
    "partition_bytes": "target bytes of one DataFrame partition",
    "shuffle_method": "shuffle used when a result is split over partitions (None: Dask's default)",
    "split_out_budget_bytes": "a groupby result estimated under this stays in one partition",
    "split_every": "fan-in of tree reductions (None: all partials in one combine)",
    "groupby_concat_min_fraction": "a groupby runs per-worker (concatenate, aggregate once) when a "
    "partition's groups are at least this fraction of its rows (0: always; always too where each "
    "worker runs one thread)",
    "pre_import": "libraries each worker imports at start",
}


def cluster_knobs(resolved, selection, spec) -> dict[str, dict[str, Any]]:
    """The cluster's knobs: the backend as set, the family as selected, then the spec's own
    decisions, each as its record."""
    source = resolved.sources.get("backend", "default")
    family = selection.chosen
    return {
        "backend": Decision(selection.requested, source).record(),
        "family": (
            family if family.source == "rule" else dataclasses.replace(family, source=source)
        ).record(),
        **{k: v.record() if isinstance(v, Decision) else dict(v) for k, v in spec.choices.items()},
    }


def family_knobs(family, collection: str | None) -> dict[str, dict[str, Any]]:
    d = family.knobs.as_dict(collection)
    return {
        k: Decision(d[k], "family", f"{family.name} family default: {why}").record()
        for k, why in FAMILY_KNOBS.items()
        if k in d
    }


def workload_knobs(
    choices: dict[str, dict], decisions: dict[str, dict] | None = None
) -> dict[str, dict[str, Any]]:
    out = {k: dict(v) for k, v in choices.items()}
    for k, d in (decisions or {}).items():
        planned = choices.get(k, {})
        out[k] = {**d, "planned": planned.get("value"), "planned_rule": planned.get("rule")}
    return out


def session_knobs(applied) -> dict[str, dict[str, Any]]:
    """What the session applies to all Dask work in its block
    (:func:`gpuscale.backends.session_knobs.plan`), the user's own code included."""
    return {name: a.record() for name, a in dict(applied).items()}


def explained(
    resolved,
    selection,
    spec,
    collection: str | None,
    choices: dict[str, dict],
    decisions: dict[str, dict] | None = None,
    session=(),
) -> dict[str, dict[str, dict[str, Any]]]:
    """Every knob of a run by scope: ``{"cluster": ..., "family": ..., "workload": ...,
    "session": ...}`` (``session``: the session's applied Dask settings)."""
    return {
        "cluster": cluster_knobs(resolved, selection, spec),
        "family": family_knobs(selection.family, collection),
        "workload": workload_knobs(choices, decisions),
        "session": session_knobs(session),
    }
