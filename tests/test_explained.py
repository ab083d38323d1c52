"""explain's output and the record's ``explained`` section stay what they were while the
layers that make the choices change (see tests/explained_cases.py): the cluster layer records
its own choices and explain lays them out."""
from __future__ import annotations

import json
import pathlib

import pytest

import explained_cases as cases
from gpuscale import machine

GOLDEN = json.loads((pathlib.Path(__file__).parent / "data" / "explained.json").read_text())
CORES = 2
"""The golden file was made on a machine with this many usable cores (CI's): the thread
layout in it depends on them."""

pytestmark = pytest.mark.skipif(machine.usable_cores() != CORES,
                                reason=f"the golden file's layouts are for {CORES} cores")


def _ids(items):
    return [" ".join(f"{k}={v}" for k, v in c.items()) for c in items]


@pytest.mark.parametrize("i", range(len(cases.EXPLAIN)), ids=_ids(cases.EXPLAIN))
def test_explain_unchanged(i):
    case = cases.EXPLAIN[i]
    if machine.gpus() and (case.get("backend") in ("gpu", "cupy") or "gpu" in str(case.get("profile"))):
        pytest.skip("the golden GPU plans are those of a machine without a visible GPU")
    got = json.loads(json.dumps(cases.explain_case(case), default=str))
    assert got == GOLDEN["explain"][i]


@pytest.mark.parametrize("i", range(len(cases.RUNS)), ids=_ids(cases.RUNS))
def test_record_explained_unchanged(i):
    got = json.loads(json.dumps(cases.run_case(cases.RUNS[i]), default=str))
    assert got == GOLDEN["runs"][i]
