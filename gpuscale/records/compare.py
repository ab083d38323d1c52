"""Compare two sets of records (two bench folders, two records folders or two record files):
per case, the ratio B / A with a confidence interval from the repeats, and a verdict.

Method: Welch's t interval on log times, widened by the spread between runs. Run times are
positive and their noise is roughly multiplicative, so each case's timed repeats are taken as
log(t); the difference of the means of log(t_B) and log(t_A) gets a Welch (unequal variances)
t interval with Welch-Satterthwaite degrees of freedom; exponentiated, that is the ratio of the
geometric mean times, B / A, with its interval (default 95 %). Welch rather than a bootstrap
because bench cases hold few repeats (3-10), where a bootstrap's interval is too narrow; it
needs at least two repeats on each side (else the verdict is ``n/a``).

The repeats inside one run do not see how much a whole run moves (another cluster, another
placement, a busy machine): two runs of the same code on 2 shared cores differ by 10-30 % on
20 ms cases while their repeats agree within a few percent. With three or more paired cases
that spread is estimated from the cases themselves, as the between-study variance of a
random-effects meta-analysis (DerSimonian-Laird: how much more the cases' log ratios scatter
than their repeats explain), and added to every case's variance (``between_run_sd`` in the
answer; 0 when the cases scatter no more than their repeats say, and with fewer than three
cases). A slowdown that moves every case alike does not scatter the cases, so it keeps the
narrow interval and is flagged.

Verdict, with a margin m (default 5 %: smaller differences are not worth a verdict, and two
runs of the same code on one machine differ by a few percent between clusters, which the
repeats inside one run cannot see): ``slower`` when the whole interval lies above 1 + m,
``faster`` when it lies below 1 / (1 + m), else ``same`` (no difference beyond m shown).
``--fail-if-slower PCT`` (exit :data:`SLOWER_EXIT`) fails when some case's interval lies wholly
above 1 + PCT.

Cases pair by workload, every parameter, family, protocol and workers; two single record
files pair with each other whatever they hold. Where a side holds a case twice, its newest
record counts.
"""
from __future__ import annotations

import json
import math
import os
import pathlib
import statistics
from typing import Any

from ..errors import EXIT_CHECK_FAILED, UserError
from . import results
from .table import shown_params, size_label

SLOWER_EXIT = EXIT_CHECK_FAILED
"""Exit status of ``gpuscale results compare --fail-if-slower PCT`` when a case is slower by
more than PCT with confidence (1 is a failed validation of ``run``, 2 bad input)."""
METHOD = "Welch t interval on log times + between-run spread (DerSimonian-Laird)"


def parse_pct(text: str | float, what: str) -> float:
    """``"5%"`` or ``"5"`` (a bare number is percent too) -> the fraction, 0.05."""
    s = str(text).strip()
    try:
        v = float(s.removesuffix("%"))
    except ValueError:
        raise UserError(f"{what} must be a percentage, got {text!r}", f"e.g. {what} 5%") from None
    if not 0 <= v < 1000:
        raise UserError(f"{what} must be between 0% and 1000%, got {text!r}", f"e.g. {what} 5%")
    return v / 100


def key(r) -> tuple:
    workers = (r.cluster.get("running") or {}).get("workers") or r.cluster.get("workers")
    return (r.workload, json.dumps(r.params, sort_keys=True, default=str), r.family, r.protocol, workers)


def _side(path: str | os.PathLike) -> dict[tuple, Any]:
    recs = results.find(path)  # newest first
    out: dict[tuple, Any] = {}
    for r in recs:
        out.setdefault(key(r), r)
    return out


def log_diff(a: list[float], b: list[float]) -> tuple[float, float | None, float | None]:
    """(mean log b - mean log a, its variance, Welch degrees of freedom); variance and degrees
    None with fewer than two repeats on a side."""
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    diff = statistics.fmean(lb) - statistics.fmean(la)
    if len(la) < 2 or len(lb) < 2:
        return diff, None, None
    va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
    if va + vb == 0:
        return diff, 0.0, float(len(la) + len(lb) - 2)
    df = (va + vb) ** 2 / (va ** 2 / (len(la) - 1) + vb ** 2 / (len(lb) - 1))
    return diff, va + vb, df


