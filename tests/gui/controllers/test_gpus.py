"""Which GPU: every GPU NVML reports in the header; plans, launch and telemetry follow it."""

from __future__ import annotations

UUID_4090 = "GPU-6f3a2c1e-8b4d-4e2a-9c71-0d5e3b7a9f12"
UUID_3090 = "GPU-1b2c3d4e-5f60-4718-8a9b-0c1d2e3f4a5b"


def test_two_gpus_default_to_the_card_without_the_display(make_window, qtbot) -> None:
    w = make_window("rtx4090-rtx3090")
    combo = w.gpu_combo
    assert combo.isVisibleTo(w)
    items = [combo.itemText(i) for i in range(combo.count())]
    assert items[0].startswith("0: RTX 4090") and items[0].endswith("(display)")
    assert items[1].startswith("1: RTX 3090")
    assert items[2] == "0+1: all 2 (tensor parallel)"
    assert w.gpu_control.gpu_indices == (1,) and combo.currentIndex() == 1
    target = w.gpu_control.target
    assert target.name == "NVIDIA GeForce RTX 3090" and target.uuids == (UUID_3090,)
    assert "3090" in w.gpu_panel.title.text()
    qtbot.waitUntil(lambda: w.services.gpu_sampler is not None, timeout=5000)
    assert w.services.gpu_sampler.index == 1
    # the launch of a plan goes to that card, by UUID
    row = next(r for r in w.planner.rows if r.fits)
    assert w.gpu_control.gpu_overrides(row) == {"cuda_visible_devices": UUID_3090}


def test_both_gpus_rank_parallel_plans_and_sample_both(make_window, qtbot) -> None:
    w = make_window("rtx4090-rtx3090")
    gen = w.plan_control.plan_generation
    assert w.gpu_control.select_gpus((0, 1))
    qtbot.waitUntil(
        lambda: w.plan_control.plan_generation > gen
        and any(r.inputs is not None and r.inputs.tensor_parallel_size == 2
                for r in w.planner.rows),
        timeout=30_000,
    )
    assert w.gpu_combo.currentIndex() == 2
    target = w.gpu_control.target
    assert target.gpu_set is not None and target.name == "RTX 4090 + RTX 3090"
    sampler = w.services.gpu_sampler
    assert sampler is not None and sampler.indices == (0, 1)
    sample = sampler.sample_once()
    assert sample.gpu_indices == (0, 1)
    assert sample.memory_total_bytes == 25757220864 + 25769803776  # both NVML totals
    fitting = [r for r in w.planner.rows if r.fits]
    parallel_rows = [r for r in fitting if r.inputs.tensor_parallel_size == 2]
    single_rows = [r for r in fitting if r.inputs.tensor_parallel_size == 1]
    assert parallel_rows and single_rows
    tp = parallel_rows[0]
    assert "RTX 4090 + RTX 3090" in tp.title and "no P2P" in tp.reason
    both = f"{UUID_4090},{UUID_3090}"
    assert w.gpu_control.gpu_overrides(tp) == {"cuda_visible_devices": both}
    one = single_rows[0]
    assert w.gpu_control.gpu_overrides(one) == {"cuda_visible_devices": UUID_3090}
    assert w.gpu_control.plan_gpu_indices(one) == (1,)


def test_one_gpu_shows_no_combo(make_window) -> None:
    w = make_window("rtx4090-desktop")
    assert not w.gpu_combo.isVisibleTo(w)
    assert w.gpu_control.gpu_indices == (0,)
    assert w.gpu_control.select_gpus((3,)) is False
    assert "there is no GPU 3" in w.statusBar().currentMessage()


def test_planner_mode_offers_pairs_of_cards(make_window, qtbot) -> None:
    w = make_window("no-driver")
    combo = w.gpu_panel.spec_combo
    names = [combo.itemText(i) for i in range(combo.count())]
    assert "2x NVIDIA GeForce RTX 4090" in names
    assert "NVIDIA GeForce RTX 4090 + NVIDIA GeForce RTX 3090" in names
    gen = w.plan_control.plan_generation
    combo.setCurrentText("NVIDIA GeForce RTX 4090 + NVIDIA GeForce RTX 3090")
    qtbot.waitUntil(
        lambda: w.plan_control.plan_generation > gen
        and any(r.inputs is not None and r.inputs.tensor_parallel_size == 2
                for r in w.planner.rows),
        timeout=30_000,
    )
    target = w.gpu_control.target
    assert target.name == "RTX 4090 + RTX 3090" and target.gpu_set is not None
    assert target.compute_capability == (8, 6)
    tp = next(r for r in w.planner.rows if r.inputs is not None
              and r.inputs.tensor_parallel_size == 2)
    assert tp.title.endswith("· RTX 4090 + RTX 3090")


def _cli_launch_line(capsys, version: str) -> str:
    """``kvpilot gpu``'s launch line for the same recorded desktop and vLLM release."""
    from kvpilot.core.cli import main

    capsys.readouterr()
    assert main(["gpu", "--fake-nvml", "rtx4090-desktop", "--vllm-version", version]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines()
                if x.startswith("  launch now  "))
    return line.removeprefix("  launch now  ")


def test_the_launch_line_speaks_of_the_vllm_found_as_kvpilot_gpu_does(
        make_window, qtbot, capsys) -> None:
    import sys

    from kvpilot.core.runtimes.discovery import VllmRuntime
    from kvpilot.gui import theme

    w = make_window()
    line = w.gpu_panel.warning
    # 0.33's default utilization (0.92) would not pass the start-up check on this desktop
    # (0.91 at most): a warning; 0.34 makes no such check
    for version, colour in (("0.33.0", theme.TIGHT), ("0.34.0", theme.MUTED)):
        w.runtime_control.set_runtime(
            VllmRuntime((sys.executable, "-c", "pass"), version, "env", sys.executable))
        cli = _cli_launch_line(capsys, version)
        # the CLI adds what the margin keeps; the window shows the sentence they share
        assert cli.startswith(line.text()) and line.text()
        assert not line.isHidden() and colour in line.styleSheet()
    assert line.text().startswith("vLLM 0.34+ sizes its KV cache from the memory free after "
                                  "warm-up and makes no start-up check; --gpu-memory-utilization "
                                  "0.83")
