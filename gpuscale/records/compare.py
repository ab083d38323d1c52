"""Compare two sets of records (two bench folders, two records folders or two record files): per
case, the ratio B / A with a confidence interval, a verdict, and the smallest change the runs
could have shown.

Cases pair by workload, every parameter, family, protocol and workers. Two record files pair
when their workload and parameters agree (family, protocol and workers may differ) and are
refused otherwise. Repeats a record flags as disturbed (``info.disturbed_repeats``) are left
out.

The interval (docs/decisions.md, rule ``compare.between-run``): with one run a side, the
Hodges-Lehmann estimate on log times with its Mann-Whitney interval (Welch's t where ranks are
too few; ``n/a`` under two repeats a side), widened by the between-run spread (``between_run``,
default :data:`ASSUMED_BETWEEN_RUN`, or the DerSimonian-Laird estimate when larger); with
several runs on a side, Welch's t interval over the runs.

Verdict, with a margin m (default 5 %): ``slower`` when the whole interval lies above 1 + m,
``faster`` when it lies below 1 / (1 + m), ``same`` when it lies within both, else
``inconclusive``, with ``resolve`` (the repeats, or runs, per side at which such an interval
would clear the nearest bound). ``mde``: the ratio these runs would call ``slower`` with
probability :data:`POWER`. The gate ``--fail-if-slower PCT`` (exit :data:`SLOWER_EXIT`) fails a
case whose interval lies wholly above 1 + PCT and, with ``--fail-if-inconclusive``, one whose
interval reaches above it.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import statistics
from typing import Any

import numpy as np

from ..errors import EXIT_CHECK_FAILED, UserError
from . import results
from .table import brief_params, shown_params, size_label, workers_of

SLOWER_EXIT = EXIT_CHECK_FAILED
"""Exit status of ``gpuscale results compare --fail-if-slower PCT`` when a case is slower by
more than PCT with confidence (1 is a failed validation of ``run``, 2 bad input)."""
METHOD = "Hodges-Lehmann ratio, Mann-Whitney interval; runs as the unit where a side has several"
EXACT_PAIRS = 10_000
"""Up to this many (A, B) repeat pairs the Mann-Whitney distribution is exact."""
POWER = 0.8
"""The chance at which ``mde`` is detected."""
VERDICTS = ("faster", "slower", "same", "inconclusive", "n/a")
ASSUMED_BETWEEN_RUN = 0.10
"""The spread between two runs of the same code (standard deviation of log B / A) assumed where
each side holds one run."""


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
    return (
        r.workload,
        json.dumps(r.params, sort_keys=True, default=str),
        r.family,
        r.protocol,
        workers_of(r),
    )


def _side(path: str | os.PathLike) -> dict[tuple, list]:
    """Case -> its runs (records), newest first."""
    out: dict[tuple, list] = {}
    for r in results.find(path):  # newest first
        out.setdefault(key(r), []).append(r)
    return out


def clean_times(r) -> list[float]:
    """The record's timed repeats without those it flags as disturbed (all, if every one is)."""
    flagged = ((r.info or {}).get("disturbed_repeats") or {}).get("repeats") or {}
    kept = [t for i, t in enumerate(r.times_s) if str(i) not in flagged]
    return kept or list(r.times_s)


def _u_cdf(n: int, m: int) -> np.ndarray:
    """P(U <= u), u = 0 .. n m, of the Mann-Whitney statistic of n and m exchangeable values."""
    if n * m > EXACT_PAIRS:
        from scipy import stats

        mean, sd = n * m / 2, math.sqrt(n * m * (n + m + 1) / 12)
        return stats.norm.cdf((np.arange(n * m + 1) + 0.5 - mean) / sd)
    # p(i, j, u) = i/(i+j) p(i-1, j, u-j) + j/(i+j) p(i, j-1, u), for i and j values
    row = [np.ones(1) for _ in range(m + 1)]  # i = 0: U = 0 whatever j
    for i in range(1, n + 1):
        new = [np.ones(1)]  # j = 0: U = 0
        for j in range(1, m + 1):
            p = np.zeros(i * j + 1)
            p[j : j + len(row[j])] += i / (i + j) * row[j]
            p[: len(new[j - 1])] += j / (i + j) * new[j - 1]
            new.append(p)
        row = new
    return np.cumsum(row[m])


