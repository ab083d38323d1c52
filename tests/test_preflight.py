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
from conftest import _clean_environ

import gpuscale

pytestmark = pytest.mark.timeout(240)

OTHER = "0.0.1"


def _other_install(root: pathlib.Path) -> pathlib.Path:
    """A second install of gpuscale under ``root``: the package files and its .dist-info, as pip
    writes them, but version OTHER."""
    site = root / "site-packages"
    shutil.copytree(
        pathlib.Path(gpuscale.__file__).parent,
        site / "gpuscale",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
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
        p = subprocess.Popen(
            [sys.executable, "-m", *argv],
            env=_clean_environ(env),
            cwd=str(self.folder),
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=open(self.folder / f"{name}.err", "w"),
        )
        self.procs.append(p)
        return p

    def scheduler(self) -> None:
        self._start(
            "scheduler",
            [
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(self.file),
            ],
        )
        deadline = time.monotonic() + 60
        while not self.file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert self.file.exists(), (self.folder / "scheduler.err").read_text()[-2000:]

    def worker(self, name: str, env: dict | None = None) -> None:
        self._start(
            name,
            [
                "distributed.cli.dask_worker",
                "--scheduler-file",
                str(self.file),
                "--nthreads",
                "1",
                "--host",
                "127.0.0.1",
                "--no-dashboard",
                "--no-nanny",
                "--name",
                name,
            ],
            env,
        )

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


def _run(cli, c: Cluster, tmp_path, *flags: str):
    return cli(
        "run",
        "svd",
        "--rows",
        "20000",
        "--cols",
        "10",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--backend",
        "cpu",
        "--scheduler-file",
        c.file,
        *flags,
        "--json",
        "--results-dir",
        tmp_path / "res",
        timeout=180,
    )


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
            _netns_cluster(h, c, tmp_path, ["sched", "w1"], env)
            h.down("w1")
            p = cli(
                "run",
                "svd",
                "--rows",
                "20000",
                "--cols",
                "10",
                "--backend",
                "cpu",
                "--scheduler-file",
                c.file,
                "--results-dir",
                tmp_path / "res",
                timeout=120,
            )
        finally:
            c.close()
    assert p.returncode == 2, (p.stdout[-2000:], p.stderr[-3000:])
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    w1 = h.ip["w1"]
    assert (
        lines[0].startswith(f"gpuscale: error: worker tcp://{w1}:")
        and f" on host {w1} is listed by the scheduler but does not answer it" in lines[0]
    ), lines[0]
    assert f"; make {w1} reachable from the scheduler's host, or stop that worker" in lines[0]


# ---------------------------------------------------------------------------------------
# interconnect and the bandwidth probe
# ---------------------------------------------------------------------------------------
def test_tcp_preflight_does_not_probe_unless_asked(running, cli, tmp_path):
    """The cheap path: over tcp the probe is off by default (auto probes over ucx only), and the
    record still names the transport between the two workers."""
    running.worker("a")
    running.worker("b")
    running.wait_for(2)
    p = _run(cli, running, tmp_path, "--no-in-cluster")
    assert p.returncode == 0, p.stderr[-3000:]
    rec = json.loads(p.stdout)
    probe = rec["cluster"]["preflight"]["probe"]
    assert probe["value"] is False and probe["source"] == "default" and probe["pairs"] == []
    assert probe["rule"].startswith("auto: probes over UCX only")
    host = rec["cluster"]["preflight"]["hosts"]["127.0.0.1"]
    assert host["nvlink"] is None and host["infiniband"] == []  # no GPUs, no RDMA ports on this machine
    pairs = rec["cluster"]["pairs"]
    (pair,) = pairs["pairs"]
    assert pairs["by"] == "worker" and pairs["from"] == "preflight"
    assert sorted(pair["between"]) == sorted(
        a for h in rec["cluster"]["hosts"].values() for a in h["addresses"]
    )
    assert pair["transport"] == "tcp" and pair["same_host"] is True and pair["label"] == "tcp, same host"
    assert pair["gib_s"] is None


@WHERE
def test_the_bandwidth_probe_measures_a_real_pair_of_cpu_workers(running, cli, tmp_path, where):
    """--bandwidth-probe on over tcp: the 64 MiB NumPy block moved between the two workers, its
    times and bandwidth in the record (preflight.probe and cluster.pairs), and plausible: a few
    hundredths of a second to seconds on loopback, and the bandwidth is the block over the best."""
    from gpuscale.cluster import preflight

    running.worker("a")
    running.worker("b")
    running.wait_for(2)
    p = _run(cli, running, tmp_path, where, "--bandwidth-probe", "on")
    assert p.returncode == 0, p.stderr[-3000:]
    rec = json.loads(p.stdout)
    assert rec["valid"] is True
    probe = rec["cluster"]["preflight"]["probe"]
    assert probe["value"] is True and probe["source"] == "flag" and probe["rule"].startswith("on:")
    assert probe["block_bytes"] == preflight.PROBE_BYTES == 64 * 2**20
    (m,) = probe["pairs"]
    workers = sorted(a for h in rec["cluster"]["hosts"].values() for a in h["addresses"])
    assert sorted([m["from"], m["to"]]) == workers and m["hosts"] == ["127.0.0.1", "127.0.0.1"]
    assert m["transport"] == "tcp, same host" and m["bytes"] == preflight.PROBE_BYTES
    assert m["expectation"] == "TCP within one host (loopback): at least 500 MiB/s"
    assert 1 <= len(m["seconds"]) <= preflight.PROBE_TRIES and all(0.001 < s < 10 for s in m["seconds"])
    best = m["bytes"] / min(m["seconds"]) / 2**30
    assert abs(m["gib_s"] - best) <= 0.01 * best + 0.002
    assert m["expected_gib_s"] / preflight.FAR_BELOW <= m["gib_s"] < 200  # passed the check; not a fantasy
    assert 0 < probe["seconds"] < preflight.PROBE_BUDGET_S + preflight.PROBE_TIMEOUT_S
    (pair,) = rec["cluster"]["pairs"]["pairs"]
    assert pair["gib_s"] == m["gib_s"] and pair["same_host"] is True


def _netns_cluster(h, c: Cluster, tmp_path, workers: list[str], env: dict | None = None) -> None:
    """A scheduler on host "sched" and one `dask worker` on each of ``workers`` (hosts of ``h``)."""
    c.procs.append(
        subprocess.Popen(
            h.cmd(
                "sched",
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                h.ip["sched"],
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(c.file),
            ),
            env=_clean_environ(env),
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "scheduler.err", "w"),
        )
    )
    deadline = time.monotonic() + 60
    while not c.file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    for name in workers:
        c.procs.append(
            subprocess.Popen(
                h.cmd(
                    name,
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    "--scheduler-file",
                    str(c.file),
                    "--host",
                    h.ip[name],
                    "--nthreads",
                    "1",
                    "--no-nanny",
                    "--no-dashboard",
                    "--name",
                    name,
                ),
                env=_clean_environ(env),
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=open(tmp_path / f"{name}.err", "w"),
            )
        )
    c.wait_for(len(workers))


