"""The project speaks of gpuscale itself, never of how it was made: a line of the package, its
tests, workflows, docs or README that names a numbered or ordinal work session or a numbered
ticket fails, with its file and line, and so does a file or folder named for one. Evidence lives
in docs/decisions.md, and every rule the package cites there has its section."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FOLDERS = ("gpuscale", "tests", "workflows", "docs", "notebooks", "clusters", "docker")
FILES = ("README.md", "pyproject.toml")
SKIP = {".git", "_build", "__pycache__", ".pytest_cache"}
"""Parts of a path never read: build output and caches."""
COPIES = ("docs/notebooks/",)
"""What the docs build copies in (notebooks/ is read where it lives)."""
HISTORY = re.compile(
    r"\bsession ?\d+|\bissues? ?#?\d+|\bissue-\d+|\bpreviously\b"
    r"|\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|\w+teenth"
    r"|\w+tieth|\d+(st|nd|rd|th)|nth) (GPU |CPU )?session\b",
    re.IGNORECASE,
)
"""Words that date a line to how the project was developed. ``session`` alone is a product word."""
NAMED = re.compile(r"session[-_ ]?\d|issue[-_ ]?#?\d", re.IGNORECASE)
"""A file or folder name that dates it the same way."""


def findings(text: str) -> list[tuple[int, str]]:
    """(line number, the words found) for each line of ``text`` that names how it was made."""
    return [(n, m.group(0)) for n, line in enumerate(text.splitlines(), 1) if (m := HISTORY.search(line))]


def _paths() -> list[pathlib.Path]:
    out = [ROOT / f for f in FILES]
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            rel = path.relative_to(ROOT).as_posix()
            if not SKIP & set(path.parts) and not rel.startswith(COPIES) and path.suffix != ".pyc":
                out.append(path)
    return out


def _files() -> list[str]:
    return [p.relative_to(ROOT).as_posix() for p in _paths() if p.is_file()]


def test_no_file_or_folder_is_named_for_how_the_project_was_developed():
    named = [p.relative_to(ROOT).as_posix() for p in _paths() if NAMED.search(p.name)]
    assert not named, f"named for how the project was developed: {named}; name them for what they hold"


def test_the_pattern_catches_history_and_spares_the_product_word():
    numbered = "see the " + "ses" + "sion 12 grid"
    ticket = "as " + "iss" + "ue #7 asked"
    ordinal = "in the fourteenth GPU " + "ses" + "sion"
    text = "\n".join(["with gpuscale.session(backend='gpu') as s:", numbered, ticket, ordinal])
    assert [n for n, _ in findings(text)] == [2, 3, 4]


@pytest.mark.parametrize("rel", _files())
def test_no_file_says_how_the_project_was_developed(rel):
    try:
        text = (ROOT / rel).read_text()
    except UnicodeDecodeError:
        pytest.skip("not text")
    found = findings(text)
    assert not found, "; ".join(f"{rel}:{n}: {words!r}" for n, words in found) + (
        ": say what the code does, and put evidence in docs/decisions.md or docs/benchmarks/"
    )


CITED = re.compile(r"\brule\s+`{1,2}([a-z][a-z0-9-]*\.[a-z0-9.-]*[a-z0-9])`{1,2}")
"""A rule id as the package cites it: ``rule ``groupby.combine-copies```` (with or without quotes)."""
SECTION = re.compile(r"^(?:#+ |- )(`[a-z][a-z0-9-]*\.[a-z0-9.*-]+`(?:, `[^`]+`)*)", re.MULTILINE)


def documented_rules(markdown: str) -> set[str]:
    """The rule ids docs/decisions.md explains: those its headings and list items start with."""
    return {rule for m in SECTION.finditer(markdown) for rule in re.findall(r"`([^`]+)`", m.group(1))}


def cited_rules(text: str) -> set[str]:
    """The rule ids a source file cites beside docs/decisions.md (whitespace runs as one space)."""
    flat = " ".join(text.split())
    if "decisions.md" not in flat:
        return set()
    return set(CITED.findall(flat))


def test_the_rule_patterns_read_a_heading_and_a_wrapped_citation():
    markdown = "## Memory\n\n### `memory.block-copies`: three blocks\n- `protocol.tls`: TLS\n"
    code = '"""Blocks (see\n    docs/decisions.md, rule\n    ``memory.block-copies``)."""\n'
    assert documented_rules(markdown) == {"memory.block-copies", "protocol.tls"}
    assert cited_rules(code) == {"memory.block-copies"}


def test_every_rule_the_package_cites_has_its_section_in_decisions():
    documented = documented_rules((ROOT / "docs" / "decisions.md").read_text())
    missing = sorted(
        f"{path.relative_to(ROOT).as_posix()}: {rule}"
        for path in sorted((ROOT / "gpuscale").rglob("*.py"))
        for rule in cited_rules(path.read_text())
        if rule not in documented
    )
    assert not missing, f"rules cited without a section in docs/decisions.md: {missing}; add the section"
