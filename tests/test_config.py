"""Settings: YAML defaults vs schema, dask.config integration, layer precedence, profiles."""

from __future__ import annotations

import pathlib

import click
import dask.config
import pytest
import yaml

from gpuscale import UserError, config

REPO = pathlib.Path(__file__).resolve().parents[1]
PROFILE_DIR = REPO / "clusters"
EXPECTED_PROFILES = {"cpu", "gpu-tcp", "gpu-ucx", "gpu-ucx-nvlink", "scheduler"}


@pytest.fixture
def process_env(monkeypatch):
    """Set env vars / Dask YAML paths *as at process start*: Dask reads both when it is
    imported, so after changing them the global config is re-read (and re-read again, without
    them, when the test ends)."""

    class ProcessEnv:
        def setenv(self, name: str, value: str) -> None:
            monkeypatch.setenv(name, value)
            dask.config.refresh(paths=dask.config.paths)

        def add_yaml_dir(self, d: pathlib.Path) -> None:
            monkeypatch.setattr(dask.config, "paths", [*dask.config.paths, str(d)])
            dask.config.refresh(paths=dask.config.paths)

    yield ProcessEnv()
    monkeypatch.undo()
    dask.config.refresh()


def write_profile(path: pathlib.Path, body: dict | str) -> pathlib.Path:
    path.write_text(body if isinstance(body, str) else yaml.safe_dump(body))
    return path


# ---------------------------------------------------------------------------------------
# Defaults and schema
# ---------------------------------------------------------------------------------------
def test_the_defaults_file_is_what_the_declaration_writes():
    """gpuscale/gpuscale.yaml is the declaration's output, word for word: a default or a
    description changed in config.py and not rewritten here fails, naming the command."""
    text = config.DEFAULTS_FILE.read_text()
    assert text == config.defaults_yaml(), f"gpuscale/gpuscale.yaml is stale; run {config.REWRITE_DEFAULTS}"
    assert yaml.safe_load(text) == config.DEFAULTS
    # and the YAML's values are the schema's defaults (one source of truth for both)
    assert config.schema_keys() == config.default_keys() == {s.key for s in config.SETTINGS}
    defaults = config.Settings().model_dump(by_alias=True)
    assert (
        config.Settings.model_validate(config.normalize(yaml.safe_load(text)["gpuscale"])).model_dump(
            by_alias=True
        )
        == defaults
    )


def test_the_keyword_map_is_the_declarations_keywords():
    """Every keyword is declared on its setting (config.Knob): the map is exactly those, and a
    keyword names one setting."""
    declared = [(s.keyword, s.key) for s in config.SETTINGS if s.keyword]
    assert config.KEYWORDS == dict(declared)
    assert len(declared) == len(config.KEYWORDS), "a keyword is declared on two settings"
    assert config.KEYWORDS["trust_cluster_files"] == "cluster.trust-files"  # a keyword of its own
    assert config.KEYWORDS["min_repeats"] == "run.auto-repeat.min-repeats"  # a keyword, no flag
    assert "min_repeats" not in config.FLAGS and "profile" in config.FLAGS
    assert "profile" not in config.KEYWORDS  # the API's own profile=, beside the keywords


def test_a_setting_declared_in_a_model_gets_keyword_flag_and_default():
    """Declaring a setting is all it takes: the walk over the models finds its keyword, flag,
    environment variable and default, and the CLI builds its option from them."""
    from typing import Annotated

    from gpuscale.cli.options import declaration

    class Extra(config._Section):
        chunk_budget: Annotated[
            int, config.Knob(flag=config.Flag("bytes of one chunk", "run", scope="run", kind="int"))
        ] = 1024
        """Bytes of one chunk."""
        quiet: Annotated[bool, config.Knob("hush", config.Flag("say less", "run", kind="switch"))] = False
        """Say less."""

    class Top(config._Section):
        extra: Extra = Extra()
        """A section."""

    budget, quiet = config._declared(Top)
    assert (budget.key, budget.keyword, budget.opts, budget.env) == (
        "extra.chunk-budget",
        "chunk_budget",
        ("--chunk-budget",),
        "DASK_GPUSCALE__EXTRA__CHUNK_BUDGET",
    )
    assert (quiet.keyword, quiet.opts) == ("hush", ("--hush",))
    decls, attrs = declaration(quiet)
    assert decls == ["--hush", "hush"] and attrs["is_flag"] and attrs["default"] is None
    option = click.Option(*declaration(budget)[:1], **declaration(budget)[1])
    assert (option.name, option.opts, option.type.name) == ("chunk_budget", ["--chunk-budget"], "int")
    assert Top().model_dump(by_alias=True) == {"extra": {"chunk-budget": 1024, "quiet": False}}


