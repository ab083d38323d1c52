"""An existing scheduler: connect, never start or stop workers."""
from __future__ import annotations

from ..errors import UserError
from . import ClusterSpec


def plan(settings, family, collection, proto) -> ClusterSpec:
    address = settings.scheduler
    if "://" not in address:
        address = f"{proto.name}://{address}"
    return ClusterSpec(kind="existing", cls="distributed.Client (existing scheduler)",
                       family=family.name, protocol=address.split("://", 1)[0], scheduler=address,
                       connect_timeout=settings.cluster.connect_timeout,
                       notes=["workers, threads and memory are whatever the running cluster has"],
                       kwargs={"address": address, "timeout": settings.cluster.connect_timeout})


def start(spec: ClusterSpec):
    from distributed import Client
    try:
        client = Client(**spec.kwargs)
    except (OSError, TimeoutError) as e:
        raise UserError(f"no scheduler answered at {spec.scheduler} within "
                        f"{spec.connect_timeout:g} s ({type(e).__name__})",
                        "start one (`dask scheduler`) or fix --scheduler / the profile's address") from None
    return None, client
