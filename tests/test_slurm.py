"""The slurm deploy target (``cluster.deploy: slurm``, dask-jobqueue's SLURMCluster) against a
real SLURM: Debian's slurm-wlm (slurmctld + slurmd, one node: this machine) and munge, both
started here in a temporary folder with their own key, socket, slurm.conf (``SLURM_CONF``),
state and spool folders and free ports, no cgroups (proctrack/linuxproc, task/none), and
stopped afterwards. `gpuscale cluster show` prints the job script SLURMCluster would submit;
`gpuscale cluster up --deploy slurm` submits real jobs (TLS, the credentials file beside the
scheduler file), a `gpuscale run --scheduler-file` against it is valid, and `cluster down`
leaves no job in the queue."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import _clean_environ

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")


def _missing() -> str | None:
    gone = [b for b in BINARIES if not (shutil.which(b) or os.path.exists(f"/usr/sbin/{b}"))]
    if gone:
        return f"{', '.join(gone)} not installed (Debian: apt-get install slurm-wlm munge; .ci/run does)"
    if os.geteuid() != 0:
        return (
            "slurmd runs jobs as their users and munged's key is root's here: the test runs as root (CI does)"
        )
    return None


WHY = _missing()
pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(WHY is not None, reason=f"slurm tests: {WHY}")]


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _conf(d: pathlib.Path, ctld_port: int, d_port: int) -> str:
    return "\n".join(
        [
            "ClusterName=gpuscaletest",
            "SlurmctldHost=localhost(127.0.0.1)",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={d_port}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={d / 'munge.sock'}",
            f"StateSaveLocation={d / 'state'}",
            f"SlurmdSpoolDir={d / 'spool'}",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'slurmd.pid'}",
            f"SlurmctldLogFile={d / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            "ReturnToService=2",
            f"NodeName=gpuscale-node NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory=4000 State=UNKNOWN",
            "PartitionName=gpuscale Nodes=gpuscale-node Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def _tail(d: pathlib.Path) -> str:
    return " | ".join(
        f"{f.name}: {f.read_text(errors='replace')[-800:]}"
        for f in sorted(d.glob("*.log")) + sorted(d.glob("*.err"))
        if f.is_file()
    )


@pytest.fixture(scope="module")
def slurm():
    """munged + slurmctld + slurmd of this test, in a temporary folder; yields the environment
    (SLURM_CONF) that SLURM's commands and dask-jobqueue need; everything stopped afterwards."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="gpuscale-slurm-"))
    os.chmod(d, 0o755)  # munged wants its socket's folder open to all (execute)
    procs: list[subprocess.Popen] = []
    env = _clean_environ({"SLURM_CONF": str(d / "slurm.conf")})
    try:
        (d / "state").mkdir()
        (d / "spool").mkdir()
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        (d / "slurm.conf").write_text(_conf(d, *_free_ports(2)))
        munged = subprocess.run(
            [
                _binary("munged"),
                "--force",
                f"--socket={d / 'munge.sock'}",
                f"--key-file={key}",
                f"--log-file={d / 'munged.log'}",
                f"--pid-file={d / 'munged.pid'}",
                f"--seed-file={d / 'munged.seed'}",
            ],
            capture_output=True,
            text=True,
        )
        if munged.returncode != 0:
            pytest.skip(f"munged does not start here: {munged.stderr.strip()[-300:]}")
        for name, argv in (
            ("slurmctld", [_binary("slurmctld"), "-D"]),
            ("slurmd", [_binary("slurmd"), "-D", "-N", "gpuscale-node"]),
        ):
            procs.append(
                subprocess.Popen(
                    argv + ["-f", str(d / "slurm.conf")],
                    env=env,
                    start_new_session=True,
                    stdout=subprocess.DEVNULL,
                    stderr=open(d / f"{name}.err", "w"),
                )
            )
            time.sleep(1)
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                pytest.skip(f"slurmctld/slurmd exited at start here: {_tail(d)}")
            p = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], env=env, capture_output=True, text=True)
            state = p.stdout.strip()
            if state in ("idle", "mix", "alloc"):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the SLURM node did not come up (sinfo: {state!r}): {_tail(d)}")
        yield {"env": env, "folder": d}
    finally:
        if procs:  # jobs left by a failed test: their steps outlive slurmd (proctrack/linuxproc)
            subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True, timeout=30)
            deadline = time.monotonic() + 20
            while (
                time.monotonic() < deadline
                and subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True).stdout.strip()
            ):
                time.sleep(0.5)
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=15)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        pid_file = d / "munged.pid"
        if pid_file.exists():
            try:
                pid = int(pid_file.read_text().strip())
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:  # it writes its seed file as it exits
                    os.kill(pid, 0)
                    time.sleep(0.1)
            except (ValueError, ProcessLookupError):
                pass
        shutil.rmtree(d, ignore_errors=True)


