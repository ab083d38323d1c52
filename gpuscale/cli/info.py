"""``gpuscale info``: this machine's hardware, its optional stacks, the backends and
protocols it can use, and the versions."""

from __future__ import annotations

from typing import Any

import click

from .. import backends, machine
from ..records import report
from ..wire import protocols
from .base import CONTEXT, Panelled, emit, json_option


def gather_info() -> dict[str, Any]:
    """What ``gpuscale info`` shows, as one dict (``--json`` prints it)."""
    fams = []
    for fam in backends.families():
        ok, why = fam.probe()
        fams.append(
            {
                "name": fam.name,
                "names": list(fam.names),
                "usable": ok,
                "why": why,
                "description": fam.description,
            }
        )
    return {
        "hardware": machine.hardware(),
        "stacks": machine.stacks(),
        "backends": fams,
        "protocols": {n: protocols.get(n).available() for n in protocols.names()},
        "versions": machine.versions(),
        "gpu_dashboard": machine.gpu_dashboard(),
    }


@click.command(cls=Panelled, context_settings=CONTEXT)
@json_option("what was found")
def info(as_json):
    """CPU, memory, GPUs and NVLink, optional stacks, backends and versions."""
    data = gather_info()
    emit(data, as_json, lambda: report.info_table(data))
