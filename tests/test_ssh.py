"""The ssh deploy target (``cluster.deploy: ssh``, distributed's SSHCluster) against real sshd
servers (Debian's openssh-server), one in each of two network namespaces (tests/netns.py):
`gpuscale cluster up --profile PATH` starts the scheduler and a worker on one host and a
worker on the other over ssh, with TLS (the credentials file on the shared filesystem), and a
`gpuscale run --scheduler-file` from the root namespace is valid and names both hosts."""

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

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
WHY = netns.unavailable() or (
    None
    if os.path.exists(SSHD)
    else "sshd is not installed (Debian: apt-get install openssh-server; .ci/run does)"
)
pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(WHY is not None, reason=f"ssh deploy tests: {WHY}"),
]


def _sshd_config(folder: pathlib.Path, name: str, ip: str) -> pathlib.Path:
    lines = [
        f"ListenAddress {ip}",
        "Port 22",
        f"HostKey {folder / 'host_key'}",
        f"PidFile {folder / name}.pid",
        f"AuthorizedKeysFile {folder / 'authorized_keys'}",
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
    ]
    if os.environ.get("PYTHONPATH"):  # a source checkout's gpuscale, as in this process
        lines.append(f"SetEnv PYTHONPATH={os.environ['PYTHONPATH']}")
    cfg = folder / f"sshd-{name}.conf"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


@pytest.fixture
def nodes():
    pytest.importorskip(
        "asyncssh", reason="the ssh deploy target needs asyncssh (pip install 'gpuscale[ssh]')"
    )
    folder = pathlib.Path(tempfile.mkdtemp(prefix="gpuscale-ssh-"))
    procs: list[subprocess.Popen] = []
    h = netns.Hosts(["n1", "n2"])
    try:
        for key in ("host_key", "user_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key)], check=True
            )
        (folder / "authorized_keys").write_text((folder / "user_key.pub").read_text())
        host_pub = (folder / "host_key.pub").read_text().split()[:2]
        (folder / "known_hosts").write_text("".join(f"{ip} {' '.join(host_pub)}\n" for ip in h.ip.values()))
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation folder
        for name, ip in h.ip.items():
            cfg = _sshd_config(folder, name, ip)
            procs.append(
                subprocess.Popen(
                    h.cmd(name, SSHD, "-D", "-e", "-f", str(cfg)),
                    start_new_session=True,
                    stdout=subprocess.DEVNULL,
                    stderr=open(folder / f"sshd-{name}.err", "w"),
                )
            )
        profile = folder / "ssh-test.yaml"
        profile.write_text(
            json.dumps(
                {
                    "version": 1,
                    "description": "test",
                    "gpuscale": {
                        "cluster": {
                            "deploy": "ssh",
                            "threads-per-worker": 1,
                            "ssh": {
                                "hosts": [h.ip["n1"], h.ip["n1"], h.ip["n2"]],
                                "username": "root",
                                "client-keys": [str(folder / "user_key")],
                                "known-hosts": str(folder / "known_hosts"),
                            },
                        }
                    },
                }
            )
        )
        yield {"hosts": h, "folder": folder, "profile": profile, "procs": procs}
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        h.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_cluster_show_prints_the_ssh_commands(nodes, cli):
    h = nodes["hosts"]
    p = cli("cluster", "show", "--profile", nodes["profile"], "--backend", "cpu", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["spec"]["cls"] == "distributed.deploy.ssh.SSHCluster" and d["spec"]["security"] == "tls"
    cmds = d["commands"]
    key = nodes["folder"] / "user_key"
    assert len(cmds) == 3 and cmds[0].startswith(f"ssh -i {key} root@{h.ip['n1']} ")
    assert cmds[2].startswith(f"ssh -i {key} root@{h.ip['n2']} ")
    assert "distributed.Scheduler" in cmds[0] and '"protocol": "tls"' in cmds[0]
    assert all("distributed.Nanny" in c for c in cmds[1:])
    per = d["per_host"]  # what each host runs and its workers get, from the same spec
    assert list(per) == [h.ip["n1"], h.ip["n2"]] and per[h.ip["n1"]]["scheduler"] is True
    assert per[h.ip["n1"]]["worker_entries"] == per[h.ip["n2"]]["worker_entries"] == 1
    assert per[h.ip["n2"]]["worker_class"] == "distributed.Nanny" and per[h.ip["n2"]]["tls"] is True
    assert per[h.ip["n2"]]["threads_per_worker"] == 1


def test_cluster_up_over_ssh_serves_a_valid_tls_run(nodes, cli, tmp_path):
    h, folder = nodes["hosts"], nodes["folder"]
    sched = folder / "scheduler.json"
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "cluster",
            "up",
            "--profile",
            str(nodes["profile"]),
            "--backend",
            "cpu",
            "--scheduler-file",
            str(sched),
            "--json",
        ],
        cwd=str(folder),
        env=_clean_environ(),
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=open(folder / "up.err", "w"),
        text=True,
    )
    nodes["procs"].append(up)
    line = up.stdout.readline()
    assert line.startswith("{"), (
        line,
        (folder / "up.err").read_text()[-3000:],
        [(f.name, f.read_text()[-1500:]) for f in folder.glob("sshd-*.err")],
    )
    d = json.loads(line)
    assert d["tls"] is True and d["scheduler"].startswith(f"tls://{h.ip['n1']}:") and d["workers"] == 2
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
        timeout=180,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    rec = json.loads(p.stdout)
    assert rec["valid"] is True and rec["cluster"]["tls"] is True
    assert {k: v["workers"] for k, v in rec["cluster"]["hosts"].items()} == {h.ip["n1"]: 1, h.ip["n2"]: 1}
    p = cli("cluster", "down", "--scheduler-file", sched, timeout=60)
    assert p.returncode == 0, p.stderr
    assert up.wait(timeout=60) == 0
    deadline = time.monotonic() + 30
    while sched.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not sched.exists() and not (folder / "scheduler.tls.pem").exists()


