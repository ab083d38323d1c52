"""Faults and bad input end in one line, a documented exit code, nothing half-written.

Real processes throughout: the `gpuscale` CLI as a subprocess (its stderr on a pseudo-terminal
where a test needs the progress bar the CLI really draws there as the marker of a phase), real
LocalClusters and `gpuscale cluster up`. Signals are sent once the program shows it is inside
the chosen phase (its progress bar counting repeats, a temp file it made, the runner's task on
the scheduler), never after a fixed sleep. Every process a test starts is in its own session
and is killed at teardown, with the worker processes it had.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pathlib
import pty
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
from conftest import _clean_environ, as_from_a_terminal, files_under

from gpuscale import errors, interrupts

pytestmark = pytest.mark.timeout(240)

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
ONE_WORKER = ("--backend", "cpu", "--workers", "1", "--threads-per-worker", "1")
LONG_SVD = (
    "run",
    "svd",
    *ONE_WORKER,
    "--rows",
    "20000",
    "--cols",
    "10",
    "--warmup",
    "0",
    "--repeat",
    "100000",
)
REPEATING = r"svd \(cpu\).*\b[1-9]\d*/100000"  # the progress bar, a repeat or more done


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
class Proc:
    """``python -m gpuscale ...`` in its own session; stdout through a pipe, stderr through a
    pipe or a pseudo-terminal (``tty=True``: the CLI then draws its progress bar there)."""

    def __init__(self, *args, cwd, tty: bool = False, env=None):
        self.out: list[str] = []
        self.err: list[str] = []
        self._done = threading.Event()
        master = slave = None
        if tty:
            master, slave = pty.openpty()
        self.p = subprocess.Popen(
            [sys.executable, "-m", "gpuscale", *map(str, args)],
            cwd=str(cwd),
            env=_clean_environ({"COLUMNS": "200", "PYTHONFAULTHANDLER": "1", **(env or {})}),
            stdout=subprocess.PIPE,
            stderr=slave if tty else subprocess.PIPE,
            start_new_session=True,
            preexec_fn=as_from_a_terminal,
        )
        if tty:
            os.close(slave)
            err_reader = threading.Thread(target=self._read_fd, args=(master,), daemon=True)
        else:
            err_reader = threading.Thread(target=self._read_pipe, args=(self.p.stderr, self.err), daemon=True)
        self._threads = [
            threading.Thread(target=self._read_pipe, args=(self.p.stdout, self.out), daemon=True),
            err_reader,
        ]
        for t in self._threads:
            t.start()
        self.kids: set[int] = set()
        self.cmdlines: dict[int, str] = {}

    def _read_pipe(self, f, sink):
        for chunk in iter(lambda: f.read1(65536), b""):
            sink.append(chunk.decode(errors="replace"))

    def _read_fd(self, fd):
        try:
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # EIO: the other side closed
                    break
                if not chunk:
                    break
                self.err.append(chunk.decode(errors="replace"))
        finally:
            os.close(fd)

    @property
    def pid(self) -> int:
        return self.p.pid

    def stdout(self) -> str:
        return "".join(self.out)

    def stderr_lines(self) -> list[str]:
        """stderr as lines, terminal control codes and progress-bar frames removed."""
        text = ANSI.sub("", "".join(self.err)).replace("\r\n", "\n")
        lines = []
        for raw in text.split("\n"):
            line = raw.split("\r")[-1].strip()
            if line and "━" not in line and not re.search(r"\d+/\d+\s+\d+:\d\d:\d\d$", line):
                lines.append(line)
        return lines

    def note_kids(self) -> None:
        with contextlib.suppress(psutil.NoSuchProcess):
            for c in psutil.Process(self.pid).children(recursive=True):
                self.kids.add(c.pid)
                with contextlib.suppress(psutil.Error):
                    self.cmdlines.setdefault(c.pid, " ".join(c.cmdline()))

    def wait_for(self, what, timeout: float = 90, on="err"):
        """Until ``what`` (a regex on stdout / raw stderr, or a callable) holds; children noted."""
        deadline = time.monotonic() + timeout
        while True:
            self.note_kids()
            if callable(what):
                if what():
                    return
            else:
                text = ANSI.sub("", "".join(self.err if on == "err" else self.out))
                if re.search(what, text):
                    return
            if self.p.poll() is not None:
                time.sleep(0.3)
                raise AssertionError(
                    f"exited {self.p.returncode} before {what!r}:\n{self.stdout()}\n{self.stderr_lines()}"
                )
            assert time.monotonic() < deadline, f"no {what!r} within {timeout} s: {self.stderr_lines()}"
            time.sleep(0.02)

    def wait(self, timeout: float = 90) -> int:
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:  # show where it hangs: faulthandler dumps every thread
            os.kill(self.pid, signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.p.wait(timeout=10)
            for t in self._threads:
                t.join(timeout=5)
            raise AssertionError(
                f"no exit within {timeout} s; its threads then:\n" + "".join(self.err)[-20000:]
            ) from None
        for t in self._threads:
            t.join(timeout=10)
        return rc

    def signal_group(self, sig) -> None:
        """Like Ctrl-C in a terminal or `timeout`: the signal to the whole process group."""
        os.killpg(self.pid, sig)

    def kill_all(self) -> None:
        self.note_kids()
        for pid in [self.pid, *self.kids]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.p.wait(timeout=10)


@pytest.fixture
def spawn(tmp_path):
    procs: list[Proc] = []

    def start(*args, tty: bool = False, env=None) -> Proc:
        proc = Proc(*args, cwd=tmp_path, tty=tty, env=env)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill_all()


def gone(pids, timeout: float = 30) -> list[int]:
    """The pids still alive after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [
            p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        ]
        time.sleep(0.1)
    return alive


def assert_one_line(lines: list[str], *needles: str) -> str:
    text = "\n".join(lines)
    assert "Traceback" not in text and "never retrieved" not in text, text
    assert len(lines) == 1, text
    assert lines[0].startswith("gpuscale: error: "), text
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def assert_nothing_half_written(folder: pathlib.Path) -> None:
    left = [
        p
        for p in folder.rglob("*")
        if ".tmp-" in p.name or p.name.endswith(".gpuscale-tmp") or p.name.startswith(".gpuscale-probe-")
    ]
    assert left == [], left


# ---------------------------------------------------------------------------------------
# 1. exit codes, one line, --debug
# ---------------------------------------------------------------------------------------
def test_exit_codes_are_defined_once_and_documented():
    page = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "reference" / "exit-codes.md").read_text()
    table = page.split("# Exit codes", 1)[1].split("\n\n", 3)[2]
    for code in errors.EXIT_CODES:
        assert f"\n| {code} |" in "\n" + table, code
    assert (
        errors.EXIT_BAD_INPUT,
        errors.EXIT_CHECK_FAILED,
        errors.EXIT_CLUSTER_GONE,
        errors.EXIT_SIGHUP,
        errors.EXIT_SIGINT,
        errors.EXIT_SIGTERM,
    ) == (2, 3, 4, 129, 130, 143)
    from gpuscale.records import compare

    assert compare.SLOWER_EXIT == errors.EXIT_CHECK_FAILED


