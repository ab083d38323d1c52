"""The command-line contract, through real subprocesses."""

from __future__ import annotations

import json
import pathlib

import pytest
from conftest import files_under

import gpuscale
from gpuscale.cli import COMMANDS


def only_json(stdout: str):
    """The whole of stdout is exactly one JSON value."""
    return json.loads(stdout)


def test_run_svd_json(cli, results_dir):
    p = cli(
        "run",
        "svd",
        "--rows",
        "20000",
        "--cols",
        "20",
        "--repeat",
        "2",
        "--warmup",
        "0",
        "--json",
        "--results-dir",
        results_dir,
    )
    assert p.returncode == 0, p.stderr
    d = only_json(p.stdout)
    assert isinstance(d, dict)
    assert d["workload"] == "svd"
    assert d["backend"] == "auto" and d["family"] in ("cpu", "gpu")
    assert d["protocol"] == ("inproc" if d["family"] == "cpu" else "tcp")  # small work: one worker here
    assert d["params"]["rows"] == 20000 and d["params"]["cols"] == 20
    assert isinstance(d["times_s"], list) and len(d["times_s"]) == 2
    assert d["warmup_s"] == []
    assert d["median_s"] > 0
    assert d["valid"] is True
    files = files_under(results_dir)
    assert [str(f) for f in files] == [d["path"]]
    assert json.loads(files[0].read_text())["id"] == d["id"]
    assert "Traceback" not in p.stderr


def test_record_attributes_run_flags_to_flag(cli, results_dir):
    p = cli(
        "run",
        "svd",
        "--rows",
        "2000",
        "--cols",
        "10",
        "--repeat",
        "2",
        "--warmup",
        "0",
        "--json",
        "--results-dir",
        results_dir,
    )
    assert p.returncode == 0, p.stderr
    sources = only_json(p.stdout)["settings_sources"]
    assert sources["results-dir"] == "flag"
    assert (sources["run.repeat"], sources["run.warmup"]) == ("flag", "flag")


def test_run_groupby_json(cli, results_dir):
    p = cli(
        "run",
        "groupby",
        "--rows",
        "200000",
        "--keys",
        "1000",
        "--split-out",
        "2",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--backend",
        "pandas",
        "--processes",
        "yes",
        "--json",
        "--results-dir",
        results_dir,
    )
    assert p.returncode == 0, p.stderr
    d = only_json(p.stdout)
    assert d["workload"] == "groupby" and d["backend"] == "pandas" and d["family"] == "cpu"
    assert d["params"] == {"rows": 200000, "keys": 1000, "partitions": None, "split_out": 2, "seed": 0}
    assert len(d["times_s"]) == 1 and d["valid"] is True
    assert d["choices"]["split_out"]["value"] == 2
    # dataframe work: one thread per worker process (the cpu family's knob)
    assert d["cluster"]["threads_per_worker"] == 1
    # the record, and the log file it names when Dask logged (the shuffle's WARNING lines)
    assert sorted(map(str, files_under(results_dir))) == sorted(
        filter(None, [d["path"], d["info"]["dask_log"]])
    )


