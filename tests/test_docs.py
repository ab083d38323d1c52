"""The documentation site builds, warnings as errors, and its reference covers the code.

The build is ``sphinx-build -W --keep-going -b html docs OUT`` (docs/conf.py): a warning fails it,
among them an internal link that resolves nowhere (MyST's ``myst.xref_missing``: a page, a heading
anchor), a bad directive, or reST that does not parse in a docstring or a CLI help text. Links to
the outside world are not checked (no network in CI).
"""

from __future__ import annotations

import html
import json
import pathlib
import re
import subprocess
import sys

import pytest
from conftest import _clean_environ

from gpuscale import config, errors
from gpuscale.records.results import Result

REPO = pathlib.Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"

WALK_CLI = r"""
import json, click
from gpuscale.cli import cli

def walk(cmd, path):
    ctx = click.Context(cmd, info_name=path[-1])
    opts = [p for p in cmd.params if isinstance(p, click.Option)]
    options = sorted(o for p in opts for o in (*p.opts, *p.secondary_opts))
    yield {"path": " ".join(path), "options": options}
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            yield from walk(cmd.get_command(ctx, name), [*path, name])

print(json.dumps(list(walk(cli, ["gpuscale"]))))
"""


def text_of(page: pathlib.Path) -> str:
    """A built page's text: tags dropped, entities decoded, whitespace runs made one space."""
    t = page.read_text()
    t = t.split('<article class="bd-article">', 1)[-1].split("</article>", 1)[0]
    t = re.sub(r"<[^>]+>", "", t)
    return " ".join(html.unescape(t).split())


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("docs-html")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "-d",
            str(out / ".doctrees"),
            str(DOCS),
            str(out),
        ],
        cwd=str(REPO),
        env=_clean_environ(),
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert p.returncode == 0, f"sphinx-build failed:\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return out


def test_the_site_builds_without_a_warning(built):
    for page in (
        "index",
        "reference/cli",
        "reference/python",
        "reference/settings",
        "reference/records",
        "reference/exit-codes",
        "benchmarks/index",
        "benchmarks/user-queries",
        "guide/own-data",
    ):
        assert (built / f"{page}.html").is_file(), page


