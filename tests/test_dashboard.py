"""Dashboard-based profiling: `cluster up` / `cluster down`, `run --dashboard`, the dashboard's
bind address, the notebook repr, `info`'s GPU-plots line and the performance report rendered
in real headless Chromium. Real clusters and real subprocesses throughout; every process a
test starts is in its own process group and is killed at teardown, pass or fail."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import psutil
import pytest
from browser import assert_task_stream, render_performance_report
from conftest import _clean_environ, as_from_a_terminal, clean_gpuscale_env, files_under

import gpuscale
from gpuscale import api

SMALL_SVD = ("svd", "--rows", "20000", "--cols", "20", "--repeat", "1", "--warmup", "0")
CPU2 = ("--backend", "cpu", "--workers", "2", "--threads-per-worker", "1")

pytestmark = pytest.mark.timeout(180)


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
class Proc:
    """``python -m gpuscale ...`` in its own process group; stdout / stderr lines are
    collected by reader threads with the time each arrived."""

    def __init__(self, *args, cwd):
        self.p = subprocess.Popen(
            [sys.executable, "-m", "gpuscale", *map(str, args)],
            cwd=str(cwd),
            env=_clean_environ(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=as_from_a_terminal,
        )
        self.lines: dict[str, list[tuple[float, str]]] = {"out": [], "err": []}
        self._q: queue.Queue = queue.Queue()
        self._threads = [
            threading.Thread(target=self._read, args=(name, f), daemon=True)
            for name, f in (("out", self.p.stdout), ("err", self.p.stderr))
        ]
        for t in self._threads:
            t.start()

    def _read(self, name, f):
        for line in f:
            item = (time.monotonic(), line.rstrip("\n"))
            self.lines[name].append(item)
            self._q.put((name, *item))
        self._q.put((name, None, None))

    @property
    def pid(self) -> int:
        return self.p.pid

    def text(self, name: str) -> str:
        return "\n".join(line for _, line in self.lines[name])

    def wait_for(self, name: str, pattern: str, timeout: float = 60) -> tuple[float, str]:
        """The first line of stream ``name`` matching ``pattern`` (seen or yet to come)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            for t, line in list(self.lines[name]):
                if rx.search(line):
                    return t, line
            if self.p.poll() is not None and all(not t.is_alive() for t in self._threads):
                raise AssertionError(
                    f"exited {self.p.returncode} before {pattern!r}:\n"
                    f"stdout: {self.text('out')}\nstderr: {self.text('err')}"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"no {pattern!r} within {timeout} s:\nstdout: {self.text('out')}\n"
                    f"stderr: {self.text('err')}"
                )
            try:
                self._q.get(timeout=min(left, 0.5))
            except queue.Empty:
                pass

    def wait(self, timeout: float) -> int:
        rc = self.p.wait(timeout=timeout)
        for t in self._threads:
            t.join(timeout=5)
        return rc

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def kill_group(self) -> None:
        """Teardown: SIGTERM the process group, then SIGKILL whatever is left."""
        steps = ((signal.SIGTERM, 15), (signal.SIGKILL, 5))
        if self.p.poll() is not None:  # exited already: only stragglers of its group, if any
            steps = steps[1:]
        for sig, wait in steps:
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.p.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            if sig == signal.SIGTERM:
                time.sleep(0.5)  # let the group's workers finish closing


@pytest.fixture
def spawn(tmp_path):
    procs: list[Proc] = []

    def start(*args) -> Proc:
        proc = Proc(*args, cwd=tmp_path)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill_group()


