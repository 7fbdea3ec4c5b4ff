"""Watch a vLLM OpenAI server that kvpilot did not start (a container, another machine).

:class:`ServerWatch` asks the server who it is (``GET /version``, ``GET /v1/models``), then
scrapes ``/metrics`` through :class:`~kvpilot.core.vllm.metrics.MetricsScraper` into a
:class:`~kvpilot.core.telemetry.live.Telemetry`, so the dashboard, the pressure signals and the load
test work the same as for a server kvpilot launched. Each :meth:`ServerWatch.poll` returns one
:class:`WatchSample`; a failed scrape is a gap (``connected`` False, the error named), never an
exception, and the identity is asked again once the server answers.

Capacity: the ``vllm:cache_config_info`` labels give what the server reports (KV tokens,
blocks, KV memory, maximum concurrency). When the served model's ``config.json`` can be read
here (a local folder, or the Hugging Face cache, never the network), :func:`compare_capacity`
puts kvpilot's prediction next to it: the full budget when the GPU is known (the local GPU for
a server on this machine), else the KV tokens that the reported KV memory holds in kvpilot's
KV layout of the model.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.hosts import is_loopback_host, server_root
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.base.versions import Release
from kvpilot.core.fit.measurements import ReportedCapacity
from kvpilot.core.telemetry.live import PressureSignal, Telemetry
from kvpilot.core.vllm.metrics import MetricsSample, MetricsScraper, ScrapeError

log = logging.getLogger(__name__)

#: telemetry values copied into each sample (the dashboard's headline numbers)
SAMPLE_VALUES = (
    "running",
    "waiting",
    "kv_usage_frac",
    "generation_tokens_per_s",
    "prompt_tokens_per_s",
    "preemptions_per_min",
    "prefix_hit_rate",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
)


class WatchError(KvpilotError):
    """The URL is not a usable vLLM server (bad URL, unreachable at the start, needs a key)."""


@dataclass(frozen=True)
class ServerIdentity:
    """Who answers at ``base_url``: vLLM's version, the served model and its context length.

    ``model_root`` is what ``vllm serve`` was given (a folder or a repo id; vLLM's ``root``
    field); ``max_model_len`` in tokens. Any field is None when the server does not say.
    """

    base_url: str
    version: str | None
    model_id: str | None
    model_root: str | None
    max_model_len: int | None


@dataclass(frozen=True)
class CapacityComparison:
    """What the server reported (``cache_config_info``, else its log) against the KV capacity
    kvpilot predicts.

    ``reported`` holds the server's figures; ``predicted_*`` are kvpilot's (None where it could
    not predict); ``basis`` says how the prediction was made; ``token_error_frac`` is
    predicted / reported - 1 for the KV tokens.
    """

    reported: ReportedCapacity
    predicted_kv_tokens: int | None = None
    predicted_kv_bytes: int | None = None
    basis: str = ""

    @property
    def token_error_frac(self) -> float | None:
        """predicted / reported - 1 for the KV tokens (None without both)."""
        reported_kv_tokens = self.reported.kv_cache_tokens
        if not reported_kv_tokens or self.predicted_kv_tokens is None:
            return None
        return self.predicted_kv_tokens / reported_kv_tokens - 1.0

    def to_json(self) -> dict[str, Any]:
        """The ``capacity`` object of ``kvpilot watch --json``."""
        reported = self.reported
        return {
            "reported_kv_tokens": reported.kv_cache_tokens,
            "reported_num_blocks": reported.num_blocks,
            "reported_kv_bytes": reported.kv_bytes,
            "reported_max_concurrency": reported.max_concurrency,
            "predicted_kv_tokens": self.predicted_kv_tokens,
            "predicted_kv_bytes": self.predicted_kv_bytes,
            "basis": self.basis,
            "token_error_frac": self.token_error_frac,
        }


@dataclass(frozen=True)
class WatchSample:
    """One poll: ``t_s`` seconds since the watch began; ``connected`` False for a gap."""

    t_s: float
    connected: bool
    error: str | None
    identity: ServerIdentity | None
    values: Mapping[str, float | None] = field(default_factory=dict)
    pressure: tuple[PressureSignal, ...] = ()
    capacity: CapacityComparison | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (one line of ``kvpilot watch --json``); NaN becomes null."""
        values = {
            k: (None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v)
            for k, v in self.values.items()
        }
        cap = None if self.capacity is None else self.capacity.to_json()
        return {
            "t_s": round(self.t_s, 3),
            "connected": self.connected,
            "error": self.error,
            "version": self.identity.version if self.identity else None,
            "model": self.identity.model_id if self.identity else None,
            "max_model_len": self.identity.max_model_len if self.identity else None,
            "values": values,
            "pressure": [asdict(p) for p in self.pressure],
            "capacity": cap,
        }


