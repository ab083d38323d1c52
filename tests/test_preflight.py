"""Preflight before work on a running cluster (gpuscale.cluster.preflight), with real processes:
a `dask scheduler`, a `dask worker` of this environment, and one of another install of gpuscale
(a copy of the package with its own version in _version.py and in its distribution metadata,
first on that worker's PYTHONPATH: what `pip install gpuscale==0.0.1` leaves on a host). A run
against the cluster with that worker is refused in one line naming its host and the fix; with
only matching workers it is valid and the record holds what the preflight saw."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

import gpuscale
from conftest import _clean_environ

pytestmark = pytest.mark.timeout(240)

OTHER = "0.0.1"


def _other_install(root: pathlib.Path) -> pathlib.Path:
    """A second install of gpuscale under ``root``: the package files and its .dist-info, as pip
    writes them, but version OTHER."""
    site = root / "site-packages"
    shutil.copytree(pathlib.Path(gpuscale.__file__).parent, site / "gpuscale",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (site / "gpuscale" / "_version.py").write_text(f'__version__ = "{OTHER}"\n')
    info = site / f"gpuscale-{OTHER}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: gpuscale\nVersion: {OTHER}\n")
    (info / "INSTALLER").write_text("pip\n")
    return site


class Cluster:
    def __init__(self, folder: pathlib.Path):
        self.folder = folder
        self.file = folder / "scheduler.json"
        self.procs: list[subprocess.Popen] = []

    def _start(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-m", *argv], env=_clean_environ(env), cwd=str(self.folder),
                             start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=open(self.folder / f"{name}.err", "w"))
        self.procs.append(p)
        return p

    def scheduler(self) -> None:
        self._start("scheduler", ["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--no-dashboard", "--scheduler-file", str(self.file)])
        deadline = time.monotonic() + 60
        while not self.file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert self.file.exists(), (self.folder / "scheduler.err").read_text()[-2000:]

    def worker(self, name: str, env: dict | None = None) -> None:
        self._start(name, ["distributed.cli.dask_worker", "--scheduler-file", str(self.file), "--nthreads", "1",
                           "--host", "127.0.0.1", "--no-dashboard", "--no-nanny", "--name", name], env)

    def wait_for(self, n: int) -> None:
        from distributed import Client
        with Client(scheduler_file=str(self.file), timeout=30) as c:
            c.wait_for_workers(n, timeout=90)

    def close(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=15)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


@pytest.fixture
def running(tmp_path):
    c = Cluster(tmp_path)
    try:
        c.scheduler()
        yield c
    finally:
        c.close()


def _run(cli, c: Cluster, tmp_path, where: str):
    return cli("run", "svd", "--rows", "20000", "--cols", "10", "--repeat", "1", "--warmup", "0", "--backend", "cpu",
               "--scheduler-file", c.file, where, "--json", "--results-dir", tmp_path / "res", timeout=180)


# the runner in a task on a worker (run.in-cluster, the default against a running cluster) or here
WHERE = pytest.mark.parametrize("where", ["--in-cluster", "--no-in-cluster"])


@WHERE
def test_a_worker_of_another_gpuscale_install_is_refused_in_one_line(running, cli, tmp_path, where):
    site = _other_install(tmp_path / "other")
    running.worker("same")
    running.worker("other", {"PYTHONPATH": str(site)})
    running.wait_for(2)
    p = _run(cli, running, tmp_path, where)
    assert p.returncode == 2, (p.stdout[-2000:], p.stderr[-3000:])
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    line = lines[0]
    assert line.startswith("gpuscale: error: worker tcp://127.0.0.1:") and " on host 127.0.0.1 " in line
    from importlib.metadata import version
    assert f"gpuscale {OTHER} (this client: {version('gpuscale')})" in line, line
    assert f"; install gpuscale=={version('gpuscale')} in the workers' environment on 127.0.0.1" in line, line
    assert not list((tmp_path / "res").glob("**/*.json"))  # no work, no record


@WHERE
def test_matching_workers_pass_and_the_record_says_what_was_checked(running, cli, tmp_path, where):
    running.worker("a")
    running.worker("b")
    running.wait_for(2)
    p = _run(cli, running, tmp_path, where)
    assert p.returncode == 0, p.stderr[-3000:]
    rec = json.loads(p.stdout)
    assert rec["valid"] is True
    pre = rec["cluster"]["preflight"]
    assert pre["ok"] is True and pre["workers"] == 2
    assert pre["hosts"]["127.0.0.1"]["workers"] == 2 and pre["hosts"]["127.0.0.1"]["gpus"] == [0, 0]
    assert {"python", "dask", "distributed", "gpuscale", "numpy", "pandas"} <= set(pre["compared"])


def test_a_worker_the_scheduler_cannot_reach_is_refused_in_one_line(cli, tmp_path):
    """Two hosts (network namespaces, tests/netns.py): the scheduler and a worker on one, a
    worker on the other; that host's cable is pulled, so the scheduler still lists its worker
    but cannot reach it: the run stops before any work, naming it."""
    import netns
    why = netns.unavailable()
    if why:
        pytest.skip(f"multi-host preflight test: {why}")
    with netns.Hosts(["sched", "w1"]) as h:
        c = Cluster(tmp_path)
        # the scheduler gives up on a worker it cannot connect to after 5 s (Dask's default: 30 s)
        env = {"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "5s"}
        try:
            c.procs.append(subprocess.Popen(
                h.cmd("sched", sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", h.ip["sched"],
                      "--port", "0", "--no-dashboard", "--scheduler-file", str(c.file)),
                env=_clean_environ(env), start_new_session=True, stdout=subprocess.DEVNULL,
                stderr=open(tmp_path / "scheduler.err", "w")))
            deadline = time.monotonic() + 60
            while not c.file.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            for name in ("sched", "w1"):
                c.procs.append(subprocess.Popen(
                    h.cmd(name, sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(c.file),
                          "--host", h.ip[name], "--nthreads", "1", "--no-nanny", "--no-dashboard", "--name", name),
                    env=_clean_environ(), start_new_session=True, stdout=subprocess.DEVNULL,
                    stderr=open(tmp_path / f"{name}.err", "w")))
            c.wait_for(2)
            h.down("w1")
            p = cli("run", "svd", "--rows", "20000", "--cols", "10", "--backend", "cpu", "--scheduler-file", c.file,
                    "--results-dir", tmp_path / "res", timeout=120)
        finally:
            c.close()
    assert p.returncode == 2, (p.stdout[-2000:], p.stderr[-3000:])
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    w1 = h.ip["w1"]
    assert lines[0].startswith(f"gpuscale: error: worker tcp://{w1}:") and \
        f" on host {w1} is listed by the scheduler but does not answer it" in lines[0], lines[0]
    assert f"; make {w1} reachable from the scheduler's host, or stop that worker" in lines[0]
