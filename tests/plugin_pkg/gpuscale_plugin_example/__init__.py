"""An example plugin: ``y = factor * x`` for a random vector, written as plain functions with
``@gpuscale.workload`` and registered through the ``gpuscale.workloads`` entry point."""

from __future__ import annotations

import dask.array as da
from pydantic import Field

import gpuscale
from gpuscale.wire.protocols import Protocol
from gpuscale.workloads import Check


def generate(p, ctx):
    chunk = max(1, p.n // ctx.total_threads)
    ctx.choose("chunk", chunk, "rule", "n / threads")
    return da.random.default_rng(p.seed).random(p.n, chunks=chunk)


def validate(result, x, p):
    got = float(result.astype("float64").sum().compute())
    ref = p.factor * float(x.astype("float64").sum().compute())
    rel = abs(got - ref) / abs(ref) if ref else abs(got)
    return [Check("sum(y) = factor * sum(x)", rel <= 1e-12, rel, 1e-12, "relative")]


@gpuscale.workload(
    "plugin_scale",
    params={
        "n": (int, 100_000, "length of the vector"),
        "factor": Field(2.0, ge=0, description="scale factor, >= 0"),
        "seed": 0,
    },
    generate=generate,
    validate=validate,
)
def scale(x, p, ctx):
    """y = factor * x of a random vector (an example plugin)."""
    return x * p.factor


# A transport through the ``gpuscale.protocols`` entry point: distributed's own WebSocket comm,
# which gpuscale does not register itself.
ws = Protocol("ws", "WebSockets (distributed's ws comm, from the example plugin)", bind_host="127.0.0.1")
