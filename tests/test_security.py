"""Beyond one host, on one machine: `--scheduler-file` on run / sessions / explain, and TLS
(`cluster.security`): `cluster up` protected by default, its credentials (mode 0600) beside the
scheduler file, clients without them refused, also from another uid. Real `cluster up`
processes, real clients in subprocesses; nothing mocked."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest
from conftest import _clean_environ, files_under
from test_dashboard import CPU2, SMALL_SVD, Proc, assert_one_error_line, wait_gone

import gpuscale
from gpuscale import UserError, api
from gpuscale.cluster import security

pytestmark = pytest.mark.timeout(240)


def start_up(tmp_path, *extra) -> tuple[Proc, dict]:
    up = Proc("cluster", "up", *CPU2, "--json", *extra, cwd=tmp_path)
    _, first = up.wait_for("out", r"^\{", timeout=90)
    return up, json.loads(first)


@pytest.fixture(scope="module")
def served():
    """One `cluster up --scheduler-file` (TLS by default) for the module, in a folder other
    users may enter (pytest's own are private), so the other-uid test reaches the files and
    is refused by their modes."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="gpuscale-served-"))
    folder.chmod(0o755)
    sched = folder / "scheduler.json"
    try:
        up, d = start_up(folder, "--scheduler-file", sched)
        yield up, d, sched
        up.kill_group()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# --scheduler-file as a setting (starting nothing)
# ---------------------------------------------------------------------------------------
def test_scheduler_file_is_a_setting_with_its_source(tmp_path, cli):
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"address": "tcp://127.0.0.1:8786"}))
    resolved, _, spec = api.configure(backend="cpu", scheduler_file=str(f))
    assert spec.kind == "existing" and spec.scheduler == "tcp://127.0.0.1:8786"
    assert resolved.sources["scheduler-file"] == "flag" and spec.security == "off"
    assert spec.choices["security"]["source"] == "scheduler address"
    p = cli("explain", "svd", "--backend", "cpu", "--scheduler-file", f, "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["settings_sources"]["scheduler-file"] == "flag"
    assert d["cluster"]["scheduler"] == "tcp://127.0.0.1:8786"
    assert d["explained"]["cluster"]["security"]["value"] == "off"
    p = cli("cluster", "show", "--backend", "cpu", "--json", env={"DASK_GPUSCALE__SCHEDULER_FILE": str(f)})
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["sources"]["scheduler-file"] == "env"


@pytest.mark.parametrize(
    "args, needles",
    [
        (("run", *SMALL_SVD, "--scheduler-file", "nosuch.json"), ("nosuch.json", "does not exist")),
        (("explain", "svd", "--scheduler-file", "nosuch.json"), ("nosuch.json", "does not exist")),
        (
            ("run", *SMALL_SVD, "--scheduler", "tcp://127.0.0.1:1", "--scheduler-file", "s.json"),
            ("both a scheduler address", "give one"),
        ),
        (
            ("run", *SMALL_SVD, "--scheduler", "tls://127.0.0.1:1"),
            ("accepts TLS clients only", "--credentials"),
        ),
        (
            ("run", *SMALL_SVD, "--scheduler", "tls://127.0.0.1:1", "--credentials", "nosuch.pem"),
            ("credentials file", "does not exist"),
        ),
        (
            ("run", *SMALL_SVD, "--scheduler", "tls://127.0.0.1:1", "--credentials", "s.json"),
            ("credentials file s.json is not a PEM file", "NO_CERTIFICATE_OR_CRL_FOUND"),
        ),
        (
            ("run", *SMALL_SVD, "--scheduler", "tls://127.0.0.1:1", "--credentials", "cert-only.pem"),
            ("cert-only.pem is not a PEM file holding a CA certificate, a certificate and its key",),
        ),
        (("cluster", "down", "tls://127.0.0.1:1", "--credentials", "s.json"), ("is not a PEM file",)),
        (("run", *SMALL_SVD, "--security", "maybe"), ("gpuscale.cluster.security", "auto")),
        (("cluster", "up", "--backend", "cpu", "--protocol", "ucx"), ("has no TLS", "--security off")),
        (("cluster", "down", "tls://127.0.0.1:1"), ("accepts TLS clients only", "--credentials")),
    ],
)
def test_refusals_are_one_line(cli, tmp_path, args, needles):
    (tmp_path / "s.json").write_text(json.dumps({"address": "tcp://127.0.0.1:1"}))
    pem = security.write(security.temporary(), tmp_path / "whole.pem").read_text()
    certs = [b for b in pem.split("-----END") if "BEGIN CERTIFICATE" in b]
    (tmp_path / "cert-only.pem").write_text(certs[0] + "-----END CERTIFICATE-----\n")  # no key
    assert_one_error_line(cli(*args, timeout=60), *needles)


def test_a_runs_own_cluster_stays_plain_and_tls_is_a_setting(tmp_path):
    r = gpuscale.run(
        "svd",
        backend="cpu",
        rows=20_000,
        cols=10,
        repeat=1,
        warmup=0,
        write=False,
        cluster_settings={"workers": 1},
    )
    assert r.valid and r.cluster["security"] == "off" and r.cluster["tls"] is False
    assert r.explained["cluster"]["security"]["rule"].startswith(
        "auto: this process's own cluster, plain tcp"
    )
    r = gpuscale.run(
        "groupby",
        backend="cpu",
        rows=50_000,
        keys=100,
        repeat=1,
        warmup=0,
        write=False,
        cluster_settings={"workers": 1, "security": "tls"},
    )
    assert r.valid and r.cluster["tls"] is True and r.cluster["running"]["scheduler"].startswith("tls://")
    assert (
        r.explained["cluster"]["security"]["source"] == "keyword"
        or r.explained["cluster"]["security"]["source"] == "flag"
    )
    assert list(r.cluster["hosts"]) == ["127.0.0.1"] and r.cluster["hosts"]["127.0.0.1"]["workers"] == 1
    assert r.cluster["workers_lost"] == []


# ---------------------------------------------------------------------------------------
# cluster up, protected
# ---------------------------------------------------------------------------------------
def test_up_writes_owner_only_credentials_beside_the_scheduler_file(served):
    up, d, sched = served
    creds = sched.with_name("scheduler.tls.pem")
    assert d["tls"] is True and d["scheduler"].startswith("tls://127.0.0.1:")
    assert d["credentials"] == str(creds) and d["scheduler_file"] == str(sched)
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600 and creds.stat().st_uid == os.getuid()
    assert json.loads(sched.read_text())["address"] == d["scheduler"]
    text = creds.read_text()
    assert "PRIVATE KEY" in text and "CERTIFICATE" in text


def test_run_with_the_scheduler_file_is_valid_over_tls(served, cli, tmp_path):
    _, d, sched = served
    res = tmp_path / "res"
    p = cli("run", *SMALL_SVD, "--backend", "cpu", "--scheduler-file", sched, "--json", "--results-dir", res)
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["valid"] is True and rec["cluster"]["tls"] is True and rec["cluster"]["security"] == "tls"
    assert rec["cluster"]["scheduler"] == d["scheduler"]
    assert rec["cluster"]["hosts"]["127.0.0.1"]["workers"] == 2
    assert rec["settings_sources"]["scheduler-file"] == "flag"
    sec = rec["explained"]["cluster"]["security"]
    assert sec["value"] == "tls" and "beside the scheduler file" in sec["rule"]
    assert rec["info"]["runner"]["where"] == "cluster"  # the runner on a worker used its worker's TLS
    # the address and explicit credentials work too, here without the in-cluster runner
    p = cli(
        "run",
        *SMALL_SVD,
        "--backend",
        "cpu",
        "--scheduler",
        d["scheduler"],
        "--credentials",
        d["credentials"],
        "--no-in-cluster",
        "--json",
        "--results-dir",
        res,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["valid"] is True and json.loads(p.stdout)["cluster"]["tls"] is True


def test_session_with_the_scheduler_file(served):
    _, d, sched = served
    with gpuscale.session(backend="cpu", scheduler_file=str(sched)) as s:
        assert s.spec.security == "tls" and s.client.scheduler.address == d["scheduler"]
        r = s.run("groupby", rows=20_000, keys=50, repeat=1, warmup=0, write=False)
        assert r.valid and r.cluster["tls"] is True
        assert r.settings_sources["scheduler-file"] == "flag"


def test_a_runner_on_a_dask_worker_connects_with_its_workers_credentials(served):
    """`dask worker --tls-cert F --tls-key F` gives its Security the worker role only; the
    runner sent to such a worker connects as a client with them (security.as_client)."""
    from distributed import Client, Security

    _, d, _ = served
    creds = d["credentials"]
    worker_side = Security(
        tls_ca_file=creds, tls_worker_cert=creds, tls_worker_key=creds, require_encryption=True
    )
    assert worker_side.tls_client_cert is None
    with Client(
        d["scheduler"], security=security.as_client(worker_side), set_as_default=False, timeout=10
    ) as c:
        assert c.submit(sum, [1, 2]).result() == 3


def test_a_client_without_the_credentials_is_refused(served, cli):
    _, d, _ = served
    assert_one_error_line(
        cli("run", *SMALL_SVD, "--scheduler", d["scheduler"], timeout=60),
        "accepts TLS clients only",
        "--credentials",
    )
    plain = "tcp://" + d["scheduler"].split("://", 1)[1]
    p = cli(
        "run",
        *SMALL_SVD,
        "--scheduler",
        plain,
        "--no-in-cluster",
        env={"DASK_GPUSCALE__CLUSTER__CONNECT_TIMEOUT": "3"},
        timeout=90,
    )
    assert_one_error_line(p, "no scheduler answered", "TLS")
    # Dask's own client with credentials of its own (another CA) is refused by the handshake
    code = (
        f"from distributed import Client, Security\n"
        f"try:\n    Client({d['scheduler']!r}, security=Security.temporary(), timeout=5)\n"
        f"except Exception as e:\n    print('refused', type(e).__name__)\nelse:\n    print('CONNECTED')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_clean_environ()
    )
    assert out.stdout.startswith("refused"), (out.stdout, out.stderr)


def _other_uid() -> list[str]:
    if os.geteuid() != 0:
        pytest.skip("running a client as another uid needs root (CI runs as root)")
    tool = shutil.which("setpriv")
    if tool is None:
        pytest.skip("setpriv (util-linux) is not installed")
    return [tool, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def _python_for(prefix: list[str]) -> tuple[list[str], dict[str, str]]:
    """An interpreter uid nobody can run with this environment's packages: this one, else the
    system's of the same version with this one's sys.path (a pyenv Python under /root is not
    readable by others); skip when there is none."""
    env = _clean_environ({"HOME": "/tmp"})
    paths = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    probe = "import distributed, gpuscale"
    candidates = [
        (sys.executable, env),
        (f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}", {**env, "PYTHONPATH": paths}),
    ]
    for exe, e in candidates:
        if (
            os.path.exists(exe)
            and subprocess.run([*prefix, exe, "-c", probe], env=e, capture_output=True, timeout=60).returncode
            == 0
        ):
            return [exe], e
    pytest.skip(
        f"uid nobody cannot run a Python with distributed and gpuscale ({sys.executable} and its "
        "packages lie in folders it cannot read; .ci/run makes CI's venv readable)"
    )


def test_another_uid_is_refused(served):
    """The issue's attack: uid nobody on the same machine ran code as root on a `cluster up`.
    Now it cannot read the credentials (0600), gpuscale says so in one line, and Dask's own
    client gets no connection, with or without TLS of its own."""
    _, d, sched = served
    prefix = _other_uid()
    python, env = _python_for(prefix)
    tmp_path = sched.parent / "nobody"
    tmp_path.mkdir(mode=0o777, exist_ok=True)
    tmp_path.chmod(0o777)
    p = subprocess.run(
        [
            *prefix,
            *python,
            "-m",
            "gpuscale",
            "run",
            *SMALL_SVD,
            "--scheduler-file",
            str(sched),
            "--results-dir",
            str(tmp_path / "res"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(tmp_path),
    )
    line = assert_one_error_line(p, "not readable by this user (uid 65534)", "run as the user who started")
    assert str(sched.with_name("scheduler.tls.pem")) in line
    plain = "tcp://" + d["scheduler"].split("://", 1)[1]
    code = (
        "import os, sys\nfrom distributed import Client, Security\n"
        "for addr, sec in ((sys.argv[1], Security.temporary()), (sys.argv[2], None)):\n"
        "    try:\n        c = Client(addr, security=sec, timeout=5)\n"
        "    except Exception as e:\n        print('refused', type(e).__name__)\n"
        "    else:\n        print('RAN AS', c.run(os.getuid))\n"
    )
    out = subprocess.run(
        [*prefix, *python, "-c", code, d["scheduler"], plain],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(tmp_path),
    )
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and all(x.startswith("refused") for x in lines), (out.stdout, out.stderr[-2000:])


def test_a_second_up_with_the_same_file_refuses_and_leaves_the_files(served, cli):
    up, d, sched = served
    before = {f: f.read_bytes() for f in (sched, sched.with_name("scheduler.tls.pem"))}
    p = cli("cluster", "up", "--backend", "cpu", "--workers", "1", "--scheduler-file", sched, timeout=90)
    assert_one_error_line(p, str(sched), f"pid {up.pid}", "cluster down --scheduler-file")
    assert {f: f.read_bytes() for f in before} == before
    assert up.p.poll() is None
    # a scheduler file that no gpuscale holds but whose scheduler answers (`dask scheduler` wrote it)
    other = sched.with_name("dask-scheduler.json")
    other.write_text(json.dumps({"address": d["scheduler"]}))
    p = cli("cluster", "up", "--backend", "cpu", "--workers", "1", "--scheduler-file", other, timeout=90)
    assert_one_error_line(p, str(other), "names a scheduler that is running", "another --scheduler-file")
    assert json.loads(other.read_text()) == {"address": d["scheduler"]}
    other.unlink()


def test_down_with_the_scheduler_file_removes_only_its_files(served, cli):
    """Last in the module: stops the served cluster."""
    up, d, sched = served
    workers = up.descendants()
    p = cli("cluster", "down", "--scheduler-file", sched, timeout=60)
    assert p.returncode == 0, p.stderr
    assert f"stopped the scheduler at {d['scheduler']} and its 2 worker(s)" in p.stdout
    assert up.wait(timeout=30) == 0, up.text("err")
    assert wait_gone(workers) == []
    assert [
        f.name for f in files_under(sched.parent) if f.parent == sched.parent
    ] == []  # file, credentials, lock


def test_stopping_never_deletes_another_clusters_file(tmp_path, cli):
    """A cluster whose scheduler file was taken over (its path reused by another scheduler
    while it ran) leaves the file it no longer owns when it stops."""
    sched = tmp_path / "s.json"
    up, d = start_up(tmp_path, "--scheduler-file", sched, "--security", "off")
    assert d["tls"] is False and d["credentials"] is None and d["scheduler"].startswith("tcp://")
    other = {"address": "tcp://127.0.0.1:9", "type": "Scheduler"}
    sched.write_text(json.dumps(other))  # as `dask scheduler --scheduler-file` would
    up.p.send_signal(2)
    assert up.wait(timeout=60) == 0, up.text("err")
    assert json.loads(sched.read_text()) == other
    assert [f.name for f in files_under(tmp_path)] == ["s.json"]


def test_up_takes_over_a_file_left_by_a_cluster_that_is_gone(tmp_path):
    sched = tmp_path / "s.json"
    sched.write_text(json.dumps({"address": "tls://127.0.0.1:9"}))
    up, d = start_up(tmp_path, "--scheduler-file", sched)
    try:
        assert json.loads(sched.read_text())["address"] == d["scheduler"]
    finally:
        up.kill_group()


def test_planning_a_tls_scheduler_without_credentials():
    with pytest.raises(UserError, match="accepts TLS clients only"):
        api.configure(backend="cpu", scheduler="tls://127.0.0.1:1")
    assert security.beside("/a/b/scheduler.json").name == "scheduler.tls.pem"