def between_run_variance(diffs: list[tuple[float, float]]) -> float:
    """DerSimonian-Laird: from (log ratio, its within-run variance) of k >= 3 cases, the
    variance of the log ratio that the repeats do not explain (0 when there is none)."""
    cases = [(y, v) for y, v in diffs if v is not None and v > 0]
    if len(cases) < 3:
        return 0.0
    w = [1 / v for _, v in cases]
    mean = sum(wi * y for wi, (y, _) in zip(w, cases)) / sum(w)
    q = sum(wi * (y - mean) ** 2 for wi, (y, _) in zip(w, cases))
    c = sum(w) - sum(wi * wi for wi in w) / sum(w)
    return max(0.0, (q - (len(cases) - 1)) / c)


def interval(a: list[float], b: list[float], confidence: float = 0.95,
             between: float = 0.0) -> tuple[float, float | None, float | None]:
    """(ratio, lo, hi) of B / A: geometric means, Welch t interval on log times with the
    between-run variance ``between`` added (None, None with fewer than two repeats on a side)."""
    diff, var, df = log_diff(a, b)
    if var is None:
        return math.exp(diff), None, None
    se = math.sqrt(var + between)
    if se == 0:
        return math.exp(diff), math.exp(diff), math.exp(diff)
    from scipy import stats
    t = float(stats.t.ppf((1 + confidence) / 2, df))
    return math.exp(diff), math.exp(diff - t * se), math.exp(diff + t * se)


def verdict(lo: float | None, hi: float | None, margin: float) -> str:
    if lo is None:
        return "n/a"
    if lo > 1 + margin:
        return "slower"
    if hi < 1 / (1 + margin):
        return "faster"
    return "same"


def compare(a: str | os.PathLike, b: str | os.PathLike, *, confidence: float = 0.95, margin: float = 0.05,
            fail_if_slower: float | None = None) -> dict[str, Any]:
    """Every case of A and B paired: ratio, interval, verdict. ``failed`` lists the cases
    slower than ``fail_if_slower`` (a fraction) with confidence."""
    if not 0 < confidence < 1:
        raise UserError(f"confidence must be between 0 and 1, got {confidence}", "e.g. 0.95")
    sa, sb = _side(a), _side(b)
    if not sa or not sb:
        empty = a if not sa else b
        raise UserError(f"'{empty}' holds no gpuscale result records",
                        "give two bench folders, results folders or record files")
    if pathlib.Path(a).is_file() and pathlib.Path(b).is_file():
        (ka, ra), (_, rb) = next(iter(sa.items())), next(iter(sb.items()))
        pairs = [(ka, ra, rb)]
        only_a = only_b = []
    else:
        pairs = [(k, sa[k], sb[k]) for k in sa if k in sb]
        only_a = [_label(k) for k in sa if k not in sb]
        only_b = [_label(k) for k in sb if k not in sa]
    pairs = sorted(pairs, key=lambda p: (p[0][0], str(p[0][1:])))
    between = between_run_variance([log_diff(ra.times_s, rb.times_s)[:2] for _, ra, rb in pairs])
    cases = []
    for k, ra, rb in pairs:
        ratio, lo, hi = interval(ra.times_s, rb.times_s, confidence, between)
        v = verdict(lo, hi, margin)
        cases.append({"workload": ra.workload, "size": size_label(shown_params(ra.params)),
                      "params": ra.params, "backend": ra.backend, "family": ra.family, "protocol": ra.protocol,
                      "workers": k[4], "a_median_s": ra.median_s, "b_median_s": rb.median_s,
                      "a_repeats": len(ra.times_s), "b_repeats": len(rb.times_s), "ratio": ratio, "lo": lo,
                      "hi": hi, "verdict": v, "a_record": ra.path, "b_record": rb.path,
                      "slower_than_limit": fail_if_slower is not None and lo is not None and lo > 1 + fail_if_slower})
    counts = {v: sum(c["verdict"] == v for c in cases) for v in ("faster", "slower", "same", "n/a")}
    return {"a": str(a), "b": str(b), "method": METHOD, "confidence": confidence, "margin": margin,
            "fail_if_slower": fail_if_slower, "between_run_sd": math.sqrt(between), "cases": cases, "counts": counts, "only_a": only_a,
            "only_b": only_b, "failed": [c for c in cases if c["slower_than_limit"]]}


def _label(k: tuple) -> str:
    wl, params, family, protocol, workers = k
    return f"{wl} {size_label(shown_params(json.loads(params)))} {family} {protocol} {workers}w"