INJECTED = (
    "import sys\n"
    "import gpuscale.cli\n"
    "from gpuscale.records import results\n"
    "def find(*paths):\n"
    "    return 1 / 0  # a bug in the code, not the user's input\n"
    "results.find = find\n"
    "gpuscale.cli.main(sys.argv[1:])\n"
)
"""The CLI with a bug put into the function ``results list`` calls: what a user meets when
gpuscale itself is wrong."""


def _with_a_bug(tmp_path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", INJECTED, *args],
        cwd=tmp_path,
        env=_clean_environ(env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unexpected_error_is_one_line_exit_1(tmp_path):
    p = _with_a_bug(tmp_path, "results", "list", str(tmp_path))
    assert p.returncode == errors.EXIT_INTERNAL, p.stderr
    assert_one_line(p.stderr.splitlines(), "unexpected ZeroDivisionError", "--debug")
    assert p.stdout == ""


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_shows_the_traceback(tmp_path, how):
    p = (
        _with_a_bug(tmp_path, "--debug", "results", "list", str(tmp_path))
        if how == "flag"
        else _with_a_bug(tmp_path, "results", "list", str(tmp_path), env={"GPUSCALE_DEBUG": "1"})
    )
    assert p.returncode == 1
    assert "Traceback (most recent call last)" in p.stderr and "ZeroDivisionError" in p.stderr


def test_a_broken_record_is_named_in_one_line_and_the_others_still_listed(cli, tmp_path):
    """A record of the right schema whose content is broken (edited by hand, cut short) is named
    in one warning line by `results list`, which lists the good ones; `results show` of it is one
    error line, exit 2."""
    d = tmp_path / "recs"
    p = cli("run", "svd", "--backend", "cpu", "--workers", "1", "--rows", "2000", "--cols", "5",
            "--repeat", "1", "--warmup", "0", "--results-dir", d)  # fmt: skip
    assert p.returncode == 0, p.stderr
    (d / "r.json").write_text(json.dumps({"schema": "gpuscale.result", "schema_version": 1, "workload": 3}))
    (d / "cut.json").write_text('{"schema": "gpuscale.result", "schema_vers')
    p = cli("results", "list", d)
    assert p.returncode == 0 and " svd " in p.stdout, p.stderr
    warned = p.stderr.splitlines()
    assert len(warned) == 2, warned
    assert warned[0].startswith(f"gpuscale: warning: skipped {d / 'cut.json'}: not a record: not JSON"), (
        warned
    )
    assert warned[1].startswith(f"gpuscale: warning: skipped {d / 'r.json'}: not a valid"), warned
    p = cli("results", "show", d / "r.json")
    assert_one_line(p.stderr.splitlines(), f"{d / 'r.json'} is not a valid record")
    assert p.returncode == errors.EXIT_BAD_INPUT


def test_records_edited_by_hand_or_cut_short_are_named_and_the_others_still_listed(cli, tmp_path):
    """Each way a record file can be broken, beside a good record: `results list` lists the good
    one and names the broken file in one warning line; `results show` of it is one line, exit 2."""
    d = tmp_path / "recs"
    p = cli("run", "svd", "--backend", "cpu", "--workers", "1", "--rows", "2000", "--cols", "5",
            "--repeat", "1", "--warmup", "0", "--results-dir", d)  # fmt: skip
    assert p.returncode == 0, p.stderr
    (good,) = d.glob("*.json")
    text = good.read_text()
    rec = json.loads(text)

    def edited(**kv) -> str:
        return json.dumps({**rec, **kv})

    variants = {
        "median-a-word": edited(median_s="fast"),
        "median-nan": edited(median_s=float("nan")),
        "median-negative": edited(median_s=-1.0),
        "times-infinite": edited(times_s=[float("inf")]),
        "valid-a-word": edited(valid="yes"),
        "timestamp-a-word": edited(timestamp="yesterday"),
        "newer-schema": edited(schema_version=99),
        "nested-deep": text[:-2] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "cut-short": text[: len(text) // 2],
        "not-utf8": '{"schema": "gpuscale.result", "x": "\udcff"}',
    }
    wrong = []
    for name, body in variants.items():
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(good, folder / good.name)
        bad = folder / f"{name}.json"
        bad.write_bytes(body.encode("utf-8", "surrogateescape"))
        listed = cli("results", "list", folder)
        shown = cli("results", "show", bad)
        if not (
            listed.returncode == 0
            and rec["id"][:8] in listed.stdout
            and listed.stderr.splitlines() == [listed.stderr.splitlines()[0]]
            and listed.stderr.startswith(f"gpuscale: warning: skipped {bad}: ")
            and shown.returncode == errors.EXIT_BAD_INPUT
            and len(shown.stderr.splitlines()) == 1
            and shown.stderr.startswith(f"gpuscale: error: {bad} is ")
        ):
            wrong.append(
                (name, listed.returncode, listed.stderr[-200:], shown.returncode, shown.stderr[-200:])
            )
    assert wrong == []


# ---------------------------------------------------------------------------------------
# 2. signals: one line naming the phase, 130 / 143, temp files removed, workers gone
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "sig, code, group",
    [
        (signal.SIGTERM, 143, False),
        (signal.SIGINT, 130, False),
        (signal.SIGTERM, 143, True),
        (signal.SIGINT, 130, True),
    ],
    ids=["SIGTERM", "SIGINT", "SIGTERM to the group (timeout)", "SIGINT to the group (Ctrl-C)"],
)
def test_signal_during_the_timed_repeats(spawn, tmp_path, sig, code, group):
    p = spawn(*LONG_SVD, "--results-dir", tmp_path / "res", tty=True)
    p.wait_for(REPEATING)
    p.signal_group(sig) if group else os.kill(p.pid, sig)
    assert p.wait() == code, p.stderr_lines()
    name = signal.Signals(sig).name
    assert_one_line(p.stderr_lines(), f"interrupted ({name}) during timed repeat ", "nothing was written")
    assert p.stdout() == ""
    assert files_under(tmp_path / "res") == []
    assert gone(p.kids) == []


@pytest.mark.parametrize(
    "sigs, code",
    [((signal.SIGINT, signal.SIGTERM), 130), ((signal.SIGTERM, signal.SIGHUP, signal.SIGINT), 143)],
    ids=["SIGINT then SIGTERM", "SIGTERM, SIGHUP, SIGINT"],
)
def test_signals_in_a_row_end_as_the_first_one_says(spawn, tmp_path, sigs, code):
    p = spawn(*LONG_SVD, "--results-dir", tmp_path / "res", tty=True)
    p.wait_for(REPEATING)
    for sig in sigs:
        os.kill(p.pid, sig)
        time.sleep(0.02)
    assert p.wait() == code, p.stderr_lines()
    assert_one_line(p.stderr_lines(), f"interrupted ({signal.Signals(sigs[0]).name}) during timed repeat ")
    assert "Traceback" not in "\n".join(p.stderr_lines())
    assert files_under(tmp_path / "res") == []
    assert gone(p.kids) == []


def test_the_interruption_line_counts_timed_repeats_apart_from_warm_ups(spawn, tmp_path):
    argv = [a for a in LONG_SVD if a not in ("--warmup", "0")]
    p = spawn(*argv, "--warmup", "3", "--results-dir", tmp_path / "res", tty=True)
    p.wait_for(r"svd \(cpu\).*\b([4-9]|\d\d+)/100003")  # past the warm-ups
    os.kill(p.pid, signal.SIGTERM)
    assert p.wait() == 143, p.stderr_lines()
    assert_one_line(p.stderr_lines(), "interrupted (SIGTERM) during timed repeat ", " of 100000")


def test_an_interrupted_bench_says_its_finished_cases_are_kept(spawn, tmp_path):
    spec = tmp_path / "long.yaml"
    spec.write_text(
        "name: long\nbackends: [cpu]\nworkers: [1]\nrepeat: 3\nwarmup: 0\n"
        "cluster: {threads_per_worker: 1}\nworkloads:\n  svd:\n"
        "    sizes: [{rows: 2000, cols: 10}, {rows: 3000, cols: 10}, {rows: 4000, cols: 10}]\n"
        "  reduction:\n    sizes: [{rows: 100, cols: 10}]\n    params: {op: sum}\n"
    )
    p = spawn("bench", spec, "--out", tmp_path / "out", "--json")
    p.wait_for(lambda: glob.glob(str(tmp_path / "out" / "records" / "*.json")), timeout=120)
    os.kill(p.pid, signal.SIGTERM)
    assert p.wait() == 143, p.stderr_lines()
    lines = [x for x in p.stderr_lines() if not x.startswith("[")]  # the sweep's progress lines go first
    line = assert_one_line(
        lines, "interrupted (SIGTERM)", "finished case(s) are kept in", "a re-run skips them"
    )
    assert "nothing was written" not in line
    assert glob.glob(str(tmp_path / "out" / "records" / "*.json"))
    assert gone(p.kids) == []


@pytest.mark.parametrize(
    "sig, code",
    [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)],
    ids=["SIGTERM", "SIGINT", "SIGHUP"],
)
def test_signal_during_a_traced_run_removes_the_trace_temp_folder(spawn, tmp_path, sig, code):
    p = spawn(*LONG_SVD, "--results-dir", tmp_path / "res", "--trace", tmp_path / "tr", tty=True)
    p.wait_for(lambda: glob.glob(str(tmp_path / ".tr.tmp-*")))  # the folder the capture fills
    p.wait_for(REPEATING)
    os.kill(p.pid, sig)
    assert p.wait() == code, p.stderr_lines()
    assert_one_line(p.stderr_lines(), "interrupted", "during timed repeat")
    assert not (tmp_path / "tr").exists() and glob.glob(str(tmp_path / ".tr.tmp-*")) == []
    assert gone(p.kids) == []


@pytest.mark.slow
def test_sigterm_while_writing_output_removes_its_temp_file(spawn, tmp_path):
    out = tmp_path / "out.csv"
    p = spawn(
        "run",
        "groupby",
        "--backend",
        "cpu",
        "--workers",
        "1",
        "--threads-per-worker",
        "2",
        "--rows",
        "2000000",
        "--keys",
        "1000000",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--output",
        out,
        "--results-dir",
        tmp_path / "res",
    )
    p.wait_for(lambda: glob.glob(str(tmp_path / ".out.csv.*gpuscale-tmp")), timeout=120)
    os.kill(p.pid, signal.SIGTERM)
    assert p.wait() == 143
    assert_one_line(p.stderr_lines(), "interrupted (SIGTERM) during writing --output")
    assert not out.exists() and glob.glob(str(tmp_path / ".out.csv.*")) == []
    assert files_under(tmp_path / "res") == []
    assert gone(p.kids) == []


SHUTDOWN_NOISE = r"""
import asyncio, logging, multiprocessing, os, sys
from gpuscale import interrupts
if sys.argv[1] == "quiet":
    interrupts.quiet_shutdown_noise()
import distributed  # its own handler on the "distributed" logger

try:  # what log_errors does when the loop cancels a Nanny's close: the nanny module's logger
    raise asyncio.CancelledError()
except asyncio.CancelledError as e:
    logging.getLogger("distributed.nanny").exception(e)
lock = multiprocessing.get_context("spawn").Lock()  # its semaphore is never released
sys.stderr.flush()
os._exit(0)
"""


@pytest.mark.parametrize("mode", ["loud", "quiet"])
def test_an_on_purpose_stop_leaves_no_tracebacks_or_tracker_warnings(mode):
    """What a CI run once saw after the command's one line: distributed's log_errors
    traceback of a cancelled Nanny close, and the resource tracker's leaked-semaphore warnings.
    Without interrupts.quiet_shutdown_noise (what `main` calls first) both are printed: the check
    sees them."""
    p = subprocess.run(
        [sys.executable, "-c", SHUTDOWN_NOISE, mode],
        capture_output=True,
        text=True,
        timeout=60,
        env=_clean_environ(),
    )
    deadline = time.monotonic() + 10  # the tracker process prints after this one exits
    while mode == "loud" and "leaked semaphore" not in p.stderr and time.monotonic() < deadline:
        time.sleep(0.1)
    assert p.returncode == 0
    if mode == "loud":
        assert "Traceback" in p.stderr and "CancelledError" in p.stderr, p.stderr
    else:
        assert p.stderr == "", p.stderr


def test_sigterm_while_the_cluster_starts(spawn, tmp_path):
    p = spawn(*LONG_SVD, "--results-dir", tmp_path / "res")
    p.wait_for(lambda: p.kids)  # a worker process is starting
    os.kill(p.pid, signal.SIGTERM)
    assert p.wait() == 143
    assert_one_line(p.stderr_lines(), "interrupted (SIGTERM) during ")  # a phase near the start, named
    assert gone(p.kids) == []


def test_sigint_after_the_repeats_names_a_later_phase(spawn, tmp_path):
    """The last repeat counted on the progress bar: Ctrl-C lands in validation or the record
    write, never named as a repeat, and nothing is left behind."""
    p = spawn(
        "run",
        "svd",
        *ONE_WORKER,
        "--rows",
        "400000",
        "--cols",
        "50",
        "--warmup",
        "0",
        "--repeat",
        "2",
        "--validate",
        "full",
        "--results-dir",
        tmp_path / "res",
        tty=True,
    )
    p.wait_for(r"svd \(cpu\).*\b2/2")
    os.kill(p.pid, signal.SIGINT)
    rc = p.wait()
    lines = p.stderr_lines()
    if rc == 0:  # it finished first: nothing to judge
        pytest.skip("the run finished before the signal landed")
    assert rc == 130
    line = assert_one_line(lines, "interrupted (SIGINT) during")
    assert "repeat" not in line, line
    assert_nothing_half_written(tmp_path)


# ---------------------------------------------------------------------------------------
# 3. absurd flags: refused from what this machine holds, before anything starts
# ---------------------------------------------------------------------------------------
ABSURD = [
    (("--workers", "100000"), ("--workers 100000", "at most")),
    (("--threads-per-worker", "1000000"), ("--threads-per-worker 1000000", "at most 64")),
    (("--workers", "8", "--threads-per-worker", "60"), ("threads in all",)),
    (("--memory-limit", "1.5"), ("'1.5'", "neither a fraction", "0.5")),
    (("--memory-limit", "-1GB"), ("'-1GB'", "negative")),
    (("--memory-limit", "-0.5"), ("negative",)),
    (("--memory-limit", "2"), ("less than the 256.00 MiB",)),
    (("--memory-limit", "100MB"), ("100MB", "less than")),
    (("--memory-limit", "10PB"), ("more than this machine",)),
    (("--repeat", "99999999999999999999"), ("run.repeat", "100000")),
    (("--warmup", "5000"), ("run.warmup", "1000")),
    (("--repeat", "-3"), ("--repeat",)),
    (("--rows", "-5"), ("--rows",)),
]


@pytest.mark.parametrize("flags, needles", ABSURD, ids=[" ".join(f) for f, _ in ABSURD])
def test_absurd_flags_are_refused_at_once(spawn, tmp_path, flags, needles):
    t0 = time.monotonic()
    p = spawn(
        "run",
        "svd",
        "--backend",
        "cpu",
        "--rows",
        "1000",
        "--cols",
        "10",
        *flags,
        "--results-dir",
        tmp_path / "res",
    )
    while p.p.poll() is None:
        p.note_kids()
        time.sleep(0.02)
    assert p.wait() == 2
    assert time.monotonic() - t0 < 15
    assert_one_line(p.stderr_lines(), *needles)
    workers = [c for c in p.cmdlines.values() if "multiprocessing" in c]
    assert workers == []  # no worker process was started
    assert not (tmp_path / "res").exists()


def test_a_fraction_is_of_this_machines_memory(cli):
    from gpuscale import machine

    p = cli("cluster", "show", "--backend", "cpu", "--workers", "1", "--memory-limit", "0.5", "--json")
    assert p.returncode == 0, p.stderr
    spec = json.loads(p.stdout)["spec"]
    assert spec["memory_limit_bytes"] == int(machine.cpu()["memory_bytes"] * 0.5)


def test_the_api_bounds_the_same(tmp_path):
    import gpuscale

    t0 = time.monotonic()
    with pytest.raises(gpuscale.UserError, match="more than this machine holds"):
        gpuscale.run("svd", backend="cpu", cluster_settings={"workers": 100_000}, rows=1000, cols=10)
    assert time.monotonic() - t0 < 10


# ---------------------------------------------------------------------------------------
# 4. never lose a measured result: free space up front, the record on stdout if the write fails
# ---------------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A real tmpfs mounted for the test (root only); yields a function mounting one of SIZE."""
    mounted: list[pathlib.Path] = []

    def mount(size: str) -> pathlib.Path:
        d = tmp_path / f"disk{len(mounted)}"
        d.mkdir()
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True, text=True
        )
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}): needs root")
        mounted.append(d)
        return d

    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    yield mount
    for d in mounted:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def fill(folder: pathlib.Path) -> None:
    with open(folder / "filler", "wb") as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()


