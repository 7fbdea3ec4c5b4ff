"""Read vLLM's Prometheus ``/metrics`` into :class:`MetricsSample` records.

This is the only module that talks to ``/metrics``. It knows both generations of vLLM metric
names (``vllm:kv_cache_usage_perc`` and the older ``vllm:gpu_cache_usage_perc``,
``vllm:inter_token_latency_seconds`` and the older ``vllm:time_per_output_token_seconds``,
``vllm:prefix_cache_*`` and the older ``vllm:gpu_prefix_cache_*``) and the labels ``model_name``
and ``engine`` (values of several engines are added up; KV usage takes the fullest engine).

:func:`parse_metrics` keeps only the sample lines of the families read here (~110 of the 639
lines of a 0.32.0 payload) and reads them with a small line parser of the text format;
prometheus_client's parser spends most of its time walking label strings character by character,
which costs ~7 ms per scrape (1.4 % of a core at 2 Hz) against ~1 ms. prometheus_client is the
tests' oracle, not a dependency of the program: :func:`parse_metrics_with` takes any reader of
the whole payload, and the tests check that prometheus_client's gives identical samples on the
real payloads. The line parser still validates the whole payload when no vLLM family is found.

A server started with ``--disable-log-stats`` exposes no ``vllm:*`` metric at all: the sample then
says ``has_vllm_metrics=False`` and every vLLM field is ``None``, never zero.

Every way a scrape can fail (connection refused, timeout, HTTP status, empty, truncated or garbage
payload) raises :class:`ScrapeError` with a :class:`ScrapeErrorKind`; :class:`MetricsSampler`
turns those into gaps and never lets an exception escape its thread.
"""

from __future__ import annotations

import enum
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kvpilot.core.base.background import BackgroundLoop, notify
from kvpilot.core.base.errors import KvpilotError

if TYPE_CHECKING:  # httpx loads when first used (not at the app's start)
    import httpx

log = logging.getLogger("kvpilot.metrics")

__all__ = [
    "DISABLED_STATS_MESSAGE",
    "HistogramSnapshot",
    "MetricsSample",
    "MetricsSampler",
    "MetricsScraper",
    "ScrapeError",
    "ScrapeErrorKind",
    "Scraper",
    "parse_metrics",
    "parse_metrics_with",
]

DISABLED_STATS_MESSAGE = (
    "the server exposes no vllm:* metrics (it was started with --disable-log-stats); "
    "restart it without that flag to see KV usage, queue and latency"
)


class ScrapeErrorKind(str, enum.Enum):
    """Why a scrape produced no sample."""

    CONNECT = "connect"  # nothing listening / connection reset
    TIMEOUT = "timeout"  # no complete answer within the per-request timeout
    HTTP_STATUS = "http_status"  # an answer other than 200
    EMPTY = "empty"  # 200 with an empty body
    TRUNCATED = "truncated"  # the body stops mid-line or lacks families vLLM always has
    MALFORMED = "malformed"  # not Prometheus text
    TOO_LARGE = "too_large"  # a body larger than MAX_BODY_BYTES (vLLM's is ~100 KB)


#: the largest /metrics body read (bytes); a larger one is refused, never held in memory
MAX_BODY_BYTES = 8 << 20


