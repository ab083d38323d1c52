"""One decision: a value, where it came from, the rule that chose it and the numbers it used."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Iterator


@dataclass(frozen=True, slots=True, eq=False)
class Decision(Mapping):
    """A value as chosen: ``source`` is the settings layer it came from or ``rule`` / ``family``
    / ``cluster``, ``rule`` the sentence that says why (None: nothing to say), ``rule_id`` the
    rule's id and ``numbers`` the facts and settings it used. It reads as its :meth:`record`."""

    value: Any
    source: str
    rule: str | None = None
    rule_id: str | None = None
    numbers: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Keys the record carries after the three (e.g. ``setting``: the raw setting)."""
    documented: bool = False

    def record(self) -> dict[str, Any]:
        """The recorded choice: ``{"value", "source", "rule", **extra}``; a ``documented`` rule
        (a section of docs/decisions.md) also records ``rule_id``, and its sentence starts with it."""
        out: dict[str, Any] = {"value": self.value, "source": self.source}
        if self.documented and self.rule_id:
            out["rule"] = f"{self.rule_id}: {self.rule}" if self.rule else self.rule_id
            return {**out, **self.extra, "rule_id": self.rule_id}
        return {**out, "rule": self.rule, **self.extra}

    def __getitem__(self, key: str) -> Any:
        return self.record()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.record())

    def __len__(self) -> int:
        return len(self.record())

    def __eq__(self, other: object) -> bool:
        """Equal field by field to a decision, or as its record to a mapping."""
        if isinstance(other, Decision):
            return all(getattr(self, f) == getattr(other, f) for f in self.__slots__)
        if isinstance(other, Mapping):
            return self.record() == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # values may be dicts

    def __repr__(self) -> str:
        return f"Decision({self.rule_id or '-'}: {self.value!r} from {self.source})"
