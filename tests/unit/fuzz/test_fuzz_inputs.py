"""Bad input, fuzzed: every parser of outside data raises only its documented error and ends.

Each property runs a bounded number of examples (the whole file stays well under a minute on
two cores); ``hypothesis`` shrinks any failure to a small reproducer. Documented errors:
config.json and safetensors -> ``ModelSpecError``; vLLM log lines -> nothing (the scanner never
raises); /metrics text -> ``ScrapeError``; settings files -> nothing but warnings
(``SettingsError`` only when the file cannot be read at all); CLI flags -> an exit status.
"""

from __future__ import annotations

import gc
import json
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from metricskit import PARSERS

from kvpilot.core.app import settings as kst
from kvpilot.core.base.errors import KvpilotError, ModelSpecError, SettingsError
from kvpilot.core.models.local import load_local_model, spec_from_config
from kvpilot.core.models.weights import safetensors_tensor_bytes
from kvpilot.core.vllm import logparse
from kvpilot.core.vllm.metrics import ScrapeError

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

TESTS = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_collection_while_deep() -> Iterator[None]:
    """A parse nested 100,000 deep runs at the recursion limit: a garbage collection there
    may run a finalizer of an earlier test's object whose warning cannot even be formatted
    (``RecursionError`` in ``sys.unraisablehook``), which fails this test for another's
    leftovers. So collect first, and let nothing be collected while the parse runs."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
REAL_CONFIG = json.loads((TESTS / "data/models/llama-3.1-8b-instruct/config.json").read_text())

# ------------------------------------------------------------------ JSON values

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
CONFIG_KEYS = [
    *sorted(REAL_CONFIG),
    "text_config",
    "llm_config",
    "quantization_config",
    "layer_types",
    "head_dim",
    "num_experts",
    "num_local_experts",
    "sliding_window",
    "rope_scaling",
    "multi_query_attention",
    "multi_query_group_num",
    "kv_lora_rank",
    "model_type",
]


@st.composite
def configs(draw: Any) -> dict[str, Any]:
    """A real config.json with some keys replaced by wrong types, huge values or nesting."""
    config = dict(REAL_CONFIG)
    for key in draw(st.lists(st.sampled_from(CONFIG_KEYS), max_size=6)):
        if draw(st.booleans()):
            config.pop(key, None)
        else:
            config[key] = draw(json_values)
    return config


@FUZZ
@given(configs())
def test_config_json_raises_only_model_spec_error(config: dict[str, Any]) -> None:
    try:
        spec = spec_from_config(config, model_id="fuzz/model")
    except ModelSpecError as err:
        assert err.message
    else:
        assert spec.num_hidden_layers > 0 and spec.num_attention_heads > 0


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,  # deep nesting
        '{"architectures": ["LlamaForCausalLM"], "hidden_size": ' + "9" * 5000 + "}",
        "\ufeff{}",
        "",
        "null",
        '{"num_hidden_layers": 1e999}',
    ],
)
@pytest.mark.usefixtures("no_collection_while_deep")
def test_hostile_config_files_are_one_model_spec_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "config.json").write_text(text, encoding="utf-8")
    with pytest.raises(ModelSpecError):
        load_local_model(tmp_path)


# ------------------------------------------------------------------ safetensors headers

DTYPES = ["F16", "BF16", "F32", "I8", "F8_E4M3", "F4", "X9", "", "f16"]


@st.composite
def safetensors_files(draw: Any) -> bytes:
    tensors: dict[str, Any] = {}
    offset = 0
    for i in range(draw(st.integers(0, 4))):
        shape = draw(st.lists(st.integers(-2, 2**40), max_size=4))
        entry: Any = {
            "dtype": draw(st.sampled_from(DTYPES) | json_values),
            "shape": shape if draw(st.booleans()) else draw(json_values),
            "data_offsets": draw(
                st.just([offset, offset + 4]) | st.lists(st.integers(-5, 2**64), max_size=3)
            ),
        }
        if draw(st.booleans()):
            entry = draw(json_values)
        tensors[f"t{i}"] = entry
        offset += 4
    header = json.dumps(tensors).encode() if draw(st.booleans()) else draw(st.binary(max_size=64))
    declared = draw(
        st.just(len(header))
        | st.integers(0, 2**64 - 1)
        | st.sampled_from([0, len(header) + 1, 100_000_001])
    )
    data = draw(st.binary(max_size=32))
    return struct.pack("<Q", declared) + header + data + draw(st.binary(max_size=8))


@FUZZ
@given(safetensors_files())
def test_safetensors_headers_raise_only_model_spec_error(blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.safetensors"
        path.write_bytes(blob)
        try:
            total, count = safetensors_tensor_bytes(path)
        except ModelSpecError as err:
            assert err.message
        else:
            assert total >= 0 and count >= 0


def test_a_100_mb_header_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", 100_000_001))
        fh.truncate(8 + 100_000_001)  # sparse: the declared header really is there
    with pytest.raises(ModelSpecError, match="declares 100000001 bytes"):
        safetensors_tensor_bytes(path)


@pytest.mark.usefixtures("no_collection_while_deep")
def test_a_header_nested_too_deep_is_one_model_spec_error(tmp_path: Path) -> None:
    header = b"[" * 200_000 + b"]" * 200_000
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(ModelSpecError):
        safetensors_tensor_bytes(path)


# ------------------------------------------------------------------ vLLM log lines

REAL_LINES = [
    line
    for log in sorted((TESTS / "data/vllm_logs/cpu_0.32").glob("*.log"))
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines()[:400]
]


@st.composite
def log_lines(draw: Any) -> str:
    """Real vLLM lines with their numbers, units or tail mangled, or any text at all."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.text(max_size=300))
    line = draw(st.sampled_from(REAL_LINES))
    for _ in range(draw(st.integers(0, 3))):
        pos = draw(st.integers(0, len(line)))
        cut = draw(st.integers(0, 10))
        insert = draw(
            st.sampled_from(["", "9" * 400, "-1", "nan", "inf", "GiB", " ", ",", "1e309", "\x00"])
            | st.text(max_size=8)
        )
        line = line[:pos] + insert + line[pos + cut :]
    return line