def test_every_settings_flag_is_built_from_its_declaration():
    """The flags of run / explain / cluster show / cluster up that set a setting are exactly the
    declared ones for those commands (config.Flag.scope), with the declared spelling, help,
    metavar and section; cluster down's take the declaration with help of their own."""
    from gpuscale.cli.base import PANELS, panel
    from gpuscale.cli.cluster import cluster
    from gpuscale.cli.run import run

    def flags_of(cmd):
        return {p.name: p for p in cmd.params if p.name in config.FLAGS}

    commands = {
        ("cluster", "client", "run"): run.get_command(None, "svd"),
        ("cluster", "client"): cluster.commands["show"],
        ("cluster",): cluster.commands["up"],
    }
    for scopes, cmd in commands.items():
        declared = {n for n, s in config.FLAGS.items() if s.flag.scope in scopes}
        got = flags_of(cmd)
        if cmd.name == "up":  # its --scheduler-file is where it writes the file, not a setting
            got.pop("scheduler_file")
        assert set(got) == declared, (cmd.name, sorted(set(got) ^ declared))
        for name, p in got.items():
            s = config.FLAGS[name]
            assert (p.opts + p.secondary_opts) == list(s.opts), name
            assert p.metavar == s.flag.metavar, name
            assert p.help == (s.flag.help or None) or s.flag.kind == "backend", name
            assert panel(p) == s.flag.panel in PANELS, name
    down = flags_of(cluster.commands["down"])
    assert set(down) == {"scheduler_file", "credentials", "trust_cluster_files"}
    assert [p.opts for p in down.values()] == [list(config.FLAGS[n].opts) for n in down]


# --------------------------------------------------------------------------------------
# No second declaration: the modules other than config.py spell no list of settings
# --------------------------------------------------------------------------------------
FLAG_AND_KEYWORD_MODULES = (
    *(f"gpuscale/cli/{p.name}" for p in sorted((REPO / "gpuscale" / "cli").glob("*.py"))),
    "gpuscale/api.py",
    "gpuscale/runs/session.py",
    "gpuscale/runs/run.py",
    "gpuscale/workloads/decorator.py",
    "docs/_ext/gpuscale_docs.py",
)
"""Where flags and keywords meet the settings: here even a list of keyword names is a second
declaration (elsewhere, words like ``workers`` or ``protocol`` also name record columns)."""

OWN_FLAG_OF_THE_SAME_NAME = {("gpuscale/cli/cluster.py", "cluster_up", "--scheduler-file")}
"""``cluster up --scheduler-file PATH`` is where it writes the file, not the setting."""


