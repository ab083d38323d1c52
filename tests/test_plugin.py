"""Your own workloads: ``@gpuscale.workload`` (functions, plain classes, Workload subclasses)
through a real CPU session, and the ``gpuscale.workloads`` entry point for real: the example
package in tests/plugin_pkg is pip-installed into a temporary virtual environment that sees
this environment's packages, and run there through ``python -m gpuscale``."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import site
import subprocess
import sys
import sysconfig

import dask.array as da
import numpy as np
import pytest
from conftest import files_under
from pydantic import Field

import gpuscale
from gpuscale import UserError, workloads
from gpuscale.workloads import Check, Output, Params, Validation, Workload

PLUGIN_SRC = pathlib.Path(__file__).parent / "plugin_pkg"
QUICK = dict(repeat=1, warmup=0)


@pytest.fixture
def registered():
    """Names registered by a test, removed afterwards (the registry is process-wide)."""
    names: list[str] = []
    yield names
    for n in names:
        workloads.unregister(n)


# ---------------------------------------------------------------------------------------
# The decorator
# ---------------------------------------------------------------------------------------
def _make(p, ctx):
    return da.random.default_rng(p.seed).random((p.n, p.n), chunks=max(1, p.n // 2))


def _check_twice(result, x, p):
    got = float(result.compute())
    ref = 2 * float(x.astype("float64").sum().compute())
    return abs(got - ref) <= 1e-9 * abs(ref)


def test_decorated_functions_run_validated_and_recorded(cpu_session, registered, results_dir):
    @gpuscale.workload("nb_twice_sum", params={"n": 200, "seed": 0}, generate=_make, validate=_check_twice)
    def twice_sum(x, p, ctx):
        """(x + x.T).sum(), from a notebook."""
        return (x + x.T).sum()

    registered.append("nb_twice_sum")
    assert issubclass(twice_sum, Workload) and workloads.get("nb_twice_sum") is twice_sum
    d = workloads.describe(twice_sum)
    assert d["description"] == "(x + x.T).sum(), from a notebook"
    assert d["params"]["n"] == {"default": 200, "type": "int", "choices": None, "help": ""}

    r = cpu_session.run("nb_twice_sum", n=120, **QUICK, results_dir=str(results_dir))
    assert r.valid, r.validation
    assert r.validation["method"] == "nb_twice_sum's validate hook"
    assert r.params == {"n": 120, "seed": 0}
    assert pathlib.Path(r.path).is_file() and json.loads(pathlib.Path(r.path).read_text())["valid"]


def test_decorated_validate_false_is_an_invalid_result(cpu_session, registered):
    @gpuscale.workload(
        "nb_wrong",
        params={"n": 50, "seed": 0},
        generate=_make,
        validate=lambda result, x: {"always wrong": False, "fine": True},
    )
    def wrong(x):
        return x + 1

    registered.append("nb_wrong")
    r = cpu_session.run("nb_wrong", **QUICK, write=False)
    assert r.valid is False
    assert [(c["name"], c["ok"]) for c in r.validation["checks"]] == [("always wrong", False), ("fine", True)]


def test_decorated_plain_class_with_dict_result_and_plan(cpu_session, registered):
    @gpuscale.workload("nb_class", params={"rows": (int, 1_000, "rows"), "seed": 0}, collection="array")
    class Stats:
        """column means and maxima."""

        def plan(self, p, ctx):
            ctx.choose("chunk", max(1, p.rows // ctx.total_threads), "rule", "rows / threads")

        def generate(self, p, ctx):
            return da.random.default_rng(p.seed).random(
                (p.rows, 4), chunks=(ctx.choices["chunk"]["value"], 4)
            )

        def compute(self, x, p, ctx):
            return {"mean": x.mean(axis=0), "max": x.max(axis=0)}

        def validate(self, result, x, p, ctx):
            a = np.asarray(x.compute())
            return [
                Check("mean", bool(np.allclose(result["mean"].compute(), a.mean(axis=0)))),
                Check("max", bool((result["max"].compute() == a.max(axis=0)).all())),
            ]

    registered.append("nb_class")
    r = cpu_session.run("nb_class", rows=800, **QUICK, write=False)
    assert r.valid, r.validation
    assert r.choices["chunk"] == {"value": 400, "source": "rule", "rule": "rows / threads"}
    assert workloads.get("nb_class").description == "column means and maxima"


def test_decorated_workload_subclass_and_output(cpu_session, registered):
    class P(Params):
        n: int = Field(64, ge=1, description="length")

    @gpuscale.workload("nb_subclass", params=P)
    class Cumsum(Workload):
        description = "cumulative sum"
        collection = "array"

        def generate(self, p, ctx):
            return da.arange(p.n, chunks=16)

        def compute(self, x, p, ctx):
            return Output({"c": x.cumsum(axis=0)}, {"note": "strict signatures"})

        def validate(self, out, x, p, ctx):
            got = np.asarray(out.collections["c"].compute())
            return Validation("closed form", [Check("n(n-1)/2", int(got[-1]) == p.n * (p.n - 1) // 2)])

    registered.append("nb_subclass")
    r = cpu_session.run("nb_subclass", n=100, **QUICK, write=False)
    assert r.valid and r.info["note"] == "strict signatures"
    with pytest.raises(UserError, match=r"nb_subclass --n: Input should be greater than or equal to 1"):
        workloads.get("nb_subclass").parse({"n": "0"})


def test_decorator_check_hook_and_field_limits(registered):
    def check(p):
        if p.lo >= p.hi:
            raise ValueError("--lo must be below --hi")

    @gpuscale.workload(
        "nb_checked", params={"lo": 0, "hi": Field(10, le=100)}, check=check, validate=lambda r: True
    )
    def f(data, p):
        return None

    registered.append("nb_checked")
    cls = workloads.get("nb_checked")
    assert cls.parse({"lo": "1", "hi": "5"}).hi == 5
    with pytest.raises(UserError, match="nb_checked: --lo must be below --hi"):
        cls.parse({"lo": "7", "hi": "5"})
    with pytest.raises(UserError, match=r"nb_checked --hi: Input should be less than or equal to 100"):
        cls.parse({"hi": "500"})
    with pytest.raises(UserError, match="has no parameter --nope"):
        cls.parse({"nope": 1})


def test_decorator_refusals(registered):
    with pytest.raises(TypeError, match="no validate hook"):
        gpuscale.workload("nb_novalidate")(lambda x: x)
    with pytest.raises(UserError, match=r"already exists .*; choose another name, or pass replace=True"):
        gpuscale.workload("svd", validate=lambda r: True)(lambda x: x)
    with pytest.raises(UserError, match=r"parameter 'workers' is gpuscale's own keyword"):
        gpuscale.workload("nb_reserved", params={"workers": 2}, validate=lambda r: True)(lambda x: x)
    with pytest.raises(UserError, match="has default None"):
        gpuscale.workload("nb_none", params={"k": None}, validate=lambda r: True)(lambda x: x)
    with pytest.raises(UserError, match="collection must be 'array' or 'dataframe'"):
        gpuscale.workload("nb_coll", collection="table", validate=lambda r: True)(lambda x: x)
    assert (
        "nb_novalidate" not in workloads.names()
        and workloads.get("svd").__module__ == "gpuscale.workloads.svd"
    )


@pytest.mark.parametrize(
    "name",
    # Session.run's own keywords beside **params; a settings keyword without a flag; a flag's
    # parameter that is no keyword (profile) and the --no- form of a declared flag
    ["audit", "data", "validate", "output", "overwrite", "min_repeats", "profile", "no_memory_check"],
)
def test_a_parameter_named_like_a_run_keyword_is_refused_at_declaration_in_one_line(registered, name):
    """``s.run("w", audit=False)`` binds ``audit`` to Session.run's own keyword, never to the
    workload: such a parameter is refused when the workload is declared, naming it and the fix."""
    registered.append("nb_shadow")
    with pytest.raises(UserError) as e:
        gpuscale.workload("nb_shadow", params={name: 1, "n": 2}, validate=lambda r: True)(lambda x: x)
    line = str(e.value)
    assert "\n" not in line
    assert line == (
        f"workload 'nb_shadow': parameter '{name}' is gpuscale's own keyword (Session.run / "
        f"gpuscale.run / the run flags), so it could never be set; "
        f"rename it (e.g. '{name}' -> 'my_{name}')"
    ), line
    assert workloads.registry.registered("nb_shadow") is None


def test_a_workload_subclass_with_a_run_keyword_parameter_is_refused_too(registered):
    registered.append("nb_shadow_cls")

    class P(Params):
        audit: bool = True

    with pytest.raises(UserError, match="parameter 'audit' is gpuscale's own keyword"):

        @gpuscale.workload("nb_shadow_cls", params=P)
        class Shadow(Workload):
            def compute(self, data, p, ctx):
                return data

            def validate(self, result, data, p, ctx):
                return Validation([])

    assert workloads.registry.registered("nb_shadow_cls") is None


def test_every_run_and_settings_keyword_is_reserved():
    """Every keyword that sits beside a workload's ``**params`` (Session.run,
    gpuscale.run, gpuscale.explain), every setting keyword and every settings flag (as declared
    on the settings, ``--no-`` forms too) is reserved: one added there later cannot be shadowed
    by a workload parameter."""
    import inspect

    from gpuscale import api, config
    from gpuscale.runs.session import Session
    from gpuscale.workloads.decorator import reserved

    keywords = set(config.KEYWORDS) | set(config.FLAGS)
    keywords |= {o[2:].replace("-", "_") for s in config.FLAGS.values() for o in s.opts}
    for fn in (Session.run, api.run, api.explain):
        keywords |= {
            n
            for n, prm in inspect.signature(fn).parameters.items()
            if n != "self" and prm.kind is not prm.VAR_KEYWORD
        }
    assert {"audit", "data", "validate", "output", "overwrite", "min_repeats", "no_memory_check"} <= keywords
    assert keywords <= reserved(), sorted(keywords - reserved())


def test_every_flag_of_gpuscale_and_its_run_command_is_reserved():
    """The flags of ``gpuscale`` and ``gpuscale run`` (a workload's own flags sit beside them),
    read from the commands as declared: one added later is reserved or this fails."""
    from gpuscale.cli import cli, run
    from gpuscale.workloads.decorator import reserved

    stub = type("Stub", (), {"input_formats": ("npy",), "output_formats": ("npy",)})
    flags = set()
    for param in (*cli.params, *run.run_params(), *run.data_options(stub)):
        flags.add(param.name)
        for opt in (*param.opts, *param.secondary_opts):
            flags.add(opt.lstrip("-").replace("-", "_"))
    assert {"json", "trace_dir", "output_path", "input_path", "version"} <= flags
    assert flags <= reserved(), sorted(flags - reserved())


def test_builtin_workloads_still_register_with_no_reserved_parameter():
    from gpuscale.workloads.decorator import reserved

    for name in workloads.names():
        cls = workloads.get(name)
        assert cls.name == name
        assert not set(cls.Params.model_fields) & reserved(), name


def test_decorating_again_replaces_the_notebooks_own(registered):
    registered.append("nb_again")
    first = gpuscale.workload("nb_again", params={"a": 1}, validate=lambda r: True)(lambda x: x)
    second = gpuscale.workload("nb_again", params={"b": 2}, validate=lambda r: True)(lambda x: x)
    assert workloads.get("nb_again") is second is not first
    assert list(second.Params.model_fields) == ["b"]


# ---------------------------------------------------------------------------------------
# The entry point, installed for real
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def plugin_python(tmp_path_factory) -> pathlib.Path:
    """A temporary venv that sees this environment's packages (gpuscale included, editable or
    not) and has the example plugin installed into it by pip. Returns its python."""
    root = tmp_path_factory.mktemp("plugin")
    src = shutil.copytree(PLUGIN_SRC, root / "src")  # a setuptools build writes into its source
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # site.addsitedir (not a plain path line) so this environment's own .pth files (an
    # editable gpuscale, numba-cuda's redirector) are processed too
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), *site.getsitepackages()}
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in sorted(ours) if os.path.isdir(p))
    pathlib.Path(purelib, "_outer_env.pth").write_text(lines)
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--quiet",
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return py


def _gpuscale(py, *args, cwd, timeout=180):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_GPUSCALE__")}
    env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run(
        [str(py), "-m", "gpuscale", *map(str, args)],
        cwd=str(cwd),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_entry_point_plugin_listed(plugin_python, tmp_path):
    p = _gpuscale(plugin_python, "workloads", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    items = {w["name"]: w for w in json.loads(p.stdout)}
    assert {"plugin_scale", "svd", "stencil", "lombscargle"} <= set(items)
    w = items["plugin_scale"]
    assert w["description"] == "y = factor * x of a random vector (an example plugin)"
    assert w["params"]["n"] == {
        "default": 100_000,
        "type": "int",
        "choices": None,
        "help": "length of the vector",
    }
    assert w["params"]["factor"]["help"] == "scale factor, >= 0"
    # installed in the temporary venv only: this interpreter does not know it
    assert "plugin_scale" not in workloads.names()


def test_entry_point_plugin_runs_through_the_cli(plugin_python, tmp_path):
    p = _gpuscale(
        plugin_python,
        "run",
        "plugin_scale",
        "--backend",
        "cpu",
        "--workers",
        "1",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--n",
        "5000",
        "--factor",
        "3",
        "--results-dir",
        "res",
        "--json",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["workload"] == "plugin_scale" and d["valid"] is True and d["family"] == "cpu"
    assert d["params"] == {"n": 5000, "factor": 3.0, "seed": 0}
    threads = d["cluster"]["running"]["threads"]
    assert d["choices"]["chunk"] == {"value": 5000 // threads, "source": "rule", "rule": "n / threads"}
    assert [c["name"] for c in d["validation"]["checks"]] == ["sum(y) = factor * sum(x)"]
    assert len(files_under(tmp_path / "res")) == 1


def test_entry_point_plugin_bad_parameter_is_one_line(plugin_python, tmp_path):
    p = _gpuscale(plugin_python, "run", "plugin_scale", "--factor", "-1", "--backend", "cpu", cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "gpuscale: error: plugin_scale --factor: Input should be greater than or equal to 0 "
        "(got -1.0); see `gpuscale workloads` for plugin_scale's parameters"
    ]
    assert files_under(tmp_path) == []


def test_entry_point_protocol_carries_a_run(plugin_python, tmp_path):
    """A transport registered through the ``gpuscale.protocols`` entry point: the cluster is
    started over it, the record says so, and its rule names the plugin's description."""
    p = _gpuscale(
        plugin_python,
        "run",
        "transpose_sum",
        "--backend",
        "cpu",
        "--protocol",
        "ws",
        "--workers",
        "1",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--n",
        "400",
        "--results-dir",
        "res",
        "--json",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["valid"] is True and d["protocol"] == "ws"
    assert d["cluster"]["running"]["scheduler"].startswith("ws://")
    transports = d["explained"]["cluster"]["transports"]
    assert transports["rule"] == "WebSockets (distributed's ws comm, from the example plugin): transports ws"
    # installed in the temporary venv only: this interpreter refuses it in one line
    from gpuscale.cluster import protocols

    assert "ws" not in protocols.names()
    q = subprocess.run(
        [sys.executable, "-m", "gpuscale", "cluster", "show", "--protocol", "ws"],
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert q.returncode == 2 and q.stderr.strip().splitlines() == [
        "gpuscale: error: invalid value 'ws' for gpuscale.protocol (from a flag): unknown protocol; "
        "choose one of: auto, tcp, ucx; fix it (see `gpuscale cluster show`)"
    ]
