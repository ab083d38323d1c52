"""Backend families: name resolution, auto, availability errors, knobs, family_of, registry."""

from __future__ import annotations

import dataclasses
import json
import os

import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import gpu_probe

from gpuscale import UserError, backends
from gpuscale.backends.family import Family

GPU_USABLE = gpu_probe()[0]
no_gpu_here = pytest.mark.skipif(GPU_USABLE, reason="checks the no-GPU behaviour")


@pytest.mark.parametrize("name", ["cpu", "numpy", "pandas"])
@pytest.mark.parametrize("collection", [None, "array", "dataframe"])
def test_cpu_names_select_cpu_family(name, collection):
    sel = backends.select(name, collection)
    assert sel.family.name == "cpu" and sel.name == "cpu"
    assert sel.requested == name
    assert name in sel.reason


@no_gpu_here
def test_auto_picks_cpu_and_says_why_not_gpu():
    sel = backends.select("auto")
    assert sel.family.name == "cpu"
    assert sel.requested == "auto"
    assert "auto chose cpu" in sel.reason
    assert "not gpu:" in sel.reason  # why the GPU family was passed over
    gpu_ok, gpu_why = backends.select("gpu", check=False).family.probe()
    assert gpu_ok is False and gpu_why in sel.reason


@no_gpu_here
@pytest.mark.parametrize(
    "name, collection", [("cupy", "array"), ("cudf", "dataframe"), ("gpu", None), ("gpu", "dataframe")]
)
def test_gpu_names_fail_early_with_install_hint(name, collection):
    with pytest.raises(UserError) as e:
        backends.select(name, collection)
    msg = str(e.value)
    assert f"backend '{name}'" in msg
    assert "pip install" in msg
    assert "\n" not in msg


def test_gpu_names_select_gpu_family_without_check():
    for name in ("gpu", "cupy", "cudf"):
        sel = backends.select(name, check=False)
        assert sel.family.name == "gpu"


def test_unknown_backend_lists_names():
    with pytest.raises(UserError, match="unknown backend 'tpu'") as e:
        backends.select("tpu")
    for n in ("auto", "cpu", "numpy", "pandas", "gpu", "cupy", "cudf"):
        assert n in str(e.value)
    assert backends.names()[0] == "auto"


def test_knobs_differ_between_families():
    cpu = backends.select("cpu").family
    gpu = backends.select("gpu", check=False).family
    assert gpu.knobs.shuffle_method == "tasks"  # keeps cuDF on the device
    assert cpu.knobs.shuffle_method is None  # Dask's default
    assert gpu.knobs.chunk_bytes > cpu.knobs.chunk_bytes
    assert gpu.knobs.split_every is None and cpu.knobs.split_every == 8
    assert gpu.knobs.rmm_pool_size == 0.8 and cpu.knobs.rmm_pool_size is None
    assert cpu.knobs.threads_per_worker["dataframe"] == 1
    assert cpu.knobs.threads_per_worker["array"] > 1
    assert gpu.knobs.as_dict("array")["pre_import"] == ["cupy"]
    assert cpu.knobs.as_dict("array")["pre_import"] == ["dask.array"]
    assert cpu.knobs.as_dict("dataframe")["threads_per_worker"] == 1
    assert cpu.dask_config() == {"array.backend": "numpy", "dataframe.backend": "pandas"}
    assert gpu.dask_config() == {"array.backend": "cupy", "dataframe.backend": "cudf"}
    assert (cpu.cluster_kind, gpu.cluster_kind) == ("local", "cuda")


def test_cpu_layout_by_collection():
    cpu = backends.select("cpu").family
    # array: a few threads per worker, capped by the cores; dataframe: one thread per process
    assert cpu.layout_rule("array", 8, 0)[:2] == (2, 4)
    assert cpu.layout_rule("array", 2, 0)[:2] == (1, 2)
    assert cpu.layout_rule("dataframe", 2, 0)[:2] == (2, 1)
    # a cluster for any work (cluster up, session()) gets plain Dask's LocalCluster() split,
    # so the user's own code runs on the cluster it would get without gpuscale
    from distributed.deploy.utils import nprocesses_nthreads

    for cores in (2, 8, 16):
        assert cpu.layout_rule(None, cores, 0)[:2] == nprocesses_nthreads(cores)
    assert cpu.layout_rule(None, 2, 0)[:3] == (2, 1, "distributed's default split of 2 cores")
    # what the user set wins, the rest fills the cores
    assert cpu.layout_rule("array", 8, 0, workers=8)[:3] == (
        8,
        1,
        "workers set by you, threads fill the cores",
    )
    assert cpu.layout_rule("dataframe", 8, 0, threads=2)[:2] == (4, 2)
    # a family without a session value: distributed's default split
    import dataclasses

    bare = dataclasses.replace(cpu, knobs=dataclasses.replace(cpu.knobs, threads_per_worker={"array": 4}))
    assert bare.layout_rule(None, 2, 0)[:3] == (2, 1, "distributed's default split of 2 cores")