def test_run_svd_with_no_flags_is_the_readme_job(cli, tmp_path):
    """`gpuscale run svd` alone: auto backend, default sizes, validated, record in ./gpuscale-results."""
    p = cli("run", "svd", cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "valid" in p.stdout and "INVALID" not in p.stdout
    assert "auto chose" in p.stdout  # it says which backend and why
    records = files_under(tmp_path / "gpuscale-results")
    assert len(records) == 1 and records[0].suffix == ".json"
    d = json.loads(records[0].read_text())
    assert d["valid"] is True and d["backend"] == "auto"
    assert d["params"]["rows"] == 200_000 and d["params"]["cols"] == 100
    assert (len(d["times_s"]), len(d["warmup_s"])) == (3, 1)


def test_workloads_json(cli):
    p = cli("workloads", "--json")
    assert p.returncode == 0, p.stderr
    items = {w["name"]: w for w in only_json(p.stdout)}
    assert {"svd", "groupby"} <= set(items)
    assert items["svd"]["collection"] == "array" and items["groupby"]["collection"] == "dataframe"
    for name in ("svd", "groupby"):
        assert "rows" in items[name]["params"]
        assert items[name]["params"]["rows"]["default"] > 0
    assert {"cols", "chunk-rows", "dtype", "compute-uv", "route", "condition", "seed"} <= set(
        items["svd"]["params"]
    )
    assert {"keys", "partitions", "split-out", "seed"} <= set(items["groupby"]["params"])
    # fixed sets of values are listed as choices (the CLI accepts exactly these)
    assert items["svd"]["params"]["route"]["choices"] == ["auto", "gram", "cholqr2", "tsqr"]
    assert items["svd"]["params"]["rows"]["choices"] is None
    assert items["groupby"]["params"]["split-out"]["choices"] == ["auto"]


def test_workloads_table(cli):
    p = cli("workloads")
    assert p.returncode == 0, p.stderr
    assert "svd" in p.stdout and "groupby" in p.stdout and "--rows" in p.stdout
    wide = cli("workloads", env={"COLUMNS": "400"})  # unwrapped cells: the choices on one line
    assert wide.returncode == 0, wide.stderr
    assert "{auto|gram|cholqr2|tsqr}" in wide.stdout


def test_info_json(cli):
    p = cli("info", "--json")
    assert p.returncode == 0, p.stderr
    d = only_json(p.stdout)
    cpu = d["hardware"]["cpu"]
    assert cpu["cores"] >= 1 and cpu["usable_cores"] >= 1 and cpu["memory_bytes"] > 0
    assert isinstance(d["hardware"]["gpus"], list)
    assert {"cupy", "cudf", "dask_cuda", "distributed_ucxx", "rmm"} <= set(d["stacks"])
    assert d["protocols"]["tcp"] is True
    assert {b["name"] for b in d["backends"]} >= {"cpu", "gpu"}
    assert d["versions"]["gpuscale"] == gpuscale.__version__


def test_info_json_without_gpu_stack(cli):
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is importable here")
    except ImportError:
        pass
    d = only_json(cli("info", "--json").stdout)
    assert d["stacks"]["cupy"] == {"importable": False, "version": None}
    gpu = next(b for b in d["backends"] if b["name"] == "gpu")
    assert gpu["usable"] is False and "cupy" in gpu["why"]


def test_info_table(cli):
    p = cli("info")
    assert p.returncode == 0, p.stderr
    assert "CPU" in p.stdout and "backend cpu" in p.stdout


def test_dask_cli_entry_point(cli):
    p = cli("gpuscale", "workloads", "--json", module="dask")
    assert p.returncode == 0, p.stderr
    assert {"svd", "groupby"} <= {w["name"] for w in only_json(p.stdout)}


def test_dask_cli_bad_input_is_one_line(cli):
    p = cli("gpuscale", "run", "nosuch", module="dask")
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [p.stderr.strip()]
    assert p.stderr.startswith("gpuscale: error: unknown workload 'nosuch'")


def test_version_and_help(cli):
    p = cli("--version")
    assert p.returncode == 0 and gpuscale.__version__ in p.stdout
    p = cli("run", "svd", "--help")
    assert p.returncode == 0
    for flag in (
        "--rows",
        "--cols",
        "--route",
        "--backend",
        "--protocol",
        "--profile",
        "--json",
        "--results-dir",
        "--no-memory-check",
        "--repeat",
        "--warmup",
    ):
        assert flag in p.stdout, flag
    p = cli("run", "--help")
    assert p.returncode == 0 and "svd" in p.stdout and "groupby" in p.stdout


def test_failed_cli_runs_leave_cwd_clean(cli, tmp_path):
    """Sanity for the bad-input tests: a refused run writes nothing anywhere under cwd."""
    p = cli("run", "svd", "--rows", "0")
    assert p.returncode == 2
    assert files_under(tmp_path) == []
    assert not pathlib.Path(tmp_path / "gpuscale-results").exists()


def test_shuffle_run_keeps_dask_log_lines_off_stderr(cli, results_dir):
    """distributed's P2P shuffle logs "initialized" / "deactivated" WARNING lines in the
    scheduler: they go to the log file the record names, and stderr stays empty."""
    p = cli(
        "run",
        "shuffle",
        "--backend",
        "cpu",
        "--rows",
        "200000",
        "--partitions",
        "4",
        "--repeat",
        "2",
        "--warmup",
        "0",
        "--json",
        "--results-dir",
        results_dir,
    )
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    log = only_json(p.stdout)["info"]["dask_log"]
    assert log and pathlib.Path(log).parent == pathlib.Path(results_dir).resolve() / "logs"
    assert "distributed.shuffle._scheduler_plugin WARNING Shuffle" in pathlib.Path(log).read_text()


@pytest.mark.parametrize("workload", ["shuffle", "groupby"])
def test_a_cpu_run_leaks_no_semaphore_with_the_trackers_warnings_on(cli, results_dir, workload):
    """`gpuscale run shuffle --backend cpu 2>&1 | cat` ends with nothing on stderr, with the
    resource tracker's leak warnings left on (GPUSCALE_DEBUG=1; the CLI hides them otherwise):
    the 6 semaphores each worker's nanny makes (two spawn-context queues) are released as the
    cluster closes, so the tracker, which prints after the command exits, has none left."""
    p = cli(
        "run",
        workload,
        "--backend",
        "cpu",
        "--workers",
        "2",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--results-dir",
        results_dir,
        env={"GPUSCALE_DEBUG": "1"},
    )
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""


LEAK = """import multiprocessing, os, sys
from gpuscale.cli import main
try:
    main(["--help"])
except SystemExit:
    pass
lock = multiprocessing.get_context("spawn").Lock()  # never released: the tracker sees it
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.parametrize("debug, shown", [("1", True), ("", False)])
def test_the_trackers_leak_warning_shows_under_gpuscale_debug(debug, shown):
    """What makes the test above able to fail: under GPUSCALE_DEBUG=1 a leaked semaphore is
    reported by the tracker; without it the CLI hides the warning (an on-purpose stop's)."""
    import subprocess
    import sys

    from conftest import _clean_environ

    p = subprocess.run(
        [sys.executable, "-c", LEAK],
        capture_output=True,
        text=True,
        timeout=120,
        env=_clean_environ({"GPUSCALE_DEBUG": debug}),
    )
    assert p.returncode == 0, p.stderr
    assert ("leaked semaphore" in p.stderr) is shown, p.stderr


def test_an_error_still_reaches_stderr_while_dask_logs_go_to_the_file(tmp_path):
    """ERROR lines of Dask's loggers stay on stderr; WARNING lines go to the file, in this
    process and in a child that is set up as a worker's preload does it."""
    import subprocess
    import sys

    log = tmp_path / "logs" / "x.log"
    code = (
        "import logging, distributed, dask\n"
        "from gpuscale.cluster import logs\n"
        f"with logs.kept_off_stderr({str(log)!r}):\n"
        "    logging.getLogger('distributed.scheduler').warning('a warning')\n"
        "    logging.getLogger('distributed.scheduler').error('an error')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "an error" in p.stderr and "a warning" not in p.stderr
    text = log.read_text()
    assert "a warning" in text and "an error" in text


def _groups():
    """Every group of the command line, by its words after ``gpuscale`` ("" is gpuscale itself)."""
    import click

    from gpuscale.cli import cli

    return [""] + [
        name for name in cli.list_commands(None) if isinstance(cli.get_command(None, name), click.Group)
    ]


@pytest.mark.parametrize("group", _groups(), ids=lambda g: g or "gpuscale")
def test_a_bare_group_shows_its_help_and_exits_0(cli, group):
    """`gpuscale run` (any group, nothing after it): the same help `--help` prints, on stdout,
    exit 0, nothing on stderr."""
    words = group.split()
    p = cli(*words)
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert p.stderr == ""
    assert p.stdout.startswith(f"Usage: {' '.join(['gpuscale', *words])} ")
    assert p.stdout == cli(*words, "--help").stdout


def test_bare_groups_cover_the_ones_users_meet():
    assert {"", "run", "cluster", "results", "trace"} <= set(_groups())


def test_bare_group_under_dask_and_with_only_a_global_flag(cli):
    p = cli("gpuscale", module="dask")
    assert p.returncode == 0 and p.stderr == ""
    assert p.stdout.startswith("Usage: ") and "Commands:" in p.stdout and "results" in p.stdout
    p = cli("--debug")
    assert p.returncode == 0 and p.stderr == ""
    assert p.stdout == cli("--help").stdout


def test_gpuscale_help_lists_each_command_by_the_first_sentence_of_its_own_help():
    """`gpuscale --help` lists the commands from gpuscale.cli.COMMANDS, importing none of them;
    each sentence there is the one the command's own help starts with."""
    from gpuscale.cli import cli

    assert cli.list_commands(None) == sorted(COMMANDS)
    for name, (_, sentence) in COMMANDS.items():
        assert cli.get_command(None, name).get_short_help_str(limit=500) == sentence, name
    assert cli.get_command(None, "nosuch") is None


def test_the_shell_completes_the_command_names_with_their_help_as_click_cuts_it():
    import click

    from gpuscale.cli import cli

    ctx = click.Context(cli, info_name="gpuscale")
    got = [(c.value, c.help) for c in cli.shell_complete(ctx, "")]
    assert got == [(n, cli.get_command(ctx, n).get_short_help_str()) for n in cli.list_commands(ctx)]
    assert [c.value for c in cli.shell_complete(ctx, "r")] == ["results", "run"]
    assert "--debug" in [c.value for c in cli.shell_complete(ctx, "--")]


def imported_by(cwd, *args) -> set[str]:
    """The modules ``gpuscale *args`` imported, in a fresh process."""
    from conftest import fresh_gpuscale

    return fresh_gpuscale(cwd, *args)[1]


COMMAND_MODULES = {f"gpuscale.cli.{path.partition(':')[0]}" for path, _ in COMMANDS.values()} | {
    "gpuscale.cli.run_callback",
    "gpuscale.cli.explain_callback",
}
"""Every module of gpuscale.cli that holds a command or what it does."""


@pytest.mark.parametrize(
    "args, loaded, not_loaded",
    [
        pytest.param(["--help"], set(), COMMAND_MODULES | {"distributed", "gpuscale.api"}, id="gpuscale"),
        pytest.param(
            ["run", "--help"], {"gpuscale.cli.run"}, COMMAND_MODULES - {"gpuscale.cli.run"}, id="run"
        ),
        pytest.param(
            ["run", "svd", "--help"],
            {"gpuscale.cli.run"},
            {"gpuscale.cli.run_callback", "gpuscale.api"},
            id="svd",
        ),
        pytest.param(
            ["explain", "svd", "--help"],
            {"gpuscale.cli.explain"},
            {"gpuscale.cli.explain_callback", "gpuscale.api"},
            id="explain-svd",
        ),
        pytest.param(
            ["results", "list", "."], {"gpuscale.cli.results"}, {"gpuscale.cli.run", "pandas"}, id="list"
        ),
    ],
)
def test_a_command_imports_its_own_module_and_its_help_none_of_its_work(tmp_path, args, loaded, not_loaded):
    """A command's module is imported when the command runs or shows its help, no other
    command's; `gpuscale --help` imports none, and the help of `run` / `explain` imports none
    of the cluster machinery their work needs."""
    imported = imported_by(tmp_path, *args)
    assert loaded <= imported
    assert not imported & not_loaded, sorted(imported & not_loaded)


def _explained(cli, *args):
    p = cli("explain", *args, "--json")
    assert p.returncode == 0, p.stderr
    return [
        (f"{scope}.{name}", e)
        for scope, items in only_json(p.stdout)["explained"].items()
        for name, e in items.items()
    ]


def test_explain_at_80_columns_is_one_line_per_knob(cli):
    """`gpuscale explain svd --backend cpu` in an 80-column terminal: each knob on one line with
    its value and source, no name split across lines, nothing wider than 80; rules only on
    --rules."""
    knobs = _explained(cli, "svd", "--backend", "cpu")
    assert len(knobs) > 10
    p = cli("explain", "svd", "--backend", "cpu", env={"COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    from gpuscale.records.report import _fmt_value

    for name, e in knobs:
        (line,) = [ln for ln in lines if ln.split()[:1] == [name]]  # once, whole, at a line's start
        assert line.split()[-1] == str(e["source"]).split()[-1], line
        assert " ".join(_fmt_value(e["value"]).split()) in " ".join(line.split()), line
    rules = [" ".join(e["rule"].split()) for _, e in knobs if len(e.get("rule") or "") > 40]
    assert rules and not [r for r in rules if r in " ".join(p.stdout.split())]
    assert "--rules" in p.stdout  # it says where the rules are


def test_explain_rules_at_80_columns_keep_every_name_whole(cli):
    knobs = _explained(cli, "svd", "--backend", "cpu")
    p = cli("explain", "svd", "--backend", "cpu", "--rules", env={"COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    text = " ".join(p.stdout.split())
    for name, e in knobs:
        assert [ln for ln in lines if ln.split()[:1] == [name]], name  # its value line
        if e.get("rule"):
            assert name in [ln.strip() for ln in lines], name  # the line that heads its rule
            assert " ".join(e["rule"].split()) in text, name


def test_help_shows_a_commands_or_a_workloads_help_and_names_what_exists(cli):
    p = cli("help", "svd")
    assert p.returncode == 0 and p.stdout.startswith("Usage: gpuscale run svd [OPTIONS]")
    assert "--rows" in p.stdout
    p = cli("help", "results", "compare")
    assert p.returncode == 0 and p.stdout.startswith("Usage: gpuscale results compare")
    p = cli("help")
    assert p.returncode == 0 and "Commands" in p.stdout and "help" in p.stdout
    p = cli("help", "nope")
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert p.stderr.startswith("gpuscale: error: no command or workload named 'nope'; commands: ")
    p = cli("helpp")
    assert (
        p.returncode == 2 and p.stderr == "gpuscale: error: No such command 'helpp'; see `gpuscale --help`\n"
    )


def test_a_dashboard_port_another_program_holds_is_one_line(cli, results_dir):
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        p = cli("run", "svd", "--rows", "1000", "--cols", "10", "--repeat", "1", "--warmup", "0",
                "--dashboard-address", f"127.0.0.1:{port}", "--results-dir", results_dir)  # fmt: skip
    assert p.returncode == 0, p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith(f"gpuscale: warning: dashboard port {port} is in use"), line
    assert "the dashboard is at http://127.0.0.1:" in line


def test_a_cluster_of_other_package_versions_is_one_line(cli, results_dir, tmp_path):
    """A running scheduler and worker whose environment has another version of a package
    distributed compares (lz4, from a folder on their PYTHONPATH): distributed's table of
    versions becomes one line naming the package, and the run goes on."""
    import json
    import os
    import subprocess
    import sys
    import time

    other = tmp_path / "their-site" / "lz4-0.0.1.dist-info"
    other.mkdir(parents=True)
    (other / "METADATA").write_text("Metadata-Version: 2.1\nName: lz4\nVersion: 0.0.1\n")
    env = {**os.environ, "PYTHONPATH": str(other.parent)}
    sched_file = tmp_path / "scheduler.json"
    dask = [sys.executable, "-m", "dask"]
    procs = [
        subprocess.Popen(
            [
                *dask,
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(sched_file),
            ],
            env=env,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(sched_file.read_text())["address"]
        procs.append(
            subprocess.Popen(
                [*dask, "worker", address, "--nthreads", "1", "--no-dashboard"],
                env=env,
                stderr=subprocess.DEVNULL,
            )
        )
        p = cli(
            "run",
            "svd",
            "--rows",
            "1000",
            "--cols",
            "10",
            "--repeat",
            "1",
            "--warmup",
            "0",
            "--scheduler",
            address,
            "--results-dir",
            results_dir,
            timeout=180,
        )
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
    assert p.returncode == 0, p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith("gpuscale: warning: the cluster's versions differ"), line
    assert "lz4 None here, 0.0.1 on the cluster" in line, line