def hodges_lehmann(
    a: list[float], b: list[float], confidence: float
) -> tuple[float, float | None, float | None]:
    """(estimate, lo, hi) of log B - log A: the median of every pairwise difference and its
    distribution-free interval (None, None when the repeats are too few for ``confidence``)."""
    d = np.sort(np.subtract.outer(np.log(b), np.log(a)).ravel())
    est = float(np.median(d))
    cdf = _u_cdf(len(a), len(b))
    k = int(np.searchsorted(cdf, (1 - confidence) / 2, side="right"))  # P(U <= k - 1) <= alpha / 2
    if k < 1:
        return est, None, None
    return est, float(d[k - 1]), float(d[len(d) - k])


def _z(confidence: float) -> float:
    from scipy import stats

    return float(stats.norm.ppf((1 + confidence) / 2))


def within_run(ra, rb, confidence: float) -> dict[str, Any]:
    """One run a side: the Hodges-Lehmann estimate and interval, with its standard error
    (half the interval's width in z units); too few repeats for ranks at this confidence (3 + 3
    at 95 %), Welch's t interval on log times (:func:`welch`)."""
    a, b = clean_times(ra), clean_times(rb)
    est, lo, hi = hodges_lehmann(a, b, confidence)
    side = {"unit": "repeats", "n": min(len(a), len(b))}
    if lo is None:
        return {**welch(a, b, confidence), **side}
    se = (hi - lo) / (2 * _z(confidence))
    return {"est": est, "lo": lo, "hi": hi, "se": se, **side, "how": "ranks"}


def welch(a: list[float], b: list[float], confidence: float) -> dict[str, Any]:
    """Mean log b - mean log a with Welch's t interval (lo, hi, se None with fewer than two
    repeats on a side)."""
    from scipy import stats

    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    est = statistics.fmean(lb) - statistics.fmean(la)
    if len(la) < 2 or len(lb) < 2:
        return {"est": est, "lo": None, "hi": None, "se": None, "how": "too few repeats"}
    va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
    se = math.sqrt(va + vb)
    if se == 0:
        return {"est": est, "lo": est, "hi": est, "se": 0.0, "how": "welch"}
    df = (va + vb) ** 2 / (va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1))
    t = float(stats.t.ppf((1 + confidence) / 2, df))
    return {"est": est, "lo": est - t * se, "hi": est + t * se, "se": se, "how": "welch"}


def across_runs(runs_a: list, runs_b: list, confidence: float) -> dict[str, Any]:
    """Several runs on a side: Welch's t interval on the means of the runs' median log times
    (a side with one run borrows the other side's variance)."""
    from scipy import stats

    la = [math.log(statistics.median(clean_times(r))) for r in runs_a]
    lb = [math.log(statistics.median(clean_times(r))) for r in runs_b]
    va = statistics.variance(la) if len(la) > 1 else None
    vb = statistics.variance(lb) if len(lb) > 1 else None
    va, vb = (va if va is not None else vb), (vb if vb is not None else va)
    est = statistics.fmean(lb) - statistics.fmean(la)
    sa, sb = va / len(la), vb / len(lb)
    se = math.sqrt(sa + sb)
    base = {"est": est, "unit": "runs", "n": min(len(la), len(lb)), "how": "runs"}
    if se == 0:
        return {**base, "lo": est, "hi": est, "se": 0.0}
    df = (sa + sb) ** 2 / sum(s * s / (n - 1) for s, n in ((sa, len(la)), (sb, len(lb))) if n > 1)
    t = float(stats.t.ppf((1 + confidence) / 2, df))
    return {**base, "lo": est - t * se, "hi": est + t * se, "se": se}


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


