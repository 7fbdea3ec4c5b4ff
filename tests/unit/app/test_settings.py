"""Settings file: defaults, round trip, atomic 0600 writes, corruption, unknown keys, CRUD."""

from __future__ import annotations

import json
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from kvpilot.core.app import settings as st
from kvpilot.core.base.errors import SettingsError
from kvpilot.core.base.goal import Goal
from kvpilot.core.base.plan import ServingSettings


@pytest.fixture()
def store(tmp_path: Path) -> st.SettingsStore:
    return st.SettingsStore(tmp_path / "cfg")


def _write(store: st.SettingsStore, data: object) -> None:
    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.write_text(json.dumps(data), encoding="utf-8")


def test_missing_file_gives_defaults_without_warnings(store: st.SettingsStore) -> None:
    result = store.load()
    assert result.warnings == ()
    assert result.settings.names == (st.DEFAULT_PROFILE_NAME,)
    assert result.settings.active.host == "127.0.0.1"
    assert result.settings.active.plan.gpu_memory_utilization is None  # auto


def test_env_overrides_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(st.CONFIG_DIR_ENV, str(tmp_path / "x"))
    assert st.SettingsStore().path == tmp_path / "x" / "settings.json"
    monkeypatch.delenv(st.CONFIG_DIR_ENV)
    assert st.default_config_dir().name.lower() == "kvpilot"


def test_round_trip_keeps_every_field(store: st.SettingsStore) -> None:
    profile = st.Profile(
        name="Chat 32k",
        model_ref="Qwen/Qwen3-14B-AWQ",
        goal=Goal(use_case="long-docs", context_tokens=32768, users=3, min_weight_bits=8),
        plan=ServingSettings(
            max_model_len=32768,
            max_num_seqs=3,
            kv_cache_dtype="fp8",
            gpu_memory_utilization=0.91,
            enforce_eager=True,
            max_num_batched_tokens=4096,
            kv_cache_memory_bytes=8 << 30,
            enable_prefix_caching=False,
            dtype="float16",
        ),
        vllm_runtime="/opt/vllm/bin/vllm",
        host="0.0.0.0",
        port=8123,
        api_key="sk-secret",
        hf_cache_dir="/data/hf",
        hf_token="hf_abc",
        extra_args="--max-cudagraph-capture-size 256 --disable-log-requests",
        sampling_hz=5.0,
        theme="dark",
    )
    settings = st.Settings(
        profiles=(st.Profile(name="Default"), profile),
        active_profile="Chat 32k",
        window_geometry="AdnQywADAAA=",
    )
    store.save(settings)
    loaded = store.load()
    assert loaded.warnings == ()
    assert loaded.settings == settings
    assert loaded.settings.active.api_key == "sk-secret"


def test_file_is_written_0600_and_atomically(store: st.SettingsStore) -> None:
    store.save(st.Settings())
    mode = stat.S_IMODE(store.path.stat().st_mode)
    assert mode == 0o600
    # no temp files left next to it
    assert sorted(p.name for p in store.path.parent.iterdir()) == ["settings.json"]


def test_failed_write_leaves_previous_file_intact(
    store: st.SettingsStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.save(st.Settings(window_geometry="first"))

    def boom(self: Path, target: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "replace", boom)
    with pytest.raises(SettingsError, match="No space left on device"):
        store.save(st.Settings(window_geometry="second"))
    monkeypatch.undo()
    assert store.load().settings.window_geometry == "first"
    assert sorted(p.name for p in store.path.parent.iterdir()) == ["settings.json"]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2, 3]", "not a JSON object"),
        ('{"schema_version": 1, "profiles": 5}', "'profiles' is not a list"),
        ('{"schema_version": "two"}', "schema_version"),
    ],
)
def test_corrupt_file_is_kept_aside_and_defaults_used(
    store: st.SettingsStore, content: str, why: str
) -> None:
    store.path.parent.mkdir(parents=True)
    store.path.write_text(content, encoding="utf-8")
    result = store.load()
    assert result.settings == st.Settings()
    assert len(result.warnings) == 1
    w = result.warnings[0]
    assert w.kind == "corrupt"
    assert why in w.message
    assert w.backup_path is not None
    assert w.backup_path.name.startswith("settings.json.corrupt-")
    assert w.backup_path.read_text(encoding="utf-8") == content
    assert not store.path.exists()
    # the app can save again right after
    store.save(result.settings)
    assert store.load().warnings == ()


def test_two_corruptions_in_the_same_second_keep_both_backups(store: st.SettingsStore) -> None:
    for text in ("{bad", "{worse"):
        store.path.parent.mkdir(parents=True, exist_ok=True)
        store.path.write_text(text, encoding="utf-8")
        store.load()
    backups = sorted(p.read_text() for p in store.path.parent.glob("settings.json.corrupt-*"))
    assert backups == ["{bad", "{worse"]