def test_family_of_collections():
    x = da.ones((10, 3), chunks=5)
    df = dd.from_pandas(pd.DataFrame({"a": range(4)}), npartitions=2)
    assert backends.family_of(x).name == "cpu"
    assert backends.family_of(df).name == "cpu"
    assert backends.family_of(df["a"]).name == "cpu"
    assert backends.family_of(np.ones(3)).name == "cpu"
    with pytest.raises(UserError, match="no backend family handles"):
        backends.family_of(db.from_sequence([1, 2]))
    with pytest.raises(UserError, match="no backend family handles builtins.list"):
        backends.family_of([1, 2])


def test_to_host_is_identity_for_numpy_and_pandas():
    a = np.arange(3)
    f = pd.DataFrame({"a": [1]})
    assert backends.to_host(a) is a
    assert backends.to_host(f) is f


@pytest.fixture
def cpu_family():
    return backends.select("cpu").family


def test_register_clashing_name_raises(cpu_family):
    before = backends.names()
    clash = dataclasses.replace(cpu_family, name="test-clash", names=("test-clash", "numpy"))
    with pytest.raises(ValueError, match=r"\['numpy'\].*family cpu"):
        backends.register(clash)
    assert backends.names() == before
    with pytest.raises(UserError):
        backends.select("test-clash")


def test_register_select_unregister_test_family(cpu_family):
    fam = dataclasses.replace(cpu_family, name="test-fam", names=("test-fam", "test-alias"), auto_priority=-5)
    backends.register(fam)
    try:
        assert "test-alias" in backends.names()
        sel = backends.select("test-alias")
        assert sel.family is fam
        # a lower priority never changes what auto picks
        assert backends.select("auto").family.name != "test-fam"
    finally:
        backends.unregister("test-fam")
    assert "test-alias" not in backends.names()
    with pytest.raises(UserError, match="unknown backend 'test-alias'"):
        backends.select("test-alias")


def test_missing_module_family_is_not_usable(cpu_family):
    fam = dataclasses.replace(
        cpu_family,
        name="test-missing",
        names=("test-missing",),
        requires={"gpuscale_no_such_module": "pip install no-such-thing"},
        auto_priority=100,
    )
    backends.register(fam)
    try:
        ok, why = fam.probe()
        assert not ok and "gpuscale_no_such_module" in why
        with pytest.raises(UserError, match="pip install no-such-thing"):
            backends.select("test-missing")
        # auto skips it despite its higher priority, and says so
        sel = backends.select("auto")
        assert sel.family.name != "test-missing"
        assert "not test-missing" in sel.reason
    finally:
        backends.unregister("test-missing")


def test_import_in_background_imports_the_pre_import_list(tmp_path):
    """A session starts importing its family's worker libraries (cuDF: 2 s) in a thread while
    its cluster starts; already-imported and missing modules are skipped, and a collection with
    nothing to import starts no thread."""
    import subprocess
    import sys

    code = """
import dataclasses, sys
from gpuscale import backends
cpu = backends.select("cpu").family
knobs = dataclasses.replace(cpu.knobs, pre_import={"dataframe": ("xml.dom.minidom", "json", "no_such_mod_x")})
fam = dataclasses.replace(cpu, knobs=knobs)
assert "xml.dom.minidom" not in sys.modules
t = fam.import_in_background("dataframe")
t.join(30)
print("xml.dom.minidom" in sys.modules, fam.import_in_background("dataframe"),
      cpu.import_in_background("session"))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "None", "None"], out


def test_a_pre_import_of_the_frame_library_reads_a_small_parquet_plan_in_the_thread(tmp_path):
    """Where the list holds the family's frame library (a GPU session: cuDF), the thread then
    reads a small Parquet file through Dask in the family's backend and optimizes a plan of it
    (the first use of Dask's Parquet metadata and the library's, while the cluster starts),
    and removes the file; a list without the library plans nothing."""
    import subprocess
    import sys

    code = """
import dataclasses, sys, threading
from gpuscale import backends
calls = set()
threading.setprofile(lambda frame, event, arg: event == "call" and calls.add(frame.f_code.co_name))
cpu = backends.select("cpu").family
for modules in (("xml.dom.minidom",), ("pandas",)):
    calls.clear()
    fam = dataclasses.replace(cpu, knobs=dataclasses.replace(cpu.knobs, pre_import={"dataframe": modules}))
    fam.import_in_background("dataframe").join(60)
    print(sorted(calls & {"read_parquet", "optimize", "_first_plan"}))
