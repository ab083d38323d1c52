"""What ``gpuscale explain WORKLOAD`` does with its parsed flags: :func:`gpuscale.api.explain`,
shown as a table or one JSON object."""

from __future__ import annotations

from .. import api
from ..records import report
from .base import emit
from .options import workload_keywords

NOT_PLANNED = {
    "results_dir": "--results-dir",
    "input_path": "--input",
    "overwrite": "--overwrite",
    "validate": "--validate",
}
"""The run flags that do not change the plan (named in a note when given)."""


def explain_workload(
    cls, as_json=False, trace_dir=None, output_path=None, dashboard=False, rules=False, **kwargs
) -> None:
    """The plan of ``gpuscale run NAME`` with these flags for the workload class ``cls``."""
    unused = [flag for key, flag in NOT_PLANNED.items() if kwargs.pop(key, None) not in (None, False)]
    d = api.explain(
        cls.name, trace=trace_dir, output=output_path, dashboard=dashboard, **workload_keywords(kwargs)
    )
    if unused:
        d["notes"].append(
            f"not used by explain: {', '.join(unused)} (the plan is for generated "
            "data and does not depend on where results go)"
        )
    emit(d, as_json, lambda: report.explain_table(d, rules=rules))
