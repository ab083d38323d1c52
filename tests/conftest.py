"""Shared fixtures for gpuscale's tests.

* Every test runs with its working directory in its own ``tmp_path`` (so a record written to
  the default ``./gpuscale-results`` lands there) and with no ``DASK_GPUSCALE__*`` /
  ``GPUSCALE_PROFILE`` variables from the outer environment.
* ``cpu_session``: one real 2-worker CPU ``LocalCluster`` per test module.
* ``cli``: run the real command line in a subprocess.
* Tests marked ``gpu`` are skipped unless a usable GPU (CuPy + dask-cuda + a visible device)
  is present; ``pytest -m gpu`` runs only them.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import subprocess
import sys

import dask.config
import pytest

import gpuscale

REPO = pathlib.Path(__file__).resolve().parents[1]
ENV_PREFIXES = ("DASK_GPUSCALE__",)
ENV_NAMES = ("GPUSCALE_PROFILE",)


def _ours(name: str) -> bool:
    return name.startswith(ENV_PREFIXES) or name in ENV_NAMES


@contextlib.contextmanager
def clean_gpuscale_env():
    """Remove gpuscale's env vars for the duration. dask.config read them when it was imported,
    so when any were present the config is re-read without them (and again afterwards)."""
    with pytest.MonkeyPatch.context() as mp:
        present = [k for k in os.environ if _ours(k)]
        for k in present:
            mp.delenv(k)
        if present:
            dask.config.refresh()
        yield mp
    if present:
        dask.config.refresh()


# ---------------------------------------------------------------------------------------
# GPU marker
# ---------------------------------------------------------------------------------------
def gpu_probe() -> tuple[bool, str]:
    try:
        return gpuscale.backends.select("gpu", check=False).family.probe()
    except Exception as e:  # noqa: BLE001 - a broken GPU stack means "no usable GPU"
        return False, f"{type(e).__name__}: {e}"


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU with CuPy / cuDF / dask-cuda")


def pytest_collection_modifyitems(config, items):
    gpu_items = [it for it in items if it.get_closest_marker("gpu")]
    if not gpu_items:
        return
    ok, why = gpu_probe()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {why}")
    for it in gpu_items:
        it.add_marker(skip)


# ---------------------------------------------------------------------------------------
# Isolation
# ---------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _isolated(tmp_path):
    """Own cwd (default results dir under tmp_path) and no gpuscale env vars."""
    with clean_gpuscale_env() as mp:
        mp.chdir(tmp_path)
        yield


@pytest.fixture
def results_dir(tmp_path) -> pathlib.Path:
    return tmp_path / "results"


# ---------------------------------------------------------------------------------------
# A real CPU cluster shared by a module's API-level tests
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_session():
    with clean_gpuscale_env():
        with gpuscale.session(backend="cpu", workers=2, threads_per_worker=1) as s:
            yield s


# ---------------------------------------------------------------------------------------
# The real command line
# ---------------------------------------------------------------------------------------
def _clean_environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not _ours(k)}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def as_from_a_terminal() -> None:
    """``preexec_fn`` for a command the tests interrupt: SIGINT, SIGHUP and SIGTERM at their
    defaults, as a shell on a terminal starts it. A test run in the background or under nohup
    passes them ignored, and an ignored signal stays ignored across exec."""
    import signal

    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


FRESH_GPUSCALE = """
import json, sys
from gpuscale.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    assert not e.code, e.code
print(json.dumps(sorted(sys.modules)))
"""


def fresh_gpuscale(cwd, *args, timeout: float = 120) -> tuple[list[str], set[str]]:
    """``gpuscale *args`` in a fresh process in ``cwd``, which must succeed: the lines it
    printed, and the modules imported by its end."""
    p = subprocess.run(
        [sys.executable, "-c", FRESH_GPUSCALE, *map(str, args)],
        env=_clean_environ(),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    *printed, modules = p.stdout.strip().splitlines()
    return printed, set(json.loads(modules))


@pytest.fixture
def cli(tmp_path):
    """``cli("run", "svd", ...)`` runs ``python -m gpuscale ...`` in tmp_path; returns the
    CompletedProcess (text). ``module="dask"`` runs ``python -m dask ...`` instead."""

    def run(
        *args: str,
        env: dict[str, str] | None = None,
        cwd=None,
        timeout: float = 120,
        module: str = "gpuscale",
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", module, *map(str, args)],
            cwd=str(cwd or tmp_path),
            env=_clean_environ(env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


def files_under(path: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.exists() else []


def produce(session, name, **params):
    """Plan, generate and compute one workload by hand, data and output persisted as the
    runner does: (workload, params, context, data, Output)."""
    from gpuscale import workloads
    from gpuscale.runs import runner
    from gpuscale.workloads import Output

    cls = workloads.get(name)
    wl, p = cls(), cls.parse(params)
    ctx = workloads.Context(session.family, session.spec, session.client)
    wl.plan(p, ctx)
    data = runner.persist(session.client, wl.generate(p, ctx))
    out = wl.compute(data, p, ctx)
    return wl, p, ctx, data, Output(runner.persist(session.client, out.collections), out.info)
