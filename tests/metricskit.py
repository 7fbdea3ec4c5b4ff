"""prometheus_client's text parser as the oracle of kvpilot's /metrics line parser.

prometheus_client is a development dependency only: the program reads /metrics with its own
parser (:func:`kvpilot.core.vllm.metrics.parse_metrics`), and the tests check it against this.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families

from kvpilot.core.vllm.metrics import (
    MetricsSample,
    ScrapeError,
    ScrapeErrorKind,
    parse_metrics,
    parse_metrics_with,
)


def prometheus_samples(text: str) -> Iterable[tuple[str, Mapping[str, str], float]]:
    """Every sample of ``text`` as prometheus_client reads it; what it rejects is MALFORMED."""
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                yield sample.name, sample.labels, float(sample.value)
    except ScrapeError:
        raise
    except Exception as exc:
        raise ScrapeError(
            ScrapeErrorKind.MALFORMED, f"/metrics is not valid Prometheus text: {exc}"
        ) from exc


def parse_with_prometheus_client(text: str, t_monotonic_s: float) -> MetricsSample:
    """The sample prometheus_client's reading of the whole payload gives."""
    return parse_metrics_with(text, t_monotonic_s, prometheus_samples)


#: the two parsers, for tests that run on both
PARSERS = {"fast": parse_metrics, "full": parse_with_prometheus_client}
