"""Every GUI form field, fuzzed with hypothesis: the settings dialog (runtime, host, port, API
key, HF cache and token, extra vLLM arguments, sampling rate), the planner's inputs (context,
users, KV dtype, utilization, model path or id), the benchmark dialog and the attach dialog.

For each example: nothing raises but the documented error (``KvpilotError`` from the planning
and attach calls, shown to the user; the forms themselves raise nothing), nothing hangs (each
example is timed), and invalid input is told where it was typed (the settings dialog's problem
list with OK disabled, the planner's context note, the benchmark dialog's status line).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from kvpilot.core.app import settings as st
from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.vllm.client import MAX_CONCURRENCY, LoadTestConfig, LoadTestError
from kvpilot.gui import theme
from kvpilot.gui.bridge import CoreBridge
from kvpilot.gui.dialogs.benchmark_dialog import BenchmarkDialog
from kvpilot.gui.dialogs.settings_dialog import SettingsDialog
from kvpilot.gui.workers import wait_for_pool

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
#: no single example may take longer (the GUI would have hung)
EXAMPLE_LIMIT_S = 5.0

#: text a user may type or paste: shell metacharacters, quotes, spaces, non-ASCII, control
#: characters, very long runs
NASTY = ["'", '"', "\\", ";", "|", "&", "$(", "`", "\n", "\t", " ", "\x00", "~", "*", "é", "模型",
         "--", "=", "%", "\u202e", "\U0001f600"]
typed = hs.one_of(
    hs.text(max_size=40),
    hs.lists(hs.sampled_from(NASTY) | hs.text(max_size=6), max_size=12).map("".join),
    hs.text(alphabet="9", min_size=20, max_size=400),
)
numbers = hs.one_of(
    hs.integers(min_value=-(2**63), max_value=2**63),
    hs.floats(allow_nan=True, allow_infinity=True),
)


class Timed:
    def __enter__(self) -> Timed:
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        elapsed = time.monotonic() - self.t0
        assert elapsed < EXAMPLE_LIMIT_S, f"one example took {elapsed:.1f} s"


def _set_spin(spin, value: int | float) -> None:
    if isinstance(value, float) and value != value:  # NaN: what a paste of "nan" would give
        spin.lineEdit().setText("nan")
        return
    clamped = min(max(value, spin.minimum()), spin.maximum())
    spin.setValue(type(spin.value())(clamped))


# ------------------------------------------------------------------ settings dialog


def or_valid(*valid: str) -> hs.SearchStrategy[str]:
    """Mostly one fuzzed field among valid ones, so that accepted forms are reached too."""
    return hs.sampled_from(valid) | typed


EXTRA_ARGS = ("", "--seed 1", "--seed 1; rm -rf /", "--served-model-name 'a b'",
              "--served-model-name $(id)", '--chat-template "{{ x }}"', "--no-such-flag 3")


@FUZZ
@given(
    runtime=or_valid(""), host=or_valid("127.0.0.1", "0.0.0.0"), port=numbers,
    api_key=or_valid("", "sk-abc123"), hf_cache=or_valid("", "/tmp/hf cache"),
    hf_token=or_valid("", "hf_abc"), extra=or_valid(*EXTRA_ARGS), sampling=numbers,
)
def test_settings_dialog_fields(
    qtbot, tmp_path: Path, runtime: str, host: str, port: float, api_key: str, hf_cache: str,
    hf_token: str, extra: str, sampling: float,
) -> None:
    dlg = SettingsDialog(st.Settings(), config_path=str(tmp_path / "settings.json"))
    qtbot.addWidget(dlg)
    with Timed():
        dlg.runtime.setEditText(runtime)
        dlg.host.setText(host)
        _set_spin(dlg.port, port if not isinstance(port, float) or port == port else 0)
        dlg.api_key.setText(api_key)
        dlg.hf_cache.setText(hf_cache)
        dlg.hf_token.setText(hf_token)
        dlg.extra_args.setText(extra)
        _set_spin(dlg.sampling, sampling)
        problems = dlg._validate()
        ok = dlg.buttons.button(dlg.buttons.StandardButton.Ok)
        assert ok.isEnabled() == (not problems)
        if problems:  # told in the dialog, one line each, and nothing is taken
            assert dlg.problems.text() == "\n".join(problems)
            assert all(p.strip() and "Traceback" not in p for p in problems)
            dlg.accept()
            assert dlg.result() != dlg.DialogCode.Accepted
            return
        assert dlg._commit(), dlg.problems.text()
        edited = dlg.result_settings()
        store = st.SettingsStore(tmp_path / "config")
        store.save(edited)  # what was accepted survives the disk round trip unchanged
        assert store.load().settings.active == edited.active


# ------------------------------------------------------------------ planner inputs

model_refs = hs.one_of(
    typed,
    hs.sampled_from(["", "", "Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b-instruct", "/no/such dir",
                     "~nobody-here/model", "./relative path", "C:\\models\\x", "org/na me",
                     "a" * 300, "../" * 40, "/etc", "/dev/null"]),
)


@pytest.fixture
def window(make_window, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return make_window()


@FUZZ
@given(context=typed, users=numbers, util=numbers, util_auto=hs.booleans(), kv=hs.booleans(),
       model=model_refs)
def test_planner_inputs(
    window, context: str, users: float, util: float, util_auto: bool, kv: bool, model: str
) -> None:
    planner = window.planner
    with Timed():
        planner.context.setEditText(context)
        _set_spin(planner.users, users if not isinstance(users, float) or users == users else 1)
        planner.util_auto.setChecked(util_auto)
        _set_spin(planner.util, util)
        planner.kv_dtype.setCurrentIndex(int(kv))
        planner.model.setEditText(model)
        request = planner.request()
        tokens, problem = planner.context_tokens()
        assert request.goal.context_tokens == tokens
        assert 16 <= tokens <= 16 * 1024 * 1024
        assert planner.context_problem.isVisibleTo(planner) == (problem is not None)
        if problem is not None:
            assert planner.context_problem.text() == problem
        try:
            result = window.services.plan(window.gpu_control.target, request)
        except KvpilotError as exc:  # the documented error: shown as one line
            assert exc.message.strip() and "\n" not in exc.message.strip()
        else:
            assert all(row.title for row in result.rows)


# ------------------------------------------------------------------ benchmark dialog

levels_text = hs.one_of(
    typed,
    hs.lists(hs.integers(min_value=-5, max_value=10**30), max_size=6).map(
        lambda xs: ", ".join(map(str, xs))
    ),
)


@FUZZ
@given(levels=levels_text, prompt=numbers, output=numbers, requests=numbers)
def test_benchmark_dialog_fields(
    qtbot, levels: str, prompt: float, output: float, requests: float
) -> None:
    ran: list[LoadTestConfig] = []

    def runner(config, _progress, _cancel):
        ran.append(config)
        raise LoadTestError("the stand-in runner does not send requests")

    dlg = BenchmarkDialog("http://127.0.0.1:9", "m", CoreBridge(), runner, LoadTestConfig)
    qtbot.addWidget(dlg)
    with Timed():
        dlg.levels.setText(levels)
        for spin, value in ((dlg.prompt_tokens, prompt), (dlg.output_tokens, output),
                            (dlg.requests, requests)):
            _set_spin(spin, value if not isinstance(value, float) or value == value else 1)
        started = dlg.start()
        wait_for_pool(10_000)
        qtbot.wait(1)  # the pool's answer is delivered on the GUI thread
        if not started:  # told in the status line, in the failure colour
            assert dlg.status.text().strip()
            assert theme.FAIL in dlg.status.styleSheet()
            assert ran == []
            return
        (config,) = ran
        assert all(1 <= c <= MAX_CONCURRENCY for c in config.concurrency_levels)
        qtbot.waitUntil(lambda: "benchmark failed" in dlg.status.text(), timeout=5000)


# ------------------------------------------------------------------ attach dialog

urls = hs.one_of(
    typed,
    hs.builds(
        lambda scheme, port, path: f"{scheme}127.0.0.1:{port}{path}",
        hs.sampled_from(["http://", "https://", "ftp://", "", "http:/", "HTTP://"]),
        hs.integers(min_value=-1, max_value=70_000),
        typed.map(lambda t: t.replace("\x00", "")),
    ),
)


@FUZZ
@given(url=urls, api_key=typed, log_path=typed)
def test_attach_fields(window, url: str, api_key: str, log_path: str) -> None:
    from kvpilot.gui.dialogs.attach_dialog import AttachDialog

    dlg = AttachDialog(window, url=url)
    dlg.api_key.setText(api_key)
    dlg.log_path.setText(log_path)
    values = dlg.values()
    dlg.deleteLater()
    with Timed():
        try:
            window.services.attach(*values)
        except KvpilotError as exc:  # the documented error (WatchError): one line
            assert exc.message.strip()