def still_running(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Of these processes, the ones still running (zombies waiting to be reaped count as gone)."""
    alive = []
    for pr in procs:
        try:
            if pr.status() != psutil.STATUS_ZOMBIE:
                alive.append(pr)
        except psutil.NoSuchProcess:
            pass
    return alive


def wait_gone(procs: list[psutil.Process], timeout: float = 15) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while still_running(procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    return still_running(procs)


def http_status(url: str, timeout: float = 5) -> int:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def listening(pid: int) -> list[tuple[str, int]]:
    """(ip, port) of every TCP socket process ``pid`` listens on."""
    return [
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    ]


def non_loopback_ipv4() -> list[str]:
    return [
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]


def assert_one_error_line(p, *needles) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuscale: error: "), p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def start_up(spawn, tmp_path, *extra) -> tuple[Proc, dict]:
    """`cluster up --json` on 2 single-thread CPU workers; (process, its JSON line)."""
    up = spawn("cluster", "up", *CPU2, "--json", *extra)
    _, first = up.wait_for("out", r"^\{", timeout=90)
    assert up.lines["out"][0][1] == first  # the JSON object is the first line of stdout
    return up, json.loads(first)


# ---------------------------------------------------------------------------------------
# cluster up / run --scheduler / session(scheduler=) / cluster down
# ---------------------------------------------------------------------------------------
def test_up_serves_other_processes_until_down(spawn, cli, tmp_path):
    sched_file = tmp_path / "scheduler.json"
    up, d = start_up(spawn, tmp_path, "--scheduler-file", sched_file)
    addr = d["scheduler"]
    assert addr.startswith("tls://127.0.0.1:")  # protected by default (tests/test_security.py)
    creds = d["credentials"]
    from gpuscale.cluster import security

    tls = security.load(creds)
    assert (d["cls"], d["family"], d["workers"], d["threads"]) == ("distributed.LocalCluster", "cpu", 2, 2)
    assert d["pid"] == up.pid
    # kept up for later runs: every worker already imported the workloads and their libraries
    assert d["warm_up_s"] > 0
    from distributed import Client

    with Client(addr, set_as_default=False, security=tls) as c:
        loaded = c.run(
            lambda: [
                m in __import__("sys").modules
                for m in ("gpuscale.workloads.groupby", "gpuscale.workloads.svd", "pandas")
            ]
        )
        on_scheduler = c.run_on_scheduler(lambda: "dask.dataframe" in __import__("sys").modules)
    assert len(loaded) == 2 and all(v == [True, True, True] for v in loaded.values()), loaded
    assert on_scheduler  # the scheduler can unpack a DataFrame graph without importing first
    # the scheduler file is Dask's own format, with the same address
    assert json.loads(sched_file.read_text())["address"] == addr
    # scheduler and dashboard listen on loopback only
    link = urllib.parse.urlsplit(d["dashboard"])
    assert link.hostname == "127.0.0.1"
    assert http_status(d["dashboard"]) == 200
    socks = listening(up.pid)
    assert (link.hostname, link.port) in socks
    assert all(ip == "127.0.0.1" for ip, _ in socks), socks

    # another process: gpuscale run --scheduler ADDRESS --json
    res = tmp_path / "res"
    p = cli(
        "run",
        *SMALL_SVD,
        "--backend",
        "cpu",
        "--scheduler",
        addr,
        "--credentials",
        creds,
        "--json",
        "--results-dir",
        res,
    )
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["valid"] is True
    assert rec["cluster"]["kind"] == "existing" and rec["cluster"]["scheduler"] == addr
    assert rec["cluster"]["running"] == {"workers": 2, "threads": 2, "scheduler": addr}
    assert rec["dashboard_link"] == d["dashboard"]
    assert [str(f) for f in files_under(res)] == [rec["path"]]

    # this process: gpuscale.session(scheduler=ADDRESS), and Dask's scheduler file
    with gpuscale.session(backend="cpu", scheduler=addr, credentials=creds) as s:
        assert s.spec.kind == "existing" and s.cluster is None
        assert s.cluster_info()["running"] == {"workers": 2, "threads": 2, "scheduler": addr}
        r = s.run("svd", rows=10_000, cols=10, repeat=1, warmup=0, write=False)
        assert r.valid and r.cluster["scheduler"] == addr
        assert s.client.submit(sum, [1, 2, 3]).result() == 6
    from distributed import Client

    with Client(scheduler_file=str(sched_file), set_as_default=False, security=tls) as c:
        assert c.scheduler.address == addr
    # both clients left: the cluster is still up with its 2 workers
    assert up.p.poll() is None
    workers = up.descendants()
    assert len([w for w in workers if "multiprocessing.spawn" in " ".join(w.cmdline())]) == 2, workers

    # cluster down ADDRESS: scheduler and workers stop, `up` exits 0
    t0 = time.monotonic()
    p = cli("cluster", "down", addr, "--credentials", creds, timeout=60)
    assert p.returncode == 0, p.stderr
    assert f"stopped the scheduler at {addr} and its 2 worker(s)" in p.stdout
    assert up.wait(timeout=30) == 0, up.text("err")
    assert time.monotonic() - t0 < 30
    assert "the scheduler was stopped (cluster down)" in up.text("err")
    assert "Traceback" not in up.text("err")
    assert wait_gone(workers) == []
    assert not sched_file.exists() and not pathlib.Path(creds).exists()  # removed on exit
    assert not answers("127.0.0.1", link.port) and not answers("127.0.0.1", int(addr.rsplit(":", 1)[1]))


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_up_stops_on_ctrl_c_and_sigterm(spawn, tmp_path, how):
    up, d = start_up(spawn, tmp_path)
    workers = up.descendants()
    assert workers
    port = urllib.parse.urlsplit(d["dashboard"]).port
    if how == "ctrl-c":
        os.killpg(up.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole group
    else:
        os.kill(up.pid, signal.SIGTERM)
    assert up.wait(timeout=30) == 0, up.text("err")
    assert "gpuscale: cluster closed" in up.text("err")
    if how == "sigterm":
        assert "stopped by SIGTERM" in up.text("err")
    assert wait_gone(workers) == []
    assert not answers("127.0.0.1", port)


def test_sigterm_while_the_cluster_starts_closes_it_in_one_line(spawn, tmp_path):
    """SIGTERM at several points of the start-up window (measured first: process start to the
    JSON line): every time the process ends with exit 143 (or 0 once up), one gpuscale line and
    no traceback (distributed's exit hook once printed an AssertionError for workers still in
    Status.init), and no worker process is left behind."""
    t0 = time.monotonic()
    up, _ = start_up(spawn, tmp_path)
    window = time.monotonic() - t0
    os.kill(up.pid, signal.SIGTERM)
    assert up.wait(timeout=30) == 0
    codes = []
    for frac in (0.5, 0.6, 0.7, 0.8, 0.9):
        p = spawn("cluster", "up", *CPU2, "--json")
        time.sleep(frac * window)
        kids = p.descendants()
        os.kill(p.pid, signal.SIGTERM)
        rc = p.wait(timeout=60)
        err = p.text("err")
        assert "Traceback" not in err, err
        assert rc in (0, 143), (rc, err)  # 143: SIGTERM (gpuscale.errors.EXIT_SIGTERM)
        if rc == 143:
            assert err.startswith("gpuscale: error: interrupted (SIGTERM)"), err
            assert "what this command started was stopped" in err and len(err.splitlines()) == 1, err
        assert wait_gone(kids) == []
        codes.append(rc)
    assert 143 in codes  # at least one SIGTERM landed while the cluster was starting


def test_down_on_a_dead_address_is_one_line_and_quick(cli):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    p = cli("cluster", "down", f"tcp://127.0.0.1:{port}", timeout=60)
    elapsed = time.monotonic() - t0
    line = assert_one_error_line(p, f"tcp://127.0.0.1:{port}", "no scheduler answered", "cluster up")
    assert elapsed < 15, elapsed
    assert "; " in line  # problem; fix


@pytest.mark.parametrize(
    "args, needles",
    [
        (("cluster", "down"), ("ADDRESS", "--scheduler-file")),
        (("cluster", "down", "tcp://127.0.0.1:1", "--timeout", "soon"), ("--timeout", "soon")),
        (("cluster", "down", "--scheduler-file", "nosuch.json"), ("nosuch.json", "does not exist")),
        (
            ("cluster", "up", "--backend", "cpu", "--scheduler", "tcp://127.0.0.1:1"),
            ("starts a cluster", "tcp://127.0.0.1:1", "drop --scheduler"),
        ),
        (("cluster", "up", "--profile", "scheduler", "--backend", "cpu"), ("starts a cluster", "profile")),
        (
            ("cluster", "up", "--backend", "cpu", "--scheduler-file", "no/such/dir/s.json"),
            ("--scheduler-file", "does not exist"),
        ),
    ],
)
def test_up_down_refusals(cli, tmp_path, args, needles):
    t0 = time.monotonic()
    assert_one_error_line(cli(*args, timeout=60), *needles)
    assert time.monotonic() - t0 < 20
    assert files_under(tmp_path) == []  # nothing started, nothing written


# ---------------------------------------------------------------------------------------
# run --dashboard
# ---------------------------------------------------------------------------------------
def test_run_dashboard_prints_link_first_and_holds_until_ctrl_c(spawn, tmp_path):
    res = tmp_path / "res"
    run = spawn("run", *SMALL_SVD, *CPU2, "--dashboard", "--json", "--results-dir", res)
    t_link, link_line = run.wait_for("err", r"^gpuscale: dashboard: http", timeout=90)
    link = link_line.split("dashboard: ", 1)[1]
    assert urllib.parse.urlsplit(link).hostname == "127.0.0.1"
    t_held, held = run.wait_for("err", r"stays up for the dashboard", timeout=90)
    assert link in held and "Ctrl-C" in held
    t_json, _ = run.wait_for("out", r"^\{")
    # link before the work's result; result before holding (stdout and stderr are read by two
    # threads, so lines written microseconds apart can be stamped in either order)
    assert t_link < t_json and t_link < t_held and t_json < t_held + 0.5
    # it holds: still alive, dashboard answering, record written
    time.sleep(2)
    assert run.p.poll() is None
    assert http_status(link) == 200
    files = files_under(res)
    assert len(files) == 1
    os.killpg(run.pid, signal.SIGINT)  # Ctrl-C
    assert run.wait(timeout=30) == 0, run.text("err")
    assert "stopped by Ctrl-C" in run.text("err")
    rec = json.loads(run.text("out"))  # stdout is exactly one JSON object
    assert rec["valid"] is True and rec["path"] == str(files[0])
    assert rec["dashboard_link"] == link
    assert json.loads(files[0].read_text())["id"] == rec["id"]
    assert not answers("127.0.0.1", urllib.parse.urlsplit(link).port)


def test_run_without_dashboard_does_not_hold(cli, tmp_path):
    t0 = time.monotonic()
    p = cli("run", *SMALL_SVD, *CPU2, "--json", "--results-dir", tmp_path / "res", timeout=90)
    assert p.returncode == 0, p.stderr
    assert "dashboard:" not in p.stderr and time.monotonic() - t0 < 60
    json.loads(p.stdout)


def test_api_run_hooks_see_the_live_cluster(tmp_path):
    seen = {}

    def on_ready(s):
        seen["ready_workers"] = len(s.client.scheduler_info()["workers"])
        seen["records_before"] = files_under(tmp_path / "res")

    def hold(s, r):
        seen["hold"] = (r.id, s.client.submit(lambda: 41 + 1).result(), files_under(tmp_path / "res"))

    r = gpuscale.run(
        "svd",
        backend="cpu",
        rows=10_000,
        cols=10,
        repeat=1,
        warmup=0,
        results_dir=str(tmp_path / "res"),
        cluster_settings={"workers": 1},
        on_ready=on_ready,
        hold=hold,
    )
    assert seen["ready_workers"] == 1 and seen["records_before"] == []
    rid, answer, records = seen["hold"]
    assert rid == r.id and answer == 42 and [str(f) for f in records] == [r.path]


# ---------------------------------------------------------------------------------------
# bind address, notebook repr
# ---------------------------------------------------------------------------------------
def test_dashboard_binds_to_loopback_on_cpu(cpu_session):
    link = urllib.parse.urlsplit(cpu_session.dashboard_link)
    assert link.hostname == "127.0.0.1"
    assert http_status(cpu_session.dashboard_link) == 200
    socks = [ip for ip, port in listening(os.getpid()) if port == link.port]
    assert socks and all(ip == "127.0.0.1" for ip in socks), socks
    for ip in non_loopback_ipv4():  # not reachable from outside the machine
        assert not answers(ip, link.port), ip


@pytest.mark.parametrize(
    "profile, backend", [(None, "cpu"), (None, "gpu"), ("gpu-ucx", None), ("gpu-tcp", None), ("cpu", None)]
)
def test_planned_clusters_bind_the_dashboard_to_loopback(profile, backend):
    _, _, spec = api.configure(profile=profile, backend=backend, check=False)
    assert spec.cls in ("distributed.LocalCluster", "dask_cuda.LocalCUDACluster")
    assert spec.dashboard_address == spec.kwargs["dashboard_address"] == "127.0.0.1:0"
    _, _, spec = api.configure(
        profile=profile, backend=backend, check=False, dashboard_address="0.0.0.0:8787"
    )
    assert spec.kwargs["dashboard_address"] == "0.0.0.0:8787"


def test_repr_html_links_the_dashboard_and_counts_workers_live():
    def workers_cell(html: str) -> str:
        return re.search(r"<th[^>]*>workers</th><td[^>]*>([^<]*)</td>", html).group(1)

    with clean_gpuscale_env(), gpuscale.session(backend="cpu", workers=2, threads_per_worker=1) as s:
        html = s._repr_html_()
        link = s.dashboard_link
        assert f"<a href='{link}' target='_blank'>{link}</a>" in html
        assert workers_cell(html) == "2" and cell(html, "threads") == "2"
        assert cell(html, "scheduler") == s.client.scheduler.address
        s.cluster.scale(1)  # the count is asked for at render time
        deadline = time.monotonic() + 30
        while len(s.client.scheduler_info()["workers"]) != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert workers_cell(s._repr_html_()) == "1"
    html = s._repr_html_()
    assert "(closed)" in html and workers_cell(html) == "-"


def cell(html: str, name: str) -> str:
    return re.search(rf"<th[^>]*>{name}</th><td[^>]*>([^<]*)</td>", html).group(1)


def test_repr_html_of_a_session_whose_scheduler_went_away():
    from distributed import LocalCluster

    with (
        clean_gpuscale_env(),
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=False,
            protocol="tcp",
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as lc,
    ):
        with gpuscale.session(backend="cpu", scheduler=lc.scheduler_address) as s:
            assert cell(s._repr_html_(), "workers") == "1"
            lc.close()
            t0 = time.monotonic()
            html = s._repr_html_()  # renders, promptly, instead of raising or hanging
            assert time.monotonic() - t0 < 15
            assert cell(html, "workers").startswith("?"), html


# ---------------------------------------------------------------------------------------
# info: can GPU workers draw the dashboard's GPU plots?
# ---------------------------------------------------------------------------------------
def test_info_says_whether_gpu_plots_can_show(cli):
    p = cli("info", "--json")
    assert p.returncode == 0, p.stderr
    gd = json.loads(p.stdout)["gpu_dashboard"]
    if importlib.util.find_spec("pynvml") is None:
        assert gd["state"] == "pynvml-missing" and gd["available"] is False
        assert "no GPU" in gd["message"] and "nvidia-ml-py" in gd["message"]
    else:
        assert gd["state"] in ("on", "no-device", "no-nvml-library", "wsl-driver")
        assert gd["available"] is (gd["state"] == "on")
    p = cli("info", "--json", env={"DASK_DISTRIBUTED__DIAGNOSTICS__NVML": "False"})
    gd = json.loads(p.stdout)["gpu_dashboard"]
    assert gd["state"] == "disabled-by-config" and gd["available"] is False
    assert "distributed.diagnostics.nvml" in gd["message"]
    p = cli("info")
    assert p.returncode == 0 and "GPU dashboard" in p.stdout


@pytest.mark.gpu
def test_gpu_workers_report_gpu_metrics(cli):
    gd = json.loads(cli("info", "--json").stdout)["gpu_dashboard"]
    assert gd["available"] and gd["devices"] >= 1, gd
    with clean_gpuscale_env(), gpuscale.session(backend="gpu", workers=1, rmm_pool_size="none") as s:
        link = urllib.parse.urlsplit(s.dashboard_link)
        assert link.hostname == "127.0.0.1"
        assert [ip for ip, port in listening(os.getpid()) if port == link.port] == ["127.0.0.1"]
        w = next(iter(s.client.scheduler_info()["workers"].values()))
        # what the dashboard's GPU plots draw (distributed.dashboard.components.nvml)
        assert {"gpu_utilization", "gpu_memory_used", "gpu-memory-total"} <= set(w["metrics"]), w["metrics"]
        assert w["metrics"]["gpu-memory-total"] > 0
        from distributed.dashboard.components.nvml import GPUCurrentLoad

        plot = GPUCurrentLoad(s.cluster.scheduler)  # the plot, fed from the in-process scheduler
        plot.update()
        assert list(plot.source.data["worker"]) == list(s.client.scheduler_info()["workers"])
        assert plot.memory_figure.x_range.end == w["metrics"]["gpu-memory-total"]
        base = s.dashboard_link.rsplit("/", 1)[0]
        assert http_status(base + "/individual-gpu-memory") == 200


# ---------------------------------------------------------------------------------------
# The performance report, rendered in headless Chromium
# ---------------------------------------------------------------------------------------
def test_performance_report_renders_its_task_stream_in_chromium(cpu_session, tmp_path):
    import dask.array as da
    from distributed import performance_report

    report = tmp_path / "performance-report.html"
    with performance_report(filename=str(report)):
        x = da.random.random((2000, 2000), chunks=500)
        assert float((x + x.T).sum().compute()) > 0
    # Dask's default loads BokehJS from its CDN: answered here from the installed bokeh
    r = render_performance_report(report, screenshot=tmp_path / "report.png", serve_cdn=True)
    assert_task_stream(r, min_rows=16, groups=("random_sample", "sum"))
    # with the network blocked outright such a report draws nothing (what the offline checks
    # of gpuscale's own reports would catch)
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    with pytest.raises(PlaywrightTimeout):
        render_performance_report(report, timeout_s=5)
    # and the check tells an empty task stream apart (a report around no work)
    empty = tmp_path / "empty-report.html"
    with performance_report(filename=str(empty)):
        pass
    e = render_performance_report(empty, serve_cdn=True)
    assert e.task_stream_title == "Task Stream" and not e.page_errors
    assert e.task_stream_rows == 0 and e.colored_pixels < 0.001 * e.frame_pixels
    with pytest.raises(AssertionError):
        assert_task_stream(e)
