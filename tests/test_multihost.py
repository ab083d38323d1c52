"""Several hosts simulated by Linux network namespaces (tests/netns.py; root only): `gpuscale
cluster up` (TLS, the default) in one namespace, Dask's own `dask worker` in two others with
the credentials file it wrote, and `gpuscale run --scheduler-file` from the root namespace: a
run valid over TLS whose record names the three hosts; then a host lost in the middle of a run
(its worker killed, its link pulled) and the result still valid, the record naming the lost
worker. Real processes and sockets throughout; every namespace and process is removed at the
end, pass or fail."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import netns
import pytest
from conftest import _clean_environ

WHY = netns.unavailable()
pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(WHY is not None, reason=f"multi-host tests: {WHY}"),
]


def _spawn(argv: list[str], folder: pathlib.Path, log: str) -> subprocess.Popen:
    return subprocess.Popen(
        argv,
        cwd=str(folder),
        env=_clean_environ(),
        start_new_session=True,
        stdout=open(folder / f"{log}.out", "w"),
        stderr=open(folder / f"{log}.err", "w"),
    )


def _logs(folder: pathlib.Path) -> str:
    return "\n".join(f"--- {f.name}\n{f.read_text()[-3000:]}" for f in sorted(folder.glob("*.err")))


def _kill(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait(timeout=30)


@pytest.fixture(scope="module")
def hosts():
    """Hosts sched (cluster up: scheduler + 1 worker), w1 and w2 (one `dask worker` each)."""
    from distributed import Client

    from gpuscale.cluster import security

    folder = pathlib.Path(tempfile.mkdtemp(prefix="gpuscale-hosts-"))
    procs: list[subprocess.Popen] = []
    h = netns.Hosts(["sched", "w1", "w2"])
    try:
        sched = folder / "scheduler.json"
        procs.append(
            _spawn(
                h.cmd(
                    "sched",
                    sys.executable,
                    "-m",
                    "gpuscale",
                    "cluster",
                    "up",
                    "--backend",
                    "cpu",
                    "--workers",
                    "1",
                    "--threads-per-worker",
                    "1",
                    "--host",
                    h.ip["sched"],
                    "--scheduler-file",
                    str(sched),
                    "--json",
                ),
                folder,
                "up",
            )
        )
        deadline = time.monotonic() + 120
        while not sched.exists():
            assert procs[0].poll() is None and time.monotonic() < deadline, _logs(folder)
            time.sleep(0.2)
        address = json.loads(sched.read_text())["address"]
        creds = security.beside(sched)
        assert address == f"tls://{h.ip['sched']}:{address.rsplit(':', 1)[1]}" and creds.exists()
        workers = {}
        for name in ("w1", "w2"):
            p = _spawn(
                h.cmd(
                    name,
                    sys.executable,
                    "-m",
                    "dask",
                    "worker",
                    address,
                    "--tls-ca-file",
                    str(creds),
                    "--tls-cert",
                    str(creds),
                    "--tls-key",
                    str(creds),
                    "--nthreads",
                    "1",
                    "--no-nanny",
                    "--no-dashboard",
                    "--name",
                    name,
                ),
                folder,
                name,
            )
            procs.append(p)
            workers[name] = p
        with Client(address, security=security.load(creds), set_as_default=False, timeout=30) as client:
            try:
                client.wait_for_workers(3, timeout=90)
            except TimeoutError:
                raise AssertionError(_logs(folder)) from None
            yield {
                "hosts": h,
                "folder": folder,
                "sched": sched,
                "address": address,
                "creds": creds,
                "workers": workers,
                "client": client,
            }
    finally:
        for p in procs:
            _kill(p)
        h.close()
        shutil.rmtree(folder, ignore_errors=True)


def _worker_of(client, name: str) -> str:
    return next(a for a, w in client.scheduler_info(n_workers=-1)["workers"].items() if w.get("name") == name)


def test_a_run_over_three_hosts_is_valid_over_tls(hosts, cli, tmp_path):
    h = hosts["hosts"]
    p = cli(
        "run",
        "svd",
        "--rows",
        "60000",
        "--cols",
        "20",
        "--repeat",
        "2",
        "--warmup",
        "0",
        "--backend",
        "cpu",
        "--scheduler-file",
        hosts["sched"],
        "--json",
        "--results-dir",
        tmp_path / "res",
        timeout=180,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    rec = json.loads(p.stdout)
    assert rec["valid"] is True and rec["cluster"]["tls"] is True
    assert rec["cluster"]["scheduler"] == hosts["address"]
    assert {host: v["workers"] for host, v in rec["cluster"]["hosts"].items()} == {
        h.ip["sched"]: 1,
        h.ip["w1"]: 1,
        h.ip["w2"]: 1,
    }
    assert all(a.startswith("tls://") for v in rec["cluster"]["hosts"].values() for a in v["addresses"])
    assert rec["cluster"]["workers_lost"] == [] and rec["info"]["runner"]["where"] == "cluster"
    # and a client that only knows the address, without the credentials, is refused in one line
    p = cli("run", "svd", "--scheduler", hosts["address"], timeout=60)
    assert p.returncode == 2 and p.stderr.startswith("gpuscale: error: ") and len(p.stderr.splitlines()) == 1
    assert "accepts TLS clients only" in p.stderr


def test_a_host_lost_mid_run_still_gives_a_valid_result(hosts, tmp_path):
    """w1 dies while the run's data sit on it: its worker is killed and its link pulled. Dask
    recomputes what was lost on the other hosts; the record is valid and names the lost worker."""
    h, client = hosts["hosts"], hosts["client"]
    w1 = _worker_of(client, "w1")
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "run",
            "groupby",
            "--rows",
            "3000000",
            "--keys",
            "1000",
            "--partitions",
            "12",
            "--repeat",
            "6",
            "--warmup",
            "1",
            "--backend",
            "cpu",
            "--no-in-cluster",
            "--scheduler-file",
            str(hosts["sched"]),
            "--json",
            "--results-dir",
            str(tmp_path / "res"),
        ],
        cwd=str(tmp_path),
        env=_clean_environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not client.has_what().get(w1):  # the run's data have reached w1
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "no data reached w1"
            time.sleep(0.05)
        _kill(hosts["workers"]["w1"])
        h.down("w1")
        lost_at = time.monotonic()
        out, err = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            _kill(run)
    assert run.returncode == 0, err[-3000:]
    rec = json.loads(out)
    assert rec["valid"] is True
    assert rec["cluster"]["workers_lost"] == [w1], rec["cluster"]
    assert h.ip["w1"] not in rec["cluster"]["hosts"] and set(rec["cluster"]["hosts"]) == {
        h.ip["sched"],
        h.ip["w2"],
    }
    assert time.monotonic() - lost_at < 240
    # the run's summary says so too
    from gpuscale.records import report, results

    table = report.result_table(results.load(rec["path"]))
    rows = dict(zip(*[list(c.cells) for c in table.columns]))
    assert rows["  lost during the run"] == w1
    assert h.ip["w2"] in rows["  hosts"] and "(TLS)" in rows["  hosts"]
