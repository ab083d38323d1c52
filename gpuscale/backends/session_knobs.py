"""The Dask settings a session applies to all the work in its block, not only gpuscale's own:
:func:`plan` decides each value once, with its source and rule id, and the session sets them
with ``dask.config.set`` for the block. Precedence and measurements: docs/decisions.md, rules
``shuffle.setting``, ``shuffle.yours``, ``shuffle.family``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dask.config

from .family import Family

SHUFFLE_SETTING = "session.shuffle-method"
SHUFFLE_KEY = "dataframe.shuffle.method"


@dataclass(frozen=True)
class Applied:
    """One Dask setting a session applies: the value Dask gets (None: Dask's own default), where
    it came from, and the rule that chose it."""

    name: str
    """The knob's name in ``explained["session"]`` (``shuffle_method``)."""
    dask_key: str
    """Dask's config key it sets (``dataframe.shuffle.method``)."""
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


def plan(family: Family, setting: str, source: str) -> tuple[Applied, ...]:
    """What a session of ``family`` applies to user code, given ``session.shuffle-method``
    (``setting``, from settings layer ``source``) and Dask's config as it is now."""
    return (_shuffle(family, setting, source),)


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
    return {a.dask_key: a.value for a in applied if a.value is not None and a.source != "dask.config"}