@FUZZ
@given(st.lists(log_lines(), min_size=1, max_size=30), st.integers(-256, 256))
def test_log_scanner_never_raises(lines: list[str], returncode: int) -> None:
    scanner = logparse.LogScanner(version="0.32.0", port=8000)
    for line in lines:
        events = scanner.feed(line)
        assert isinstance(events, list)
        logparse.parse_line(line)
    failure = logparse.classify_exit(returncode, scanner, was_ready=returncode % 2 == 0)
    assert failure is None or failure.message


def test_one_10_mb_log_line_is_handled_quickly() -> None:
    import time

    scanner = logparse.LogScanner()
    line = "(APIServer pid=1) INFO 11-29 08:10:34 [x.py:1] " + "A" * (10 << 20)
    started = time.perf_counter()
    assert scanner.feed(line) == []
    assert time.perf_counter() - started < 5.0


# ------------------------------------------------------------------ Prometheus text

METRICS = (TESTS / "data/metrics/metrics_during.txt").read_text(encoding="utf-8")
METRIC_LINES = METRICS.splitlines()


@st.composite
def metrics_texts(draw: Any) -> str:
    if draw(st.integers(0, 4)) == 0:
        return draw(st.text(max_size=400))
    lines = list(METRIC_LINES)
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        pos = draw(st.integers(0, len(line)))
        insert = draw(
            st.sampled_from(['"', "{", "}", "=", "\\", "NaN", "+Inf", "1e999", " ", "\n", ""])
            | st.text(max_size=6)
        )
        lines[i] = line[:pos] + insert + line[pos + draw(st.integers(0, 6)) :]
    text = "\n".join(lines)
    return text + "\n" if draw(st.booleans()) else text[: draw(st.integers(0, len(text)))]


@FUZZ
@given(metrics_texts(), st.sampled_from(sorted(PARSERS)))
def test_metrics_text_raises_only_scrape_error(text: str, parser: str) -> None:
    try:
        sample = PARSERS[parser](text, 1.0)
    except ScrapeError as err:
        assert str(err)
    else:
        assert sample.t_monotonic_s == 1.0


# ------------------------------------------------------------------ settings files


@st.composite
def settings_files(draw: Any) -> bytes:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.binary(max_size=200))
    if kind == 1:
        return json.dumps(draw(json_values)).encode()
    profile = {
        key: draw(json_values)
        for key in draw(
            st.lists(
                st.sampled_from(
                    ["name", "port", "host", "api_key", "sampling_hz", "theme", "extra_args",
                     "hf_token", "plan", "vllm_path", "unknown_future_key"]
                ),
                max_size=6,
            )
        )
    }
    if draw(st.booleans()):
        profile["name"] = draw(st.text(max_size=10))
    data = {
        "schema_version": draw(st.integers(-3, 99) | json_values),
        "profiles": [profile] if draw(st.booleans()) else draw(json_values),
        "active_profile": draw(json_values),
    }
    return json.dumps(data).encode()