class ScrapeError(KvpilotError):
    """A ``/metrics`` scrape that failed; ``kind`` says how. Recorded as a gap, never a zero."""

    def __init__(self, kind: ScrapeErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class HistogramSnapshot:
    """A cumulative Prometheus histogram at one instant.

    ``upper_bounds`` are the ``le`` values in ascending order, the last one ``inf``;
    ``cumulative_counts[i]`` is the number of observations <= ``upper_bounds[i]`` since the
    server started. ``sum`` is in the histogram's unit (seconds for the latency histograms).
    """

    upper_bounds: tuple[float, ...]
    cumulative_counts: tuple[float, ...]
    sum: float
    count: float


@dataclass(frozen=True)
class MetricsSample:
    """One parsed ``/metrics`` scrape. Counters are cumulative since the server started.

    Every vLLM field is ``None`` when the payload does not carry it (and all of them when
    ``has_vllm_metrics`` is False). ``kv_usage_frac`` is 0..1. Histograms are in seconds.
    ``cache_config`` holds the labels of ``vllm:cache_config_info`` as strings
    (``kv_cache_size_tokens``, ``kv_cache_max_concurrency``, ``num_gpu_blocks``, ``block_size``,
    ...). ``legacy_names`` is True when the pre-0.12 names were read.
    """

    t_monotonic_s: float
    has_vllm_metrics: bool
    running: float | None = None
    waiting: float | None = None
    kv_usage_frac: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    preemptions_total: float | None = None
    prefix_queries_total: float | None = None
    prefix_hits_total: float | None = None
    request_success_by_reason: Mapping[str, float] = field(default_factory=dict)
    ttft: HistogramSnapshot | None = None
    itl: HistogramSnapshot | None = None
    e2e: HistogramSnapshot | None = None
    tpot: HistogramSnapshot | None = None
    cache_config: Mapping[str, str] = field(default_factory=dict)
    model_name: str | None = None
    legacy_names: bool = False

    @property
    def message(self) -> str | None:
        """A line for the user when the sample lacks vLLM metrics, else None."""
        return None if self.has_vllm_metrics else DISABLED_STATS_MESSAGE

    def cache_config_number(self, key: str) -> float | None:
        """A numeric ``cache_config_info`` label (e.g. ``kv_cache_size_tokens``), else None."""
        raw = self.cache_config.get(key)
        if raw is None:
            return None
        try:
            value = float(raw)
        except ValueError:
            return None
        return value if math.isfinite(value) else None

    def cache_config_utilization(self) -> float | None:
        """``cache_config_info``'s ``gpu_memory_utilization`` (a fraction in (0, 1]), or None
        when absent or unset: vLLM 0.34 reports ``"None"`` (``CacheConfig.metrics_info`` is
        ``str()`` of each field) and resolves it to 1.0 with the extensible KV cache, 0.92
        without."""
        value = self.cache_config_number("gpu_memory_utilization")
        return value if value is not None and 0 < value <= 1 else None

    def cache_config_flag(self, key: str) -> bool | None:
        """A true/false ``cache_config_info`` label (``enable_extensible_kv_cache``, 0.34+),
        None when absent or ``"None"``."""
        raw = (self.cache_config.get(key) or "").strip().lower()
        return {"true": True, "false": False}.get(raw)

    def cache_config_capacity(self) -> dict[str, int | float]:
        """The KV capacity ``vllm:cache_config_info`` reports (vLLM 0.25+), by the name of the
        server capacity field each label fills (``kv_cache_tokens``, ``max_concurrency``,
        ``num_blocks``, ``block_size``, ``kv_cache_memory_bytes``; bytes and tokens); labels that
        are absent or not numbers are left out."""
        out: dict[str, int | float] = {}
        for label, name, kind in CACHE_CONFIG_CAPACITY_LABELS:
            value = self.cache_config_number(label)
            if value is not None:
                out[name] = kind(value)
        return out


#: ``vllm:cache_config_info`` label -> the capacity field it fills, and its type
CACHE_CONFIG_CAPACITY_LABELS: tuple[tuple[str, str, type[int] | type[float]], ...] = (
    ("kv_cache_size_tokens", "kv_cache_tokens", int),
    ("kv_cache_max_concurrency", "max_concurrency", float),
    ("num_gpu_blocks", "num_blocks", int),
    ("block_size", "block_size", int),
    ("kv_cache_memory_bytes", "kv_cache_memory_bytes", int),
)


# --- names ---------------------------------------------------------------------------------

_GAUGES: dict[str, str] = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
}
_KV_NEW = "vllm:kv_cache_usage_perc"
_KV_OLD = "vllm:gpu_cache_usage_perc"
_COUNTERS: dict[str, tuple[str, bool]] = {
    # sample name -> (field, legacy name?)
    "vllm:prompt_tokens_total": ("prompt_tokens_total", False),
    "vllm:generation_tokens_total": ("generation_tokens_total", False),
    "vllm:num_preemptions_total": ("preemptions_total", False),
    "vllm:prefix_cache_queries_total": ("prefix_queries_total", False),
    "vllm:prefix_cache_hits_total": ("prefix_hits_total", False),
    "vllm:gpu_prefix_cache_queries_total": ("prefix_queries_total", True),
    "vllm:gpu_prefix_cache_hits_total": ("prefix_hits_total", True),
}
_SUCCESS = "vllm:request_success_total"
_CACHE_INFO = "vllm:cache_config_info"
# histogram base name -> (field, legacy name?); the first of a field found in the list wins
_HISTOGRAMS: dict[str, tuple[str, bool]] = {
    "vllm:time_to_first_token_seconds": ("ttft", False),
    "vllm:inter_token_latency_seconds": ("itl", False),
    "vllm:time_per_output_token_seconds": ("itl", True),
    "vllm:e2e_request_latency_seconds": ("e2e", False),
    "vllm:request_time_per_output_token_seconds": ("tpot", False),
}
_HIST_SUFFIXES = ("_bucket", "_sum", "_count")
#: families vLLM exposes from start-up on whenever stats are enabled: a payload with vllm:*
#: metrics but without these was cut short
_REQUIRED = ("running", "waiting", "kv_usage_frac", "generation_tokens_total")


