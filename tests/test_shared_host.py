"""Safe on a machine shared with other users: a second real user (uid nobody, through
setpriv) plants links and files, owns scheduler files, writes profiles; gpuscale refuses in
one line, never writes through a link, never trusts another user's cluster unasked, and
reads YAML and environment input with bounds. Real files, real uids, real processes."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest
from conftest import _clean_environ
from test_dashboard import Proc, assert_one_error_line
from test_security import _other_uid

from gpuscale import UserError, trust

pytestmark = pytest.mark.timeout(240)

BOMB = """version: 1
gpuscale:
  cluster:
    gpus: &a [&b [&c [&d [&e [&f [&g [&h [&i [1, 1, 1, 1, 1, 1, 1, 1, 1], *i, *i, *i, *i, *i, *i, *i, *i],
      *h, *h, *h, *h, *h, *h, *h, *h], *g, *g, *g, *g, *g, *g, *g, *g], *f, *f, *f, *f, *f, *f, *f, *f],
      *e, *e, *e, *e, *e, *e, *e, *e], *d, *d, *d, *d, *d, *d, *d, *d], *c, *c, *c, *c, *c, *c, *c, *c],
      *b, *b, *b, *b, *b, *b, *b, *b]
"""
"""A "billion laughs" profile: under 1 KB, 9^9 (387 million) values with its aliases expanded."""


@pytest.fixture
def open_folder():
    """A folder anyone may write, without the sticky bit (mode 0777, as a careless shared
    folder is), beside a root-owned canary file that must never change."""
    top = pathlib.Path(tempfile.mkdtemp(prefix="gpuscale-open-"))
    top.chmod(0o755)
    folder = top / "open"
    folder.mkdir()
    folder.chmod(0o777)
    canary = top / "canary"
    canary.write_text("canary\n")
    yield folder, canary
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def shared():
    """A folder every user may write, like /tmp (mode 1777: the sticky bit keeps users from
    replacing each other's files), inside a folder others may enter."""
    top = pathlib.Path(tempfile.mkdtemp(prefix="gpuscale-shared-"))
    top.chmod(0o755)
    folder = top / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(top, ignore_errors=True)


def as_nobody(*cmd: str, cwd=None) -> subprocess.CompletedProcess:
    """``cmd`` run by uid nobody (skips unless this process is root)."""
    p = subprocess.run(
        [*_other_uid(), *map(str, cmd)], capture_output=True, text=True, timeout=60, cwd=str(cwd or "/")
    )
    assert p.returncode == 0, (cmd, p.stdout, p.stderr)
    return p


def peak_rss_mb(args: list[str], cwd) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``python -m gpuscale *args`` under a fresh parent that reports its children's peak
    resident memory (``RUSAGE_CHILDREN``: this test process's own children do not count)."""
    code = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run([sys.executable, '-m', 'gpuscale', *sys.argv[1:]], capture_output=True, "
        "text=True)\n"
        "sys.stderr.write(p.stderr)\nsys.stdout.write(p.stdout)\n"
        "print('PEAK_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
        "sys.exit(p.returncode)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(cwd),
        env=_clean_environ(),
    )
    err = p.stderr.splitlines()
    peak = [line for line in err if line.startswith("PEAK_KB ")]
    assert peak, p.stderr
    p.stderr = "\n".join(line for line in err if not line.startswith("PEAK_KB ")) + "\n"
    return p, int(peak[0].split()[1]) / 1024


def up_refused(folder: pathlib.Path, sched: pathlib.Path, *extra: str) -> subprocess.CompletedProcess:
    """``cluster up --scheduler-file sched``, which is to refuse before starting anything;
    one that starts a cluster instead is stopped after 60 s (and the caller's checks fail)."""
    up = Proc(
        "cluster", "up", "--backend", "cpu", "--workers", "1", "--scheduler-file", sched, *extra, cwd=folder
    )
    try:
        rc = up.wait(timeout=60)
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        up.kill_group()
    return subprocess.CompletedProcess(up.p.args, rc, up.text("out"), up.text("err") + "\n")


# ---------------------------------------------------------------------------------------
# never through a link
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "planted, what",
    [(".s.json.lock", "lock file"), ("s.json", "scheduler file"), ("s.tls.pem", "credentials file")],
)
def test_cluster_up_refuses_a_link_planted_by_another_user(open_folder, planted, what):
    """uid nobody links a name `cluster up --scheduler-file open/s.json` will write to a
    root-owned file; root's `cluster up` refuses in one line, and the file is untouched."""
    folder, canary = open_folder
    as_nobody("ln", "-s", canary, folder / planted)
    p = up_refused(folder, folder / "s.json")
    line = assert_one_error_line(
        p,
        f"{what} {folder / planted} is a symbolic link",
        f"to {canary}",
        "uid 65534",
        "never writes through a link",
    )
    assert canary.read_text() == "canary\n"
    assert sorted(f.name for f in folder.iterdir()) == [planted], line


def test_cluster_up_refuses_another_users_lock_file(open_folder):
    folder, _ = open_folder
    as_nobody("sh", "-c", f"echo 1 > {folder / '.s.json.lock'}")
    p = up_refused(folder, folder / "s.json")
    assert_one_error_line(p, f"lock file {folder / '.s.json.lock'} belongs to uid 65534")


def test_a_record_is_never_written_through_a_link(open_folder, cli):
    """--output, a bench folder's files and --trace: a link (or another user's folder)
    planted where they go is refused."""
    folder, canary = open_folder
    as_nobody("ln", "-s", canary, folder / "out.npy")
    p = cli(
        "run",
        "svd",
        "--backend",
        "cpu",
        "--workers",
        "1",
        "--rows",
        "2000",
        "--cols",
        "5",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--output",
        folder / "out.npy",
        "--overwrite",
        "--results-dir",
        folder / "res",
    )
    assert_one_error_line(p, f"{folder / 'out.npy'} is a symbolic link", "uid 65534")
    assert canary.read_text() == "canary\n" and not (folder / "res").exists()
    res = pathlib.Path(tempfile.mkdtemp(prefix="gpuscale-own-")) / "res"  # a folder of root's own
    res.parent.chmod(0o755)
    p = cli(
        "run",
        "svd",
        "--backend",
        "cpu",
        "--workers",
        "1",
        "--rows",
        "2000",
        "--cols",
        "5",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--results-dir",
        res,
    )
    assert p.returncode == 0, p.stderr
    res.chmod(0o777)
    as_nobody("ln", "-s", canary, res / "report.html")
    assert_one_error_line(cli("results", "chart", res), f"report {res / 'report.html'} is a symbolic link")
    assert canary.read_text() == "canary\n"
    res.chmod(0o755)
    as_nobody("mkdir", folder / "empty")
    as_nobody("ln", "-s", folder / "empty", folder / "trace")
    p = cli(
        "run",
        "svd",
        "--backend",
        "cpu",
        "--workers",
        "1",
        "--rows",
        "2000",
        "--cols",
        "5",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--trace",
        folder / "trace",
        "--results-dir",
        res,
    )
    assert_one_error_line(p, f"trace dir {folder / 'trace'} is a symbolic link", "uid 65534")
    assert_one_error_line(
        cli("run", "svd", "--backend", "cpu", "--trace", folder / "empty"),
        f"trace dir {folder / 'empty'} belongs to uid 65534",
    )


def _run_into(cli, *flags, cwd=None):
    return cli("run", "svd", "--backend", "cpu", "--workers", "1", "--rows", "2000", "--cols", "5",
               "--repeat", "1", "--warmup", "0", *flags, cwd=cwd)  # fmt: skip


def test_records_are_never_written_through_another_users_link_or_folder(shared, open_folder, cli):
    """Another user plants links where root's records and logs would go, or owns the folder:
    root's run refuses in one line, before any cluster starts, and nothing is written there."""
    private = pathlib.Path(tempfile.mkdtemp(prefix="gpuscale-private-"))
    private.chmod(0o700)
    (private / "secret").write_text("secret\n")
    as_nobody("ln", "-s", private, shared / "res")  # --results-dir through a planted link
    p = _run_into(cli, "--results-dir", shared / "res")
    assert_one_error_line(p, f"results dir {shared / 'res'} is a symbolic link", "uid 65534", "never writes")
    as_nobody("ln", "-s", private, shared / "gpuscale-results")  # the default folder, planted
    p = _run_into(cli, cwd=shared)
    assert_one_error_line(p, f"results dir {shared / 'gpuscale-results'} is a symbolic link", "uid 65534")
    as_nobody("mkdir", shared / "theirs")  # a folder the other user owns and can write
    p = _run_into(cli, "--results-dir", shared / "theirs")
    assert_one_error_line(p, f"results dir {shared / 'theirs'} belongs to uid 65534")
    assert not list((shared / "theirs").iterdir())
    folder, _ = open_folder  # a folder anyone may change (0777, no sticky bit): nothing goes under it
    p = _run_into(cli, "--results-dir", folder / "res")
    assert_one_error_line(p, f"results dir {folder} is writable by every user, without the sticky bit")
    assert not (folder / "res").exists()
    mine = shared / "mine"  # root's own folder, but its logs/ planted by the other user first
    mine.mkdir()
    mine.chmod(0o1777)
    as_nobody("ln", "-s", private, mine / "logs")
    p = _run_into(cli, "--results-dir", mine)
    assert_one_error_line(p, f"log folder {mine / 'logs'} is a symbolic link", "uid 65534")
    assert sorted(f.name for f in private.iterdir()) == ["secret"]  # nothing written in root's folder
    assert (private / "secret").read_text() == "secret\n"
    shutil.rmtree(private)


def test_a_log_file_planted_as_a_link_is_not_followed(tmp_path):
    """The log handler opens its file never through a link: a link another user planted at its
    name leaves the target as it was, and one line says the lines are not kept."""
    from gpuscale.cluster import logs

    folder = tmp_path / "res" / "logs"
    folder.mkdir(parents=True)
    target = tmp_path / "root-only"
    target.write_text("root\n")
    target.chmod(0o600)
    planted = folder / "20261129T000000-1.log"
    os.symlink(target, planted)
    code = (
        "import logging, pathlib, sys\n"
        "from gpuscale.cluster import logs\n"
        f"restore = logs.to_file(pathlib.Path({str(planted)!r}))\n"
        "logging.getLogger('distributed').warning('a line')\n"
        "logging.getLogger('distributed').warning('another')\n"
        "restore()\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert target.read_text() == "root\n"
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpuscale: Dask's log lines are not kept: log file "), (
        lines
    )
    assert logs.LOGGERS


# ---------------------------------------------------------------------------------------
# bounded input
# ---------------------------------------------------------------------------------------
def test_an_alias_bomb_profile_is_refused_in_one_line_and_little_memory(tmp_path):
    prof = tmp_path / "bomb.yaml"
    prof.write_text(BOMB)
    assert len(BOMB) < 1024
    p, peak = peak_rss_mb(["cluster", "show", "--backend", "cpu", "--profile", prof], tmp_path)
    assert_one_error_line(p, str(prof), "more than 100,000 values", "aliases")
    assert peak < 200, f"peak resident memory {peak:.0f} MB"


def test_an_alias_bomb_bench_spec_is_refused_in_one_line(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(BOMB.replace("version: 1", "workloads: {svd: {}}"))
    p, peak = peak_rss_mb(["bench", spec, "--out", tmp_path / "out"], tmp_path)
    assert_one_error_line(p, str(spec), "more than 100,000 values")
    assert peak < 200, f"peak resident memory {peak:.0f} MB"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "text, needles",
    [
        ("version: 1\ngpuscale:\n  cluster:\n    gpus: &a [*a]\n", ("alias that refers to itself", "line 4")),
        (
            "version: 1\ngpuscale:\n  cluster:\n    gpus: " + "[" * 20000 + "]" * 20000 + "\n",
            ("nested too deeply",),
        ),
        ("version: 1\n#" + "x" * (1 << 20) + "\n", ("more than the 1,048,576", "at most 1024 KiB")),
    ],
    ids=["alias-cycle", "deep-nesting", "over-1MiB"],
)
def test_a_hostile_profile_is_refused_before_it_is_used(cli, tmp_path, text, needles):
    prof = tmp_path / "p.yaml"
    prof.write_text(text)
    assert_one_error_line(cli("cluster", "show", "--backend", "cpu", "--profile", prof), str(prof), *needles)


def test_aliases_within_the_limit_are_read(cli, tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text("version: 1\ngpuscale:\n  cluster:\n    workers: &n 2\n    threads-per-worker: *n\n")
    p = cli("cluster", "show", "--backend", "cpu", "--profile", prof, "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["settings"]["cluster"]["threads-per-worker"] == 2
    assert trust.load_yaml("a: &a [1, 2, 3]\nb: [*a, *a, *a]\n", "x") == {
        "a": [1, 2, 3],
        "b": [[1, 2, 3]] * 3,
    }
    with pytest.raises(UserError, match="x holds more than 12 values"):  # 4 + 1 + 3 x 4 + 3 keys and values
        trust.load_yaml("a: &a [1, 2, 3]\nb: [*a, *a, *a]\n", "x", limit=12)


def test_a_1mb_environment_value_is_one_short_line(tmp_path):
    """A variable of 1 MB (more than one exec argument may carry, so it is set inside the
    process, as a notebook or a wrapper would) and one of 120,000 digits through exec."""
    code = (
        "import os, sys\nos.environ['DASK_GPUSCALE__CLUSTER__WORKERS'] = '9' * 1_000_000\n"
        "sys.argv = ['gpuscale', 'cluster', 'show', '--backend', 'cpu']\n"
        "from gpuscale import cli\ncli.main()\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
        env=_clean_environ(),
    )
    line = assert_one_error_line(
        p, "gpuscale.cluster.workers", "1,000,000 characters", "DASK_GPUSCALE__CLUSTER__WORKERS"
    )
    assert len(line) < 300, len(line)
    p = subprocess.run(
        [sys.executable, "-m", "gpuscale", "explain", "svd", "--backend", "cpu"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
        env=_clean_environ({"DASK_GPUSCALE__CLUSTER__THREADS_PER_WORKER": "x" * 120_000}),
    )
    assert len(assert_one_error_line(p, "120,000 characters", "threads-per-worker")) < 300


def test_a_long_bench_spec_value_is_cut(cli, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("workloads:\n  svd:\n    sizes: [{rows: " + "x" * 100_000 + "}]\n")
    line = assert_one_error_line(cli("bench", spec, "--out", tmp_path / "out"), str(spec), "--rows")
    assert len(line) < 600, len(line)


def test_a_profile_others_can_write_is_used_with_a_warning(shared, tmp_path):
    """Planted by uid nobody in a shared folder: gpuscale says so in one warning line, then
    uses it (what it says is what the run will do)."""
    prof = shared / "theirs.yaml"
    as_nobody("sh", "-c", f"printf 'version: 1\\ngpuscale:\\n  cluster:\\n    workers: 3\\n' > {prof}")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "cluster",
            "show",
            "--backend",
            "cpu",
            "--profile",
            str(prof),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
        env=_clean_environ(),
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["sources"]["cluster.workers"] == "profile"
    lines = p.stderr.splitlines()
    assert (
        len(lines) == 1 and lines[0].startswith("gpuscale: warning: profile ") and "uid 65534" in lines[0]
    ), p.stderr
    mine = tmp_path / "mine.yaml"
    mine.write_text("version: 1\ngpuscale:\n  cluster:\n    workers: 3\n")
    p = subprocess.run(
        [sys.executable, "-m", "gpuscale", "cluster", "show", "--backend", "cpu", "--profile", str(mine)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
        env=_clean_environ(),
    )
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr


# ---------------------------------------------------------------------------------------
# never trusting another user's cluster unasked
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served_tls():
    """One `cluster up --scheduler-file` (TLS) of this user's, in a folder of its own."""
    from test_security import start_up

    folder = pathlib.Path(tempfile.mkdtemp(prefix="gpuscale-mine-"))
    folder.chmod(0o755)
    try:
        up, d = start_up(folder, "--scheduler-file", folder / "scheduler.json")
        yield d
        up.kill_group()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _planted_by_nobody(shared: pathlib.Path, d: dict) -> pathlib.Path:
    """uid nobody's scheduler file and credentials in the shared folder, naming the served
    cluster (the credentials copied for it: in the attack, nobody's cluster makes its own)."""
    creds = shared / "theirs.tls.pem"
    shutil.copyfile(d["credentials"], creds)
    os.chown(creds, 65534, 65534)
    as_nobody("sh", "-c", f"echo '{json.dumps({'address': d['scheduler']})}' > {shared / 'theirs.json'}")
    return shared / "theirs.json"


RUN = ("run", "svd", "--backend", "cpu", "--rows", "20000", "--cols", "20", "--repeat", "1", "--warmup", "0")


def test_a_scheduler_file_of_another_user_is_refused_unless_trusted(served_tls, shared, cli, tmp_path):
    sched = _planted_by_nobody(shared, served_tls)
    line = assert_one_error_line(
        cli(*RUN, "--scheduler-file", sched, timeout=120),
        f"scheduler file {sched} could be written by another user",
        "owned by uid 65534",
        "could run code in this process",
        "--trust-cluster-files",
    )
    assert len(line) < 400
    p = cli(
        *RUN,
        "--scheduler-file",
        sched,
        "--trust-cluster-files",
        "--json",
        "--results-dir",
        tmp_path / "res",
        timeout=180,
    )
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["valid"] is True and rec["cluster"]["tls"] is True
    assert rec["settings_sources"]["cluster.trust-files"] == "flag"
    p = cli(
        "explain",
        "svd",
        "--backend",
        "cpu",
        "--scheduler-file",
        sched,
        "--json",
        env={"DASK_GPUSCALE__CLUSTER__TRUST_FILES": "true"},
        timeout=120,
    )
    assert p.returncode == 0, p.stderr


def test_credentials_of_another_user_are_refused_unless_trusted(served_tls, shared, cli):
    _planted_by_nobody(shared, served_tls)
    creds = shared / "theirs.tls.pem"
    assert_one_error_line(
        cli(
            "explain",
            "svd",
            "--backend",
            "cpu",
            "--scheduler",
            served_tls["scheduler"],
            "--credentials",
            creds,
            timeout=120,
        ),
        f"credentials file {creds} could be written by another user",
        "uid 65534",
        "--trust-cluster-files",
    )
    assert_one_error_line(
        cli("cluster", "down", served_tls["scheduler"], "--credentials", creds, timeout=60),
        f"credentials file {creds}",
        "uid 65534",
    )


@pytest.mark.parametrize("case", ["file writable by others", "folder writable by others"])
def test_a_scheduler_file_others_can_change_is_refused(served_tls, open_folder, shared, cli, case):
    """This user's own files, but ones another user could rewrite or replace."""
    folder = open_folder[0] if case.startswith("folder") else shared
    sched = folder / "s.json"
    sched.write_text(json.dumps({"address": served_tls["scheduler"]}))
    shutil.copyfile(served_tls["credentials"], folder / "s.tls.pem")
    if case.startswith("file"):
        sched.chmod(0o666)
    needle = (
        "writable by others (mode 0666)" if case.startswith("file") else f"its folder {folder} is writable"
    )
    assert_one_error_line(
        cli("explain", "svd", "--backend", "cpu", "--scheduler-file", sched, timeout=120),
        f"scheduler file {sched}",
        needle,
        "--trust-cluster-files",
    )
    assert_one_error_line(cli("cluster", "down", "--scheduler-file", sched, timeout=60), needle)


def test_a_bench_spec_others_can_write_is_read_with_a_warning(shared, cli):
    spec = shared / "spec.yaml"
    as_nobody("sh", "-c", f"printf 'workloads: {{svd: {{}}}}\\nbogus: 1\\n' > {spec}")
    p = cli("bench", spec, "--out", shared / "out")
    assert p.returncode == 2, p.stderr
    warning, error = p.stderr.splitlines()
    assert warning.startswith(f"gpuscale: warning: bench spec {spec} could be changed by another user"), (
        warning
    )
    assert "uid 65534" in warning and error.startswith("gpuscale: error: ") and "unknown key 'bogus'" in error


def test_cluster_up_warns_of_a_folder_others_can_write(open_folder):
    """Its own clients would refuse the scheduler file there: `cluster up` says so as it starts."""
    from test_security import start_up

    folder, _ = open_folder
    up, d = start_up(folder, "--scheduler-file", folder / "s.json", "--security", "off")
    try:
        warnings = [line for _, line in up.lines["err"] if line.startswith("gpuscale: warning:")]
        assert len(warnings) == 1 and f"its folder {folder} is writable by others" in warnings[0], warnings
        assert "--trust-cluster-files" in warnings[0]
    finally:
        up.kill_group()


def test_special_files_named_like_records_or_scheduler_files_are_refused_not_read(cli, tmp_path):
    """A FIFO named x.json in a results folder does not hang `results list`, a link to /dev/zero
    named zero.json does not fill its memory; both are skipped beside the good record, refused in
    one line when named; a --scheduler-file that is a FIFO is one line, not a hang."""
    res = tmp_path / "res"
    p = _run_into(cli, "--results-dir", res)
    assert p.returncode == 0, p.stderr
    os.mkfifo(res / "x.json")
    os.symlink("/dev/zero", res / "zero.json")
    p = cli("results", "list", res, timeout=60)
    assert p.returncode == 0 and p.stdout.count(" svd ") == 1, p.stdout + p.stderr
    assert_one_error_line(
        cli("results", "show", res / "zero.json", timeout=60), "record", "is a device, not a file"
    )
    assert_one_error_line(
        cli("results", "show", res / "x.json", timeout=60), "record", "is a FIFO, not a file"
    )
    os.mkfifo(tmp_path / "s.json")
    p = cli("run", "svd", "--scheduler-file", tmp_path / "s.json", timeout=60)
    assert_one_error_line(p, f"scheduler file {tmp_path / 's.json'} is a FIFO, not a file")


def test_a_record_another_user_planted_prints_no_escape_and_is_marked_theirs(shared, cli):
    """uid nobody drops a record into a shared results folder with a terminal escape sequence in
    its workload name and a 1 ns median: root's `results list` / `show` print no control
    character and say whose file it is."""
    p = _run_into(cli, "--results-dir", shared / "res")
    assert p.returncode == 0, p.stderr
    (shared / "res").chmod(0o1777)  # a results folder the team shares, as /tmp is shared
    (mine,) = [f for f in (shared / "res").glob("*.json")]
    data = json.loads(mine.read_text())
    data.update(workload="svd\x1b]0;pwned\x07\x1b[2J", median_s=1e-9, id="f" * 32)
    planted = shared / "res" / "planted.json"
    tmp = shared / "planted.tmp"
    tmp.write_text(json.dumps(data))
    tmp.chmod(0o644)
    as_nobody("cp", tmp, planted)
    listed = cli("results", "list", shared / "res", env={"COLUMNS": "200"})
    assert listed.returncode == 0, listed.stderr
    shown_ = cli("results", "show", planted, env={"COLUMNS": "200"})
    assert shown_.returncode == 0, shown_.stderr
    for out in (listed.stdout + listed.stderr, shown_.stdout + shown_.stderr):
        assert "\x1b" not in out and "\x07" not in out
    assert "(uid 65534's file)" in listed.stdout and listed.stdout.count("65534") == 1
    assert "uid 65534's, not yours" in shown_.stdout