def test_a_results_disk_without_room_is_refused_up_front(cli, small_disk, tmp_path):
    d = small_disk("64k")
    t0 = time.monotonic()
    p = cli("run", "svd", *ONE_WORKER, "--rows", "1000", "--cols", "10", "--results-dir", d / "res")
    assert p.returncode == 2, p.stderr
    assert_one_line(p.stderr.splitlines(), "bytes free", "--results-dir")
    assert time.monotonic() - t0 < 15
    assert_nothing_half_written(d)


@pytest.mark.parametrize("as_json", [True, False], ids=["--json", "table"])
def test_a_disk_full_at_the_end_prints_the_record_instead(spawn, small_disk, tmp_path, as_json):
    d = small_disk("2m")
    p = spawn(
        "run",
        "svd",
        *ONE_WORKER,
        "--rows",
        "20000",
        "--cols",
        "10",
        "--warmup",
        "0",
        "--repeat",
        "40",
        "--results-dir",
        d / "res",
        *(["--json"] if as_json else []),
        tty=True,
    )
    p.wait_for(r"svd \(cpu\).*\b[1-9]\d*/40")
    fill(d)  # the disk fills while the run is in its repeats
    assert p.wait() == errors.EXIT_RECORD_NOT_WRITTEN
    assert_one_line(p.stderr_lines(), "could not write the record", "No space left on device", "stdout")
    record = json.loads(p.stdout())  # exactly one JSON object: the measured result
    assert record["workload"] == "svd" and len(record["times_s"]) == 40 and record["valid"] is True
    assert record["path"] is None
    assert [f.name for f in files_under(d) if f.name != "filler"] == []
    assert_nothing_half_written(d)