def test_a_pair_of_workers_that_cannot_reach_each_other_is_refused_in_one_line(cli, tmp_path):
    """Three hosts (network namespaces): the scheduler alone on one, a worker on each of the
    others, and no route between those two. Both answer the scheduler (the version check
    passes), but the probe's block cannot move between them: the run stops before any work,
    naming both workers, their hosts and the fix."""
    import netns

    why = netns.unavailable()
    if why:
        pytest.skip(f"multi-host probe test: {why}")
    with netns.Hosts(["sched", "w1", "w2"]) as h:
        c = Cluster(tmp_path)
        try:
            # a worker gives up connecting to a peer after 3 s (Dask's default: 30 s)
            _netns_cluster(h, c, tmp_path, ["w1", "w2"], {"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "3s"})
            h.unroute("w1", "w2")
            t0 = time.monotonic()
            p = cli(
                "run",
                "svd",
                "--rows",
                "20000",
                "--cols",
                "10",
                "--backend",
                "cpu",
                "--scheduler-file",
                c.file,
                "--bandwidth-probe",
                "on",
                "--results-dir",
                tmp_path / "res",
                timeout=120,
            )
            took = time.monotonic() - t0
        finally:
            c.close()
    assert p.returncode == 2, (p.stdout[-2000:], p.stderr[-3000:])
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    w1, w2 = h.ip["w1"], h.ip["w2"]
    assert (
        lines[0].startswith(f"gpuscale: error: worker tcp://{w2}:")
        and f" on host {w2} could not fetch a 64 MiB block from worker tcp://{w1}:" in lines[0]
    ), lines[0]
    assert f" on host {w1} over tcp (" in lines[0]
    assert lines[0].endswith(
        f"; check the workers' network between {w1} and {w2} (firewall, routes), or skip "
        "this check with --bandwidth-probe off"
    ), lines[0]
    assert took < 60
    assert not list((tmp_path / "res").glob("**/*.json"))


def test_a_pair_far_below_its_transport_is_refused_and_a_fast_one_is_measured(tmp_path):
    """Two worker hosts (network namespaces): first the probe measures the pair between hosts
    (transport 'tcp, between hosts', a real number); then one host's sending is throttled to
    1 MB/s (tc) and the probe, with a 2 MiB block, refuses the pair in one line: measured
    bandwidth, the expectation and its rule, both workers and the fix."""
    import netns

    why = netns.unavailable()
    if why:
        pytest.skip(f"multi-host probe test: {why}")
    if shutil.which("tc") is None:
        pytest.skip("the throttled-link test needs tc (iproute2)")
    from distributed import Client

    from gpuscale import backends
    from gpuscale.cluster import preflight
    from gpuscale.errors import UserError

    fam = backends.select("cpu").family
    with netns.Hosts(["sched", "w1", "w2"]) as h:
        c = Cluster(tmp_path)
        try:
            _netns_cluster(h, c, tmp_path, ["w1", "w2"])
            with Client(scheduler_file=str(c.file), timeout=30) as client:
                checked = preflight.check(client, fam, "on", "keyword")
                h.throttle("w1", "8mbit")
                seen = preflight.seen_from(checked)
                decision = preflight._probe_decision("on", "keyword", "tcp", 2)
                with pytest.raises(UserError) as e:
                    preflight.probe(client, fam, sorted(seen), seen, decision, nbytes=2 * 2**20, tries=1)
        finally:
            c.close()
    w1, w2 = h.ip["w1"], h.ip["w2"]
    (m,) = checked["probe"]["pairs"]
    assert m["hosts"] == [w1, w2] and m["transport"] == "tcp, between hosts"
    assert m["expectation"] == "TCP between hosts: at least 100 MiB/s (a 1 GbE link)"
    assert m["gib_s"] > 0.1 * 100 / 1024 and m["bytes"] == preflight.PROBE_BYTES
    assert set(checked["hosts"]) == {w1, w2}
    pair = preflight.pairs(sorted(seen), seen, checked["probe"])["pairs"][0]
    assert (
        pair["same_host"] is False and pair["label"] == "tcp, between hosts" and pair["gib_s"] == m["gib_s"]
    )
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"workers tcp://{w1}:") and f" on host {w1} and tcp://{w2}:" in msg, msg
    rate = float(msg.split(" block at ")[1].split(" MiB/s")[0])
    assert 0.3 < rate < 1.5, msg  # 8 Mbit/s = 0.95 MiB/s, less what the headers take
    assert (
        " moved a 2 MiB block at " in msg
        and "under 1/10 of the 100 MiB/s expected (TCP between hosts: at "
        "least 100 MiB/s (a 1 GbE link)); check the workers' network between "
        in msg
    ), msg
    assert msg.endswith("or skip this check with --bandwidth-probe off")


def test_rdma_ports_are_read_from_sysfs(tmp_path):
    """gpuscale.machine.infiniband reads the kernel's /sys/class/infiniband layout: a tree laid
    out as the kernel does (an InfiniBand HDR port up, a RoCE port down) is read back."""
    from gpuscale import machine

    root = tmp_path / "infiniband"
    for dev, port, state, phys, rate, layer in (
        ("mlx5_0", "1", "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand"),
        ("mlx5_1", "1", "1: DOWN", "3: Disabled", "40 Gb/sec (4X QDR)", "Ethernet"),
    ):
        d = root / dev / "ports" / port
        d.mkdir(parents=True)
        for name, text in (("state", state), ("phys_state", phys), ("rate", rate), ("link_layer", layer)):
            (d / name).write_text(text + "\n")
    ports = machine.infiniband(str(root))
    assert ports == [
        {
            "device": "mlx5_0",
            "port": 1,
            "state": "ACTIVE",
            "phys_state": "LinkUp",
            "rate": "200 Gb/sec (4X HDR)",
            "rate_gbps": 200.0,
            "link_layer": "InfiniBand",
        },
        {
            "device": "mlx5_1",
            "port": 1,
            "state": "DOWN",
            "phys_state": "Disabled",
            "rate": "40 Gb/sec (4X QDR)",
            "rate_gbps": 40.0,
            "link_layer": "Ethernet",
        },
    ]
    assert machine.infiniband(str(tmp_path / "none")) == []
    # two ucx workers on hosts whose HDR ports are up expect half the port's rate
    from gpuscale.cluster import preflight

    seen = {
        a: {"gpu": 0, "nvlink_peers": {}, "infiniband": ports}
        for a in ("ucx://10.0.0.1:1", "ucx://10.0.0.2:1")
    }
    expected, rule = preflight.expectation("ucx://10.0.0.1:1", "ucx://10.0.0.2:1", seen, gpu=True)
    assert expected == 200e9 / 8 / 2 and rule.startswith("UCX over InfiniBand: at least half")
    assert (
        preflight.transport("ucx://10.0.0.1:1", "ucx://10.0.0.2:1", seen)["label"]
        == "ucx, between hosts, InfiniBand active on both"
    )


def test_the_record_names_the_transport_per_worker_pair_or_per_host_pair():
    """cluster.pairs: every worker pair up to 8 workers (NVLink from the GPUs the workers hold),
    one entry per host pair and per host beyond that."""
    from gpuscale.cluster import preflight

    peers = {"0": [1], "1": [0], "2": []}
    few = {
        f"ucx://10.0.0.1:{p}": {"gpu": g, "nvlink_peers": peers, "infiniband": []}
        for p, g in ((1, 0), (2, 1), (3, 2))
    }
    got = preflight.pairs(sorted(few), few)
    assert got["by"] == "worker" and len(got["pairs"]) == 3
    labels = {tuple(p["between"]): p["label"] for p in got["pairs"]}
    assert labels[("ucx://10.0.0.1:1", "ucx://10.0.0.1:2")] == "ucx, same host, NVLink"
    assert labels[("ucx://10.0.0.1:1", "ucx://10.0.0.1:3")] == "ucx, same host, no NVLink between their GPUs"
    many = [f"tls://10.0.0.{h}:{p}" for h in (1, 2, 3) for p in (1, 2, 3, 4)]
    got = preflight.pairs(many)
    assert got["by"] == "host" and got["from"] == "addresses"
    assert [p["between"] for p in got["pairs"]] == [
        ["10.0.0.1", "10.0.0.1"],
        ["10.0.0.1", "10.0.0.2"],
        ["10.0.0.1", "10.0.0.3"],
        ["10.0.0.2", "10.0.0.2"],
        ["10.0.0.2", "10.0.0.3"],
        ["10.0.0.3", "10.0.0.3"],
    ]
    assert all(
        p["transport"] == "tls" and p["same_host"] == (p["between"][0] == p["between"][1])
        for p in got["pairs"]
    )
    assert preflight.probe_pairs(many) == [
        ("tls://10.0.0.1:1", "tls://10.0.0.1:2"),
        ("tls://10.0.0.2:1", "tls://10.0.0.2:2"),
        ("tls://10.0.0.3:1", "tls://10.0.0.3:2"),
        ("tls://10.0.0.1:1", "tls://10.0.0.2:1"),
        ("tls://10.0.0.1:1", "tls://10.0.0.3:1"),
        ("tls://10.0.0.2:1", "tls://10.0.0.3:1"),
    ]


def test_the_packages_compared_are_found_without_scanning_every_installed_distribution():
    """Which distribution provides numpy, pandas or gpuscale is asked of those names directly:
    the scan of every installed distribution's files (seconds on an image with many packages,
    on every `gpuscale run --scheduler-file`) is left for a module found under neither."""
    from gpuscale import machine
    from gpuscale.backends import select
    from gpuscale.cluster import preflight

    machine._providers.cache_clear()
    assert preflight.packages(select("cpu").family) == ["gpuscale", "numpy", "pandas"]
    assert machine._providers.cache_info().currsize == 0
    assert machine.distribution("yaml") == "PyYAML"  # import name != distribution name: the scan
    assert machine._providers.cache_info().currsize == 1
