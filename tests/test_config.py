"""Settings: YAML defaults vs schema, dask.config integration, layer precedence, profiles."""

from __future__ import annotations

import pathlib

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
def test_schema_in_sync_with_yaml():
    assert config.schema_keys() == config.default_keys()
    # and the YAML's values are the schema's defaults (one source of truth for both)
    defaults = config.Settings().model_dump(by_alias=True)
    assert (
        config.Settings.model_validate(config.normalize(config.DEFAULTS["gpuscale"])).model_dump(
            by_alias=True
        )
        == defaults
    )


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
    assert {v for v in config.KEYWORDS.values()} <= config.schema_keys()


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