def test_output_on_a_full_disk_keeps_the_record(cli, small_disk, tmp_path):
    """--output onto a disk too small for it: the validated result is kept (the record is
    written to the results folder, which has room, and shown), one line says why, exit 5."""
    d = small_disk("256k")
    p = cli(
        "run",
        "groupby",
        *ONE_WORKER,
        "--rows",
        "200000",
        "--keys",
        "100000",
        "--repeat",
        "2",
        "--warmup",
        "0",
        "--output",
        d / "out.csv",
        "--results-dir",
        tmp_path / "res",
        "--json",
        timeout=300,
    )
    assert p.returncode == errors.EXIT_RECORD_NOT_WRITTEN, p.stderr
    line = assert_one_line(
        p.stderr.splitlines(),
        "could not write --output",
        "No space left on device",
        "the measured result is kept in the record",
    )
    record = json.loads(p.stdout)
    assert record["valid"] is True and len(record["times_s"]) == 2 and record["path"] in line
    assert record["info"]["output"]["written"] is False and "No space left" in record["info"]["output"]["why"]
    assert [f.name for f in files_under(tmp_path / "res")] == [pathlib.Path(record["path"]).name]
    assert files_under(d) == []  # nothing half-written on the full disk


def test_the_record_write_is_atomic_and_never_half_there(small_disk):
    from gpuscale.records import results

    d = small_disk("256k")
    r = results.Result.build(
        workload="svd",
        params={},
        backend="cpu",
        family="cpu",
        backend_reason="",
        protocol="tcp",
        knobs={},
        choices={},
        cluster={},
        times_s=[1.0],
        warmup_s=[],
        generate_s=0.0,
        validate_s=0.0,
        valid=True,
        validation={},
        versions={},
        hardware={},
        info={"pad": "x" * 400_000},
    )
    with pytest.raises(errors.RecordNotWritten) as e:
        results.write(r, d)
    assert "No space left on device" in str(e.value) and json.loads(e.value.record_json)["id"] == r.id
    assert list(d.iterdir()) == []