def normalize_url(url: str) -> str:
    """``http(s)://host:port`` without a trailing slash or ``/v1`` (:func:`server_root`).

    Raises:
        WatchError: not an http(s) URL with a host.
    """
    try:
        return server_root(url)
    except ValueError as exc:
        raise WatchError(str(exc)) from exc


def is_local_url(base_url: str) -> bool:
    """True when the server runs on this machine (a loopback host)."""
    return is_loopback_host(httpx.URL(base_url).host)


def identify(client: httpx.Client, base_url: str) -> ServerIdentity:
    """Ask ``/version`` and ``/v1/models``.

    Raises:
        WatchError: unreachable, a 401 (the API key is missing or wrong), or not an OpenAI
            server (no model list).
        httpx.HTTPError: never; connection errors become :class:`WatchError`.
    """
    try:
        models = client.get(f"{base_url}/v1/models")
    except httpx.HTTPError as exc:
        raise WatchError(
            f"cannot reach {base_url}: {exc or type(exc).__name__} (is the server running?)"
        ) from exc
    if models.status_code == 401:
        raise WatchError(
            f"{base_url} needs an API key: put it in an environment variable and pass "
            "--api-key-env VAR"
        )
    if models.status_code != 200:
        raise WatchError(f"{base_url}/v1/models answered HTTP {models.status_code}")
    try:
        entry = models.json()["data"][0]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise WatchError(f"{base_url} lists no model; is it an OpenAI-compatible server?") from exc
    version = None
    try:
        answer = client.get(f"{base_url}/version")
        if answer.status_code == 200:
            version = str(answer.json().get("version") or "") or None
    except (httpx.HTTPError, ValueError, AttributeError):
        version = None
    mml = entry.get("max_model_len")
    return ServerIdentity(
        base_url=base_url,
        version=version,
        model_id=str(entry.get("id")) if entry.get("id") else None,
        model_root=str(entry.get("root")) if entry.get("root") else None,
        max_model_len=int(mml) if isinstance(mml, int | float) and mml > 0 else None,
    )


def load_served_model(identity: ServerIdentity) -> ModelSpec | None:
    """The served model's spec from a local folder or the Hugging Face cache, else None."""
    from kvpilot.core.hub.cache import is_repo_id
    from kvpilot.core.hub.metadata import load_cached_model
    from kvpilot.core.models.local import load_local_model

    for ref in (identity.model_root, identity.model_id):
        if not ref:
            continue
        try:
            if Path(ref).is_dir():
                return load_local_model(ref)
            if is_repo_id(ref):
                spec = load_cached_model(ref)
                if spec is not None:
                    return spec
        except KvpilotError as exc:
            log.info("cannot read the served model %s: %s", ref, exc)
    return None


@dataclass(frozen=True)
class ScannedLog:
    """A saved vLLM log read as a launch reads its output: each line with its level
    (``lines``: (level, line)), the most specific failure it shows (None: none) and the
    capacity figures it states."""

    lines: tuple[tuple[str, str], ...]
    failure: Failure | None
    figures: dict[str, Any]


def scan_log(path: str | Path) -> ScannedLog:
    """Read a saved vLLM log (``docker logs`` saved to a file, a recorded failure) with the
    scanner a launch uses (:class:`~kvpilot.core.vllm.logparse.LogScanner`).

    Raises:
        WatchError: the file cannot be read.
    """
    from kvpilot.core.vllm.loglevel import line_level
    from kvpilot.core.vllm.logparse import LogScanner

    scanner = LogScanner()
    lines: list[tuple[str, str]] = []
    try:
        with Path(path).expanduser().open(encoding="utf-8", errors="replace") as fh:
            for raw in fh:
                line = raw.rstrip("\r\n")
                scanner.feed(line)
                lines.append((line_level(line), line))
    except (OSError, ValueError, RuntimeError) as exc:  # also a NUL in the name, "~nobody/…"
        reason = getattr(exc, "strerror", None) or str(exc)
        raise WatchError(f"cannot read the log {str(path)[:200]!r}: {reason}") from exc
    return ScannedLog(tuple(lines), scanner.failure, scanner.capacity.figures())


