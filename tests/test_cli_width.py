"""Every table the CLI prints reads whole in an 80-column terminal: no line wider than the
terminal, no ellipsis, and every record id, workload name, backend, median and size the user
needs appears whole (on one line), from real runs on a real CPU cluster."""

from __future__ import annotations

import json
import re

import pytest
from rich.console import Console

from gpuscale.records import compare, report, results

NARROW = {"COLUMNS": "80"}
ROWS = (200, 2000)  # rows=200 and rows=2000 must not look alike


@pytest.fixture(scope="module")
def sides(cpu_session, tmp_path_factory):
    """Two results folders A and B (each svd at rows=200 and rows=2000), deep enough that a
    record's path is wider than the terminal."""
    base = tmp_path_factory.mktemp("width") / "a-results-folder-whose-name-is-long" / "under-another-one"
    for side in ("A", "B"):
        for rows in ROWS:
            cpu_session.run("svd", rows=rows, cols=10, repeat=3, warmup=0, results_dir=str(base / side))
    return {side: base / side for side in ("A", "B")}


def reads_whole(text: str, width: int = 80) -> list[str]:
    """The lines, after checking that none is wider than ``width`` and nothing was cut."""
    lines = text.splitlines()
    assert lines and max(map(len, lines)) <= width, max(lines, key=len)
    assert "…" not in text and "..." not in text.replace(" .. ", "")
    return lines


def on_a_line(lines: list[str], *values: str) -> str:
    """The line that holds each value as a whole word (not the start of a longer one)."""
    pats = [re.compile(rf"(?<![\w.=-]){re.escape(v)}(?![\w.=])") for v in values]
    found = [ln for ln in lines if all(p.search(ln) for p in pats)]
    assert found, f"no line holds {values} whole:\n" + "\n".join(lines)
    return found[0]


def file_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def test_results_list_names_every_record_by_a_whole_id_and_size(cli, sides):
    p = cli("results", "list", sides["A"], env=NARROW)
    assert p.returncode == 0, p.stderr
    lines = reads_whole(p.stdout)
    for r in results.find(sides["A"]):
        row = on_a_line(lines, results.short_id(r), r.workload, r.backend, report._fmt_s(r.median_s))
        size = lines[lines.index(row) : lines.index(row) + 3]  # the row wraps its params between words
        on_a_line(size, f"rows={r.params['rows']},")


def test_a_record_id_from_the_list_shows_its_run_and_full_path(cli, sides):
    r = results.find(sides["A"])[0]
    p = cli("results", "show", results.short_id(r), "--results-dir", sides["A"], env=NARROW)
    assert p.returncode == 0, p.stderr
    lines = reads_whole(p.stdout)
    assert file_name(r.path) in p.stdout and str(sides["A"]) in "".join(ln.strip(" │") for ln in lines)
    shown = json.loads(cli("results", "show", r.id[:6], "--results-dir", sides["A"], "--json").stdout)
    assert shown["id"] == r.id and shown["path"] == r.path
    b = next(x for x in results.find(sides["B"]) if x.params == r.params)
    c = cli(
        "results",
        "compare",
        results.short_id(r),
        results.short_id(b),
        "--results-dir",
        sides["A"].parent,
        "--json",
    )
    assert c.returncode == 0, c.stderr
    case = json.loads(c.stdout)["cases"][0]
    assert (case["a_record"], case["b_record"]) == (r.path, b.path)


def test_an_unknown_record_id_is_one_line_naming_where_ids_are_listed(cli, sides):
    p = cli("results", "show", "feedfacecafe", "--results-dir", sides["A"])
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "'feedfacecafe' is neither a path nor the id of a record" in p.stderr
    assert "gpuscale results list" in p.stderr


def test_results_compare_keeps_sizes_medians_and_ratios_whole(cli, sides):
    p = cli("results", "compare", sides["A"], sides["B"], env=NARROW)
    assert p.returncode == 0, p.stderr
    lines = reads_whole(p.stdout)
    c = json.loads(cli("results", "compare", sides["A"], sides["B"], "--json").stdout)
    assert sorted(x["params"]["rows"] for x in c["cases"]) == list(ROWS)
    for x in c["cases"]:
        row = on_a_line(
            lines,
            x["workload"],
            report._fmt_s(x["a_median_s"]),
            report._fmt_s(x["b_median_s"]),
            f"{x['ratio']:.3f}",
            x["verdict"],
        )
        on_a_line(lines[lines.index(row) : lines.index(row) + 3], f"rows={x['params']['rows']},")