def widened(s: dict[str, Any], between: float, confidence: float) -> dict[str, Any]:
    """The interval with the between-run variance added (a normal interval around the estimate)."""
    if s["se"] is None or between <= 0:
        return s
    se = math.sqrt(s["se"] ** 2 + between)
    z = _z(confidence)
    return {
        **s,
        "se": se,
        "lo": min(s["lo"], s["est"] - z * se),
        "hi": max(s["hi"], s["est"] + z * se),
        "unit": "runs",
        "n": 1,
    }


def verdict(lo: float | None, hi: float | None, margin: float) -> str:
    """From the interval of B / A (ratios)."""
    if lo is None:
        return "n/a"
    if lo > 1 + margin:
        return "slower"
    if hi < 1 / (1 + margin):
        return "faster"
    if lo >= 1 / (1 + margin) and hi <= 1 + margin:
        return "same"
    return "inconclusive"


def gate_of(lo: float | None, hi: float | None, limit: float, strict: bool) -> str:
    """``--fail-if-slower``: "slower" when the interval lies wholly above 1 + limit; with
    ``strict`` (``--fail-if-inconclusive``) "inconclusive" when it reaches above it or there is
    none; else "pass"."""
    if lo is None:
        return "inconclusive" if strict else "pass"
    if lo > 1 + limit:
        return "slower"
    return "inconclusive" if strict and hi > 1 + limit else "pass"


def resolve(s: dict[str, Any], margin: float) -> dict[str, Any] | None:
    """For an inconclusive case: how many repeats (or runs) per side would make an interval
    like this one, narrowed as 1 / sqrt(count), clear the nearest bound it crosses; None when
    the estimate lies on a bound."""
    bound = math.log1p(margin)
    est, half = s["est"], (s["hi"] - s["lo"]) / 2
    room = min(abs(est - bound), abs(est + bound)) if abs(est) < bound else abs(est) - bound
    if room <= 0 or half <= 0 or room < 1e-3:
        return None
    count = math.ceil(s["n"] * (half / room) ** 2)
    return {"per_side": count, "unit": s["unit"]}


def mde(s: dict[str, Any], margin: float, confidence: float) -> float | None:
    """The ratio B / A these runs would call ``slower`` with probability :data:`POWER`."""
    if s["se"] is None:
        return None
    from scipy import stats

    return math.exp(math.log1p(margin) + (_z(confidence) + float(stats.norm.ppf(POWER))) * s["se"])


def _pairs(a, b, sa: dict, sb: dict) -> tuple[list, list[str], list[str]]:
    """(key, runs of A, runs of B) for every case both hold; the cases only one side holds."""
    if pathlib.Path(a).is_file() and pathlib.Path(b).is_file():
        (ka, ra), (kb, rb) = next(iter(sa.items())), next(iter(sb.items()))
        if ka[:2] != kb[:2]:
            raise UserError(
                f"{a} is {_label(ka)} and {b} is {_label(kb)}: different work, no ratio between them",
                "compare two records of the same workload and parameters",
            )
        return [(ka, ra, rb)], [], []
    pairs = [(k, sa[k], sb[k]) for k in sa if k in sb]
    if not pairs:
        raise UserError(
            f"'{a}' and '{b}' hold no case in common (workload, parameters, family, protocol, workers)",
            "compare folders of the same sweep or two records of the same case",
        )
    return pairs, [_label(k) for k in sa if k not in sb], [_label(k) for k in sb if k not in sa]


def _interval(runs_a: list, runs_b: list, confidence: float) -> dict[str, Any]:
    """Runs as the unit where a side holds several, else the repeats of the one run a side."""
    if len(runs_a) > 1 or len(runs_b) > 1:
        return across_runs(runs_a, runs_b, confidence)
    return within_run(runs_a[0], runs_b[0], confidence)


