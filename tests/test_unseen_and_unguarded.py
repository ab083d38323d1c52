"""Two ways a user's script used to be told the wrong thing, with real processes:

* the audit of a block whose work was still running when the block closed (``x.persist()``
  returns at once) reported "clean" with 0 tasks: it now waits for the block's tasks, and an
  audit that saw no task says "nothing seen", never "clean";
* a script that opens a session outside ``if __name__ == "__main__":`` made every spawned
  worker re-run it (a worker start failure on CPU, a hang with GPUs): it now fails at once,
  before any process starts, with one line naming the file, the line and the guard.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from conftest import _clean_environ

from gpuscale import audit
from gpuscale.records import report


def _slow_identity(block):
    time.sleep(0.5)
    return block


def test_audit_waits_for_persisted_work(cpu_session):
    s = cpu_session
    with s.audit() as a:
        x = s.to_backend(np.arange(40_000, dtype="float64").reshape(400, 100), chunks=(100, 100))
        x = x.map_blocks(_slow_identity, dtype=x.dtype).persist()  # returns before the tasks ran
    assert a.summary["tasks"] >= 8  # 4 to_backend + 4 map_blocks outputs, all seen
    assert audit.verdict(a.summary) == "clean" and a.summary["clean"] is True
    assert float(x.sum().compute()) == float(np.arange(40_000).sum())


def test_audit_of_nothing_is_not_clean(cpu_session):
    s = cpu_session
    with s.audit(strict=True) as a:  # strict: nothing foreign was seen, so no error either
        lazy = s.to_backend(np.ones((10, 10)))  # never computed in the block
    assert a.summary["tasks"] == 0 and a.summary["foreign_tasks"] == 0
    assert a.summary["clean"] is False and audit.verdict(a.summary) == "nothing seen"
    assert audit.NOTHING_SEEN in a.summary["notes"]
    lines = " ".join(text for _, text in report.audit_lines(a.summary))
    assert "nothing seen" in lines and "clean" not in lines.replace("to call clean", "")
    assert lazy.shape == (10, 10)


def _script(tmp_path, body: str):
    path = tmp_path / "user_script.py"
    path.write_text(textwrap.dedent(body))
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, str(path)],
        cwd=str(tmp_path),
        env=_clean_environ(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return p, time.monotonic() - t0, path


@pytest.mark.parametrize(
    "body, line",
    [
        (
            """\
     import gpuscale

     with gpuscale.session(backend="cpu", workers=1) as s:
         print(s.run("transpose_sum", n=200, repeat=1, warmup=0, write=False).valid)
     """,
            3,
        ),
        (
            """\
     import gpuscale


     def main():
         with gpuscale.session(backend="cpu", workers=1) as s:
             s.run("transpose_sum", n=200, repeat=1, warmup=0, write=False)


     main()
     """,
            9,
        ),
        (
            """\
     import gpuscale

     if __name__ != "__main__":
         pass
     else:
         r = gpuscale.run("transpose_sum", backend="cpu", cluster_settings={"workers": 1}, n=200, repeat=1,
                          warmup=0, write=False)
     """,
            6,
        ),
    ],
    ids=["module level", "main() called unguarded", "an else branch is not the guard"],
)
def test_a_script_without_the_main_guard_fails_at_once_in_one_line(tmp_path, body, line):
    p, took, path = _script(tmp_path, body)
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stderr.splitlines() == [
        f'gpuscale: error: {path}:{line} starts a cluster outside `if __name__ == "__main__":`, so every '
        "worker process would run this script again as it starts; put the code that starts it under "
        '`if __name__ == "__main__":` (or run it in a notebook)'
    ]
    assert p.stdout == ""
    assert took < 30
    assert sorted(f.name for f in tmp_path.iterdir()) == [
        "user_script.py"
    ]  # nothing started, nothing written


def test_a_guarded_script_runs(tmp_path):
    p, _, _ = _script(
        tmp_path,
        """\
        import gpuscale


        def main():
            with gpuscale.session(backend="cpu", workers=1) as s:
                print("valid", s.run("transpose_sum", n=200, repeat=1, warmup=0, write=False).valid)


        if __name__ == "__main__":
            main()
        """,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "valid True"