def second_declarations(source: str, path: str) -> list[str]:
    """Where ``source`` declares settings again: a literal collection of two or more dotted
    setting keys; a click option spelled like a setting's flag; in the modules of
    :data:`FLAG_AND_KEYWORD_MODULES`, a literal collection (or a name -> name mapping) of two
    or more setting keywords or flag names."""
    import ast

    dotted = {s.key for s in config.SETTINGS if "." in s.key}
    names = set(config.KEYWORDS) | set(config.FLAGS)
    flags = {o for s in config.SETTINGS for o in s.opts}
    tree = ast.parse(source)
    owner = {
        id(call): fn.name
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        for deco in fn.decorator_list
        for call in ast.walk(deco)
    }
    found = []

    def strings(nodes):
        return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]

    for node in ast.walk(tree):
        where = f"{path}:{getattr(node, 'lineno', 0)}"
        items = None
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = strings(node.elts)
        elif isinstance(node, ast.Dict):
            values = strings(node.values)
            items = values + (strings(node.keys) if len(values) == len(node.values) else [])
        if items is not None:
            if len([i for i in items if i in dotted]) >= 2:
                found.append(f"{where}: setting keys {sorted(set(items) & dotted)}")
            if path in FLAG_AND_KEYWORD_MODULES and len([i for i in items if i in names]) >= 2:
                found.append(f"{where}: setting keywords {sorted(set(items) & names)}")
        if isinstance(node, ast.Call):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if func in ("option", "Option"):
                spelled = strings(node.args) + [
                    o for a in node.args if isinstance(a, (ast.List, ast.Tuple)) for o in strings(a.elts)
                ]
                for flag in {f for s in spelled for f in s.split("/")} & flags:
                    if (path, owner.get(id(node)), flag) not in OWN_FLAG_OF_THE_SAME_NAME:
                        found.append(f"{where}: the flag {flag} declared by hand")
    return found


def test_the_check_finds_a_second_declaration():
    """The check below is not vacuous: each form a second declaration takes is found."""
    cli_py = FLAG_AND_KEYWORD_MODULES[0]
    assert second_declarations('KEYS = ("workers", "threads_per_worker")', cli_py)
    assert second_declarations('PANEL = {"gpus": "GPU", "nvlink": "GPU"}', cli_py)
    assert second_declarations('M = {"w": "cluster.workers", "g": "cluster.gpus"}', "gpuscale/x.py")
    assert second_declarations('o = click.option("--workers", type=int)', "gpuscale/x.py")
    assert second_declarations('o = click.Option(["--nvlink/--no-nvlink"])', "gpuscale/x.py")
    assert second_declarations('@click.option("--scheduler-file")\ndef f(): ...', cli_py)
    # and not what is no declaration: one keyword, a record's columns outside the flag modules
    assert not second_declarations('x = kwargs.pop("trace_dir"); y = d["workers"]', cli_py)
    assert not second_declarations('COLUMNS = ("backend", "protocol", "workers")', "gpuscale/records/t.py")


def test_no_module_but_the_declaration_declares_a_setting():
    """config.py declares every setting once; no other module (nor the docs' extension) keeps
    a list of settings, keywords or flags of its own that would have to be kept in step."""
    root = pathlib.Path(__file__).resolve().parents[1]
    sources = [p for p in sorted((root / "gpuscale").rglob("*.py")) if p != root / "gpuscale" / "config.py"]
    sources += sorted((root / "docs" / "_ext").glob("*.py"))
    found = [f for p in sources for f in second_declarations(p.read_text(), p.relative_to(root).as_posix())]
    assert found == []


def test_defaults_merged_into_dask_config():
    assert dask.config.get("gpuscale.protocol") == "auto"
    assert dask.config.get("gpuscale.backend") == "auto"
    assert dask.config.get("gpuscale.cluster.rmm.external-libs") == ["cupy"]
    assert dask.config.get("gpuscale.run.repeat") == 3


def test_defaults_resolve_with_default_sources():
    r = config.resolve()
    assert r.settings.protocol == "auto"
    assert r.settings.cluster.workers is None
    assert r.profile is None
    assert set(r.sources) == config.default_keys()
    assert set(r.sources.values()) == {"default"}


