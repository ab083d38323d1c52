"""Your own workloads: ``@gpuscale.workload`` in a notebook, an entry point in a package.

A registered workload gets what a built-in gets: the backend switch and its knobs, the
runner (warm-up, timed repeats, memory check), validation, result records,
``gpuscale run NAME`` with one flag per parameter, and ``gpuscale workloads``.

Plain functions
---------------
Decorate the compute function; pass the others by keyword::

    import dask.array as da, numpy as np, gpuscale

    def generate(p, ctx):                        # data on the active backend (NumPy or CuPy)
        return da.random.default_rng(p.seed).random((p.n, p.n), chunks=p.chunk)

    def validate(result, x, p):                  # result: what compute returned, persisted
        got = float(result.compute())
        ref = 2 * float(x.astype("float64").sum().compute())
        return abs(got - ref) <= 1e-9 * abs(ref)  # bool, Check(s), {name: bool} or Validation

    @gpuscale.workload("twice_sum", params={"n": 4_000, "chunk": 1_000, "seed": 0},
                       generate=generate, validate=validate)
    def twice_sum(x, p, ctx):                    # a Dask collection, a dict of them, or Output
        return (x + x.T).sum()

    with gpuscale.session(backend="cpu") as s:
        r = s.run("twice_sum", n=2_000)          # r.valid, r.median_s, r.path

Hooks (all optional except ``validate``) and what they receive; a hook may declare fewer
positional parameters than listed (``def generate(p)``), and gets that many:

=================== ============================ =============================================
hook                called with                  returns
=================== ============================ =============================================
``check``           ``p``                        nothing; raise ``gpuscale.UserError`` (or
                                                 ``ValueError``) for bad combinations
``plan``            ``p, ctx``                   nothing; record choices with ``ctx.choose``
``estimate_bytes``  ``p, ctx``                   peak bytes, for the memory check
``generate``        ``p, ctx``                   the data (persisted before timing); default None
compute (decorated) ``data, p, ctx``             a collection, a dict of them, or ``Output``
``validate``        ``result, data, p, ctx``     ``Validation``, ``Check``, list of ``Check``,
                                                 ``{name: bool | Check}`` or a bool
``describe_data``   ``p``                        a dict for the result record
=================== ============================ =============================================

``result`` is what compute returned, persisted: the collection, the dict, or the ``Output``.
``p`` is the validated parameters; ``ctx`` is a :class:`gpuscale.workloads.Context`
(``ctx.family.array_module`` / ``dataframe_module`` name the chunk libraries, ``ctx.knobs``
the backend's chunk and partition sizes, ``ctx.client`` the Dask client).

``params`` is a :class:`gpuscale.workloads.Params` subclass (any pydantic model works) or a
dict of ``name: default`` (type from the default), ``name: (type, default)``,
``name: (type, default, "help")`` or ``name: pydantic.Field(default, ge=..., description=...)``.
Names become flags (``chunk_rows`` -> ``--chunk-rows``) and may not be one of gpuscale's own
keywords (``workers``, ``repeat``, ``audit``, ...: :func:`reserved`). Other keywords:
``collection`` ("array", the default, or "dataframe": shapes the cluster), ``description``
(default: the docstring's first line), ``replace=True`` to shadow a built-in or installed
workload of the same name. Decorating again under the same name (re-running a notebook cell)
replaces the earlier one.

A class
-------
The same hooks as methods; a :class:`gpuscale.workloads.Workload` subclass is registered
as it is (its methods keep the strict signatures), any other class is used like the
functions above (its ``Params``, ``collection``, ``description`` attributes are read when the
decorator is not given them)::

    @gpuscale.workload("twice_sum", params={"n": 4_000})
    class TwiceSum:
        def generate(self, p, ctx): ...
        def compute(self, x, p, ctx): ...
        def validate(self, result, x, p, ctx): ...

Installed packages
------------------
Name the decorated object (or a ``Workload`` subclass, or a module whose import decorates)
in the ``gpuscale.workloads`` entry-point group::

    [project.entry-points."gpuscale.workloads"]
    twice_sum = "mypkg.workloads:twice_sum"

and ``gpuscale run twice_sum --backend gpu --n 20000`` works once the package is installed.
"""