def _line_prefixes() -> tuple[str, ...]:
    names = [*_GAUGES, _KV_NEW, _KV_OLD, *_COUNTERS, _SUCCESS, _CACHE_INFO]
    names += [base + suffix for base in _HISTOGRAMS for suffix in _HIST_SUFFIXES]
    return tuple(name + end for name in names for end in ("{", " "))


_PREFIXES = _line_prefixes()


# --- parsing -------------------------------------------------------------------------------


class _Acc:
    """Accumulates samples of one payload (several engines are summed)."""

    def __init__(self) -> None:
        self.any_vllm = False
        self.values: dict[str, float] = {}
        self.kv_new: float | None = None
        self.kv_old: float | None = None
        self.success: dict[str, float] = {}
        self.cache_config: dict[str, str] = {}
        self.model_name: str | None = None
        self.legacy = False
        # base -> {le: count}, base -> sum, base -> count
        self.buckets: dict[str, dict[float, float]] = {}
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}

    def add(self, name: str, labels: Mapping[str, str], value: float) -> None:
        if not name.startswith("vllm:"):
            return
        self.any_vllm = True
        if self.model_name is None and "model_name" in labels:
            self.model_name = labels["model_name"]
        if name in _GAUGES or name in _COUNTERS:
            key = _GAUGES[name] if name in _GAUGES else _COUNTERS[name][0]
            if name in _COUNTERS and _COUNTERS[name][1]:
                self.legacy = True
            self.values[key] = self.values.get(key, 0.0) + value
        elif name == _KV_NEW:
            self.kv_new = value if self.kv_new is None else max(self.kv_new, value)
        elif name == _KV_OLD:
            self.kv_old = value if self.kv_old is None else max(self.kv_old, value)
        elif name == _SUCCESS:
            reason = labels.get("finished_reason", "unknown")
            self.success[reason] = self.success.get(reason, 0.0) + value
        elif name == _CACHE_INFO:
            if not self.cache_config:
                self.cache_config = dict(labels)
        else:
            self._add_hist(name, labels, value)

    def _add_hist(self, name: str, labels: Mapping[str, str], value: float) -> None:
        for suffix in _HIST_SUFFIXES:
            if not name.endswith(suffix):
                continue
            base = name[: -len(suffix)]
            if base not in _HISTOGRAMS:
                return
            if suffix == "_bucket":
                try:
                    le = float(labels["le"])
                except (KeyError, ValueError) as exc:
                    raise ScrapeError(
                        ScrapeErrorKind.MALFORMED, f"/metrics: bucket of {base} without a valid le"
                    ) from exc
                hist = self.buckets.setdefault(base, {})
                hist[le] = hist.get(le, 0.0) + value
            elif suffix == "_sum":
                self.sums[base] = self.sums.get(base, 0.0) + value
            else:
                self.counts[base] = self.counts.get(base, 0.0) + value
            return

    def histogram(self, wanted: str) -> tuple[HistogramSnapshot | None, bool]:
        for base, (fld, legacy) in _HISTOGRAMS.items():
            if fld != wanted or base not in self.buckets:
                continue
            buckets = self.buckets[base]
            bounds = tuple(sorted(buckets))
            if not bounds or not math.isinf(bounds[-1]):
                raise ScrapeError(
                    ScrapeErrorKind.TRUNCATED,
                    f"/metrics: histogram {base} has no +Inf bucket (payload cut short?)",
                )
            counts = tuple(buckets[b] for b in bounds)
            snap = HistogramSnapshot(
                upper_bounds=bounds,
                cumulative_counts=counts,
                sum=self.sums.get(base, math.nan),
                count=self.counts.get(base, counts[-1]),
            )
            return snap, legacy
        return None, False

    def build(self, t_monotonic_s: float) -> MetricsSample:
        if not self.any_vllm:
            return MetricsSample(t_monotonic_s=t_monotonic_s, has_vllm_metrics=False)
        kv = self.kv_new if self.kv_new is not None else self.kv_old
        legacy = self.legacy or (self.kv_new is None and self.kv_old is not None)
        hists: dict[str, HistogramSnapshot | None] = {}
        for fld in ("ttft", "itl", "e2e", "tpot"):
            hists[fld], was_legacy = self.histogram(fld)
            legacy = legacy or was_legacy
        values = dict(self.values)
        values["kv_usage_frac"] = kv  # type: ignore[assignment]
        missing = [name for name in _REQUIRED if values.get(name) is None]
        if missing:
            raise ScrapeError(
                ScrapeErrorKind.TRUNCATED,
                "/metrics has vllm:* metrics but lacks "
                + ", ".join(missing)
                + " (payload cut short, or a vLLM version this app does not know)",
            )
        return MetricsSample(
            t_monotonic_s=t_monotonic_s,
            has_vllm_metrics=True,
            running=self.values.get("running"),
            waiting=self.values.get("waiting"),
            kv_usage_frac=kv,
            prompt_tokens_total=self.values.get("prompt_tokens_total"),
            generation_tokens_total=self.values.get("generation_tokens_total"),
            preemptions_total=self.values.get("preemptions_total"),
            prefix_queries_total=self.values.get("prefix_queries_total"),
            prefix_hits_total=self.values.get("prefix_hits_total"),
            request_success_by_reason=dict(self.success),
            ttft=hists["ttft"],
            itl=hists["itl"],
            e2e=hists["e2e"],
            tpot=hists["tpot"],
            cache_config=dict(self.cache_config),
            model_name=self.model_name,
            legacy_names=legacy,
        )