# ---------------------------------------------------------------------------------------
# Precedence: default < user YAML < profile < env < dask.config.set < flag / keyword
# ---------------------------------------------------------------------------------------
def test_precedence_every_layer(tmp_path, process_env):
    prof = write_profile(
        tmp_path / "mine.yaml",
        {
            "version": 1,
            "gpuscale": {"cluster": {"workers": 3, "threads-per-worker": 2, "memory-limit": "1GB"}},
        },
    )
    key = "cluster.workers"

    r = config.resolve()
    assert (r.settings.cluster.workers, r.sources[key]) == (None, "default")

    r = config.resolve(profile=str(prof))
    assert (r.settings.cluster.workers, r.sources[key]) == (3, "profile")
    assert r.profile == str(prof)

    process_env.setenv("DASK_GPUSCALE__CLUSTER__WORKERS", "4")
    r = config.resolve(profile=str(prof))
    assert (r.settings.cluster.workers, r.sources[key]) == (4, "env")
    # the env var overrides one key; the profile's other keys stay
    assert (r.settings.cluster.threads_per_worker, r.sources["cluster.threads-per-worker"]) == (2, "profile")
    assert r.sources["protocol"] == "default"

    with dask.config.set({"gpuscale.cluster.workers": 5}):
        r = config.resolve(profile=str(prof))
        assert (r.settings.cluster.workers, r.sources[key]) == (5, "dask.config")

        r = config.resolve(profile=str(prof), overrides=config.keywords_to_nested({"workers": 6}))
        assert (r.settings.cluster.workers, r.sources[key]) == (6, "flag")
        assert r.sources["cluster.threads-per-worker"] == "profile"
        assert r.sources["cluster.memory-limit"] == "profile"


def test_dask_config_set_beats_env_but_loses_to_flag(process_env):
    process_env.setenv("DASK_GPUSCALE__CLUSTER__WORKERS", "4")
    assert config.resolve().settings.cluster.workers == 4
    with dask.config.set({"gpuscale.cluster.workers": 3}):
        r = config.resolve()
        assert (r.settings.cluster.workers, r.sources["cluster.workers"]) == (3, "dask.config")
        r = config.resolve(overrides={"cluster": {"workers": 7}})
        assert (r.settings.cluster.workers, r.sources["cluster.workers"]) == (7, "flag")
    # leaving the set block: back to the env value
    r = config.resolve()
    assert (r.settings.cluster.workers, r.sources["cluster.workers"]) == (4, "env")


def test_env_protocol_and_nested_underscores(process_env):
    process_env.setenv("DASK_GPUSCALE__CLUSTER__THREADS_PER_WORKER", "2")
    process_env.setenv("DASK_GPUSCALE__RUN__MEMORY_CHECK", "false")
    r = config.resolve()
    assert r.settings.cluster.threads_per_worker == 2
    assert r.settings.run.memory_check is False
    assert r.sources["cluster.threads-per-worker"] == "env"
    assert r.sources["run.memory-check"] == "env"


def test_user_yaml_layer_below_profile(tmp_path, process_env):
    ydir = tmp_path / "dask-yaml"
    ydir.mkdir()
    (ydir / "gpuscale.yaml").write_text("gpuscale:\n  cluster:\n    workers: 2\n    connect-timeout: 3\n")
    process_env.add_yaml_dir(ydir)
    r = config.resolve()
    assert (r.settings.cluster.workers, r.sources["cluster.workers"]) == (2, "user-yaml")
    assert r.settings.cluster.connect_timeout == 3
    prof = write_profile(tmp_path / "p.yaml", {"version": 1, "gpuscale": {"cluster": {"workers": 5}}})
    r = config.resolve(profile=str(prof))
    assert (r.settings.cluster.workers, r.sources["cluster.workers"]) == (5, "profile")
    assert r.sources["cluster.connect-timeout"] == "user-yaml"


def test_env_var_set_after_import_is_honoured(monkeypatch):
    monkeypatch.setenv("DASK_GPUSCALE__CLUSTER__WORKERS", "4")
    r = config.resolve()  # config._env_layer reads os.environ live
    assert (r.settings.cluster.workers, r.sources["cluster.workers"]) == (4, "env")


def test_profile_named_by_env_and_dask_config(process_env):
    process_env.setenv("DASK_GPUSCALE__PROFILE", "gpu-ucx")
    r = config.resolve()
    assert r.profile and r.profile.endswith("gpu-ucx.yaml")
    assert (r.settings.protocol, r.sources["protocol"]) == ("ucx", "profile")
    # a profile named by a flag wins over the env var
    r = config.resolve(profile="cpu")
    assert (r.settings.protocol, r.settings.backend) == ("tcp", "cpu")
    with dask.config.set({"gpuscale.profile": "gpu-tcp"}):
        r = config.resolve()
        assert r.profile.endswith("gpu-tcp.yaml")
        assert (r.settings.backend, r.settings.protocol) == ("gpu", "tcp")


