"""An existing scheduler, named by its address or by Dask's scheduler file: connect, never
start or stop workers."""
from __future__ import annotations

import json
import pathlib

from ..choices import choice
from ..errors import UserError
from . import ClusterSpec, protocols, rmm_choice


def address_from_file(path) -> str:
    """The scheduler address in Dask's scheduler file (``dask scheduler --scheduler-file``,
    ``gpuscale cluster up --scheduler-file``)."""
    p = pathlib.Path(path).expanduser()
    try:
        address = json.loads(p.read_text())["address"]
    except FileNotFoundError:
        raise UserError(f"scheduler file {path} does not exist",
                        "give the --scheduler-file that `gpuscale cluster up` wrote (is it still running?)") from None
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"scheduler file {path} is not a Dask scheduler file (no 'address')",
                        "give the file `gpuscale cluster up --scheduler-file` or `dask scheduler` wrote") from None
    return str(address)


def spec(resolved, family, collection, proto) -> ClusterSpec:
    settings, src = resolved.settings, resolved.sources
    notes = ["workers, threads and memory are whatever the running cluster has"]
    if settings.scheduler_file:
        if settings.scheduler:
            raise UserError(f"both a scheduler address ({settings.scheduler}, from {src.get('scheduler')}) and a "
                            f"scheduler file ({settings.scheduler_file}, from {src.get('scheduler-file')}) were given",
                            "give one: --scheduler ADDRESS or --scheduler-file PATH")
        address = address_from_file(settings.scheduler_file)
        notes.append(f"address read from the scheduler file {settings.scheduler_file}")
    else:
        address = settings.scheduler
    if "://" not in address:
        address = f"{proto.name}://{address}"
    used = protocols.of_address(address)
    if used.name == "tls":
        used = protocols.get("tcp")  # TLS over TCP sockets: the transport is tcp
    theirs = choice(None, "cluster", f"whatever the running cluster at {address} has")
    how = "scheduler file" if settings.scheduler_file else "scheduler address"
    choices = {
        "protocol": choice(used.name, how if used.name != settings.protocol
                           else src.get("protocol", "default")),
        "transports": used.transports_choice(settings.cluster.ucx, {}, src),
        "workers": theirs, "threads_per_worker": dict(theirs), "memory_limit": dict(theirs),
        "rmm_pool_size": rmm_choice(resolved, family),
    }
    return ClusterSpec(kind="existing", cls="distributed.Client (existing scheduler)",
                       family=family.name, protocol=used.name, scheduler=address,
                       connect_timeout=settings.cluster.connect_timeout, notes=notes,
                       kwargs={"address": address, "timeout": settings.cluster.connect_timeout},
                       choices=choices)


def start(spec: ClusterSpec, security=None):
    from distributed import Client
    from . import security as tls
    kwargs = dict(spec.kwargs)
    if spec.security == "tls":
        kwargs["security"] = security or tls.load(spec.credentials)
    try:
        client = Client(**kwargs)
    except (OSError, TimeoutError) as e:
        hint = "" if spec.security == "tls" else (" (a `gpuscale cluster up` scheduler speaks TLS: give its "
                                                  "tls:// address with --credentials, or --scheduler-file)")
        raise UserError(f"no scheduler answered at {spec.scheduler} within "
                        f"{spec.connect_timeout:g} s ({type(e).__name__}){hint}",
                        "start one (`dask scheduler`) or fix --scheduler / the profile's address") from None
    return None, client
