"""Where one run's time goes, step by step: the client's steps and the run's tasks on one clock.

``runner.timed`` (what every run and benchmark times) builds the graph, persists it, waits for
the results and, where an output cannot synchronize its device in its own task, synchronizes
every worker. This script stamps each of those steps (``runner.timed(..., marks=...)``) and
lays the run's tasks from the scheduler's task stream on the same clock (one host), so the
fixed cost of a run reads as: client time, then each task (when it started after the graph
was sent, how long it ran), then the wait after the last task, then the synchronize.
``--profile`` adds the client thread's top functions (cProfile, one extra run).

    python workflows/run_timeline.py --backend gpu --gpus 0 \\
        --runs svd:rows=20000,cols=20 svd:rows=200000,cols=1000 groupby:rows=10000000,keys=1000
    python workflows/run_timeline.py --backend cpu --runs groupby:rows=100000 --rounds 3
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time

import harness
from dask.utils import key_split

import gpuscale
from gpuscale.runs import runner
from gpuscale.workloads import Context
from gpuscale.workloads import get as get_workload

STEPS = (
    ("build", "start", "built"),
    ("persist call", "built", "persisted"),
    ("wait", "persisted", "in memory"),
    ("synchronize", "in memory", "synchronized"),
)


def _echo(x):
    return x


def parse_run(text: str) -> tuple[str, dict]:
    name, _, rest = text.partition(":")
    params = {}
    for item in filter(None, rest.split(",")):
        k, _, v = item.partition("=")
        params[k] = int(v) if v.lstrip("-").isdigit() else v
    return name, params


def _tasks(client, since: float, until: float) -> list[dict]:
    out = []
    for t in client.get_task_stream(start=since):
        for ss in t.get("startstops", ()):
            if ss.get("action") == "compute" and ss["start"] >= since - 1e-3 and ss["stop"] <= until + 1e-3:
                out.append({"task": key_split(t["key"]), "start": ss["start"], "stop": ss["stop"]})
    return sorted(out, key=lambda r: r["start"])


def one_run(s, name: str, params: dict, rounds: int, profile: bool) -> dict:
    cls = get_workload(name)
    p = cls.Params(**params)
    ctx = Context(s.family, s.spec, s.client)
    wl = cls()
    wl.check(p)
    wl.plan(p, ctx)
    _, data = runner.timed(s.client, s.family, lambda: wl.load(p, ctx))

    def build():
        return wl.compute(data, p, ctx).collections

    baseline = runner.task_count(s.client)
    runs = []
    for i in range(rounds + 1):
        runner.settle(s.client, baseline)
        marks: dict = {}
        t, out = runner.timed(s.client, s.family, build, marks)
        del out
        time.sleep(0.05)  # the task stream records as the scheduler hears of each task
        tasks = _tasks(s.client, marks["start"], marks["synchronized"])
        if i:
            runs.append({"seconds": t, "marks": marks, "tasks": tasks})
    steps = {label: statistics.median(r["marks"][b] - r["marks"][a] for r in runs) for label, a, b in STEPS}
    med = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
    t0 = med["marks"]["persisted"]
    timeline = [
        {
            "task": x["task"],
            "starts_after_sent_ms": 1e3 * (x["start"] - t0),
            "runs_ms": 1e3 * (x["stop"] - x["start"]),
        }
        for x in med["tasks"]
    ]
    last = max((x["stop"] for x in med["tasks"]), default=t0)
    row = {
        "run": f"{name} " + ",".join(f"{k}={v}" for k, v in params.items()),
        "median_s": statistics.median(r["seconds"] for r in runs),
        "steps_s": steps,
        "tasks": statistics.median(len(r["tasks"]) for r in runs),
        "median_run": {
            "timeline": timeline,
            "last_task_end_to_in_memory_ms": 1e3 * (med["marks"]["in memory"] - last),
            "plan": {k: v.get("value") for k, v in ctx.choices.items()},
        },
    }
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        runner.timed(s.client, s.family, build)
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
        row["profile"] = buf.getvalue()
    return row


def submit_round_trip(client, n: int) -> float:
    ts = []
    for i in range(n + 1):
        t0 = time.perf_counter()
        client.submit(_echo, i, pure=False).result()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts[1:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_cluster(ap, "auto", gpus=True, workers=True)
    ap.add_argument(
        "--runs",
        nargs="+",
        default=["svd:rows=20000,cols=20", "groupby:rows=100000,keys=1000"],
        help="workload:param=value,... (one per run)",
    )
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--profile", action="store_true", help="add the client thread's cProfile of one run")
    ap.add_argument("--json", dest="json_path", default=None)
    a = ap.parse_args(argv)
    opts = {k: v for k, v in (("gpus", a.gpus), ("workers", a.workers)) if v is not None}
    with gpuscale.session(a.backend, **opts) as s:
        from distributed import Client

        rt = submit_round_trip(s.client, a.rounds * 3)
        with Client(s.client.scheduler.address, security=s.client.security, set_as_default=False) as plain:
            rt_plain = submit_round_trip(plain, a.rounds * 3)
        rows = [one_run(s, *parse_run(r), a.rounds, a.profile) for r in a.runs]
        family = s.family.name
    print(
        f"{family} family; submit round trip: this session's client {rt * 1e3:.2f} ms, "
        f"a plain distributed.Client {rt_plain * 1e3:.2f} ms"
    )
    for r in rows:
        st = r["steps_s"]
        print(
            f"\n{r['run']}: median {r['median_s'] * 1e3:.2f} ms ({r['median_s'] / rt_plain:.2f} x plain "
            "submit), "
            f"{r['tasks']:g} tasks; " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in st.items()) + " ms"
        )
        for x in r["median_run"]["timeline"]:
            print(
                f"    {x['task']:<40} starts {x['starts_after_sent_ms']:7.2f} ms after the graph is sent, "
                f"runs {x['runs_ms']:7.2f} ms"
            )
        print(
            f"    last task's end -> client knows: {r['median_run']['last_task_end_to_in_memory_ms']:.2f} ms"
        )
        if "profile" in r:
            print(r["profile"])
    if a.json_path:
        harness.write(
            a.json_path,
            "run_timeline",
            {"family": family, "submit_s": rt, "plain_submit_s": rt_plain, "runs": rows},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