def test_profile_named_by_env_is_attributed_to_env(process_env):
    process_env.setenv("DASK_GPUSCALE__PROFILE", "gpu-ucx")
    r = config.resolve()
    assert r.sources["profile"] == "env"


def test_keywords_to_nested():
    assert config.keywords_to_nested({"workers": 2, "protocol": None, "nvlink": True}) == {
        "cluster": {"workers": 2, "ucx": {"nvlink": True}}
    }
    with pytest.raises(UserError, match="unknown setting 'wrkers'.*workers"):
        config.keywords_to_nested({"wrkers": 2})
    # every keyword points at a key the schema knows
    assert set(config.KEYWORDS.values()) <= config.schema_keys()


# ---------------------------------------------------------------------------------------
# Profiles
# ---------------------------------------------------------------------------------------
def test_profile_names_match_the_clusters_folder():
    files = {p.stem for p in PROFILE_DIR.glob("*.yaml")}
    assert EXPECTED_PROFILES <= files
    assert EXPECTED_PROFILES <= set(config.profile_names())
    assert files <= set(config.profile_names())


@pytest.mark.parametrize("name", sorted(p.stem for p in PROFILE_DIR.glob("*.yaml")))
def test_every_profile_loads_and_validates(name):
    data = yaml.safe_load((PROFILE_DIR / f"{name}.yaml").read_text())
    assert data["version"] == 1 and data["description"]
    r = config.resolve(profile=name)
    assert r.profile and r.profile.endswith(f"{name}.yaml")
    # every key the profile sets is resolved from the profile layer, with the profile's value
    flat = config._flatten(config.normalize(data["gpuscale"]))
    assert flat
    dumped = config._flatten(r.settings.model_dump(mode="json", by_alias=True))
    for key, value in flat.items():
        assert r.sources[key] == "profile", key
        assert dumped[key] == value, key


def test_gpu_profiles_content():
    nv = config.resolve(profile="gpu-ucx-nvlink").settings
    assert (nv.backend, nv.protocol, nv.cluster.ucx.nvlink) == ("gpu", "ucx", True)
    ucx = config.resolve(profile="gpu-ucx").settings
    assert (ucx.backend, ucx.protocol, ucx.cluster.ucx.nvlink) == ("gpu", "ucx", None)
    tcp = config.resolve(profile="gpu-tcp").settings
    assert (tcp.backend, tcp.protocol) == ("gpu", "tcp")
    cpu = config.resolve(profile="cpu").settings
    assert (cpu.backend, cpu.protocol) == ("cpu", "tcp")
    sch = config.resolve(profile="scheduler").settings
    assert sch.scheduler == "tcp://127.0.0.1:8786" and sch.cluster.connect_timeout == 10


def test_profile_by_path(tmp_path):
    p = write_profile(
        tmp_path / "two.yaml",
        {"version": 1, "description": "x", "gpuscale": {"cluster": {"workers": 2, "gpus": "0,1"}}},
    )
    r = config.resolve(profile=str(p))
    assert r.settings.cluster.workers == 2
    assert r.settings.cluster.gpus == (0, 1)


def test_a_profile_cannot_name_another_profile(tmp_path, process_env):
    """``profile`` is declared not settable by a profile (config.Knob.in_profile): a profile's
    own ``profile:`` key is left out and its other keys count, so the profile your Dask YAML
    names stays the one named (the profile layer sits above that YAML)."""
    assert not config.BY_KEY["profile"].knob.in_profile
    p = write_profile(
        tmp_path / "p.yaml", {"version": 1, "gpuscale": {"profile": "gpu-ucx", "protocol": "tcp"}}
    )
    ydir = tmp_path / "dask-yaml"
    ydir.mkdir()
    (ydir / "gpuscale.yaml").write_text(yaml.safe_dump({"gpuscale": {"profile": str(p)}}))
    process_env.add_yaml_dir(ydir)
    r = config.resolve()
    assert r.profile == str(p)
    assert (r.settings.profile, r.sources["profile"]) == (str(p), "user-yaml")
    assert (r.settings.protocol, r.sources["protocol"]) == ("tcp", "profile")


