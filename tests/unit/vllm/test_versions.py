"""Release: vLLM version strings as the release number plus the build variant."""

from __future__ import annotations

import pytest

from kvpilot.core.vllm.versions import NEWEST_KNOWN, Release, release_number


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


def test_comparison_ignores_the_variant_and_pre_releases() -> None:
    assert Release.parse("0.32.0+cpu").at_least("0.32")
    assert Release.parse("0.10.2rc1").at_least("0.10.2")
    assert not Release.parse("0.10.1.1").at_least("0.10.2")
    assert Release.parse("0.32.0+cpu").is_cpu_build and not Release.parse("0.32.0").is_cpu_build
    assert str(Release.parse("0.32.0+cpu")) == "0.32.0+cpu"


def test_every_feature_names_its_first_release_and_source() -> None:
    from kvpilot.core.vllm.versions import FEATURES, supports

    for feature in FEATURES.values():
        assert Release.parse(feature.since).number == feature.since and feature.source
        assert supports(feature.name, feature.since)
        assert supports(feature.name, feature.since + "+cpu")
    assert not supports("max_model_len_auto", "0.13.0")
    assert supports("cudagraph_in_budget", None)  # unknown -> the newest rules
    with pytest.raises(KeyError):
        supports("no_such_feature", "0.32.0")