from __future__ import annotations

import functools
import inspect
import typing
from typing import Any, Callable, ClassVar

from pydantic import BaseModel, Field, create_model
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from .. import config
from ..errors import UserError
from . import registry
from .base import Check, Context, Output, Params, Validation, Workload

HOOKS = ("check", "plan", "estimate_bytes", "generate", "compute", "validate", "describe_data")
_ALWAYS_RESERVED = frozenset({"workload", "help", "h"})  # the run's first argument; click's --help / -h


RUN_KEYWORDS = frozenset(
    {
        *("as_json", "audit", "cluster_settings", "dashboard", "data", "debug", "hold", "input"),
        *("input_path", "json", "on_ready", "output", "output_path", "overwrite", "profile"),
        *("progress", "trace", "trace_dir", "validate", "version", "write"),
    }
)
"""The run's own keywords beside a workload's ``**params`` (``Session.run``, ``gpuscale.run``,
``gpuscale.explain``) and the flags of ``gpuscale`` and ``gpuscale run`` that are not
settings; tests/test_plugin.py checks them against where they are declared."""


@functools.cache
def reserved() -> frozenset[str]:
    """Names a workload parameter may not take: :data:`RUN_KEYWORDS`, every setting's keyword
    and every settings flag (``--no-`` forms too)."""
    names = set(_ALWAYS_RESERVED) | set(config.KEYWORDS) | set(config.FLAGS) | RUN_KEYWORDS
    for setting in config.FLAGS.values():
        for opt in setting.opts:
            names.add(opt.lstrip("-").replace("-", "_"))
            if opt.startswith("--no-"):
                names.add(opt[len("--no-") :].replace("-", "_"))
    return frozenset(names)


def workload(
    name: str,
    *,
    params: type[BaseModel] | dict[str, Any] | None = None,
    collection: str | None = None,
    description: str | None = None,
    generate: Callable | None = None,
    validate: Callable | None = None,
    check: Callable | None = None,
    plan: Callable | None = None,
    estimate_bytes: Callable | None = None,
    describe_data: Callable | None = None,
    replace: bool = False,
):
    """Register a function (the compute step) or a class as the workload ``name``.

    Returns the registered :class:`Workload` subclass. See the module docstring."""
    if not isinstance(name, str) or not name or name.startswith("-") or any(c.isspace() for c in name):
        raise UserError(f"a workload name must be a word, got {name!r}", "e.g. @gpuscale.workload('my_sum')")
    given = {
        "generate": generate,
        "validate": validate,
        "check": check,
        "plan": plan,
        "estimate_bytes": estimate_bytes,
        "describe_data": describe_data,
    }

    def decorate(obj):
        if isinstance(obj, type) and issubclass(obj, Workload):
            cls = _from_workload_class(obj, name, params, collection, description)
        elif isinstance(obj, type):
            inst = obj()
            hooks = {h: getattr(inst, h) for h in HOOKS if callable(getattr(inst, h, None))}
            hooks.update({k: v for k, v in given.items() if v is not None})
            cls = _from_hooks(
                name,
                hooks,
                params if params is not None else getattr(obj, "Params", None),
                collection or getattr(obj, "collection", None),
                description or getattr(obj, "description", None) or _first_line(obj),
                obj.__name__,
                obj.__module__,
            )
        elif callable(obj):
            hooks = {"compute": obj, **{k: v for k, v in given.items() if v is not None}}
            cls = _from_hooks(
                name,
                hooks,
                params,
                collection,
                description or _first_line(obj),
                getattr(obj, "__name__", name),
                getattr(obj, "__module__", __name__),
            )
        else:
            raise TypeError(
                f"@gpuscale.workload({name!r}) decorates a function or a class, not {type(obj).__name__}"
            )
        return _register(cls, replace)

    return decorate