@pytest.mark.parametrize(
    "body, needles",
    [
        ("version: 1\ngpuscale:\n  backend: cpu\n   protocol: [tcp\n", ["not valid YAML", "line"]),
        ("version: 1\nbackend: cpu\n", ["no 'gpuscale:' mapping"]),
        ("", ["no 'gpuscale:' mapping"]),
        (
            "version: 1\nextra: 1\ngpuscale:\n  backend: cpu\n",
            ["unknown top-level key", "extra", "version, description, gpuscale"],
        ),
        ("version: 2\ngpuscale:\n  backend: cpu\n", ["version 2", "version: 1"]),
    ],
)
def test_bad_profile_files(tmp_path, body, needles):
    p = write_profile(tmp_path / "bad.yaml", body)
    with pytest.raises(UserError) as e:
        config.resolve(profile=str(p))
    for n in needles:
        assert n in str(e.value)


def test_profile_unknown_keys_name_the_key_and_valid_keys(tmp_path):
    p = write_profile(tmp_path / "k.yaml", {"version": 1, "gpuscale": {"bogus-key": 1}})
    with pytest.raises(UserError, match=r"unknown key 'gpuscale\.bogus-key'.*profile") as e:
        config.resolve(profile=str(p))
    for k in ("backend", "protocol", "scheduler", "cluster", "run"):
        assert k in str(e.value)
    p = write_profile(tmp_path / "n.yaml", {"version": 1, "gpuscale": {"cluster": {"wrkers": 1}}})
    with pytest.raises(UserError, match=r"unknown key 'gpuscale\.cluster\.wrkers'") as e:
        config.resolve(profile=str(p))
    assert "workers, threads-per-worker" in str(e.value)
    p = write_profile(tmp_path / "u.yaml", {"version": 1, "gpuscale": {"cluster": {"ucx": {"nvlnk": True}}}})
    with pytest.raises(UserError, match=r"cluster\.ucx\.nvlnk.*nvlink, infiniband, rdmacm"):
        config.resolve(profile=str(p))


def test_unknown_profile_lists_names():
    with pytest.raises(UserError, match="unknown profile 'nosuch'") as e:
        config.resolve(profile="nosuch")
    for name in EXPECTED_PROFILES:
        assert name in str(e.value)
    with pytest.raises(UserError, match="does not exist"):
        config.resolve(profile="no/such/file.yaml")


def test_invalid_values_name_key_and_layer(tmp_path, process_env):
    with pytest.raises(UserError, match=r"gpuscale\.backend \(from a flag\)"):
        config.resolve(overrides={"backend": "nosuch"})
    with pytest.raises(UserError, match=r"gpuscale\.protocol.*tcp, ucx"):
        config.resolve(overrides={"protocol": "udp"})
    with pytest.raises(UserError, match=r"gpuscale\.cluster\.gpus.*GPU indices"):
        config.resolve(overrides={"cluster": {"gpus": "abc"}})
    p = write_profile(tmp_path / "w.yaml", {"version": 1, "gpuscale": {"run": {"repeat": 0}}})
    with pytest.raises(UserError, match=r"gpuscale\.run\.repeat \(from profile"):
        config.resolve(profile=str(p))
    process_env.setenv("DASK_GPUSCALE__CLUSTER__WORKERS", "-1")
    with pytest.raises(UserError, match="DASK_GPUSCALE__CLUSTER__WORKERS"):
        config.resolve()


def test_a_fields_description_is_the_string_under_it():
    from gpuscale.config import UcxSettings
    from gpuscale.records.results import Result

    assert UcxSettings.model_fields["nvlink"].description == (
        "UCX over NVLink between GPUs: true / false forces it; null lets UCX choose (recommended)."
    )
    version = Result.model_fields["schema_version"]
    assert version.description == "The schema's version; readers skip records of another."
