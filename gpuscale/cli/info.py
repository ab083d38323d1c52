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
    probed = [(fam, *fam.probe()) for fam in backends.families()]
    fams = [
        {"name": f.name, "names": list(f.names), "usable": ok, "why": why, "description": f.description}
        for f, ok, why in probed
    ]
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
