"""Flags typed from the parameter models (INTEGER, FLOAT, choices), and ``gpuscale run --help``
listing the workloads and the shared flags; through the real command line."""

from __future__ import annotations

import json
import re

import pytest

from gpuscale import workloads

WIDE = {"COLUMNS": "200"}
SHARED = (
    "--backend",
    "--protocol",
    "--profile",
    "--scheduler",
    "--workers",
    "--threads-per-worker",
    "--memory-limit",
    "--device-memory-limit",
    "--device-spill",
    "--gpus",
    "--nvlink",
    "--infiniband",
    "--rmm-pool-size",
    "--dashboard-address",
    "--host",
    "--security",
    "--deploy",
    "--ssh-hosts",
    "--slurm-jobs",
    "--credentials",
    "--trust-cluster-files",
    "--message-interval",
    "--worker-ttl",
    "--processes",
    "--gather",
    "--scheduler-file",
    "--repeat",
    "--target-error",
    "--max-repeats",
    "--max-time",
    "--warmup",
    "--results-dir",
    "--trace",
    "--no-memory-check",
    "--strict-backend",
    "--in-cluster",
    "--bandwidth-probe",
    "--dashboard",
    "--json",
)


def options(help_text: str) -> dict[str, str]:
    """``--flag`` -> what follows it on its help line (the metavar, or '' for a switch)."""
    out = {}
    for line in help_text.splitlines():
        m = re.match(r"^\s{2}(--[a-z-]+)(?: / --[a-z-]+)?(?: (\S+))?", line)
        if m:
            out[m.group(1)] = m.group(2) or ""
    return out


def section(help_text: str, title: str) -> str:
    start = help_text.index(title)
    rest = help_text[start + len(title) :]
    end = re.search(r"\n\n\S", rest)
    return rest[: end.start()] if end else rest