#: a reader of the whole text format: payload -> every sample as (name, labels, value)
SampleReader = Callable[[str], Iterable[tuple[str, Mapping[str, str], float]]]


_SAMPLE_LINE = re.compile(
    r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+([^ \t]+)(?:[ \t]+-?[0-9]+)?[ \t]*"
)
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(,|$)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _unescape(value: str) -> str:
    return re.sub(r'\\[\\"n]', lambda m: _ESCAPES[m.group(0)], value)


def _fast_samples(lines: Iterable[str]) -> Iterable[tuple[str, Mapping[str, str], float]]:
    """Sample lines (no comments) of the text format -> (name, labels, value)."""
    for line in lines:
        match = _SAMPLE_LINE.fullmatch(line)
        if match is None:
            raise ScrapeError(ScrapeErrorKind.MALFORMED, f"/metrics: bad sample line {line[:80]!r}")
        name, body, raw = match.groups()
        labels: dict[str, str] = {}
        if body:
            pos = 0
            for lm in _LABEL.finditer(body):
                if lm.start() != pos:
                    break
                value = lm.group(2)
                labels[lm.group(1)] = _unescape(value) if "\\" in value else value
                pos = lm.end()
            if pos != len(body):
                raise ScrapeError(
                    ScrapeErrorKind.MALFORMED, f"/metrics: bad labels in {line[:80]!r}"
                )
        try:
            value_f = float(raw)
        except ValueError as exc:
            raise ScrapeError(
                ScrapeErrorKind.MALFORMED, f"/metrics: bad value {raw[:20]!r} of {name}"
            ) from exc
        yield name, labels, value_f