"""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.splitlines() == ["[]", "['_first_plan', 'optimize', 'read_parquet']"], out.stdout
    assert list(tmp_path.iterdir()) == []


FRESH_FINISHED = """
import numpy as np
import gpuscale.routes.linalg  # what a worker imports to run the svd's spectrum task
from gpuscale.backends import convert, finished
finished(np.ones(2))
print("cupy" in convert.finished_by_type._lazy)
"""


def test_finished_knows_cupy_chunks_where_only_the_route_module_was_imported():
    """``backends.finished`` runs inside a route's task on a worker that may have imported only
    the route's module: the GPU family's lazy registration for CuPy chunks is there when a block
    arrives (without it, a CuPy block would be returned unsynchronized). A fresh interpreter, so
    no earlier test loaded the families."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", FRESH_FINISHED], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True"], out.stdout


def test_backend_help_offers_the_families_and_names_the_library_aliases(cli):
    """`--backend` shows auto / cpu / gpu as its choices; numpy, pandas, cupy, cudf are named as
    aliases of their family and still select it."""
    assert backends.choices() == ["auto", "cpu", "gpu"]
    assert backends.aliases() == {"numpy": "cpu", "pandas": "cpu", "cupy": "gpu", "cudf": "gpu"}
    p = cli("run", "svd", "--help", env={"COLUMNS": "200"})
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())
    said = text[text.index("--backend [auto|cpu|gpu] ") : text.index("--protocol")]
    assert "numpy / pandas for cpu" in said and "cupy / cudf for gpu" in said
    for alias, family in backends.aliases().items():
        assert backends.select(alias, check=False).family.name == family
    e = cli("explain", "svd", "--backend", "pandas", "--json")
    assert e.returncode == 0, e.stderr
    d = json.loads(e.stdout)
    assert (d["backend"], d["family"]) == ("pandas", "cpu")


def test_where_a_familys_chunks_live_decides_its_memory_rules(cpu_family):
    """A family declared with device memory (``memory="device"``) is budgeted as a device
    family whatever its cluster kind: no host spill target, the device's fractions."""
    from gpuscale import memory

    dev = dataclasses.replace(cpu_family, name="test-device", memory="device")
    assert dev.on_device and not cpu_family.on_device
    assert memory.target_fraction(2**30, 1, cpu_family)[0] is not None
    assert memory.target_fraction(2**30, 1, dev)[0] is None
    assert "ran out of device memory" in str(memory.ran_out("svd", {}, dev, MemoryError()))


def test_a_backend_plugin_that_names_no_family_is_skipped_with_its_name(tmp_path):
    """An installed ``gpuscale.backends`` entry point must name a Family: one that names
    anything else is skipped with a warning naming it, and the other families still load."""
    import os
    import subprocess
    import sys

    dist = tmp_path / "badfamily-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: badfamily\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[gpuscale.backends]\nbad = json:dumps\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    code = "from gpuscale import backends; print(backends.choices())"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "skipped backend plugin 'bad' (json:dumps): it names a function, not a gpuscale Family" in p.stderr
    choices = json.loads(p.stdout.strip().replace("'", '"'))
    assert choices[:3] == ["auto", "cpu", "gpu"] and "bad" not in choices


class _NoDeviceHere(Family):
    """The CPU family under another name, whose devices this machine lacks (as a login node
    lacks the GPU nodes' devices)."""

    def probe(self) -> tuple[bool, str]:
        return False, "no device of this family is visible here"


@pytest.fixture
def no_device_family():
    cpu = backends.select("cpu").family
    fields = {f.name: getattr(cpu, f.name) for f in dataclasses.fields(cpu) if f.init}
    fam = _NoDeviceHere(**{**fields, "name": "nodevice", "names": ("nodevice",), "auto_priority": -1})
    backends.register(fam)
    yield fam
    backends.unregister(fam.name)


def test_a_family_whose_devices_are_missing_here_may_still_drive_workers_elsewhere(no_device_family):
    from gpuscale.runs.session import configure

    # its workers would start on this machine: refused before anything starts
    with pytest.raises(UserError, match="backend 'nodevice' cannot run here: no device of this family"):
        configure(backend="nodevice")
    # a running scheduler's workers (or a deploy target's) bring their own devices: the client
    # needs the family's libraries alone, and the preflight checks what the workers see
    _, selection, spec = configure(backend="nodevice", scheduler="tcp://127.0.0.1:8786")
    assert (selection.family.name, spec.kind) == ("nodevice", "existing")