def _profile(folder: pathlib.Path, jobs: int = 2) -> pathlib.Path:
    p = folder / "slurm-test.yaml"
    p.write_text(
        json.dumps(
            {
                "version": 1,
                "description": "test",
                "gpuscale": {
                    "cluster": {
                        "deploy": "slurm",
                        "slurm": {
                            "jobs": jobs,
                            "cores": 1,
                            "memory": "1GB",
                            "queue": "gpuscale",
                            "walltime": "00:10:00",
                            "log-directory": str(folder / "jobs"),
                        },
                    }
                },
            }
        )
    )
    return p


def _queue(env) -> list[str]:
    p = subprocess.run(
        ["squeue", "-h", "-o", "%i %j %T"], env=env, capture_output=True, text=True, check=True
    )
    return [line for line in p.stdout.splitlines() if line.strip()]


def test_cluster_show_prints_the_job_script(slurm, cli, tmp_path):
    """The script `cluster show` prints is the one SLURMCluster.job_script() gives for the same
    settings (there with the address of the scheduler it starts), and nothing is submitted."""
    profile = _profile(tmp_path)
    p = cli(
        "cluster",
        "show",
        "--profile",
        profile,
        "--backend",
        "cpu",
        "--security",
        "off",
        "--json",
        env=slurm["env"],
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["spec"]["cls"] == "dask_jobqueue.SLURMCluster" and d["spec"]["workers"] == 2
    script = "\n".join(d["commands"])
    assert "#SBATCH -p gpuscale" in script and "#SBATCH -t 00:10:00" in script
    assert "-m distributed.cli.dask_worker tcp://SCHEDULER_ADDRESS" in script
    from dask_jobqueue import SLURMCluster

    kw = {k: v for k, v in d["spec"]["kwargs"].items() if k not in ("n_workers",)}
    with SLURMCluster(**kw) as c:
        theirs = (
            c.job_script()
            .replace(c.scheduler.address, "tcp://SCHEDULER_ADDRESS")
            .replace("dummy-name", "WORKER_NAME")
        )
    assert theirs.splitlines() == d["commands"]
    assert _queue(slurm["env"]) == []
    # TLS (the default for a cluster on other hosts): the workers read the credentials file by its path
    p = cli("cluster", "show", "--profile", profile, "--backend", "cpu", "--json", env=slurm["env"])
    d = json.loads(p.stdout)
    assert d["spec"]["security"] == "tls"
    assert (
        "tls://SCHEDULER_ADDRESS" in d["commands"][-1] and "--tls-cert CREDENTIALS_FILE" in d["commands"][-1]
    )


def test_cluster_up_submits_jobs_and_serves_a_valid_tls_run(slurm, cli, tmp_path):
    env = slurm["env"]
    sched = tmp_path / "scheduler.json"
    err = tmp_path / "up.err"
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "cluster",
            "up",
            "--profile",
            str(_profile(tmp_path)),
            "--backend",
            "cpu",
            "--scheduler-file",
            str(sched),
            "--json",
        ],
        cwd=str(tmp_path),
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=open(err, "w"),
        text=True,
    )
    try:
        line = up.stdout.readline()
        assert line.startswith("{"), (line, err.read_text()[-3000:], _tail(slurm["folder"]))
        d = json.loads(line)
        assert d["cls"] == "dask_jobqueue.SLURMCluster" and d["tls"] is True and d["workers"] == 2
        assert d["scheduler"].startswith("tls://")
        jobs = _queue(env)
        assert len(jobs) == 2 and all("gpuscale-worker RUNNING" in j for j in jobs), jobs
        p = cli(
            "run",
            "svd",
            "--rows",
            "40000",
            "--cols",
            "10",
            "--repeat",
            "1",
            "--warmup",
            "0",
            "--backend",
            "cpu",
            "--scheduler-file",
            sched,
            "--json",
            "--results-dir",
            tmp_path / "res",
            env=env,
            timeout=180,
        )
        assert p.returncode == 0, p.stderr[-3000:]
        rec = json.loads(p.stdout)
        assert rec["valid"] is True and rec["cluster"]["tls"] is True
        assert sum(h["workers"] for h in rec["cluster"]["hosts"].values()) == 2
        p = cli("cluster", "down", "--scheduler-file", sched, env=env, timeout=60)
        assert p.returncode == 0, p.stderr
        assert up.wait(timeout=60) == 0, err.read_text()[-3000:]
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (_queue(env) or sched.exists()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _queue(env) == [] and not sched.exists() and not (tmp_path / "scheduler.tls.pem").exists()
    logs = sorted((tmp_path / "jobs").glob("gpuscale-worker-*.err"))
    assert len(logs) == 2, logs  # the jobs' own logs, in cluster.slurm.log-directory


def test_srun_tasks_make_the_cluster_and_the_run_is_valid(slurm, tmp_path):
    """`srun -n 3 gpuscale run svd --deploy srun` (dask-jobqueue's SLURMRunner): rank 0 the
    scheduler, rank 1 the run, rank 2 a worker, over TLS (rank 0 writes the credentials beside
    the scheduler file); every task exits 0 once the run is done (the client stops the
    scheduler, the worker follows), the files are gone."""
    argv = [
        "srun",
        "-n",
        "3",
        "--overcommit",
        "--kill-on-bad-exit=1",
        "--time",
        "5",
        "--chdir",
        str(tmp_path),
        f"--output={tmp_path}/task-%t.out",
        f"--error={tmp_path}/task-%t.err",
        sys.executable,
        "-m",
        "gpuscale",
        "run",
        "svd",
        "--rows",
        "40000",
        "--cols",
        "10",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--backend",
        "cpu",
        "--deploy",
        "srun",
        "--json",
        "--results-dir",
        str(tmp_path / "res"),
    ]
    p = subprocess.run(argv, env=slurm["env"], capture_output=True, text=True, timeout=150)
    logs = {f.name: f.read_text()[-1500:] for f in sorted(tmp_path.glob("task-*"))}
    assert p.returncode == 0, (p.stderr[-2000:], logs)
    rec = json.loads((tmp_path / "task-1.out").read_text())
    assert rec["valid"] is True and rec["cluster"]["cls"] == "dask_jobqueue.slurm.SLURMRunner"
    assert rec["cluster"]["tls"] is True and rec["cluster"]["running"]["workers"] == 1
    assert (tmp_path / "task-0.out").read_text() == "" and (tmp_path / "task-2.out").read_text() == ""
    # the scheduler file (Dask's scheduler removes it as it closes) and the credentials are gone
    assert not list(tmp_path.glob("scheduler-*")), logs
    deadline = time.monotonic() + 30
    while _queue(slurm["env"]) and time.monotonic() < deadline:  # COMPLETING a moment
        time.sleep(0.5)
    assert _queue(slurm["env"]) == []


def test_the_gpu_job_script_runs_dask_cuda_worker_with_the_rmm_pool(cli, tmp_path):
    """Wired, not run here (no GPU): the GPU family's job runs `python -m dask cuda worker` with
    the family's RMM pool, the device memory limit set and the GPUs asked for in job-extra."""
    p = cli(
        "cluster",
        "show",
        "--profile",
        _profile(tmp_path),
        "--backend",
        "gpu",
        "--rmm-pool-size",
        "0.5",
        "--device-memory-limit",
        "0.7",
        "--json",
    )
    if p.returncode != 0:
        pytest.skip(f"the GPU family cannot be selected here: {p.stderr.strip()[-300:]}")
    script = json.loads(p.stdout)["commands"]
    assert script[-1].startswith(f"{sys.executable} -m dask cuda worker tls://SCHEDULER_ADDRESS ")
    assert "--rmm-pool-size 0.5" in script[-1] and "--tls-key CREDENTIALS_FILE" in script[-1]
    assert "--device-memory-limit 0.7" in script[-1]  # where the workers spill device -> host
    node = json.loads(p.stdout)["per_host"]["each SLURM job's node (2 job(s))"]
    assert node["worker_class"] == "python -m dask cuda worker" and str(node["device_memory_limit"]) == "0.7"
