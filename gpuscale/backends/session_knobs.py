"""The knobs a session applies to all the work in its block, not only gpuscale's own:
:func:`plan` decides each value once, with its source and rule id; the session sets the Dask
settings among them with ``dask.config.set`` for the block (:func:`dask_settings`) and enters
the rest (:func:`entered`). Precedence and measurements: docs/decisions.md, rules
``shuffle.setting``, ``shuffle.yours``, ``shuffle.family``, ``merge-meta.cached``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import dask.config

from .. import _dask_compat
from .family import Family
from .kept_reads import KeptReads
from .merge_meta import MetaCache

SHUFFLE_SETTING = "session.shuffle-method"
SHUFFLE_KEY = "dataframe.shuffle.method"
MERGE_META_SETTING = "session.merge-meta"
ENGINE_SETTING = "session.engine"


@dataclass(frozen=True)
class Applied:
    """One Dask setting a session applies: the value Dask gets (None: Dask's own default), where
    it came from, and the rule that chose it."""

    name: str
    """The knob's name in ``explained["session"]`` (``shuffle_method``)."""
    dask_key: str | None
    """Dask's config key it sets (``dataframe.shuffle.method``); None for a knob that is not a
    Dask setting (:func:`entered` applies it)."""
    value: Any
    source: str
    rule: str
    """Rule id (``shuffle.family``); docs/decisions.md explains each."""
    why: str

    def choice(self) -> dict[str, Any]:
        """The shape every explained choice has (:func:`gpuscale.choices.choice`)."""
        return {
            "value": self.value,
            "source": self.source,
            "rule": f"{self.rule}: {self.why}",
            "rule_id": self.rule,
            "dask_key": self.dask_key,
        }


def plan(family: Family, session, sources: dict[str, str]) -> tuple[Applied, ...]:
    """What a session of ``family`` applies to user code, given the ``session`` settings
    section (each from the settings layer ``sources`` names) and Dask's config as it is now."""
    return (
        _shuffle(family, session.shuffle_method, sources.get(SHUFFLE_SETTING, "default")),
        _merge_meta(session.merge_meta, sources.get(MERGE_META_SETTING, "default")),
        _engine(family, session.engine, sources.get(ENGINE_SETTING, "default")),
        *_reads(family, session.host_collections),
        Applied(
            "kept_reads",
            None,
            True,
            "default",
            "reads.kept",
            "a read_parquet call with the arguments and local files (names, sizes, times) of an "
            "earlier one in the block returns a copy of that collection: its files are listed and "
            "its metadata built once",
        ),
    )


def _reads(family: Family, host_collections: str) -> tuple[Applied, ...]:
    """The keywords the session adds to the user's readers (the family's
    :attr:`~.family.Knobs.read_keywords`), applied by the wrappers of
    :mod:`gpuscale.backends.host_collections`: none where those are off."""
    if family.host_native():
        return ()
    out = []
    for name, keywords in family.knobs.read_keywords.items():
        words = ", ".join(f"{k}={v!r}" for k, v in keywords.items())
        if host_collections == "off":
            why = f"session.host-collections is off: your {name} calls keep Dask's partitions"
            out.append(Applied(name, None, None, "session.host-collections", "reads.off", why))
            continue
        why = (
            f"the {family.name} family adds {words} to your {name} calls that set none of the "
            "partitioning keywords: files are read together up to Dask's block size"
        )
        out.append(Applied(name, None, dict(keywords), "family", "reads.family", why))
    return tuple(out)


def _engine(family: Family, setting: str, source: str) -> Applied:
    """The engine route (:mod:`gpuscale.engines`); each compute's own engine and reason is
    decided by :func:`gpuscale.plan.engine.decide` and kept in ``Session.queries``."""
    if setting == "dask":
        return Applied("engine", None, "dask", source, "engine.setting", f"{ENGINE_SETTING} is dask")
    engine = "cudf-polars" if family.on_device else "Polars"
    how = "an error where one does not" if setting == "polars" else "Dask where one does not, with the reason"
    return Applied(
        "engine",
        None,
        setting,
        source,
        "engine.route",
        f"your DataFrame collections run on {engine} where their plan translates, {how}",
    )


def _merge_meta(setting: str, source: str) -> Applied:
    if setting == "dask":
        return Applied(
            "merge_meta",
            None,
            "dask",
            source,
            "merge-meta.dask",
            f"{MERGE_META_SETTING} is dask: each merge expression computes its own",
        )
    return Applied(
        "merge_meta",
        None,
        "cached",
        source,
        "merge-meta.cached",
        "merges of inputs with the same schemas and arguments share one metadata computation",
    )


def _shuffle(family: Family, setting: str, source: str) -> Applied:
    def applied(value, src, rule, why):
        return Applied("shuffle_method", SHUFFLE_KEY, value, src, rule, why)

    if setting == "dask":
        return applied(None, source, "shuffle.dask", "left to Dask (P2P under distributed)")
    if setting != "auto":
        return applied(setting, source, "shuffle.setting", f"{SHUFFLE_SETTING} is {setting}")
    yours = dask.config.get(SHUFFLE_KEY, None)
    if yours:
        return applied(
            yours, "dask.config", "shuffle.yours", f"{SHUFFLE_KEY} is set in Dask's config (yours): kept"
        )
    method = family.knobs.shuffle_method
    if method is None:
        return applied(
            None,
            "family",
            "shuffle.dask-default",
            f"the {family.name} family keeps Dask's default (P2P under distributed)",
        )
    return applied(
        method,
        "family",
        "shuffle.family",
        f"the {family.name} family's shuffle: {method} keeps its chunks where they live",
    )


def dask_settings(applied: tuple[Applied, ...]) -> dict[str, Any]:
    """The ``dask.config`` values to set for the block (those left to Dask are not set)."""
    return {
        a.dask_key: a.value
        for a in applied
        if a.dask_key is not None and a.value is not None and a.source != "dask.config"
    }


def entered(applied: tuple[Applied, ...], stack: contextlib.ExitStack) -> None:
    """Enter, on ``stack``, the applied knobs that are not Dask settings, for the block."""
    for a in applied:
        if a.name == "merge_meta" and a.value == "cached":
            stack.enter_context(_dask_compat.merge_meta_through(MetaCache()))
        if a.rule == "reads.kept":
            stack.enter_context(_dask_compat.reads_through(KeptReads()))
