"""An existing scheduler: connect, never start or stop workers."""
from __future__ import annotations

from ..choices import choice
from ..errors import UserError
from . import ClusterSpec, protocols, rmm_choice


def spec(resolved, family, collection, proto) -> ClusterSpec:
    settings, src = resolved.settings, resolved.sources
    address = settings.scheduler
    if "://" not in address:
        address = f"{proto.name}://{address}"
    used = protocols.of_address(address)
    theirs = choice(None, "cluster", f"whatever the running cluster at {address} has")
    choices = {
        "protocol": choice(used.name, "scheduler address" if used.name != settings.protocol
                           else src.get("protocol", "default")),
        "transports": used.transports_choice(settings.cluster.ucx, {}, src),
        "workers": theirs, "threads_per_worker": dict(theirs), "memory_limit": dict(theirs),
        "rmm_pool_size": rmm_choice(resolved, family),
    }
    return ClusterSpec(kind="existing", cls="distributed.Client (existing scheduler)",
                       family=family.name, protocol=used.name, scheduler=address,
                       connect_timeout=settings.cluster.connect_timeout,
                       notes=["workers, threads and memory are whatever the running cluster has"],
                       kwargs={"address": address, "timeout": settings.cluster.connect_timeout},
                       choices=choices)


def start(spec: ClusterSpec):
    from distributed import Client
    try:
        client = Client(**spec.kwargs)
    except (OSError, TimeoutError) as e:
        raise UserError(f"no scheduler answered at {spec.scheduler} within "
                        f"{spec.connect_timeout:g} s ({type(e).__name__})",
                        "start one (`dask scheduler`) or fix --scheduler / the profile's address") from None
    return None, client
