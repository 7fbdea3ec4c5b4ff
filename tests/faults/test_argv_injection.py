"""Model paths, extra vLLM arguments and API keys reach vLLM as argv items, never via a shell.

The stand-in vllm (tests/fakes/fake_vllm.py) records the argv and environment it was started
with; every value carries shell syntax that would create a marker file if any shell ran it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ports import free_port

from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.core.vllm.command import LaunchSpec, parse_extra_args
from kvpilot.core.vllm.supervisor import Supervisor

TESTS = Path(__file__).resolve().parents[1]
FAKE = TESTS / "fakes" / "fake_vllm.py"


def _payloads(marker: Path) -> list[str]:
    m = str(marker)
    return [
        f"$(touch {m}.1)",
        f"`touch {m}.2`",
        f"; touch {m}.3",
        f"| touch {m}.4",
        f"&& touch {m}.5 &",
        f"\n touch {m}.6",
        f"' ; touch {m}.7 ; '",
        f'" ; touch {m}.8 ; "',
    ]


@pytest.mark.parametrize("payload_index", range(8))
def test_shell_syntax_in_model_path_extra_args_and_api_key_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, payload_index: int
) -> None:
    marker = tmp_path / "marker"
    payload = _payloads(marker)[payload_index]
    model_dir = tmp_path / f"models/my model 'q' \"dq\" ünïcødé {payload}"
    model_dir.mkdir(parents=True)
    record = tmp_path / "argv.json"
    monkeypatch.setenv("FAKE_VLLM_ARGV_FILE", str(record))
    monkeypatch.chdir(tmp_path)  # a relative "touch marker" would land here
    extra = ("--chat-template", payload, "--seed", "7")
    # an API key travels in an HTTP header: printable ASCII without spaces (see the next test)
    api_key = "key" + "".join(ch for ch in payload if "!" <= ch <= "~")
    spec = LaunchSpec(
        model=str(model_dir),
        port=free_port(19600),
        api_key=api_key,
        extra_args=extra,
    )
    runtime = VllmRuntime((sys.executable, str(FAKE)), "0.32.0", "env", str(FAKE))
    sup = Supervisor(runtime, spec, data_dir=tmp_path / "data", check_flags=False, settle_s=0.1)
    sup.start()
    try:
        assert sup.wait_ready(20), (sup.state, sup.failure, sup.lines()[-40:])
    finally:
        sup.stop(sigint_wait_s=2, sigterm_wait_s=2)
    seen = json.loads(record.read_text())
    argv = seen["argv"]
    assert argv[:2] == ["serve", str(model_dir)]  # one argv item, byte for byte
    assert argv[-len(extra) :] == list(extra) or all(a in argv for a in extra)
    i = argv.index("--chat-template")
    assert argv[i + 1] == payload
    assert seen["api_key"] == api_key  # through the environment, unchanged
    assert api_key not in " ".join(argv)
    assert not list(tmp_path.glob("marker*")), "a shell ran part of an argument"
    # and the log never shows the key
    assert all(api_key not in line for line in sup.lines())


def test_extra_args_text_is_split_like_a_shell_but_never_run() -> None:
    args = parse_extra_args("--chat-template '$(touch /tmp/x)' --seed 7")
    assert args == ("--chat-template", "$(touch /tmp/x)", "--seed", "7")


@pytest.mark.parametrize("key", ["two words", "line\nbreak", "clé", "tab\there"])
def test_an_api_key_no_client_could_send_is_refused_before_launch(key: str) -> None:
    from kvpilot.core.base.errors import CommandError
    from kvpilot.core.vllm.command import build_command

    with pytest.raises(CommandError, match="printable ASCII"):
        build_command(LaunchSpec(model="/m", api_key=key), None)