def compare(
    a: str | os.PathLike,
    b: str | os.PathLike,
    *,
    confidence: float = 0.95,
    margin: float = 0.05,
    fail_if_slower: float | None = None,
    fail_if_inconclusive: bool = False,
    between_run: float = ASSUMED_BETWEEN_RUN,
) -> dict[str, Any]:
    """Every case of A and B paired: ratio, interval, verdict, ``mde``, ``resolve``. ``failed``
    lists the cases the gate fails (``fail_if_slower``, a fraction: slower than it with
    confidence; with ``fail_if_inconclusive`` also not shown to be within it)."""
    if not 0 < confidence < 1:
        raise UserError(f"confidence must be between 0 and 1, got {confidence}", "e.g. 0.95")
    sa, sb = _side(a), _side(b)
    if not sa or not sb:
        empty = a if not sa else b
        raise UserError(
            f"'{empty}' holds no gpuscale result records",
            "give two bench folders, results folders or record files",
        )
    pairs, only_a, only_b = _pairs(a, b, sa, sb)
    pairs = sorted(pairs, key=lambda p: (p[0][0], str(p[0][1:])))
    stats_ = [_interval(ra, rb, confidence) for _, ra, rb in pairs]
    one_run = [s for s in stats_ if s["unit"] == "repeats"]
    estimated = between_run_variance([(s["est"], s["se"] ** 2 if s["se"] else None) for s in one_run])
    between = max(estimated, between_run**2)
    stats_ = [widened(s, between, confidence) if s["unit"] == "repeats" else s for s in stats_]
    cases = [
        _case(k, ra, rb, s, confidence, margin, fail_if_slower, fail_if_inconclusive)
        for (k, ra, rb), s in zip(pairs, stats_)
    ]
    counts = {v: sum(c["verdict"] == v for c in cases) for v in VERDICTS}
    return {
        "a": str(a),
        "b": str(b),
        "method": METHOD,
        "confidence": confidence,
        "margin": margin,
        "fail_if_slower": fail_if_slower,
        "fail_if_inconclusive": fail_if_inconclusive,
        "between_run_sd": math.sqrt(between) if one_run else None,
        "between_runs": _between_note(one_run, estimated, between_run),
        "cases": cases,
        "counts": counts,
        "only_a": only_a,
        "only_b": only_b,
        "failed": [c for c in cases if c["gate"] in ("slower", "inconclusive")],
    }


def _between_note(one_run: list, estimated: float, assumed: float) -> str:
    if not one_run:
        return "measured: several runs a side, the run is the unit"
    if estimated > assumed**2:
        return (
            f"{100 * math.sqrt(estimated):.1f}% from the cases' scatter (one run a side, DerSimonian-Laird)"
        )
    return (
        f"{100 * assumed:.1f}% assumed (one run a side cannot show it; run each side several times "
        "into its folder to measure it, or set --between-run)"
    )


def _case(k, runs_a, runs_b, s, confidence, margin, fail_if_slower, fail_if_inconclusive) -> dict[str, Any]:
    ra, rb = runs_a[0], runs_b[0]
    lo = None if s["lo"] is None else math.exp(s["lo"])
    hi = None if s["hi"] is None else math.exp(s["hi"])
    v = verdict(lo, hi, margin)
    gate = None if fail_if_slower is None else gate_of(lo, hi, fail_if_slower, fail_if_inconclusive)
    return {
        "workload": ra.workload,
        "size": size_label(shown_params(ra.params)),
        "params": ra.params,
        "backend": ra.backend,
        "family": ra.family,
        "protocol": ra.protocol,
        "workers": k[4],
        "a_median_s": statistics.median(clean_times(ra)),
        "b_median_s": statistics.median(clean_times(rb)),
        "a_repeats": len(ra.times_s),
        "b_repeats": len(rb.times_s),
        "a_runs": len(runs_a),
        "b_runs": len(runs_b),
        "ratio": math.exp(s["est"]),
        "lo": lo,
        "hi": hi,
        "unit": s["unit"],
        "how": s.get("how"),
        "verdict": v,
        "mde": mde(s, margin, confidence),
        "resolve": resolve(s, margin) if v == "inconclusive" else None,
        "gate": gate,
        "a_record": ra.path,
        "b_record": rb.path,
        "slower_than_limit": gate == "slower",
    }


def _label(k: tuple) -> str:
    wl, params, family, protocol, workers = k
    return f"{wl} {brief_params(wl, json.loads(params))} {family} {protocol} {workers}w"