def test_unknown_keys_from_newer_version_survive_a_save(store: st.SettingsStore) -> None:
    data = {
        "schema_version": 7,
        "active_profile": "P",
        "window_geometry": "",
        "telemetry_retention_h": 48,
        "profiles": [
            {
                "name": "P",
                "port": 9000,
                "speculative": {"method": "ngram", "k": 4},
                "plan": {"max_model_len": 4096, "prefill_chunk": 512},
            }
        ],
    }
    _write(store, data)
    result = store.load()
    assert [w.kind for w in result.warnings] == ["newer_version"]
    s = result.settings
    assert s.active.port == 9000
    assert s.active.plan.max_model_len == 4096
    # the user edits something this version knows, then saves
    s = st.update_profile(s, replace(s.active, port=9001))
    store.save(s)
    written = json.loads(store.path.read_text())
    assert written["schema_version"] == 7
    assert written["telemetry_retention_h"] == 48
    prof = written["profiles"][0]
    assert prof["port"] == 9001
    assert prof["speculative"] == {"method": "ngram", "k": 4}
    assert prof["plan"]["prefill_chunk"] == 512
    assert prof["plan"]["max_model_len"] == 4096


def test_duplicate_keeps_unknown_keys(store: st.SettingsStore) -> None:
    _write(store, {"schema_version": 1, "profiles": [{"name": "A", "future": [1, 2]}]})
    s = st.duplicate_profile(store.load().settings, "A", "B")
    assert s.profile("B").unknown == {"future": [1, 2]}


def test_wrong_type_and_out_of_range_fields_fall_back_with_warning(
    store: st.SettingsStore,
) -> None:
    _write(
        store,
        {
            "schema_version": 1,
            "profiles": [
                {
                    "name": "A",
                    "port": "eighty",
                    "sampling_hz": 500,
                    "theme": "neon",
                    "model_ref": "m",
                    "plan": {
                        "max_model_len": 2048,
                        "max_num_seqs": "4",
                        "gpu_memory_utilization": 1.7,
                    },
                }
            ],
        },
    )
    result = store.load()
    p = result.settings.active
    assert p.port == 8000
    assert p.sampling_hz == st.Profile(name="x").sampling_hz
    assert p.theme == "system"
    assert p.model_ref == "m"  # valid fields are kept
    # a version-1 file: its plan's context and sequences are the goal's context and users now
    assert p.goal.context_tokens == 2048
    assert p.goal.users == 4  # default (the string was rejected)
    assert p.plan.max_model_len is None and p.plan.max_num_seqs is None
    assert p.plan.gpu_memory_utilization is None
    messages = " | ".join(w.message for w in result.warnings)
    for needle in ("port", "sampling_hz", "theme", "goal.users", "gpu_memory_utilization"):
        assert needle in messages
    assert all(w.kind == "invalid_value" for w in result.warnings)


def test_wide_host_without_api_key_is_reset_to_localhost(store: st.SettingsStore) -> None:
    _write(store, {"schema_version": 1, "profiles": [{"name": "A", "host": "0.0.0.0"}]})
    result = store.load()
    assert result.settings.active.host == "127.0.0.1"
    assert any("api_key" in w.message for w in result.warnings)


def test_profiles_without_name_or_duplicated_are_dropped(store: st.SettingsStore) -> None:
    _write(
        store,
        {
            "schema_version": 1,
            "active_profile": "zzz",
            "profiles": [{"port": 1}, {"name": "A"}, {"name": "A", "port": 9}],
        },
    )
    result = store.load()
    assert result.settings.names == ("A",)
    assert result.settings.active_profile == "A"  # unknown active name falls back
    assert result.settings.active.port == 8000
    assert len(result.warnings) == 2


def test_migration_from_version_0(store: st.SettingsStore) -> None:
    _write(store, {"profiles": {"Old": {"port": 8100}}, "active_profile": "Old"})
    result = store.load()
    assert result.warnings == ()
    assert result.settings.schema_version == st.SCHEMA_VERSION
    assert result.settings.active.name == "Old"
    assert result.settings.active.port == 8100


def test_migrate_runs_registered_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(st, "SCHEMA_VERSION", 2)
    calls: list[int] = []

    def one_to_two(data: dict) -> dict:
        calls.append(data["schema_version"])
        data["schema_version"] = 2
        data["renamed"] = data.pop("old", None)
        return data

    monkeypatch.setitem(st.MIGRATIONS, 1, one_to_two)
    out = st.migrate({"schema_version": 1, "old": 3})
    assert calls == [1]
    assert out == {"schema_version": 2, "renamed": 3}


def test_migrate_without_a_step_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(st, "SCHEMA_VERSION", st.SCHEMA_VERSION + 1)
    last = st.SCHEMA_VERSION - 1
    with pytest.raises(SettingsError, match=f"no migration from settings schema version {last}"):
        st.migrate({"schema_version": 1})