@FUZZ
@given(settings_files())
def test_settings_files_load_with_warnings_only(blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = kst.SettingsStore(Path(tmp))
        store.path.write_bytes(blob)
        result = store.load()
        assert result.settings.profiles
        assert all(kst.profile_problems(p) == [] for p in result.settings.profiles)
        store.save(result.settings)  # what was loaded can always be written back
        assert store.load().settings == result.settings


HOSTILE_JSON = [
    "[" * 100_000 + "]" * 100_000,
    '{"schema_version": ' + "9" * 5000 + "}",
    "[]",
    "null",
    '"text"',
    "\x00\x01",
]


@pytest.mark.parametrize("text", HOSTILE_JSON)
@pytest.mark.usefixtures("no_collection_while_deep")
def test_hostile_settings_files_are_moved_aside(tmp_path: Path, text: str) -> None:
    store = kst.SettingsStore(tmp_path)
    store.path.write_text(text, encoding="utf-8")
    result = store.load()
    assert result.settings == kst.Settings()
    assert [w.kind for w in result.warnings] == ["corrupt"]
    assert result.warnings[0].backup_path is not None
    assert result.warnings[0].backup_path.read_text(encoding="utf-8") == text  # nothing lost


@FUZZ
@given(st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()))
def test_pidfiles_read_as_a_record_or_none(blob: bytes) -> None:
    from kvpilot.core.vllm.orphans import ServerRecord, read_pidfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "8000.json"
        path.write_bytes(blob)
        record = read_pidfile(path)
        assert record is None or isinstance(record, ServerRecord)


@pytest.mark.parametrize("text", HOSTILE_JSON)
def test_hostile_pidfiles_and_measurements(tmp_path: Path, text: str) -> None:
    from kvpilot.core.fit.measurements import MeasurementStore
    from kvpilot.core.vllm.orphans import read_pidfile

    (tmp_path / "8000.json").write_text(text, encoding="utf-8")
    assert read_pidfile(tmp_path / "8000.json") is None
    (tmp_path / "measurements.json").write_text(text, encoding="utf-8")
    with pytest.raises(SettingsError):
        MeasurementStore(tmp_path / "measurements.json")._read()


# ------------------------------------------------------------------ CLI flags

PLAN_FLAGS = [
    "--model", "--gpu", "--gpu-total-mib", "--gpu-free-mib", "--max-model-len",
    "--max-num-seqs", "--gpu-memory-utilization", "--max-num-batched-tokens",
    "--kv-cache-dtype", "--kv-cache-memory-bytes", "--quantization",
    "--tensor-parallel-size", "--dtype", "--block-size", "--vllm-version",
]
FLAG_VALUES = st.sampled_from(
    ["0", "-1", "1", "16", "4096", "1e9", "nan", "inf", "99999999999999999999", "", " ", "auto",
     "fp8", "RTX 4090", "Qwen/Qwen3-8B", "qwen3-8b", "1.5", "0.0", "8GiB", "--json", "'", "$(x)"]
) | st.text(max_size=12)


@st.composite
def cli_argvs(draw: Any) -> list[str]:
    command = draw(st.sampled_from(["plan", "recommend", "gpu"]))
    argv = [command]
    for flag in draw(st.lists(st.sampled_from([*PLAN_FLAGS, "--json", "--limit", "--users"]),
                              max_size=6)):
        argv.append(flag)
        if draw(st.integers(0, 5)):
            argv.append(draw(FLAG_VALUES))
    if command == "plan" and "--model" not in argv:
        models = ["qwen3-8b", str(TESTS / "data/models/qwen3-8b")]
        argv += ["--model", draw(st.sampled_from(models))]
    if command != "plan":
        argv = [a for a in argv if a not in ("--model",)]
    return argv


@FUZZ
@given(argv=cli_argvs())
def test_cli_flags_end_with_an_exit_status_never_a_traceback(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    from kvpilot.core import cli

    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KVPILOT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(kst.CONFIG_DIR_ENV, str(tmp_path / "config"))
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx4090-desktop")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    try:
        status = cli.main(argv)
    except SystemExit as exit_:  # argparse: usage errors (2), --help (0)
        status = exit_.code
    err = capsys.readouterr().err
    assert status in (0, 1, 2), (argv, status, err)
    assert "Traceback" not in err


def test_documented_errors_are_kvpilot_errors() -> None:
    assert issubclass(ModelSpecError, KvpilotError) and issubclass(SettingsError, KvpilotError)