def _check_shape(text: str) -> None:
    if not text.strip():
        raise ScrapeError(ScrapeErrorKind.EMPTY, "/metrics answered with an empty body")
    if not text.endswith("\n"):
        raise ScrapeError(
            ScrapeErrorKind.TRUNCATED,
            "/metrics body stops in the middle of a line (connection cut or server stopping)",
        )


def parse_metrics(text: str, t_monotonic_s: float) -> MetricsSample:
    """Parse a ``/metrics`` payload into a :class:`MetricsSample` (only the lines of the families
    used here are read).

    Args:
        text: the Prometheus text exposition body.
        t_monotonic_s: time of the scrape, ``time.monotonic()`` seconds.

    Raises:
        ScrapeError: EMPTY, TRUNCATED or MALFORMED payloads.
    """
    _check_shape(text)
    acc = _Acc()
    lines = text.split("\n")
    wanted = [line for line in lines if line.startswith(_PREFIXES)]
    if not wanted:
        # stats disabled, only vllm:* families this app does not read, or garbage: check
        # that every sample line is well formed (a stats-disabled server is scraped at the
        # sampling rate too, so this stays on the line parser)
        other = [line for line in lines if line and not line.startswith("#")]
        if not other:
            raise ScrapeError(ScrapeErrorKind.MALFORMED, "/metrics holds no samples")
        for name, _labels, _value in _fast_samples(other):
            if name.startswith("vllm:"):
                acc.any_vllm = True
    for name, labels, value in _fast_samples(wanted):
        acc.add(name, labels, value)
    return acc.build(t_monotonic_s)


def parse_metrics_with(text: str, t_monotonic_s: float, read: SampleReader) -> MetricsSample:
    """:func:`parse_metrics` with another parser of the text format: ``read`` turns the whole
    payload into its samples (and raises :class:`ScrapeError` MALFORMED for what it rejects).

    Raises:
        ScrapeError: EMPTY, TRUNCATED or MALFORMED payloads.
    """
    _check_shape(text)
    acc = _Acc()
    seen_any = False
    for name, labels, value in read(text):
        seen_any = True
        acc.add(name, labels, value)
    if not seen_any:
        raise ScrapeError(ScrapeErrorKind.MALFORMED, "/metrics holds no samples")
    return acc.build(t_monotonic_s)


# --- scraping ------------------------------------------------------------------------------


