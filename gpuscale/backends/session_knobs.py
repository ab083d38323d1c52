"""The knobs a session applies to all the work in its block, not only gpuscale's own:
:func:`plan` decides each value once, with its source and rule id; the session sets the Dask
settings among them with ``dask.config.set`` for the block (:func:`dask_settings`) and enters
the rest (:func:`entered`). Precedence and measurements: docs/decisions.md, rules
``shuffle.setting``, ``shuffle.yours``, ``shuffle.family``, ``merge-meta.cached``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import dask.config

from .. import _dask_compat
from ..decision import Decision
from .family import Family
from .kept_reads import KeptReads
from .merge_meta import MetaCache

SHUFFLE_SETTING = "session.shuffle-method"
SHUFFLE_KEY = "dataframe.shuffle.method"
MERGE_META_SETTING = "session.merge-meta"
ENGINE_SETTING = "session.engine"


def applied(value: Any, source: str, rule_id: str, why: str, dask_key: str | None = None) -> Decision:
    """One knob a session applies: the value (None: Dask's own default), where it came from,
    the rule and why; ``dask_key``: Dask's config key it sets (None: a knob :func:`entered`
    applies), which the record shows."""
    return Decision(value, source, why, rule_id, extra={"dask_key": dask_key}, documented=True)


def plan(family: Family, session, sources: dict[str, str]) -> dict[str, Decision]:
    """What a session of ``family`` applies to user code, by the knob's name in
    ``explained["session"]``, given the ``session`` settings section (each from the settings
    layer ``sources`` names) and Dask's config as it is now."""
    return {
        "shuffle_method": _shuffle(family, session.shuffle_method, sources.get(SHUFFLE_SETTING, "default")),
        "merge_meta": _merge_meta(session.merge_meta, sources.get(MERGE_META_SETTING, "default")),
        "engine": _engine(family, session.engine, sources.get(ENGINE_SETTING, "default")),
        **_reads(family, session.host_collections),
        "kept_reads": applied(
            True,
            "default",
            "reads.kept",
            "a read_parquet call with the arguments and local files (names, sizes, times) of an "
            "earlier one in the block returns a copy of that collection: its files are listed and "
            "its metadata built once",
        ),
    }


def _reads(family: Family, host_collections: str) -> dict[str, Decision]:
    """The keywords the session adds to the user's readers (the family's
    :attr:`~.family.Knobs.read_keywords`), applied by the wrappers of
    :mod:`gpuscale.backends.host_collections`: none where those are off."""
    if family.host_native():
        return {}
    out = {}
    for name, keywords in family.knobs.read_keywords.items():
        words = ", ".join(f"{k}={v!r}" for k, v in keywords.items())
        if host_collections == "off":
            why = f"session.host-collections is off: your {name} calls keep Dask's partitions"
            out[name] = applied(None, "session.host-collections", "reads.off", why)
            continue
        why = (
            f"the {family.name} family adds {words} to your {name} calls that set none of the "
            "partitioning keywords: files are read together up to Dask's block size"
        )
        out[name] = applied(dict(keywords), "family", "reads.family", why)
    return out


def _engine(family: Family, setting: str, source: str) -> Decision:
    """The engine route (:mod:`gpuscale.engines`); each compute's own engine and reason is
    decided by :func:`gpuscale.plan.engine.decide` and kept in ``Session.queries``."""
    if setting == "dask":
        return applied("dask", source, "engine.setting", f"{ENGINE_SETTING} is dask")
    engine = "cudf-polars" if family.on_device else "Polars"
    how = "an error where one does not" if setting == "polars" else "Dask where one does not, with the reason"
    why = f"your DataFrame collections run on {engine} where their plan translates, {how}"
    return applied(setting, source, "engine.route", why)


def _merge_meta(setting: str, source: str) -> Decision:
    if setting == "dask":
        why = f"{MERGE_META_SETTING} is dask: each merge expression computes its own"
        return applied("dask", source, "merge-meta.dask", why)
    why = "merges of inputs with the same schemas and arguments share one metadata computation"
    return applied("cached", source, "merge-meta.cached", why)


def _shuffle(family: Family, setting: str, source: str) -> Decision:
    def shuffle(value, src, rule, why):
        return applied(value, src, rule, why, SHUFFLE_KEY)

    if setting == "dask":
        return shuffle(None, source, "shuffle.dask", "left to Dask (P2P under distributed)")
    if setting != "auto":
        return shuffle(setting, source, "shuffle.setting", f"{SHUFFLE_SETTING} is {setting}")
    yours = dask.config.get(SHUFFLE_KEY, None)
    if yours:
        why = f"{SHUFFLE_KEY} is set in Dask's config (yours): kept"
        return shuffle(yours, "dask.config", "shuffle.yours", why)
    method = family.knobs.shuffle_method
    if method is None:
        why = f"the {family.name} family keeps Dask's default (P2P under distributed)"
        return shuffle(None, "family", "shuffle.dask-default", why)
    why = f"the {family.name} family's shuffle: {method} keeps its chunks where they live"
    return shuffle(method, "family", "shuffle.family", why)


def described(knobs: dict[str, Decision]) -> list[str]:
    """Each applied knob in words: Dask's key (or the knob's name) = value (source, rule id)."""
    return [
        f"{a.extra['dask_key'] or name} = {a.value} ({a.source}, rule {a.rule_id})"
        for name, a in knobs.items()
    ]


def dask_settings(knobs: dict[str, Decision]) -> dict[str, Any]:
    """The ``dask.config`` values to set for the block (those left to Dask are not set)."""
    return {
        a.extra["dask_key"]: a.value
        for a in knobs.values()
        if a.extra["dask_key"] is not None and a.value is not None and a.source != "dask.config"
    }


def entered(knobs: dict[str, Decision], stack: contextlib.ExitStack) -> None:
    """Enter, on ``stack``, the applied knobs that are not Dask settings, for the block."""
    for name, a in knobs.items():
        if name == "merge_meta" and a.value == "cached":
            stack.enter_context(_dask_compat.merge_meta_through(MetaCache()))
        if a.rule_id == "reads.kept":
            stack.enter_context(_dask_compat.reads_through(KeptReads()))