# ---------------------------------------------------------------------------------------
# 5. the cluster going away under a run; cluster down refuses while runs are in flight
# ---------------------------------------------------------------------------------------
@pytest.fixture
def served(spawn):
    """`gpuscale cluster up` (2 workers, plain tcp: these cases are about the cluster going away;
    TLS is tests/test_security.py's): (its Proc, the scheduler address)."""
    up = spawn(
        "cluster",
        "up",
        "--backend",
        "cpu",
        "--workers",
        "2",
        "--threads-per-worker",
        "1",
        "--security",
        "off",
        "--json",
    )
    up.wait_for(r'"scheduler"', on="out", timeout=120)
    return up, json.loads(up.stdout().splitlines()[0])["scheduler"]


@pytest.mark.slow
def test_cluster_down_refuses_while_a_run_is_in_flight_then_force_ends_it(spawn, served, tmp_path, cli):
    up, addr = served
    run = spawn(
        "run",
        "groupby",
        "--backend",
        "cpu",
        "--scheduler",
        addr,
        "--rows",
        "20000",
        "--keys",
        "100",
        "--warmup",
        "0",
        "--repeat",
        "100000",
        "--no-in-cluster",
        "--results-dir",
        tmp_path / "res",
        tty=True,
    )
    run.wait_for(r"groupby \(cpu\).*\b[1-9]\d*/100000")
    p = cli("cluster", "down", addr)
    assert p.returncode == 2
    assert_one_line(p.stderr.splitlines(), "in flight", addr, "--force")
    assert run.p.poll() is None and up.p.poll() is None  # both carry on
    p = cli("cluster", "down", addr, "--force")
    assert p.returncode == 0 and "cut off" in p.stdout, p.stdout + p.stderr
    assert run.wait(timeout=120) == errors.EXIT_CLUSTER_GONE
    assert_one_line(run.stderr_lines(), f"the cluster at {addr} went away during timed repeat", "cluster up")
    assert files_under(tmp_path / "res") == []
    assert up.wait(timeout=60) == 0


def test_cluster_up_killed_under_an_in_cluster_run(spawn, served, tmp_path):
    from distributed import Client

    up, addr = served
    run = spawn(
        "run",
        "groupby",
        "--backend",
        "cpu",
        "--scheduler",
        addr,
        "--rows",
        "20000",
        "--keys",
        "100",
        "--warmup",
        "0",
        "--repeat",
        "100000",
        "--results-dir",
        tmp_path / "res",
    )
    with Client(addr, set_as_default=False) as c:  # the marker: the runner's task on the scheduler
        run.wait_for(
            lambda: c.run_on_scheduler(  # a lambda: pickled by value for the scheduler
                lambda dask_scheduler: any(
                    str(k).startswith("gpuscale-runner-") for k in dask_scheduler.tasks
                )
            )
        )
    up.note_kids()
    os.kill(up.pid, signal.SIGKILL)
    assert run.wait(timeout=120) == errors.EXIT_CLUSTER_GONE
    assert_one_line(run.stderr_lines(), f"the cluster at {addr} went away", "on a worker of the cluster")
    assert files_under(tmp_path / "res") == []
    assert gone(up.kids) == []  # the workers of the killed `cluster up` ended too


def test_cluster_up_terminated_under_a_run(spawn, served, tmp_path):
    up, addr = served
    run = spawn(
        "run",
        "svd",
        "--backend",
        "cpu",
        "--scheduler",
        addr,
        "--rows",
        "20000",
        "--cols",
        "10",
        "--warmup",
        "0",
        "--repeat",
        "100000",
        "--no-in-cluster",
        "--results-dir",
        tmp_path / "res",
        tty=True,
    )
    run.wait_for(REPEATING)
    os.kill(up.pid, signal.SIGTERM)
    assert up.wait(timeout=60) == 0  # SIGTERM is the normal stop of `cluster up`
    assert run.wait(timeout=120) == errors.EXIT_CLUSTER_GONE
    assert_one_line(run.stderr_lines(), f"the cluster at {addr} went away during timed repeat")


def test_cluster_down_with_nothing_in_flight_needs_no_force(served, cli):
    up, addr = served
    p = cli("cluster", "down", addr)
    assert p.returncode == 0 and "cut off" not in p.stdout, p.stdout + p.stderr
    assert up.wait(timeout=60) == 0


# ---------------------------------------------------------------------------------------
# 6. bad data: NaN / inf counted during the load, header-only CSV, absent Zarr chunks, float16
# ---------------------------------------------------------------------------------------
SMALL_INPUT_RUN = (
    "--backend",
    "cpu",
    "--workers",
    "1",
    "--threads-per-worker",
    "1",
    "--repeat",
    "1",
    "--warmup",
    "0",
)


def test_nan_and_inf_in_npy_input_are_counted_with_the_first_position(cli, tmp_path):
    import numpy as np

    a = np.random.default_rng(0).random((20000, 10))
    a[1234, 5], a[1500, 2], a[19999, 0] = np.nan, np.inf, -np.inf
    np.save(tmp_path / "nan.npy", a)
    p = cli(
        "run", "svd", "--input", tmp_path / "nan.npy", *SMALL_INPUT_RUN, "--results-dir", tmp_path / "res"
    )
    assert p.returncode == 2, p.stderr
    assert_one_line(p.stderr.splitlines(), "holds 3 NaN / inf value(s)", "row 1234, column 5", "nan_to_num")
    assert p.stdout == "" and files_under(tmp_path / "res") == []


def test_a_header_only_csv_is_refused_before_anything_starts(cli, tmp_path):
    (tmp_path / "h.csv").write_text("k,v\n")
    t0 = time.monotonic()
    p = cli(
        "run",
        "groupby",
        "--input",
        tmp_path / "h.csv",
        "--by",
        "k",
        "--agg",
        "v:sum",
        *SMALL_INPUT_RUN,
        "--results-dir",
        tmp_path / "res",
    )
    assert p.returncode == 2, p.stderr
    assert_one_line(p.stderr.splitlines(), "has no rows", "only a header", "k, v")
    assert time.monotonic() - t0 < 15 and not (tmp_path / "res").exists()