def _register(cls: type[Workload], replace: bool) -> type[Workload]:
    registry.load_builtins()
    old = registry.registered(cls.name)
    if old is not None and cls.name not in registry.DECORATED and not replace:
        raise UserError(
            f"workload '{cls.name}' already exists ({old.__module__}.{old.__name__})",
            "choose another name, or pass replace=True to shadow it",
        )
    registry.DECORATED.add(cls.name)
    return registry.register(cls)


def _first_line(obj) -> str | None:
    doc = inspect.getdoc(obj)
    return doc.strip().splitlines()[0].rstrip(".") if doc else None


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("-", "_").split("_") if part) or "Workload"


def _from_workload_class(obj, name, params, collection, description):
    attrs = {"name": name}
    if params is not None:
        attrs["Params"] = params_model(name, params)
    elif not hasattr(obj, "Params"):
        attrs["Params"] = params_model(name, {})
    if collection is not None or not hasattr(obj, "collection"):
        attrs["collection"] = _collection(name, collection)
    if description is not None or not hasattr(obj, "description"):
        attrs["description"] = description or _first_line(obj) or name
    for k, v in attrs.items():
        setattr(obj, k, v)
    _check_names(name, obj.Params)
    return obj


def _from_hooks(name, hooks, params, collection, description, qualname, module):
    if "compute" not in hooks:
        raise TypeError(
            f"workload '{name}' has no compute step: decorate the compute function, or "
            "give the class a compute method"
        )
    if "validate" not in hooks:
        raise TypeError(
            f"workload '{name}' has no validate hook: gpuscale records only validated "
            "results; pass validate=fn (fn(result, data, p, ctx) -> bool / Check(s) / "
            "Validation)"
        )
    model = params_model(name, params if params is not None else {})
    _check_names(name, model)
    return type(
        _camel(name),
        (FunctionWorkload,),
        {
            "name": name,
            "description": description or name,
            "collection": _collection(name, collection),
            "Params": model,
            "hooks": dict(hooks),
            "__module__": module,
            "__qualname__": qualname,
        },
    )


def _collection(name, collection) -> str:
    collection = collection or "array"
    if collection not in ("array", "dataframe"):
        raise UserError(f"workload '{name}': collection must be 'array' or 'dataframe', got {collection!r}")
    return collection


def _check_names(name: str, model) -> None:
    """Refuse a parameter named like one of gpuscale's own keywords (:func:`reserved`)."""
    fields = model if isinstance(model, dict) else model.model_fields
    taken = sorted(set(fields) & reserved())
    if taken:
        listed = ", ".join(f"'{t}'" for t in taken)
        one = len(taken) == 1
        raise UserError(
            f"workload '{name}': parameter {listed} {'is' if one else 'are'} gpuscale's own "
            f"keyword{'' if one else 's'} (Session.run / gpuscale.run / the run flags), so "
            f"{'it' if one else 'they'} could never be set",
            f"rename {'it' if one else 'them'} (e.g. '{taken[0]}' -> 'my_{taken[0]}')",
        )


def params_model(name: str, params) -> type[Params]:
    """A :class:`Params` model from a model class or a dict of defaults / (type, default[, help])
    / ``Field``s."""
    if isinstance(params, type) and issubclass(params, BaseModel):
        if issubclass(params, Params):
            return params
        return type(params.__name__, (params, Params), {"__module__": params.__module__})
    if not isinstance(params, dict):
        raise TypeError(
            f"workload '{name}': params must be a dict or a pydantic model class, not {type(params).__name__}"
        )
    _check_names(name, params)  # before pydantic sees (and warns about) a name like `validate`
    fields: dict[str, Any] = {}
    for key, spec in params.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise UserError(
                f"workload '{name}': parameter name {key!r} is not an identifier",
                "use letters, digits and _ (it becomes --" + str(key).replace("_", "-") + ")",
            )
        fields[key] = _field(name, key, spec)
    return create_model(f"{_camel(name)}Params", __base__=Params, **fields)


