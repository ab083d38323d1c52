"""The registry of backend families. The built-ins and the ``gpuscale.backends`` entry points
(each naming a :class:`~.family.Family`; one that fails to load is skipped with a warning) are
registered on first use; :func:`select` resolves a name (or ``auto``) to one.
"""

from __future__ import annotations

import importlib.metadata
import warnings
from dataclasses import dataclass

from ..decision import Decision
from ..errors import UserError
from . import cpu, gpu
from .family import Family

_FAMILIES: dict[str, Family] = {}
_LOADED = False


def register(family: Family) -> Family:
    """Add a family (built-in, plugin or test). Its names must not clash with another's."""
    for other in _FAMILIES.values():
        clash = set(other.names) & set(family.names)
        if other.name != family.name and clash:
            raise ValueError(f"backend name(s) {sorted(clash)} already belong to family {other.name}")
    _FAMILIES[family.name] = family
    return family


def unregister(name: str) -> None:
    _FAMILIES.pop(name, None)


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    register(cpu.FAMILY)
    register(gpu.FAMILY)
    for ep in importlib.metadata.entry_points(group="gpuscale.backends"):
        try:
            family = ep.load()
            if not isinstance(family, Family):
                raise TypeError(f"it names a {type(family).__name__}, not a gpuscale Family")
            register(family)
        except Exception as e:  # noqa: BLE001  (one broken plugin must not hide the others)
            warnings.warn(f"gpuscale: skipped backend plugin '{ep.name}' ({ep.value}): {e}", stacklevel=2)


def families() -> list[Family]:
    _load()
    return sorted(_FAMILIES.values(), key=lambda f: -f.auto_priority)


def names() -> list[str]:
    return ["auto"] + [n for f in families() for n in f.names]


def choices() -> list[str]:
    """What ``--backend`` offers: ``auto`` and each family's name, in the order registered."""
    _load()
    return ["auto"] + list(_FAMILIES)


def aliases() -> dict[str, str]:
    """Alias -> family name for the library names a family also answers to (``numpy``: ``cpu``)."""
    _load()
    return {n: f.name for f in _FAMILIES.values() for n in f.names if n != f.name}


def vocabulary() -> str:
    """The backend names in one phrase, for ``--help`` and errors: ``auto (the first usable of
    gpu, cpu) | cpu | gpu; aliases: numpy / pandas for cpu; cupy / cudf for gpu``."""
    by_family: dict[str, list[str]] = {}
    for alias, fam in aliases().items():
        by_family.setdefault(fam, []).append(alias)
    said = "; ".join(f"{' / '.join(names)} for {fam}" for fam, names in by_family.items())
    first = f"auto (the first usable of {', '.join(f.name for f in families())})"
    return " | ".join([first, *choices()[1:]]) + (f"; aliases: {said}" if said else "")


def chunk_libraries() -> dict[str, str]:
    """Every registered family's chunk libraries, top-level module -> its family's ``memory``
    ("host" / "device"): the array modules, then the frame modules, in registration order."""
    _load()
    fams = list(_FAMILIES.values())
    out: dict[str, str] = {}
    for module, fam in [(f.array_module, f) for f in fams] + [(f.dataframe_module, f) for f in fams]:
        out.setdefault(module.partition(".")[0], fam.memory)
    return out


@dataclass(frozen=True)
class Selection:
    """The family a backend name selected: the name asked for, the family, and the decision
    (the family's name, chosen by rule ``auto`` or by the name, and why)."""

    requested: str
    family: Family
    chosen: Decision

    @property
    def name(self) -> str:
        return self.family.name

    @property
    def reason(self) -> str:
        return self.chosen.rule


def select(backend: str, collection: str | None = None, *, check: bool = True) -> Selection:
    """Resolve a backend name (or ``auto``) to a family; with ``check``, fail early if it
    cannot run here."""
    fams = families()
    if backend == "auto":
        reasons = []
        for fam in fams:
            ok, why = fam.probe()
            if ok and fam.missing(collection) is None:
                why = f"auto chose {fam.name}: {why}" + (f" ({'; '.join(reasons)})" if reasons else "")
                return Selection("auto", fam, Decision(fam.name, "rule", why))
            reasons.append(f"not {fam.name}: {why}")
        raise UserError(
            "auto found no usable backend family: " + "; ".join(reasons),
            "install the CPU stack with: pip install gpuscale",
        )
    for fam in fams:
        if backend in fam.names:
            if check:
                fam.check(backend, collection)
            return Selection(
                backend, fam, Decision(fam.name, "setting", f"{backend} selects the {fam.name} family")
            )
    raise UserError(f"unknown backend '{backend}'", f"use one of: {vocabulary()}")


def family_of(collection) -> Family:
    """The family whose chunk library made this Dask collection's partitions (by its meta)."""
    meta = getattr(collection, "_meta", collection)
    top = type(meta).__module__.split(".")[0]
    for fam in families():
        if top in (fam.array_module, fam.dataframe_module):
            return fam
    raise UserError(
        f"no backend family handles {type(meta).__module__}.{type(meta).__name__} chunks",
        "convert the collection to one of: "
        + ", ".join(f"{f.array_module}/{f.dataframe_module}" for f in families()),
    )