def test_absent_zarr_chunks_are_reported_in_the_record(cli, tmp_path):
    import numpy as np

    zarr = pytest.importorskip("zarr")
    z = zarr.open_array(
        str(tmp_path / "a.zarr"), mode="w", shape=(4000, 10), chunks=(1000, 10), dtype="f8", fill_value=0.0
    )
    z[:2000] = np.random.default_rng(0).random((2000, 10))  # chunks 2 and 3 never written
    p = cli(
        "run",
        "svd",
        "--input",
        tmp_path / "a.zarr",
        *SMALL_INPUT_RUN,
        "--json",
        "--results-dir",
        tmp_path / "res",
    )
    assert p.returncode == 0, p.stderr
    absent = json.loads(p.stdout)["data"]["absent_chunks"]
    assert absent["absent"] == 2 and absent["of"] == 4 and absent["read_as"] == 0.0
    assert "fill value" in absent["note"]


def test_float16_input_validates_with_a_tolerance_of_its_precision(cli, tmp_path):
    import numpy as np

    np.save(tmp_path / "h.npy", np.random.default_rng(0).random((20000, 10)).astype(np.float16))
    p = cli(
        "run",
        "svd",
        "--input",
        tmp_path / "h.npy",
        *SMALL_INPUT_RUN,
        "--validate",
        "full",
        "--json",
        "--results-dir",
        tmp_path / "res",
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["valid"] is True and d["data"]["dtype"] == "float16"
    limits = {c["name"]: c["limit"] for c in d["validation"]["checks"]}
    assert limits["every s_i vs numpy.linalg.svd"] == 5e-3


def worker_pids(p: Proc) -> list[int]:
    """The worker processes of the run ``p`` (the nannies' spawned children), at least one."""
    pids = [
        pid
        for pid, cmd in p.cmdlines.items()
        if "multiprocessing" in cmd and "spawn_main" in cmd and psutil.pid_exists(pid)
    ]
    assert pids, p.cmdlines
    return pids


@pytest.mark.slow
def test_a_repeat_that_loses_a_worker_is_flagged_and_left_out_of_the_median(spawn, tmp_path):
    import statistics

    p = spawn(
        "run",
        "svd",
        "--backend",
        "cpu",
        "--workers",
        "2",
        "--threads-per-worker",
        "1",
        "--rows",
        "20000",
        "--cols",
        "10",
        "--warmup",
        "0",
        "--repeat",
        "300",
        "--json",
        "--results-dir",
        tmp_path / "res",
        tty=True,
    )
    p.wait_for(r"svd \(cpu\).*\b[1-9]\d*/300")
    workers = worker_pids(p)
    os.kill(workers[0], signal.SIGKILL)  # a worker lost mid-run: its nanny starts another
    assert p.wait(timeout=180) == 0, p.stderr_lines()
    d = json.loads(p.stdout())
    flagged = d["info"]["disturbed_repeats"]
    assert flagged["left_out_of_median"] is True and "worker(s) lost" in " ".join(flagged["repeats"].values())
    left_out = {int(i) for i in flagged["repeats"]}
    clean = [t for i, t in enumerate(d["times_s"]) if i not in left_out]
    assert len(d["times_s"]) == 300 and d["median_s"] == statistics.median(clean)


@pytest.mark.slow
def test_a_worker_that_stops_answering_is_removed_and_the_run_goes_on(spawn, tmp_path):
    """A worker frozen with SIGSTOP during the timed repeats: after --worker-ttl without its
    heartbeat the scheduler removes it, its tasks run on the other, and the run ends as for a
    worker that died (the repeats it disturbed flagged and left out of the median)."""
    p = spawn("run", "svd", "--backend", "cpu", "--workers", "2", "--threads-per-worker", "1",
              "--rows", "20000", "--cols", "10", "--warmup", "0", "--repeat", "300",
              "--worker-ttl", "3s", "--json", "--results-dir", tmp_path / "res", tty=True)  # fmt: skip
    p.wait_for(r"svd \(cpu\).*\b[1-9]\d*/300")
    workers = worker_pids(p)
    os.kill(workers[0], signal.SIGSTOP)
    try:
        assert p.wait(timeout=180) == 0, p.stderr_lines()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(workers[0], signal.SIGKILL)
    d = json.loads(p.stdout())
    flagged = d["info"]["disturbed_repeats"]
    assert flagged["left_out_of_median"] is True and "worker(s) lost" in " ".join(flagged["repeats"].values())
    assert d["explained"]["cluster"]["worker_ttl"]["value"] == 3.0


def test_a_corrupt_zarr_chunk_is_one_line_naming_the_rows(cli, tmp_path):
    import numpy as np

    zarr = pytest.importorskip("zarr")
    z = zarr.open_array(str(tmp_path / "c.zarr"), mode="w", shape=(4000, 10), chunks=(1000, 10), dtype="f8")
    z[:] = np.random.default_rng(0).random((4000, 10))
    store = tmp_path / "c.zarr"
    chunk = (
        store / "c" / "1" / "0" if (store / "c" / "1" / "0").is_file() else store / "1.0"
    )  # v3 / v2 layout
    chunk.write_bytes(os.urandom(100))  # rows 1000:2000 damaged
    p = cli("run", "svd", "--input", store, *SMALL_INPUT_RUN, "--results-dir", tmp_path / "res")
    assert p.returncode == 2, p.stderr
    line = assert_one_line(p.stderr.splitlines(), "cannot be read", "damaged", str(store))
    start, stop = map(int, re.search(r"rows (\d+):(\d+)", line).groups())
    assert start <= 1000 and stop >= 2000, line
    assert "Compute Failed" not in p.stderr and files_under(tmp_path / "res") == []


# ---------------------------------------------------------------------------------------
# signals held back while a temp file is made and handed over (CI once left one behind)
# ---------------------------------------------------------------------------------------
def test_a_sigterm_inside_signals_deferred_is_raised_as_the_block_ends():
    reached_the_end = False
    with pytest.raises(interrupts.Terminated):
        with interrupts.sigterm_raises():
            with interrupts.signals_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(100):  # the handler runs between these bytecodes: it must not raise
                    time.sleep(0.001)
                reached_the_end = True
    assert reached_the_end


SIGNALS_WHILE_BUSY = """
import random, sys
from gpuscale import interrupts
values = [random.random() for _ in range(3_000_000)]
try:
    with interrupts.sigterm_raises():
        print("ready", flush=True)
        sys.stdin.readline()
        sorted(values)  # one call in C holding the GIL: the signals wait for it together
        print("not raised")
except interrupts.Terminated as e:
    print(type(e).__name__)
"""


def test_the_first_signal_decides_when_python_runs_the_handlers_in_another_order(tmp_path):
    # pending together, Python runs SIGHUP's handler (1) before SIGTERM's (15)
    script = tmp_path / "busy.py"
    script.write_text(SIGNALS_WHILE_BUSY)
    p = subprocess.Popen(
        [sys.executable, str(script)],
        env=_clean_environ(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == "ready"
        p.stdin.write("go\n")
        p.stdin.flush()
        time.sleep(0.1)
        os.kill(p.pid, signal.SIGTERM)
        time.sleep(0.02)
        os.kill(p.pid, signal.SIGHUP)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert out.strip() == "Terminated", (out, err)


def test_written_leaves_nothing_when_the_block_fails_or_the_name_exists(tmp_path):
    from gpuscale import atomic

    with pytest.raises(RuntimeError):
        with atomic.written(tmp_path / "a.csv") as (f, tmp):
            f.write(b"half")
            assert pathlib.Path(tmp).exists()
            raise RuntimeError("cut")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "b.csv").write_text("old")
    with pytest.raises(FileExistsError):
        with atomic.written(tmp_path / "b.csv") as (f, tmp):
            f.write(b"new")
    assert [p.name for p in tmp_path.iterdir()] == ["b.csv"] and (tmp_path / "b.csv").read_text() == "old"
    with atomic.written(tmp_path / "b.csv", replace=True) as (f, tmp):
        f.write(b"new")
    assert [p.name for p in tmp_path.iterdir()] == ["b.csv"] and (tmp_path / "b.csv").read_text() == "new"


def test_a_sigterm_landing_as_the_temp_file_is_made_leaves_nothing(tmp_path):
    """The CI failure: SIGTERM sent the moment the temp file appeared, before its name reached
    the cleanup. Here it is sent from inside mkstemp's own open (the worst moment)."""
    import tempfile

    from gpuscale import atomic

    real_mkstemp = tempfile.mkstemp

    def mkstemp_then_signal(*a, **k):
        out = real_mkstemp(*a, **k)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler has run by now, inside mkstemp's caller's block
        return out

    tempfile.mkstemp = mkstemp_then_signal
    try:
        with pytest.raises(interrupts.Terminated):
            with interrupts.sigterm_raises():
                with atomic.written(tmp_path / "out.csv") as (f, tmp):
                    f.write(b"never")
    finally:
        tempfile.mkstemp = real_mkstemp
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------
# 7. disturbed repeats: other clients' tasks, tasks recomputed; none flagged in a quiet run
# ---------------------------------------------------------------------------------------
@pytest.fixture
def shared_cluster():
    """A running 2-worker cluster (worker processes) that gpuscale connects to, as another user
    of a `cluster up` would: (its address, a client of the test's own)."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c,
        Client(c, set_as_default=False) as client,
    ):
        yield c.scheduler_address, client


def _watched(r) -> None:
    """The run watched its tasks (so a quiet record is a check, not a blind spot)."""
    assert r.info["disturbance_checks"]["tasks"] is True, r.info["disturbance_checks"]


def test_a_quiet_run_flags_no_repeat(shared_cluster):
    """Warm-up, validation, the runner's own task on the cluster, the test's idle client: none
    of it is another client's work or a recomputation."""
    import gpuscale

    addr, _ = shared_cluster
    for workload, sizes in (("svd", dict(rows=20_000, cols=10)), ("groupby", dict(rows=20_000, keys=100))):
        r = gpuscale.run(
            workload,
            backend="cpu",
            cluster_settings={"scheduler": addr},
            warmup=2,
            repeat=4,
            validate="full",
            write=False,
            **sizes,
        )  # the runner on a worker of the cluster
        assert r.valid is True and r.info["runner"]["where"] == "cluster"
        _watched(r)
        assert "disturbed_repeats" not in r.info, r.info["disturbed_repeats"]
    r = gpuscale.run(
        "svd",
        backend="cpu",
        cluster_settings={"workers": 2, "threads_per_worker": 1},
        warmup=2,
        repeat=4,
        validate="full",
        write=False,
        rows=20_000,
        cols=10,
    )  # a cluster of its own
    _watched(r)
    assert r.valid is True and "disturbed_repeats" not in r.info, r.info["disturbed_repeats"]


def test_another_clients_tasks_flag_the_repeats_that_saw_them(shared_cluster):
    import statistics

    from distributed import Client

    import gpuscale

    addr, _ = shared_cluster
    stop, done = threading.Event(), []

    def other_user():  # a steady stream of its own small tasks, two in flight
        with Client(addr, set_as_default=False) as other:
            while not stop.is_set():
                other.gather([other.submit(time.sleep, 0.005, pure=False) for _ in range(2)])
                done.append(2)

    t = threading.Thread(target=other_user, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 60
        while not done:
            assert time.monotonic() < deadline and t.is_alive(), "the other client ran nothing"
            time.sleep(0.02)
        r = gpuscale.run(
            "svd",
            backend="cpu",
            cluster_settings={"scheduler": addr},
            rows=20_000,
            cols=10,
            warmup=1,
            repeat=6,
            write=False,
        )
    finally:
        stop.set()
        t.join(timeout=60)
    _watched(r)
    flagged = r.info["disturbed_repeats"]
    reasons = {int(i): why for i, why in flagged["repeats"].items()}
    assert len(reasons) >= len(r.times_s) // 2, reasons  # the stream never stops: most repeats saw it
    for why in reasons.values():
        assert re.search(r"\d+ task\(s\) of (1 )?other client\(?s\)? (ran|still running)", why), why
        assert "recomputed" not in why and "worker(s)" not in why, why
    clean = [x for i, x in enumerate(r.times_s) if i not in reasons] or r.times_s
    assert r.median_s == statistics.median(clean)
    assert flagged["left_out_of_median"] is (len(reasons) < len(r.times_s))


def test_a_result_lost_with_its_worker_is_recomputed_and_flagged(tmp_path, registered_workloads):
    """Deterministic: task 'first' finishes, task 'second' (which needs it) waits on a file;
    the only worker is killed then (its nanny starts another), so 'first' computes again."""
    import dask
    import dask.array  # noqa: F401 - the data gated_pair is given (and does not use)
    from distributed import Client, LocalCluster

    import gpuscale

    go = str(tmp_path / "go")

    def first(seed):
        return seed + 1

    def second(x, path):
        while not os.path.exists(path):
            time.sleep(0.01)
        return x + 1

    @gpuscale.workload(
        "gated_pair",
        params={"seed": 0},
        validate=lambda result: True,
        generate=lambda p: dask.array.ones(2, chunks=2),
    )
    def gated_pair(data, p, ctx):
        a = dask.delayed(first)(p.seed, dask_key_name="gated-first")
        return dask.delayed(second)(a, go, dask_key_name="gated-second")

    registered_workloads.append("gated_pair")
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as c,
        Client(c, set_as_default=False) as watcher,
    ):

        def kill_then_open():
            waiting = lambda dask_scheduler: (  # noqa: E731 - a lambda: pickled by value
                getattr(dask_scheduler.tasks.get("gated-first"), "state", None) == "memory"
                and getattr(dask_scheduler.tasks.get("gated-second"), "state", None) == "processing"
            )
            while not watcher.run_on_scheduler(waiting):
                time.sleep(0.02)
            (pid,) = watcher.run(os.getpid).values()
            os.kill(pid, signal.SIGKILL)
            while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                time.sleep(0.02)
            pathlib.Path(go).touch()

        t = threading.Thread(target=kill_then_open, daemon=True)
        t.start()
        r = gpuscale.run(
            "gated_pair",
            backend="cpu",
            cluster_settings={"scheduler": c.scheduler_address},
            in_cluster=False,
            warmup=0,
            repeat=2,
            write=False,
        )
        t.join(timeout=30)
    _watched(r)
    reasons = r.info["disturbed_repeats"]["repeats"]
    assert list(reasons) == ["0"], reasons  # the second repeat ran undisturbed
    # 'first' and the data's chunk (generated before the repeats: the run's too) were lost and computed again
    assert (
        "2 task(s) recomputed (gated-first, ones_like)" in reasons["0"] and "worker(s) lost" in reasons["0"]
    )
    assert r.info["disturbed_repeats"]["left_out_of_median"] is True and r.median_s == r.times_s[1]


@pytest.fixture
def registered_workloads():
    from gpuscale import workloads

    names: list[str] = []
    yield names
    for n in names:
        workloads.unregister(n)


def test_a_task_that_erred_and_was_retried_is_flagged(tmp_path, registered_workloads, shared_cluster):
    """Deterministic: the run's one task (``retries=1``) fails on its first attempt only."""
    import dask
    import dask.array  # noqa: F401 - the data flaky_once is given (and does not use)

    import gpuscale

    addr, _ = shared_cluster
    tried = str(tmp_path / "tried")

    def flaky(path):
        if not os.path.exists(path):
            pathlib.Path(path).touch()
            raise RuntimeError("the first attempt fails")
        return 1

    @gpuscale.workload(
        "flaky_once",
        params={"seed": 0},
        validate=lambda result: True,
        generate=lambda p: dask.array.ones(2, chunks=2),
    )
    def flaky_once(data, p, ctx):
        with dask.annotate(retries=1):
            return dask.delayed(flaky)(tried, dask_key_name=f"flaky-{p.seed}")

    registered_workloads.append("flaky_once")
    r = gpuscale.run(
        "flaky_once",
        backend="cpu",
        cluster_settings={"scheduler": addr},
        in_cluster=False,
        warmup=0,
        repeat=2,
        write=False,
    )
    _watched(r)
    assert r.info["disturbed_repeats"]["repeats"] == {"0": "1 task(s) erred and retried (flaky)"}


def test_a_run_that_ignores_its_signal_is_ended_hard_with_its_workers(tmp_path):
    """The safety net: a process whose code drops the interruption (here: a script that
    swallows every KeyboardInterrupt inside gpuscale's handler) still ends, with the signal's
    exit code, one line, and its worker processes gone; and the semaphores its nanny made are
    gone from /dev/shm (os._exit runs no finalizer, and the resource tracker, killed with the
    workers, left them there: 6 per worker) with no tracker warning (not quieted here)."""
    script = tmp_path / "stubborn.py"
    script.write_text(
        "import sys, time\n"
        "from multiprocessing import resource_tracker\n"
        "_register = resource_tracker.register\n"
        "def register(name, rtype):  # the names this process makes, for the test\n"
        "    with open('made.txt', 'a') as f:\n"
        "        f.write(name + '\\n')\n"
        "    return _register(name, rtype)\n"
        "resource_tracker.register = register\n"
        "from distributed import LocalCluster\n"
        "from gpuscale import interrupts\n"
        "interrupts.ESCALATE_AFTER_S = 2.0\n"
        "if __name__ == '__main__':\n"
        "    with interrupts.sigterm_raises():\n"
        "        cluster = LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None)\n"
        "        print('ready', flush=True)\n"
        "        while True:\n"
        "            try:\n"
        "                time.sleep(0.1)\n"
        "            except KeyboardInterrupt:\n"
        "                pass  # dropped, as a library might\n"
    )
    p = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=str(tmp_path),
        env=_clean_environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert p.stdout.readline().strip() == "ready"
        kids = [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
        assert kids
        t0 = time.monotonic()
        os.kill(p.pid, signal.SIGTERM)
        assert p.wait(timeout=60) == 143
        assert 3.5 < time.monotonic() - t0 < 30
        err = p.stderr.read()
        assert "did not stop within 4 s" in err and "Traceback" not in err, err
        assert "leaked semaphore" not in err, err
        assert gone(kids) == []
        made = (tmp_path / "made.txt").read_text().split()
        assert len(made) >= 6  # one worker's nanny: two spawn-context queues
        if os.path.isdir("/dev/shm"):  # Linux: a named semaphore is a file there until unlinked
            assert [n for n in made if os.path.exists("/dev/shm/sem." + n.lstrip("/"))] == []
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)


SIGNAL_IN_A_CALLBACK = """
import gc, os, signal, sys, time, weakref
from gpuscale import interrupts
hits = []
def land_here(*_):
    if not hits:
        hits.append(1)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # the handler runs here, inside the callback
class Finalized:
    def __del__(self):
        land_here()
class Referenced:
    pass
try:
    with interrupts.sigterm_raises():
        if sys.argv[1] == "gc":
            gc.callbacks.append(lambda phase, info: phase == "start" and land_here())
            gc.collect()
        elif sys.argv[1] == "finalizer":
            obj = Finalized()
            del obj
        else:
            obj = Referenced()
            ref = weakref.ref(obj, land_here)
            del obj
        for _ in range(1000):
            time.sleep(0.005)
    print("not raised")
except interrupts.Terminated:
    print("raised" if hits else "no callback")
"""


@pytest.mark.parametrize("where", ["gc", "finalizer", "weakref"])
def test_a_signal_landing_where_python_drops_exceptions_still_ends_the_block(tmp_path, where):
    """A handler that runs inside a garbage-collection callback (distributed has one), a
    ``__del__`` (futures release their keys there) or a weakref callback (a ``WeakSet``'s)
    raises where Python prints "Exception ignored" and drops the exception. The interruption
    must still reach the block, and nothing be printed."""
    p = subprocess.run(
        [sys.executable, "-c", SIGNAL_IN_A_CALLBACK, where],
        cwd=str(tmp_path),
        env=_clean_environ(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.stdout.strip() == "raised", (p.stdout, p.stderr[-2000:])
    assert p.stderr == ""