def test_world_readable_file_with_secrets_is_reported(store: st.SettingsStore) -> None:
    store.save(st.Settings(profiles=(st.Profile(name="a", hf_token="hf_x"),), active_profile="a"))
    store.path.chmod(0o644)
    result = store.load()
    assert [w.kind for w in result.warnings] == ["permissions"]
    store.save(result.settings)
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


def test_unreadable_directory_is_a_settings_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    store = st.SettingsStore(blocker / "sub")
    with pytest.raises(SettingsError, match="cannot write"):
        store.save(st.Settings())


# --------------------------------------------------------------------------- CRUD


def test_create_duplicate_rename_switch_delete() -> None:
    s = st.Settings()
    s = st.create_profile(s, "  Long docs ")
    assert s.names == ("Default", "Long docs")
    assert s.active_profile == "Long docs"
    s = st.update_profile(
        s, replace(s.active, port=8100, goal=Goal(context_tokens=65536))
    )
    s = st.duplicate_profile(s, "Long docs", "Long docs fp8")
    assert s.active.port == 8100
    assert s.active.goal.context_tokens == 65536
    s = st.rename_profile(s, "Long docs fp8", "Docs fp8")
    assert s.active_profile == "Docs fp8"
    s = st.switch_profile(s, "Default")
    assert s.active.port == 8000
    s = st.delete_profile(s, "Default")
    assert s.names == ("Long docs", "Docs fp8")
    assert s.active_profile == "Long docs"
    s = st.delete_profile(s, "Docs fp8")
    with pytest.raises(SettingsError, match="only profile"):
        st.delete_profile(s, "Long docs")


@pytest.mark.parametrize("bad", ["", "   ", "Default"])
def test_bad_new_names_are_refused(bad: str) -> None:
    with pytest.raises(SettingsError):
        st.create_profile(st.Settings(), bad)


def test_unknown_profile_names_are_refused() -> None:
    s = st.Settings()
    with pytest.raises(SettingsError, match="no profile named 'nope'"):
        st.switch_profile(s, "nope")
    with pytest.raises(SettingsError):
        st.rename_profile(s, "nope", "x")
    with pytest.raises(SettingsError):
        st.duplicate_profile(s, "nope", "x")


def test_update_profile_validates() -> None:
    s = st.Settings()
    with pytest.raises(SettingsError, match="port"):
        st.update_profile(s, replace(s.active, port=70000))
    with pytest.raises(SettingsError, match="sampling_hz"):
        st.update_profile(s, replace(s.active, sampling_hz=0))


def test_a_wrongly_typed_serving_setting_in_a_profile_falls_back(store: st.SettingsStore) -> None:
    _write(store, {"schema_version": 1, "profiles": [
        {"name": "A", "plan": {"max_num_batched_tokens": "many", "dtype": 16,
                               "kv_cache_memory_bytes": 1 << 30}}]})
    result = store.load()
    plan = result.settings.active.plan
    assert plan.max_num_batched_tokens is None and plan.dtype is None
    assert plan.kv_cache_memory_bytes == 1 << 30
    messages = " | ".join(w.message for w in result.warnings)
    assert "max_num_batched_tokens" in messages and "dtype" in messages


def test_a_version_1_goal_moves_out_of_the_plan(store: st.SettingsStore) -> None:
    """Version 1 kept the goal in ``plan`` (context as max_model_len, users as max_num_seqs);
    the file is read into the profile's goal and written back as version 2."""
    _write(store, {"schema_version": 1, "active_profile": "B", "profiles": [
        {"name": "B", "plan": {"use_case": "batch", "max_model_len": 4096, "max_num_seqs": 16,
                               "allow_4bit": False, "kv_cache_dtype": "fp8",
                               "enforce_eager": True}}]})
    result = store.load()
    assert result.warnings == ()
    profile = result.settings.active
    assert profile.goal == Goal(use_case="batch", context_tokens=4096, users=16,
                                min_weight_bits=8)
    assert profile.plan == ServingSettings(kv_cache_dtype="fp8", enforce_eager=True)
    store.save(result.settings)
    written = json.loads(store.path.read_text())
    assert written["schema_version"] == st.SCHEMA_VERSION == 2
    (body,) = written["profiles"]
    assert body["goal"] == {"use_case": "batch", "context_tokens": 4096, "users": 16,
                            "min_weight_bits": 8}
    assert {"use_case", "allow_4bit"}.isdisjoint(body["plan"])
    assert body["plan"]["max_model_len"] is None and body["plan"]["kv_cache_dtype"] == "fp8"
    assert store.load().settings.active == profile


def test_unknown_goal_keys_are_kept(store: st.SettingsStore) -> None:
    _write(store, {"schema_version": 2, "profiles": [
        {"name": "A", "goal": {"users": 3, "latency_slo_s": 2.5}}]})
    s = store.load().settings
    assert s.active.goal.users == 3
    store.save(s)
    assert json.loads(store.path.read_text())["profiles"][0]["goal"]["latency_slo_s"] == 2.5