class MetricsScraper:
    """Fetches and parses ``{base_url}/metrics`` with one reusable httpx client.

    Args:
        base_url: server root, e.g. ``http://127.0.0.1:8000``.
        timeout_s: per-request timeout in seconds (connect, read and total).
        headers: extra request headers (e.g. an Authorization header).
        transport: an httpx transport for tests; None for the network.
        clock: monotonic clock in seconds.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 2.0,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        self.url = base_url.rstrip("/") + "/metrics"
        self.timeout_s = timeout_s
        self._clock = clock
        import httpx

        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s),
            headers=dict(headers or {}),
            transport=transport,
            trust_env=False,
        )

    def scrape(self) -> MetricsSample:
        """One GET + parse.

        Raises:
            ScrapeError: any failure; the kind tells which.
        """
        import httpx

        deadline = self._clock() + self.timeout_s
        try:
            with self._client.stream("GET", self.url) as response:
                if response.status_code != 200:
                    raise ScrapeError(
                        ScrapeErrorKind.HTTP_STATUS,
                        f"GET {self.url} answered HTTP {response.status_code}",
                    )
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
                    raise ScrapeError(
                        ScrapeErrorKind.TOO_LARGE,
                        f"GET {self.url} announced {int(declared):,} bytes, more than the "
                        f"{MAX_BODY_BYTES:,} a /metrics page may have",
                    )
                chunks = []
                size = 0
                for chunk in response.iter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > MAX_BODY_BYTES:
                        raise ScrapeError(
                            ScrapeErrorKind.TOO_LARGE,
                            f"GET {self.url} sent more than the {MAX_BODY_BYTES:,} bytes a "
                            "/metrics page may have",
                        )
                    if self._clock() > deadline:
                        raise ScrapeError(
                            ScrapeErrorKind.TIMEOUT,
                            f"GET {self.url} took longer than {self.timeout_s:g} s",
                        )
                body = b"".join(chunks)
        except httpx.TimeoutException as exc:
            raise ScrapeError(
                ScrapeErrorKind.TIMEOUT, f"GET {self.url} timed out after {self.timeout_s:g} s"
            ) from exc
        except httpx.RemoteProtocolError as exc:
            raise ScrapeError(
                ScrapeErrorKind.TRUNCATED, f"GET {self.url}: connection cut mid-answer ({exc})"
            ) from exc
        except httpx.HTTPError as exc:
            raise ScrapeError(
                ScrapeErrorKind.CONNECT,
                f"GET {self.url} failed: {exc or type(exc).__name__} (is the server running?)",
            ) from exc
        t = self._clock()
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ScrapeError(ScrapeErrorKind.MALFORMED, f"/metrics is not UTF-8: {exc}") from exc
        return parse_metrics(text, t)

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()


class Scraper(Protocol):
    """Anything that returns one sample per call or raises :class:`ScrapeError`."""

    def scrape(self) -> MetricsSample:
        """One scrape."""
        ...


class MetricsSampler(BackgroundLoop):
    """Scrapes at a fixed rate in a daemon thread and hands results to callbacks.

    ``on_sample(sample)`` gets each good sample, ``on_error(t_monotonic_s, error)`` each failed
    scrape (a gap). Callback exceptions and unexpected errors are logged; the thread never raises.

    Args:
        scraper: anything with ``scrape() -> MetricsSample`` raising :class:`ScrapeError`.
        interval_s: seconds between scrape starts (2 Hz = 0.5).
    """

    def __init__(
        self,
        scraper: Scraper,
        on_sample: Callable[[MetricsSample], None],
        on_error: Callable[[float, ScrapeError], None],
        *,
        interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self.scraper = scraper
        self.interval_s = interval_s
        self._on_sample = on_sample
        self._on_error = on_error
        self._clock = clock
        super().__init__("kvpilot-metrics")
        self.samples_ok = 0
        self.samples_failed = 0
        self.samples_skipped = 0  # ticks skipped because a scrape ran past its slot
        #: warnings logged: one when scrapes start failing, none more until one succeeds
        self.warnings_logged = 0
        self._failing_since: int | None = None  # samples_failed when the streak began

    def poll_once(self) -> None:
        """One scrape, delivered to the callbacks; never raises."""
        try:
            sample = self.scraper.scrape()
        except ScrapeError as err:
            self.samples_failed += 1
            self._deliver_error(err)
            return
        except Exception as exc:
            log.exception("unexpected error while scraping /metrics")
            self.samples_failed += 1
            self._deliver_error(ScrapeError(ScrapeErrorKind.MALFORMED, f"scrape failed: {exc}"))
            return
        self.samples_ok += 1
        if self._failing_since is not None:
            log.info(
                "/metrics answers again after %d failed scrapes",
                self.samples_failed - self._failing_since,
            )
            self._failing_since = None
        notify(log, "metrics sample callback", self._on_sample, sample)

    def _deliver_error(self, err: ScrapeError) -> None:
        if self._failing_since is None:
            self._failing_since = self.samples_failed - 1
            self.warnings_logged += 1
            log.warning("%s; the plots show a gap until /metrics answers again", err)
        notify(log, "metrics error callback", self._on_error, self._clock(), err)

    def _run(self) -> None:
        next_t = self._clock()
        while not self._stop.is_set():
            self.poll_once()
            next_t += self.interval_s
            now = self._clock()
            if next_t < now:  # fell behind (slow server): skip missed ticks, keep the phase
                missed = math.ceil((now - next_t) / self.interval_s)
                next_t += missed * self.interval_s
                self.samples_skipped += missed
            self._wake.wait(next_t - now)
