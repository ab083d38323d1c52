"""How this client fetches results: straight from the workers that hold them, or through the
scheduler (distributed's ``Client(direct_to_workers=...)``), set by ``cluster.gather``. See
docs/decisions.md, rules ``gather.*``.
"""

from __future__ import annotations

from ..decision import Decision
from .protocols import HERE

SETTING = "cluster.gather"


WAYS = {"direct": True, "scheduler": False, "dask": None}
"""Each way a client can gather, as distributed's ``direct_to_workers`` (None: Dask's own)."""


def choose(resolved, kind: str) -> Decision:
    """``direct``, ``scheduler`` or ``dask`` (Dask's own) for a cluster of ``kind``, with the rule."""
    setting = resolved.settings.cluster.gather
    source = resolved.sources.get(SETTING, "default")
    if setting != "auto":
        return Decision(setting, source, f"{setting}, set by you", "gather.setting", documented=True)
    if kind in HERE:
        return Decision(
            "direct",
            "rule",
            "auto: the workers run on this machine, so results come straight from the worker that "
            "holds them instead of being relayed by the scheduler (one transfer instead of two)",
            "gather.direct",
            extra={"setting": "auto"},
            documented=True,
        )
    return Decision(
        "dask",
        "rule",
        "auto: the workers may be out of this client's reach (other hosts, a running cluster): "
        "Dask's own, through the scheduler",
        "gather.dask",
        extra={"setting": "auto"},
        documented=True,
    )


def apply_client(client, way: str) -> None:
    """Set how ``client`` gathers (one of :data:`WAYS`; ``dask`` leaves it as it is)."""
    direct = WAYS[way]
    if direct is not None and client is not None:
        client.direct_to_workers = direct