def panels(help_text: str) -> dict[str, str]:
    """``--help``'s sections: heading -> its text."""
    parts = re.split(r"^(\S[^\n]*):\n", help_text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def shared_flags(help_text: str) -> list[str]:
    """The flags of every section ``(flags every workload takes)``, in order."""
    return [
        f
        for title, text in panels(help_text).items()
        if title.endswith("(flags every workload takes)")
        for f in options(text)
    ]


def test_run_help_lists_the_workloads_and_the_shared_flags(cli):
    p = cli("run", "--help", env=WIDE)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("Usage: gpuscale run WORKLOAD [WORKLOAD PARAMETERS] [FLAGS]")
    listed = re.findall(r"^\s{2}([a-z_]+)\s{2,}", section(p.stdout, "Workloads ("), flags=re.M)
    assert listed == workloads.names()
    flags = {
        f: v
        for title, text in panels(p.stdout).items()
        if "(flags every workload takes)" in title
        for f, v in options(text).items()
    }
    assert sorted(flags) == sorted(SHARED) and len(shared_flags(p.stdout)) == len(SHARED)
    assert (flags["--workers"], flags["--threads-per-worker"], flags["--warmup"]) == ("INTEGER",) * 3
    assert (flags["--repeat"], flags["--max-repeats"], flags["--max-time"]) == (
        "INTEGER|auto",
        "INTEGER",
        "FLOAT",
    )
    assert "TEXT" not in p.stdout
    e = cli("explain", "--help", env=WIDE)  # the same flags plan instead of run
    assert e.returncode == 0 and shared_flags(e.stdout) == shared_flags(p.stdout)


def test_every_workload_parameter_flag_is_typed_from_its_model(cli):
    expected = {
        "svd": {
            "--rows": "INTEGER",
            "--cols": "INTEGER",
            "--chunk-rows": "INTEGER",
            "--dtype": "[float64|float32]",
            "--route": "[auto|gram|cholqr2|tsqr]",
            "--condition": "FLOAT",
            "--seed": "INTEGER",
            "--compute-uv": "",
            "--validate": "[off|fast|full]",
        },
        "groupby": {"--split-out": "INTEGER|auto", "--partitions": "INTEGER", "--by": "TEXT"},
        "merge": {"--match-fraction": "FLOAT", "--right-rows": "INTEGER"},
        "reduction": {"--op": "[sum|mean|std]", "--axis": "INTEGER"},
        "lombscargle": {"--fmin": "FLOAT", "--impl": "[auto|vectorized|numba|numba-cuda|cupy]"},
    }
    metavar = {"int": "INTEGER", "float": "FLOAT", "bool": "", "text": "TEXT"}
    for name in workloads.names():
        p = cli("run", name, "--help", env=WIDE)
        assert p.returncode == 0, p.stderr
        flags = options(p.stdout)
        cls = workloads.get(name)
        for fname, field in cls.Params.model_fields.items():
            kind, values = workloads.value_kind(field.annotation)
            want = {
                "choice": "[" + "|".join(map(str, values or [])) + "]",
                "int-or-choice": "|".join(["INTEGER", *map(str, values or [])]),
            }.get(kind) or metavar[kind]
            assert flags["--" + fname.replace("_", "-")] == want, (name, fname, flags)
        for flag, want in expected.get(name, {}).items():
            assert flags[flag] == want, (name, flag, flags)
        assert flags["--workers"] == "INTEGER" and flags["--repeat"] == "INTEGER|auto"
        assert "(default: None)" not in p.stdout


def test_typed_values_reach_the_plan_converted(cli):
    p = cli(
        "explain",
        "groupby",
        "--backend",
        "cpu",
        "--rows",
        "1000",
        "--keys",
        "10",
        "--split-out",
        "2",
        "--workers",
        "1",
        "--threads-per-worker",
        "1",
        "--json",
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["params"]["rows"] == 1000 and d["choices"]["split_out"]["value"] == 2
    assert (d["cluster"]["workers"], d["cluster"]["threads_per_worker"]) == (1, 1)
    p = cli(
        "explain",
        "svd",
        "--backend",
        "cpu",
        "--rows",
        "1000",
        "--cols",
        "10",
        "--condition",
        "1e3",
        "--route",
        "gram",
        "--json",
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["params"]["condition"] == 1000.0 and d["params"]["route"] == "gram"


@pytest.mark.parametrize(
    "args, words",
    [
        (("svd", "--rows", "abc"), "svd --rows: Input should be a valid integer"),
        (
            ("svd", "--route", "qr"),
            "svd --route: Input should be 'auto', 'gram', 'cholqr2' or 'tsqr' (got 'qr')",
        ),
        (("svd", "--condition", "big"), "svd --condition: Input should be a valid number"),
        (("groupby", "--split-out", "many"), "groupby --split-out"),
        (("svd", "--workers", "two"), "gpuscale.cluster.workers (from a flag)"),
        (("svd", "--warmup", "x"), "--warmup must be a whole number, got 'x'; e.g. --warmup 3"),
        (("svd", "--warmup", "-1"), "--warmup must be >= 0, got -1; e.g. --warmup 3"),
        (("svd", "--repeat", "0"), "--repeat must be a whole number >= 1 or auto, got 0"),
        (
            ("svd", "--max-time", "soon", "--repeat", "auto"),
            "gpuscale.run.auto-repeat.max-time (from a flag)",
        ),
        (("svd", "--validate", "sometimes", "--results-dir", "res"), "--validate"),
    ],
)
def test_bad_typed_values_are_one_line(cli, args, words):
    p = cli("run" if "--validate" in args else "explain", *args)
    assert p.returncode == 2, (args, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuscale: error: ") and "; " in lines[0], p.stderr
    assert words in lines[0], lines[0]


def test_every_shared_flag_is_a_reserved_workload_parameter_name():
    """A workload parameter named like a shared flag would give its command two options of one
    name (click keeps one and warns): every shared flag's name, its ``--no-`` form included, is
    reserved for the decorator."""
    from gpuscale import config
    from gpuscale.cli.run import run_params
    from gpuscale.workloads.decorator import reserved as reserved_names

    flags = {o for p in run_params() for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}
    names = reserved_names()
    assert {o[2:].replace("-", "_") for o in flags} <= names, sorted(flags)
    # the declaration's flags are all among them: a flag declared on a setting is shared
    assert {o for s in config.FLAGS.values() for o in s.opts} <= flags


def test_workload_help_puts_its_own_parameters_first_and_groups_the_shared_flags(cli):
    """`gpuscale run svd --help`: svd's parameters in the first section, then the user's data,
    then the shared flags in named sections (run, cluster, GPU, running cluster, other hosts);
    no flag or path split at a hyphen."""
    p = cli("run", "svd", "--help", env={"COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    titles = list(panels(p.stdout))
    assert titles[0] == "Parameters of svd" and titles[1].startswith("Your data")
    own = options(panels(p.stdout)["Parameters of svd"])
    assert list(own) == ["--" + f.replace("_", "-") for f in workloads.get("svd").Params.model_fields]
    assert {
        "Run and output",
        "Backend and cluster",
        "GPU workers and UCX",
        "A cluster that is already running",
        "Clusters on other hosts (SSH, SLURM) and TLS",
    } <= set(titles)
    grouped = {f for text in list(panels(p.stdout).values())[2:] for f in options(text)}
    assert grouped == set(SHARED)
    assert "--help" in list(panels(p.stdout).values())[-1]
    assert not re.search(r"[\w.]-\n", p.stdout), "a word split at its hyphen"
    assert max(map(len, p.stdout.splitlines())) <= 80
