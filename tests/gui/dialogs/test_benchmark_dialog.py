"""The load-test dialog's GPU columns: J/token, mean power and throttling per level, from the
core's energy figures (:func:`kvpilot.core.hardware.energy.gpu_energy` over GPU samples), and the
throttle sentence in the status. A whole load test against the real engine with the recorded RTX
4090:
tests/gui/test_main_window_e2e.py."""

from __future__ import annotations

from dataclasses import replace

from kvpilot.core.app.loadtest import load_test_config
from kvpilot.core.base.throttle import reason_words
from kvpilot.core.hardware.energy import gpu_energy
from kvpilot.core.hardware.sampler import GpuSample
from kvpilot.core.vllm.client import LevelResult, LoadTestReport
from kvpilot.gui.bridge import CoreBridge
from kvpilot.gui.dialogs.benchmark_dialog import RESULT_COLUMNS, BenchmarkDialog

#: NVML's power-cap clock-event bit (nvmlClocksEventReasonSwPowerCap)
SW_POWER_CAP = 0x4


def _level(c: int, gpu: object) -> LevelResult:
    return LevelResult(
        concurrency=c, requests_sent=8, requests_ok=8, errors=0, error_examples=(),
        duration_s=10.0, ttft_p50_s=0.1, ttft_p90_s=0.2, ttft_p99_s=0.3, tpot_p50_s=0.02,
        tpot_p90_s=0.03, tpot_p99_s=0.04, e2e_p50_s=1.0, e2e_p90_s=1.1, e2e_p99_s=1.2,
        prompt_tokens_total=2048, prompt_tokens_mean=256.0, output_tokens_total=1000,
        output_tokens_per_s=100.0, requests_per_s=0.8, goodput_requests=8, goodput_per_s=0.8,
        meets_slo_p99=True, gpu=gpu,  # type: ignore[arg-type]
    )


def test_gpu_columns_and_throttle_note(qtbot) -> None:
    # 10 s at 300 W (energy counter) for level 1; 10 s at 450 W with the power cap for level 4
    cool = [GpuSample(t_monotonic_s=t, gpu_index=0, power_w=300.0, energy_mj=int(t * 300e3),
                      throttle_reasons_mask=0) for t in range(0, 11)]
    hot = [GpuSample(t_monotonic_s=t, gpu_index=0, power_w=450.0,
                     throttle_reasons_mask=SW_POWER_CAP) for t in range(20, 31)]
    e1 = gpu_energy(cool, 0.0, 10.0, tokens=1000)
    e4 = gpu_energy(hot, 20.0, 30.0, tokens=1000)
    assert e1 is not None and e4 is not None and e4.throttled
    report = LoadTestReport(
        base_url="http://127.0.0.1:9", model="m", api="completions", prompt_tokens_target=256,
        output_tokens_target=128, ttft_slo_s=1.0, tpot_slo_s=0.05,
        prompt_calibration="tokenize", prompt_words=200,
        levels=(_level(1, e1), _level(4, e4), _level(8, None)), slo_break_concurrency=None,
        slo_break_reason=None, warmup_output_tokens=0, cancelled=False,
    )
    dialog = BenchmarkDialog("http://127.0.0.1:9", "m", CoreBridge(), lambda *_: report,
                             load_test_config)
    qtbot.addWidget(dialog)
    assert dialog.start()
    qtbot.waitUntil(lambda: dialog.report is not None, timeout=10_000)
    col = {name: RESULT_COLUMNS.index(name) for name in ("J/token", "GPU W", "throttled")}
    cell = lambda r, name: dialog.table.item(r, col[name]).text()  # noqa: E731
    assert (cell(0, "J/token"), cell(0, "GPU W"), cell(0, "throttled")) == ("3", "300", "no")
    assert cell(1, "J/token") == "4.5" and cell(1, "GPU W") == "450"
    assert cell(1, "throttled") == ", ".join(reason_words(SW_POWER_CAP, slowing_only=True))
    assert (cell(2, "J/token"), cell(2, "throttled")) == ("-", "-")
    assert "THROTTLED" in dialog.table.item(1, col["throttled"]).toolTip()
    assert "throttled at concurrency 4" in dialog.status.text()
    # no throttle anywhere: the status says done, no warning
    calm = replace(report, levels=report.levels[:1])
    dialog._on_done(calm)
    assert dialog.status.text() == "done"
