"""Nothing the GPU stack has removed is used: dask-cuda 26.06 removed explicit-comms and
JIT-unspill, so a setting, keyword, import or benchmark side that names them would do nothing
(or fail) on the stack gpuscale installs. Stored results (JSON) are data and are not read."""

from __future__ import annotations

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]
USES = re.compile(
    r"explicit[-_]comms\s*[=:\"']|jit[-_]unspill\s*[=:\"']|DASK_(EXPLICIT_COMMS|JIT_UNSPILL)"
    r"|dask_cuda\.explicit_comms|enable_jit_unspill",
    re.IGNORECASE,
)
TEXT = (".py", ".sh", ".md", ".yaml", ".yml", ".toml", ".cfg", ".ipynb", ".txt")


def _tracked() -> list[pathlib.Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = [ROOT / f for f in out.splitlines() if f.endswith(TEXT)]
    return [f for f in files if f.is_file() and f.resolve() != pathlib.Path(__file__).resolve()]


def test_no_removed_dask_cuda_feature_is_used():
    found = [
        f"{f.relative_to(ROOT)}:{n}: {line.strip()[:120]}"
        for f in _tracked()
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1)
        if USES.search(line)
    ]
    assert found == [], "\n".join(found)


def test_the_check_sees_a_use():
    assert USES.search('conf |= {"explicit-comms": True}') and USES.search("jit_unspill=True")
    assert not USES.search("dask-cuda 26 removed JIT-unspill.")
