"""Release: vLLM version strings as the release number plus the build variant; the supported
range and which release has which CUDA-graph flag."""

from __future__ import annotations

import pytest

from kvpilot.core.base import versions
from kvpilot.core.base.versions import NEWEST_KNOWN, Release, release_number
from kvpilot.core.runtimes.discovery import FlagSet
from kvpilot.core.vllm.command import LaunchSpec, build_command


@pytest.mark.parametrize(
    ("text", "number", "variant"),
    [
        ("0.32.0+cpu", "0.32.0", "cpu"),
        ("v0.11.0+cpu", "0.11.0", "cpu"),
        ("0.10.2rc1", "0.10.2", None),
        ("0.10.1.1", "0.10.1.1", None),
        ("0.29.1rc1.dev17+gd2d649e67.d20260913", "0.29.1", None),
        ("0.9.2+cu128", "0.9.2", "cu128"),
        ("0.33", "0.33.0", None),
        ("0.8.5.post1", "0.8.5", None),
        ("0.6.3.post1+rocm624", "0.6.3", "rocm624"),
        ("0.20.0-custom", "0.20.0", None),
    ],
)
def test_number_and_variant(text: str, number: str, variant: str | None) -> None:
    r = Release.parse(text)
    assert (r.number, r.variant) == (number, variant)
    assert release_number(text) == number


@pytest.mark.parametrize("text", [None, "", "  ", "nightly", "abc+cpu"])
def test_unknown_text_is_the_newest_known_release(text: str | None) -> None:
    assert Release.parse(text).number == NEWEST_KNOWN


@pytest.mark.parametrize(
    "text",
    [None, "", "0.33.0", "v0.11.0+cpu", "0.10.2rc1", "0.29.1rc1.dev17+gabc.d2026", "nightly"],
)
def test_each_text_is_read_once_and_its_release_shared(text: str | None) -> None:
    # planning the catalog asks for a few releases thousands of times: the first reading serves
    assert Release.parse(text) is Release.parse(text)
    assert Release.parse(text) == Release._read(text)


def test_comparison_ignores_the_variant_and_pre_releases() -> None:
    assert Release.parse("0.32.0+cpu").at_least("0.32")
    assert Release.parse("0.10.2rc1").at_least("0.10.2")
    assert not Release.parse("0.10.1.1").at_least("0.10.2")
    assert Release.parse("0.32.0+cpu").is_cpu_build and not Release.parse("0.32.0").is_cpu_build
    assert str(Release.parse("0.32.0+cpu")) == "0.32.0+cpu"
    # missing trailing parts count as zeros; a Release compares like its text
    assert Release.parse("0.10").at_least("0.10.0") and Release.parse("0").at_least("0.0.0")
    assert Release.parse("0.10.2").at_least(Release.parse("0.10"))
    assert not Release.parse("0.10").at_least(Release((0, 10, 2)))


def test_every_feature_names_its_first_release_and_source() -> None:
    from kvpilot.core.base.versions import FEATURES, supports

    for feature in FEATURES.values():
        assert Release.parse(feature.since).number == feature.since and feature.source
        assert supports(feature.name, feature.since)
        assert supports(feature.name, feature.since + "+cpu")
    assert not supports("max_model_len_auto", "0.13.0")
    assert supports("cudagraph_in_budget", None)  # unknown -> the newest rules
    with pytest.raises(KeyError):
        supports("no_such_feature", "0.32.0")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.33.0", (0, 33, 0)),
        ("0.33", (0, 33, 0)),
        ("0.10.1.1", (0, 10, 1, 1)),
        ("v0.11.0+cpu", (0, 11, 0)),
        ("0.16.1rc1.dev265+gd106bf39f", (0, 16, 1)),
        ("0.29.1rc1.dev17+gd2d649e67.d20260913", (0, 29, 1)),
        (None, None),
        ("main", None),
    ],
)
def test_release(text: str | None, expected: tuple[int, ...] | None) -> None:
    assert versions.release(text) == expected


def test_range_and_notes() -> None:
    assert versions.supported_range_text() == "vLLM 0.6 to 0.34"
    assert versions.support_note("0.33.0") is None
    assert versions.support_note("0.34.0") is None
    assert versions.support_note("0.6.6") is None
    assert versions.support_note(None) is None
    newer = versions.support_note("0.35.0")
    assert newer is not None and "newer than the newest release kvpilot knows (0.34)" in newer
    older = versions.support_note("0.5.4")
    assert older is not None and "older than 0.6" in older
    # a newer release gets the newest formats; an unknown one every format
    assert versions.applies("0.40.0", "0.28.0")
    assert not versions.applies("0.40.0", "0.10.2", "0.28.0")
    assert versions.applies(None, "0.6.0", "0.8.0")
    assert versions.applies("0.27.1", "0.10.2", "0.28.0")


@pytest.mark.parametrize(
    ("version", "flag", "mode"),
    [
        ("0.8.5", None, False),
        ("0.9.2", "--cuda-graph-sizes", False),
        ("0.10.2", "--cuda-graph-sizes", True),
        ("0.11.0", "--cuda-graph-sizes", True),
        ("0.12.0", "--max-cudagraph-capture-size", True),
        ("0.33.0", "--max-cudagraph-capture-size", True),
    ],
)
def test_cudagraph_flags_by_release(version: str, flag: str | None, mode: bool) -> None:
    assert versions.cudagraph_size_flag(version) == flag
    assert versions.has_cudagraph_mode(version) is mode


def test_the_runtimes_own_flag_wins() -> None:
    spec = LaunchSpec(model="/m", max_cudagraph_capture_size=128, cudagraph_mode="piecewise")
    old = FlagSet("0.11.0", frozenset({"--cuda-graph-sizes", "--compilation-config",
                                       "--host", "--port", "--max-model-len"}))
    argv = build_command(spec, flags=old).argv
    assert argv[argv.index("--cuda-graph-sizes") + 1] == "128"
    assert argv[argv.index("--compilation-config") + 1] == '{"cudagraph_mode":"PIECEWISE"}'
    plain = build_command(spec).argv
    assert "--max-cudagraph-capture-size" in plain