def test_run_summary_shows_the_record_id_and_file_whole(cli, sides):
    p = cli(
        "run",
        "svd",
        "--backend",
        "cpu",
        "--rows",
        "2000",
        "--cols",
        "10",
        "--repeat",
        "2",
        "--warmup",
        "0",
        "--workers",
        "1",
        "--results-dir",
        sides["A"] / "run",
        env=NARROW,
    )
    assert p.returncode == 0, p.stderr
    lines = reads_whole(p.stdout)
    (r,) = results.find(sides["A"] / "run")
    on_a_line(lines, file_name(r.path))
    on_a_line(lines, results.short_id(r))
    on_a_line(lines, report._fmt_s(r.median_s))
    on_a_line(lines, "rows=2000,")


def test_explain_shows_every_knob_and_param_whole(cli):
    p = cli("explain", "svd", "--backend", "cpu", env=NARROW)
    assert p.returncode == 0, p.stderr
    lines = reads_whole(p.stdout)
    d = json.loads(cli("explain", "svd", "--backend", "cpu", "--json").stdout)
    for name, value in d["params"].items():
        on_a_line(lines, f"{name}={value}")
    for scope, items in d["explained"].items():
        for name in items:
            assert [ln for ln in lines if ln.split()[:1] == [f"{scope}.{name}"]], name


def test_workloads_shows_every_name_flag_and_choice_whole(cli):
    p = cli("workloads", env=NARROW)
    assert p.returncode == 0, p.stderr
    lines = reads_whole(p.stdout)
    for w in json.loads(cli("workloads", "--json").stdout):
        on_a_line(lines, w["name"])
        for flag, v in w["params"].items():
            on_a_line(lines, f"--{flag}", f"({v['default']})")
            if v.get("choices"):
                on_a_line(lines, "{" + "|".join(map(str, v["choices"])) + "}:")


@pytest.mark.parametrize("width", [40, 60, 100, 180])
def test_tables_cut_nothing_at_any_width(sides, width):
    """Narrower than the words side by side: one ``header: value`` line each; wider: more
    columns (the record's path)."""
    recs = results.find(sides["A"], sides["B"])
    c = compare.compare(sides["A"], sides["B"])
    listed = report.records_table(recs, "records", sides["A"].parent)
    for table in (listed, report.compare_table(c), report.result_table(recs[0])):
        console = Console(width=width, record=True, color_system=None)
        console.print(table)
        lines = reads_whole(console.export_text(), width)
        for r in recs:
            if table.title == "records":
                on_a_line(lines, results.short_id(r))
                if width >= 180:
                    on_a_line(lines, file_name(r.path))


def test_a_parameter_at_its_default_is_shown_where_it_tells_rows_apart():
    """Tables name a record's parameters that are not at their defaults, and also those that
    differ between its rows: rows=200000 (svd's default) beside rows=2000 is named too."""
    from gpuscale.records.table import brief_params, varying

    rows = [{"rows": 200_000, "cols": 100, "seed": 0}, {"rows": 2000, "cols": 100, "seed": 0}]
    assert varying(rows) == {"rows"}
    assert [brief_params("svd", p, varying(rows)) for p in rows] == ["rows=200000", "rows=2000"]
    assert brief_params("svd", rows[0]) == "defaults"
    assert brief_params("not-installed", rows[1]) == "rows=2000, cols=100"


def test_an_empty_results_folder_says_how_to_make_a_record(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    p = cli("results", "list", tmp_path / "empty", env=NARROW)
    assert p.returncode == 0, p.stderr
    said = " ".join(p.stdout.split())
    assert said == f"no records in {tmp_path / 'empty'} yet (`gpuscale run WORKLOAD` writes one there)"


def test_a_run_summary_keeps_each_knob_name_whole_and_says_a_rule_once(cli):
    """At 80 columns a knob's name is on one line, not cut inside a word, and a rule that chose
    two knobs is written out once (the second says whose it is)."""
    p = cli("run", "groupby", "--backend", "cpu", "--rows", "200000", "--keys", "1000", "--repeat", "1",
            "--warmup", "0", "--workers", "2", "--threads-per-worker", "1", env=NARROW)  # fmt: skip
    assert p.returncode == 0, p.stderr
    lines = reads_whole(p.stdout)
    for name in ("groupby_strategy", "split_out", "partitions", "generate / check"):
        on_a_line(lines, name)
    assert on_a_line(lines, "split_out").split("│")[2].strip().endswith("(rule: as groupby_strategy)")
    flat = re.sub(r"[│\s]+", " ", p.stdout)  # the table's cells as one text (wrapped rows joined)
    assert flat.count("per-worker beat the tree") == 1