def _is_type(t) -> bool:
    return isinstance(t, type) or typing.get_origin(t) is not None or t is Any


def _field(name: str, key: str, spec):
    if isinstance(spec, FieldInfo):
        default = spec.default
        if default is PydanticUndefined or default is None:
            raise UserError(
                f"workload '{name}': parameter '{key}' needs a default to infer its type",
                f"write {key}=(type, Field(...)) or give the Field a default",
            )
        return (type(default), spec)
    if isinstance(spec, tuple) and len(spec) in (2, 3) and _is_type(spec[0]):
        ann, default = spec[0], spec[1]
        if isinstance(default, FieldInfo):
            return (ann, default)
        help_ = spec[2] if len(spec) == 3 else ""
        return (ann, Field(default, description=help_))
    if spec is None:
        raise UserError(
            f"workload '{name}': parameter '{key}' has default None, so its type is unknown",
            f"write {key}=(int | None, None) (or another type)",
        )
    return (type(spec), Field(spec, description=""))


def _positional(fn) -> int | None:
    """How many positional arguments ``fn`` takes (None: any number)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    n = 0
    for prm in sig.parameters.values():
        if prm.kind is prm.VAR_POSITIONAL:
            return None
        if prm.kind in (prm.POSITIONAL_ONLY, prm.POSITIONAL_OR_KEYWORD):
            n += 1
    return n


def _call(fn, *args):
    n = _positional(fn)
    return fn(*(args if n is None else args[:n]))


def as_validation(value, name: str) -> Validation:
    """What a validate hook returned, as a :class:`Validation`."""
    method = f"{name}'s validate hook"
    if isinstance(value, Validation):
        return value
    if isinstance(value, Check):
        return Validation(method, [value])
    if isinstance(value, dict):
        return Validation(
            method, [v if isinstance(v, Check) else Check(str(k), bool(v)) for k, v in value.items()]
        )
    if isinstance(value, (list, tuple)) and all(isinstance(c, Check) for c in value):
        return Validation(method, list(value))
    try:
        ok = bool(value) if value is not None and not isinstance(value, (list, tuple, str)) else None
    except (TypeError, ValueError):
        ok = None
    if ok is None:
        raise UserError(
            f"workload '{name}': validate returned {type(value).__name__}",
            "return a bool, a Check, a list of Checks, {name: bool} or a Validation",
        )
    return Validation(method, [Check("validate", ok)])


class FunctionWorkload(Workload):
    """A workload built from hook functions by :func:`workload`."""

    hooks: ClassVar[dict[str, Callable]] = {}

    def check(self, p) -> None:
        fn = self.hooks.get("check")
        if fn is None:
            return
        try:
            _call(fn, p)
        except UserError:
            raise
        except ValueError as e:
            raise UserError(f"{self.name}: {e}") from None

    def plan(self, p, ctx: Context) -> None:
        if self.hooks.get("plan"):
            _call(self.hooks["plan"], p, ctx)

    def estimate_bytes(self, p, ctx: Context) -> int:
        fn = self.hooks.get("estimate_bytes")
        return int(_call(fn, p, ctx)) if fn else 0

    def describe_data(self, p) -> dict:
        fn = self.hooks.get("describe_data")
        return dict(_call(fn, p)) if fn else {}

    def generate(self, p, ctx: Context):
        fn = self.hooks.get("generate")
        return _call(fn, p, ctx) if fn else None

    def compute(self, data, p, ctx: Context) -> Output:
        value = _call(self.hooks.get("compute"), data, p, ctx)
        if isinstance(value, Output):
            self._returned = "output"
            return value
        if isinstance(value, dict):
            self._returned = "dict"
            return Output(dict(value))
        self._returned = "one"
        return Output({"result": value})

    def validate(self, out: Output, data, p, ctx: Context) -> Validation:
        returned = getattr(self, "_returned", "one")
        result = {"output": out, "dict": out.collections}.get(returned, out.collections.get("result"))
        return as_validation(_call(self.hooks.get("validate"), result, data, p, ctx), self.name)