def fence_problem(text: str) -> str | None:
    """What is wrong with a page's code fences, naming the line, else None. A block opens with
    three or more backticks or tildes and the name of its language (```` ```bash ````, or a
    directive: ```` ```{toctree} ````) and closes with a line of the same character, at least as
    many, and nothing else. A fence with no language where a block would open is a closing one
    left over, and an opening one inside a block of the same fence length is one left open
    before it: either turns the rest of the page inside out."""
    opened: tuple[str, int, int] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*(`{3,}|~{3,})(.*)$", line)
        if not m:
            continue
        fence, rest = m.group(1), m.group(2).strip()
        if opened is None:
            if not rest:
                return f"line {n}: a fence with no language opens a block (a closing fence left over?)"
            opened = (fence[0], len(fence), n)
        elif fence[0] == opened[0] and len(fence) >= opened[1] and not rest:
            opened = None
        elif fence[0] == opened[0] and len(fence) == opened[1]:
            return f"line {n}: a block opens inside the block of line {opened[2]} (left open?)"
    return f"line {opened[2]}: a block never closed" if opened else None


def test_the_fence_check_finds_a_block_left_open_or_a_fence_left_over():
    assert fence_problem("```bash\nx\n```\n\n```python\ny\n```\n") is None
    assert fence_problem("````md\n```python\ninner\n```\n````\n") is None
    assert fence_problem("```bash\nx\n```\n\n## Next\n\n```python\ny\n") == "line 7: a block never closed"
    # a page with a fence lost before its second block (the closing one left over opens a block)
    lost = "```bash\na\n```\n\ntext\n\nb\n```\n\n## Python\n\n```python\nc\n```\n"
    assert fence_problem(lost).startswith("line 8: a fence with no language opens a block")


def test_every_markdown_page_closes_its_code_blocks():
    """A block left open turns the rest of the page into code, or (as on the built site) runs the
    next block's commands into the text; Sphinx does not warn."""
    pages = [REPO / "README.md", REPO / "workflows" / "README.md"]
    pages += [p for p in DOCS.rglob("*.md") if "_build" not in p.parts]
    bad = {str(p.relative_to(REPO)): why for p in pages if (why := fence_problem(p.read_text())) is not None}
    assert not bad, f"code fences that turn a page inside out: {bad}"


def test_no_built_page_shows_a_fence_as_text(built):
    shown = [
        str(p.relative_to(built))
        for p in built.rglob("*.html")
        if "_static" not in p.parts and "```" in html.unescape(re.sub(r"<[^>]+>", "", p.read_text()))
    ]
    assert not shown, f"pages whose text shows a code fence: {shown}"


def test_every_page_is_in_a_toctree(built):
    """Sphinx warns about a page outside every toctree too; here: each Markdown page was built."""
    pages = {
        p.relative_to(DOCS).with_suffix("").as_posix() for p in DOCS.rglob("*.md") if "_build" not in p.parts
    }
    missing = {p for p in pages if not (built / f"{p}.html").is_file()}
    assert not missing, missing


def test_cli_reference_names_every_command_and_option(built):
    """Every command of the click group, walked recursively in a fresh process (the workloads
    registered there, none from other tests), with every option, is in the CLI reference."""
    p = subprocess.run(
        [sys.executable, "-c", WALK_CLI],
        cwd=str(REPO),
        env=_clean_environ(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    commands = json.loads(p.stdout)
    assert {"gpuscale run svd", "gpuscale cluster up", "gpuscale results compare"} <= {
        c["path"] for c in commands
    }
    page = text_of(built / "reference" / "cli.html")
    for c in commands:
        assert f"{c['path']} [OPTIONS]" in page, f"the CLI reference has no usage of `{c['path']}`"
        section = page.split(f"{c['path']} [OPTIONS]", 1)[1]
        for opt in c["options"]:
            assert opt in section, f"the CLI reference has no {opt} for `{c['path']}`"


def test_settings_reference_lists_every_setting(built):
    """One row per setting of the pydantic models (config.Settings), with its default and
    environment variable: the table is generated from the models at build time."""
    page = text_of(built / "reference" / "settings.html")
    keys = config.schema_keys()
    assert {
        "backend",
        "cluster.workers",
        "cluster.ssh.hosts",
        "run.auto-repeat.target-error",
        "session.host-collections",
    } <= keys
    for key in sorted(keys):
        assert key in page, f"the settings reference has no {key}"
        env = "DASK_GPUSCALE__" + key.replace("-", "_").replace(".", "__").upper()
        assert env in page, f"the settings reference has no {env}"
    assert keys == config.default_keys()  # the package defaults declare the same settings
    # each setting's keyword and flag, as the declaration gives them
    for s in config.SETTINGS:
        if s.keyword:
            assert f"keyword {s.keyword}" in page, s.key
        if s.opts:
            assert f"flag {'/'.join(s.opts)}" in page, s.key


def test_every_setting_has_a_description():
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import gpuscale_docs
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    rows = list(gpuscale_docs.settings_rows(config.Settings))
    assert {k for k, _ in rows} == config.schema_keys()
    assert [k for k, f in rows if not (f.description or "").strip()] == []
    assert [k for k, f in Result.model_fields.items() if not (f.description or "").strip()] == []


def test_record_reference_lists_every_field(built):
    page = text_of(built / "reference" / "records.html")
    for name, field in Result.model_fields.items():
        assert (field.alias or name) in page, name


def test_exit_codes_page_lists_every_code():
    text = (DOCS / "reference" / "exit-codes.md").read_text()
    for code in errors.EXIT_CODES:
        assert f"\n| {code} |" in text, code


def test_every_stored_result_is_used():
    """Each file under docs/bench-* is named (its folder and file name) by a page, README, the code,
    a test or a workflow: a result nothing reads any more is dropped (git keeps it)."""
    texts = [REPO / "README.md", *DOCS.rglob("*.md"), *DOCS.glob("_ext/*.py")]
    for folder in ("gpuscale", "workflows", "tests"):
        texts += [p for p in (REPO / folder).rglob("*.py")]
    corpus = "\n".join(p.read_text() for p in texts if "_build" not in p.parts)
    for stored in sorted(p for d in DOCS.glob("bench-*") for p in d.rglob("*") if p.is_file()):
        rel = stored.relative_to(DOCS)
        named = f"{rel.parent.name}/{rel.name}" if len(rel.parts) > 2 else rel.as_posix()
        assert named in corpus, f"docs/{rel}: no page, test or workflow uses it"


def test_benchmark_tables_come_from_the_stored_results(built):
    """The user-query page shows what workflows/user_queries.py's tables() prints for its stored
    JSON; the shape grid's cells are computed from the stored grid, not copied."""
    sys.path.insert(0, str(REPO / "workflows"))
    try:
        import user_queries
    finally:
        sys.path.remove(str(REPO / "workflows"))
    stored = json.loads((DOCS / "bench-h200" / "user-queries" / "h200-sf10-1e7-all-sides.json").read_text())
    page = text_of(built / "benchmarks" / "user-queries.html")
    printed = user_queries.tables(stored)[0]
    source = (DOCS / "benchmarks" / "user-queries.md").read_text()
    for line in printed.strip().splitlines():
        assert " ".join(html.unescape(line).split()) in page, line
    rows = [line for line in printed.splitlines() if line.strip().startswith(("q1 ", "j1 ", "t1 "))]
    assert len(rows) == 3 and not any(r in source for r in rows)  # built from the file, not copied
    grid = json.loads((DOCS / "bench-h200" / "fixed-cost" / "shape-grid.json").read_text())["grid"]
    ours = [r for r in grid if r["side"] == "gpuscale default"]
    page = text_of(built / "benchmarks" / "dataframe.html")
    assert len(ours) == 12
    source = (DOCS / "benchmarks" / "dataframe.md").read_text()
    for r in ours:
        assert f"{r['rows']:,} {r['keys']:,} {r['partitions']} {r['plan']} {r['median_s']:.4f}" in page, r
        assert f"{r['median_s']:.4f}" not in source, r


def test_notebooks_are_pages_of_the_site(built):
    """Each notebook under notebooks/ is rendered (not executed) as a page the guide links."""
    notebooks = sorted((REPO / "notebooks").glob("*.ipynb"))
    assert notebooks
    guide = (DOCS / "guide" / "notebooks.md").read_text()
    for nb in notebooks:
        page = built / "notebooks" / f"{nb.stem}.html"
        assert page.is_file(), f"{nb.name} is not a page of the site"
        first = json.loads(nb.read_text())["cells"][0]
        heading = "".join(first["source"]).splitlines()[0].lstrip("# ").replace("`", "").strip()
        assert " ".join(html.unescape(heading).split()) in text_of(page), nb.name
        assert f"notebooks/{nb.stem}" in guide, f"docs/guide/notebooks.md does not link {nb.name}"