def test_gpu_workers_on_other_hosts_get_the_local_gpu_knobs():
    """Planned only (no GPU, no host needed): the device spill way, the UCX switches and the
    family's worker environment reach CUDAWorker over ssh (its options, and the configuration
    SSHCluster hands to the remote processes) and `dask cuda worker` in a SLURM job (its flags
    and the job's exports), from the same rule as local GPUs (plan.workers.worker_knobs)."""
    from gpuscale.runs.session import configure

    _, _, spec = configure(
        check=False,
        backend="gpu",
        deploy="ssh",
        ssh_hosts=("h0", "h1"),
        protocol="ucx",
        security="off",
        nvlink=True,
        device_spill="cudf",
        device_memory_limit="16GB",
    )
    opts = spec.kwargs["worker_options"]
    assert opts["enable_nvlink"] is True and opts["enable_cudf_spill"] is True
    assert opts["device_memory_limit"] == "16GB"
    env = "distributed.nanny.pre-spawn-environ."
    assert spec.dask_config[env + "DASK_DISTRIBUTED__COMM__OFFLOAD"] == "False"
    assert spec.dask_config[env + "CUDF_SPILL_DEVICE_LIMIT"] == "16000000000"
    assert spec.choices["device_spill"]["value"] == "cudf" and spec.choices["transports"]["value"] == {
        "enable_nvlink": True
    }
    assert '"enable_cudf_spill": true' in spec.commands[-1]
    _, _, spec = configure(
        check=False,
        backend="gpu",
        deploy="slurm",
        security="off",
        device_spill="cudf",
        device_memory_limit="16GB",
    )
    script = "\n".join(spec.commands)
    assert "--enable-cudf-spill" in script and "--device-memory-limit 16GB" in script
    assert "export CUDF_SPILL_DEVICE_LIMIT=16000000000" in script
