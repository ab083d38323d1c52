"""Trace capture and reading: where the time of a run (or of any code) went.

One folder per capture, written into a hidden sibling and renamed into place at the end, so
a failure leaves nothing half-written:

``performance-report.html``
    Dask's own ``performance_report`` (task stream, profiles, bandwidth, system) for the window.
``trace.json``
    The window as a Chrome / Perfetto trace (``{"traceEvents": [...]}``; open it in
    ui.perfetto.dev or chrome://tracing): one process per worker, one track per worker thread
    (compute), lanes for incoming transfers and other actions (disk), and a ``gpuscale``
    process whose tracks hold the phases (prepare, generate, warmup, compute, validate, or ``user``).
    Every duration event is ``ph: "X"`` with name / ph / ts / dur / pid / tid, in microseconds
    from the start of the window; naming events are ``ph: "M"`` (name / ph / pid / tid / args).
``comm.json``
    Bytes moved and bandwidth per (source worker, destination worker), from the workers'
    transfer logs, plus the share of the wall time during which any transfer was in flight.
``summary.json``
    Schema ``gpuscale.trace`` version 1 (:class:`Summary`): the wall time split into compute /
    transfer / idle-and-overhead, top task groups, bytes moved, per-pair bandwidth, memory
    peaks per worker (host; GPU device memory on GPU workers), the phases, what ran and the
    result record's id. Written last.
``index.html``
    A static page linking the others.

Capture any code on any Client::

    from gpuscale import trace
    with trace.capture(client, "traces/run-1") as t:
        with t.phase("load"):
            ...
        with t.phase("fit"):
            ...
    t.summary.wall_s

``gpuscale run NAME --trace DIR``, ``Session.run(..., trace=DIR)`` and ``Session.trace(DIR)``
use the same object. ``gpuscale trace summarize DIR`` and ``gpuscale trace compare A B`` read
the folders back (:func:`load`, :func:`compare`).
"""

from __future__ import annotations

from .collect import Capture, capture, check_dir
from .summary import FILES, SCHEMA, SCHEMA_VERSION, Summary, compare, load

__all__ = [
    "Capture",
    "capture",
    "check_dir",
    "Summary",
    "load",
    "compare",
    "SCHEMA",
    "SCHEMA_VERSION",
    "FILES",
]
