"""``gpuscale cluster show / up / down``: a cluster spec resolved, a cluster kept up in the
foreground, a running one stopped."""

from __future__ import annotations

import json
import sys

import click

from .. import api, config
from ..cluster import security
from ..errors import UserError
from ..records import report
from ..runs import serve
from .base import CONTEXT, STOPPED_BY, Group, Panelled, emit, json_option
from .options import setting_flags, setting_option, split

for_option = click.option(
    "--for",
    "collection",
    type=click.Choice(["array", "dataframe"]),
    default=None,
    help="shape the cluster for array or DataFrame work (as `run` does per workload)",
)


@click.group(cls=Group, context_settings=CONTEXT)
def cluster():
    """Inspect cluster specs; start a cluster in the foreground and stop it."""


@cluster.command("show", cls=Panelled, context_settings=CONTEXT)
@setting_flags("cluster", "client")
@for_option
@json_option("the spec")
def cluster_show(as_json, collection, **kwargs):
    """Print the fully resolved cluster spec, starting nothing."""
    profile, settings = split(kwargs)
    resolved, selection, spec = api.configure(profile=profile, collection=collection, check=False, **settings)
    emit(
        {
            "spec": spec.model_dump(mode="json"),
            "commands": spec.commands,
            "per_host": spec.per_host,
            "backend": selection.requested,
            "family": selection.family.name,
            "reason": selection.reason,
            "settings": resolved.settings.model_dump(mode="json", by_alias=True),
            "sources": resolved.sources,
            "profile": resolved.profile,
        },
        as_json,
        lambda: report.spec_table(spec, resolved, selection),
    )


@cluster.command("up", cls=Panelled, context_settings=CONTEXT)
@setting_flags("cluster")
@for_option
@click.option(
    "--scheduler-file",
    metavar="PATH",
    help="also write Dask's scheduler file here (removed on exit); "
    "Client(scheduler_file=PATH) and `cluster down --scheduler-file` read it",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="print scheduler address, dashboard link etc. as one JSON object on the first "
    "line of stdout (messages go to stderr)",
)
def cluster_up(as_json, scheduler_file, collection, **kwargs):
    """Start the cluster `cluster show` describes and keep it up in the foreground until
    Ctrl-C, SIGTERM or `gpuscale cluster down ADDRESS`; everything started is closed on exit."""
    profile, settings = split(kwargs)
    with serve.sigterm_as_interrupt():
        with serve.up(
            profile=profile, collection=collection, scheduler_file=scheduler_file, **settings
        ) as served:
            d = served.describe()
            lines = [
                f"gpuscale cluster up: {d['cls']}, {d['workers']} worker(s), {d['threads']} "
                f"thread(s), {d['protocol']}{' + TLS' if d['tls'] else ''} ({d['family']} family)",
                f"  layout          {d['workers']} worker(s) x {d['threads_per_worker']} thread(s): "
                f"{d['layout']} (the rule `gpuscale run` applies to the same flags)",
                f"  scheduler       {d['scheduler']}",
                f"  dashboard       {d['dashboard'] or '(none: --dashboard-address is unset)'}",
                f"  warmed up       {d['warm_up_s']:.1f} s (every worker imported its libraries and "
                f"ran a first small task)",
            ]
            if d["scheduler_file"]:
                lines.append(f"  scheduler file  {d['scheduler_file']}")
            if d["credentials"]:
                lines.append(f"  credentials     {d['credentials']} (TLS; readable by you only)")
            elif d["tls"]:
                lines.append(
                    "  credentials     in this process only (TLS; give --scheduler-file to share them)"
                )
            key = "scheduler_file" if d["scheduler_file"] else "scheduler"
            down = f"--scheduler-file {d[key]}" if d["scheduler_file"] else d[key]
            lines += [
                f"  use it          gpuscale run WORKLOAD --{key.replace('_', '-')} {d[key]}  |  "
                f"gpuscale.session({key}={d[key]!r})",
                f"  stop it         Ctrl-C, or gpuscale cluster down {down}",
            ]

            def announce():  # inside the hold: a Ctrl-C from here on is the normal stop
                if as_json:
                    click.echo(json.dumps(d, default=str))
                for line in lines:
                    click.echo(line, err=as_json)
                sys.stdout.flush()

            why = serve.hold(served.session, before=announce)
            click.echo(f"gpuscale: {STOPPED_BY.get(why, why)}; closing the cluster", err=True)
    click.echo("gpuscale: cluster closed", err=True)


@cluster.command("down", context_settings=CONTEXT)
@click.argument("address", required=False)
@setting_option("scheduler_file", "read the address from this scheduler file")
@setting_option(
    "credentials", "TLS credentials for a tls:// ADDRESS (default: the file beside --scheduler-file)"
)
@click.option("--timeout", help="seconds to wait for the scheduler to answer (default 3)")
@click.option("--force", is_flag=True, help="stop it even while runs are in flight (they end with exit 4)")
@setting_option(
    "trust_cluster_files",
    "use a scheduler file / credentials that another user can change (default: the "
    "setting cluster.trust-files, false)",
)
def cluster_down(address, scheduler_file, credentials, timeout, force, trust_cluster_files):
    """Stop the scheduler at ADDRESS and its workers (e.g. one `cluster up` started, which
    then exits 0); refused (exit 2) while other clients hold tasks there, unless --force."""
    if (address is None) == (scheduler_file is None):
        raise UserError(
            "give the scheduler ADDRESS or --scheduler-file PATH (exactly one)",
            "e.g. gpuscale cluster down tcp://127.0.0.1:8786",
        )
    t = serve.DOWN_TIMEOUT_S
    if timeout is not None:
        try:
            t = float(timeout)
        except ValueError:
            t = -1.0
        if not t > 0:
            raise UserError(
                f"--timeout must be a positive number of seconds, got {timeout!r}", "e.g. --timeout 5"
            )
    if trust_cluster_files is None:
        trust_cluster_files = config.resolve().settings.cluster.trust_files
    if scheduler_file is not None:
        address = serve.address_from_file(scheduler_file, trusted=trust_cluster_files)
        if credentials is None:
            near = security.beside(scheduler_file)
            credentials = near if near.exists() else None
    d = serve.down(address, timeout_s=t, force=force, credentials=credentials, trusted=trust_cluster_files)
    busy = d["in_flight"]
    cut = (
        f" (--force: {len(busy['clients'])} client(s) holding {busy['tasks']} task(s) were cut off)"
        if busy["clients"] or busy["processing"]
        else ""
    )
    click.echo(f"gpuscale: stopped the scheduler at {d['scheduler']} and its {d['workers']} worker(s){cut}")