def capacity_from_log(path: str | Path) -> dict[str, Any]:
    """The capacity figures a vLLM log states (``docker logs`` saved to a file, for a server
    whose ``/metrics`` has no ``cache_config_info``): what :func:`scan_log` reads.

    Raises:
        WatchError: the file cannot be read.
    """
    return scan_log(path).figures


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def compare_capacity(
    sample: MetricsSample,
    identity: ServerIdentity | None,
    model: ModelSpec | None,
    *,
    gpu_total_bytes: int | None = None,
    gpu_name: str = "",
    model_dtype: str | None = None,
    log_figures: Mapping[str, Any] | None = None,
) -> CapacityComparison | None:
    """Reported KV capacity and, with the ``model``, kvpilot's prediction (None without any
    ``cache_config_info``).

    ``model_dtype`` is the server's ``--dtype`` when it is not the checkpoint's (``/metrics``
    does not say; with an ``auto`` KV cache it sets the KV width). ``log_figures``
    (:func:`capacity_from_log`) fill in what ``cache_config_info`` lacks.
    """
    log = dict(log_figures or {})
    if not sample.cache_config and not log:
        return None
    number = sample.cache_config_number
    # the labels of /metrics win over the log's (rounded) figures
    reported = (
        ReportedCapacity()
        .merged("log", **ReportedCapacity.values_from_log(log))
        .merged("metrics", **sample.cache_config_capacity())
    )
    if model is None:
        return CapacityComparison(reported)
    from kvpilot.core.fit import kv
    from kvpilot.core.fit.budget import compute_capacity

    dtype = sample.cache_config.get("cache_dtype") or "auto"
    block = _int(number("block_size"))
    version = Release.parse(identity.version if identity else None).number
    try:
        if gpu_total_bytes:
            # "None" from 0.34 when unset: the planner resolves it as vLLM does (1.0 with the
            # extensible KV cache)
            util = sample.cache_config_utilization()
            extensible = sample.cache_config_flag("enable_extensible_kv_cache")
            # a KV size the server was given (--kv-cache-memory-bytes) replaces the utilization
            kv_given = _int(number("kv_cache_memory_bytes"))
            inputs = PlanInputs(
                model=model,
                gpu_total_bytes=gpu_total_bytes,
                gpu_name=gpu_name,
                gpu_memory_utilization=util,
                kv_cache_memory_bytes=kv_given if kv_given and kv_given > 0 else None,
                max_model_len=identity.max_model_len if identity else None,
                kv_cache_dtype=dtype,
                dtype=model_dtype,
                block_size=block,
                vllm_version=version,
            )
            cap = compute_capacity(inputs)
            assumed = "" if model_dtype or dtype not in ("auto", "") else (
                f", KV in the checkpoint's {kv.serving_dtype(model.torch_dtype)} (a server run "
                "with another --dtype stores another width)")
            return CapacityComparison(
                reported,
                predicted_kv_tokens=cap.kv_cache_tokens,
                predicted_kv_bytes=cap.available_kv_bytes,
                basis=f"kvpilot's budget on {gpu_name or 'this GPU'}"
                + (", the KV size the server was given" if kv_given else "")
                + (", vLLM 0.34's extensible KV cache sized from the memory free at launch (a "
                   "GPU nothing else used is assumed)"
                   if extensible and cap.inputs.get("extensible_kv_cache") else "")
                + assumed,
            )
        if reported.kv_bytes:
            served = model_dtype or kv.serving_dtype(model.torch_dtype)
            # an "auto" KV cache stores values in the dtype the server runs the model in
            kv_dtype = served if dtype in ("auto", "") else dtype
            layout = kv.kv_layout(model, kv_dtype, 1, block)
            blocks = reported.kv_bytes // layout.bytes_per_block
            assumed = "" if model_dtype else " (the checkpoint's; pass the server's --dtype)"
            return CapacityComparison(
                reported,
                predicted_kv_tokens=blocks * layout.block_size,
                predicted_kv_bytes=reported.kv_bytes,
                basis=f"the reported KV memory in kvpilot's KV layout of the model, "
                f"{served}{assumed}, KV cache {dtype}",
            )
    except KvpilotError as exc:
        return CapacityComparison(reported, basis=f"no prediction: {exc.message}")
    return CapacityComparison(reported)


