"""Every cluster decision of a set of CPU cases stays what ``tests/data/decisions.json`` holds:
its value, its source and its rule id (tests/decision_cases.py makes both, on any machine with
at least its cores)."""

from __future__ import annotations

import json
import os
import pathlib

import decision_cases as cases
import pytest

GOLDEN = json.loads((pathlib.Path(__file__).parent / "data" / "decisions.json").read_text())

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < cases.CORES, reason=f"the cases are held to {cases.CORES} cores"
)


@pytest.fixture(scope="module")
def today():
    return cases.run_held()


def _compare(got: dict, want: dict) -> list[str]:
    """What differs between two cases' decisions: a name missing or added, a value, a source,
    a rule id (one the golden file has; a decision may gain one)."""
    out = [f"{n}: missing" for n in want if n not in got] + [f"{n}: new" for n in got if n not in want]
    for name in set(got) & set(want):
        g, w = got[name], want[name]
        for key in ("value", "source", "rule_id"):
            if g[key] != w[key] and not (key == "rule_id" and w[key] is None):
                out.append(f"{name}.{key}: {g[key]!r} != {w[key]!r}")
    return out


def test_the_cases_ran_on_the_cores_they_were_held_to(today):
    assert today["machine"] == GOLDEN["machine"] == {"usable_cores": cases.CORES}


def test_explains_cluster_decisions_are_unchanged(today):
    assert [c["case"] for c in today["explain"]] == [c["case"] for c in GOLDEN["explain"]]
    for got, want in zip(today["explain"], GOLDEN["explain"]):
        assert _compare(got["decisions"], want["decisions"]) == [], want["case"]


def test_a_sessions_cluster_decisions_and_layout_are_unchanged(today):
    assert [c["case"] for c in today["sessions"]] == [c["case"] for c in GOLDEN["sessions"]]
    for got, want in zip(today["sessions"], GOLDEN["sessions"]):
        assert _compare(got["decisions"], want["decisions"]) == [], want["case"]
        assert got["layout"] == want["layout"], want["case"]
