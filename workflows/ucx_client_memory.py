"""What a closed UCX session leaves on the device of the process that ran it.

Each variant runs in a fresh process: a UCX session on GPU 0 fetches a cuDF merge of 1 M rows,
closes (its worker exits), and NVML says what that process holds during and after. The variants
set what UCX reads at its start: nothing (as gpuscale starts it), ``UCX_CUDA_IPC_CACHE=n``,
``UCX_TLS=^cuda_ipc``; ``reset`` calls ``ucxx.reset()`` after the close.

    python workflows/ucx_client_memory.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

CHILD = r"""
import json, os, sys, time
import numpy as np
import dask.dataframe as dd
import pynvml
import gpuscale

def held():
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    return {p.pid: (p.usedGpuMemory or 0) >> 20 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}

with gpuscale.session(backend="gpu", gpus="0", protocol="ucx"):
    a = dd.from_dict({"k": np.arange(2_000_000), "v": np.ones(2_000_000)}, npartitions=4)
    b = dd.from_dict({"k": np.arange(0, 2_000_000, 2), "w": np.ones(1_000_000)}, npartitions=2)
    out = a.merge(b, on="k").compute()
    assert len(out) == 1_000_000
    during = held().get(os.getpid())
    del out
if sys.argv[1] == "reset":
    import gc, ucxx
    ucxx.reset()
    gc.collect()
time.sleep(1)
after = held()
import ucxx
print(json.dumps({"ucx": ".".join(map(str, ucxx.get_ucx_version())), "during_mib": during,
                  "after_mib": after.get(os.getpid()),
                  "others": {p: m for p, m in after.items() if p != os.getpid()}}))
"""

VARIANTS = {
    "as gpuscale starts it": ("plain", {}),
    "UCX_CUDA_IPC_CACHE=n": ("plain", {"UCX_CUDA_IPC_CACHE": "n"}),
    "ucxx.reset() after the close": ("reset", {}),
    "UCX_TLS=^cuda_ipc": ("plain", {"UCX_TLS": "^cuda_ipc"}),
}


def main() -> int:
    print(f"{'variant':<30} {'UCX':>7} {'during MiB':>11} {'after MiB':>10}  others after")
    rc = 0
    for name, (how, env) in VARIANTS.items():
        p = subprocess.run(
            [sys.executable, "-c", CHILD, how],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=300,
        )
        lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
        if p.returncode or not lines:
            rc = 1
            print(f"{name:<30} failed: {(p.stderr.strip().splitlines() or ['?'])[-1][:120]}")
            continue
        r = json.loads(lines[-1])
        after = r["after_mib"] or 0
        print(f"{name:<30} {r['ucx']:>7} {r['during_mib']:>11,} {after:>10,}  {r['others'] or '-'}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