class ServerWatch:
    """Polls one server; feeds ``telemetry``; never raises after :meth:`start`.

    Args:
        base_url: the server root (``http://host:port``; ``/v1`` is dropped).
        api_key: sent as a Bearer token (None: no header).
        telemetry: where samples go (a new :class:`Telemetry` when None).
        gpu_total_bytes, gpu_name: the GPU the server runs on, for the full prediction.
        dtype: the server's ``--dtype`` when it is not the checkpoint's.
        log_path: a saved log of the server (its capacity lines fill in what /metrics lacks).
        transport: an httpx transport for tests.
        timeout_s: per-request timeout in seconds.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        telemetry: Telemetry | None = None,
        gpu_total_bytes: int | None = None,
        gpu_name: str = "",
        dtype: str | None = None,
        log_path: str | Path | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from kvpilot.core.vllm.client import api_key_problem

        self.base_url = normalize_url(base_url)
        problem = api_key_problem(api_key)
        if problem is not None:
            raise WatchError(problem)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.telemetry = telemetry or Telemetry(clock=clock)
        self.gpu_total_bytes = gpu_total_bytes
        self.gpu_name = gpu_name
        self.dtype = dtype
        self.log_figures = capacity_from_log(log_path) if log_path else {}
        self._clock = clock
        self._t0 = clock()
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s), headers=headers, transport=transport,
            trust_env=False,
        )
        self.scraper = MetricsScraper(
            self.base_url, timeout_s=timeout_s, headers=headers, transport=transport, clock=clock
        )
        self.identity: ServerIdentity | None = None
        self.model: ModelSpec | None = None
        self._model_looked_up = False
        self.gaps = 0
        self._in_gap = False

    def start(self) -> ServerIdentity:
        """Ask the server who it is (the first contact must succeed).

        Raises:
            WatchError: see :func:`identify`.
        """
        self.identity = identify(self._client, self.base_url)
        self._lookup_model()
        return self.identity

    def _lookup_model(self) -> None:
        if self.identity is not None and not self._model_looked_up:
            self._model_looked_up = True
            self.model = load_served_model(self.identity)

    def poll(self) -> WatchSample:
        """One scrape into the telemetry, as a :class:`WatchSample` (a gap on any error)."""
        t = self._clock() - self._t0
        try:
            sample = self.scraper.scrape()
        except ScrapeError as err:
            self.gaps += 1
            self._in_gap = True
            self.telemetry.add_scrape_error(self._clock(), err)
            return WatchSample(t, False, err.message, self.identity)
        if self._in_gap:  # back after a gap: it may be another server now (a restart)
            self._in_gap = False
            try:
                self.identity = identify(self._client, self.base_url)
                self._model_looked_up = False
            except WatchError as exc:
                log.info("server back but /v1/models fails: %s", exc.message)
        if self.identity is None:
            try:
                self.identity = identify(self._client, self.base_url)
            except WatchError as exc:
                log.info("server answers /metrics but not /v1/models: %s", exc.message)
            self._lookup_model()
        self.telemetry.add_vllm_sample(sample)
        latest = self.telemetry.latest()
        values = {k: latest[k] for k in SAMPLE_VALUES}
        capacity = compare_capacity(
            sample, self.identity, self.model,
            gpu_total_bytes=self.gpu_total_bytes, gpu_name=self.gpu_name, model_dtype=self.dtype,
            log_figures=self.log_figures,
        )
        return WatchSample(
            t, True, sample.message, self.identity, values, latest.pressure, capacity
        )

    def close(self) -> None:
        """Close the HTTP clients."""
        self._client.close()
        self.scraper.close()
