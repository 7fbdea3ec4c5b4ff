"""OpenAI-compatible requests to a vLLM server and the load generator behind ``kvpilot bench``.

:func:`run_load_test` sends streamed (SSE) completion or chat requests at each concurrency level
and measures, per request, the time to first token (TTFT), the time per output token after the
first (TPOT) and the end-to-end latency; per level it reports P50/P90/P99 of each, output tokens/s,
requests/s, errors and goodput (requests meeting both the TTFT and the TPOT goal), and overall the
first concurrency whose P99 breaks a goal.

Bounds: each level sends at most ``requests_per_level`` requests and starts none after
``duration_s``; each request is cut after ``request_timeout_s``. Targets must be loopback
addresses unless ``allow_remote`` is set.

Prompts are built from plain words. Their token length is calibrated with the server's
``/tokenize`` endpoint when it has one; otherwise a words-to-tokens ratio is assumed. The prompt
and output token counts reported are the server's own (the ``usage`` of each stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import httpx
import numpy as np

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.base.hosts import is_loopback_host, key_is_sendable, server_root
from kvpilot.core.hardware.energy import GpuEnergy, gpu_energy, throttle_note

__all__ = [
    "LevelResult",
    "LoadTestConfig",
    "LoadTestError",
    "LoadTestProgress",
    "LoadTestReport",
    "RequestResult",
    "check_target",
    "detect_model",
    "run_load_test",
]

#: tokens per word assumed when the server cannot tokenize (common English words, BPE vocabularies)
APPROX_TOKENS_PER_WORD = 1.3

_WORD_TEXT = """
time year people way day man thing woman life child world school state family student
group country problem hand part place case week company system program question work
government number night point home water room mother area money story fact month lot
right study book eye job word business issue side kind head house service friend father
power hour game line end member law car city community name president team minute idea
kid body information back parent face others level office door health person art war
history party result change morning reason research girl guy moment air teacher force
education foot boy age policy process music market sense nation plan college interest
death experience effect use class control care field development role effort rate heart
drug show leader light voice wife police mind price report decision son view
relationship town road arm difference value building action model season society tax
director position player record paper space ground form event official matter center
couple site project activity star table need court oil situation cost industry figure
street image phone data picture practice piece land product doctor wall patient worker
news test movie north love support technology step baby computer type attention film
tree source organization hair window evidence population truth song energy bank seat
river garden stone cloud summer
"""
_WORDS = tuple(_WORD_TEXT.split())


def api_key_problem(api_key: str | None) -> str | None:
    """Why ``api_key`` cannot go into an ``Authorization: Bearer`` header (HTTP headers are
    printable ASCII; a pasted key with a space, a newline or an accent cannot be sent), or
    None when it can (or there is none)."""
    if key_is_sendable(api_key):
        return None
    return (
        "the API key may hold only printable ASCII characters without spaces (it is sent as a "
        "Bearer token); check what was pasted"
    )


#: the most concurrent requests one level may hold open (each is a connection and a task)
MAX_CONCURRENCY = 4096


class LoadTestError(KvpilotError):
    """A load test that cannot run: bad settings, remote target, unreachable server, no model."""


@dataclass(frozen=True)
class LoadTestConfig:
    """What to send. Times in seconds, sizes in tokens.

    ``requests_per_level`` None means 4 x concurrency (at least 8). ``api`` is ``completions``
    or ``chat``. ``api_key`` is sent as a bearer token.
    """

    base_url: str
    model: str | None = None
    concurrency_levels: tuple[int, ...] = (1, 2, 4, 8)
    prompt_tokens: int = 256
    output_tokens: int = 128
    requests_per_level: int | None = None
    duration_s: float = 60.0
    ttft_slo_s: float = 1.0
    tpot_slo_s: float = 0.05
    api: str = "completions"
    api_key: str | None = field(default=None, repr=False)
    allow_remote: bool = False
    request_timeout_s: float = 120.0
    warmup_requests: int = 1
    ignore_eos: bool = True
    seed: int = 0

    def validate(self) -> None:
        """Raises LoadTestError naming the first bad setting."""
        if not self.concurrency_levels or any(c < 1 for c in self.concurrency_levels):
            raise LoadTestError("concurrency levels must be integers >= 1, e.g. 1,2,4")
        if any(c > MAX_CONCURRENCY for c in self.concurrency_levels):
            raise LoadTestError(
                f"concurrency levels must be at most {MAX_CONCURRENCY:,} (one connection each)"
            )
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise LoadTestError("prompt and output tokens must be >= 1")
        if self.requests_per_level is not None and self.requests_per_level < 1:
            raise LoadTestError("requests per level must be >= 1")
        if not self.duration_s > 0 or not self.request_timeout_s > 0:
            raise LoadTestError("duration and request timeout must be > 0 seconds")
        if not self.ttft_slo_s > 0 or not self.tpot_slo_s > 0:
            raise LoadTestError("the TTFT and TPOT goals must be > 0 seconds")
        if self.api not in ("completions", "chat"):
            raise LoadTestError(f"api must be 'completions' or 'chat', not {self.api!r}")
        if self.warmup_requests < 0:
            raise LoadTestError("warmup requests must be >= 0")
        problem = api_key_problem(self.api_key)
        if problem is not None:
            raise LoadTestError(problem)

    def requests_for(self, concurrency: int) -> int:
        """Requests sent at one level."""
        if self.requests_per_level is not None:
            return self.requests_per_level
        return max(8, 4 * concurrency)


@dataclass(frozen=True)
class RequestResult:
    """One streamed request. Times in seconds from its start; tokens from the server's usage."""

    ok: bool
    error: str | None
    ttft_s: float | None
    e2e_s: float | None
    tpot_s: float | None
    prompt_tokens: int | None
    output_tokens: int
    connect_failed: bool = False  # no connection could be opened (refused, reset at connect)


@dataclass(frozen=True)
class LevelResult:
    """Statistics of one concurrency level.

    Percentiles, ``output_tokens_per_s``, ``requests_per_s`` and goodput count the successful
    requests; ``output_tokens_total`` also counts tokens that failed streams produced (the
    server generated them). Rates divide by ``duration_s``, the level's first start to its
    last finish. ``gpu`` is the GPU's energy, J per generated token and throttling during the
    level (None without GPU samples; see :mod:`kvpilot.core.hardware.energy`).
    """

    concurrency: int
    requests_sent: int
    requests_ok: int
    errors: int
    error_examples: tuple[str, ...]
    duration_s: float
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    tpot_p90_s: float | None
    tpot_p99_s: float | None
    e2e_p50_s: float | None
    e2e_p90_s: float | None
    e2e_p99_s: float | None
    prompt_tokens_total: int
    prompt_tokens_mean: float | None
    output_tokens_total: int
    output_tokens_per_s: float
    requests_per_s: float
    goodput_requests: int
    goodput_per_s: float
    meets_slo_p99: bool
    gpu: GpuEnergy | None = None


@dataclass(frozen=True)
class LoadTestProgress:
    """Sent to ``on_progress`` after every finished request and at each level's start."""

    level_index: int
    levels_total: int
    concurrency: int
    completed: int
    planned: int
    errors: int
    elapsed_s: float


@dataclass(frozen=True)
class LoadTestReport:
    """The whole run. ``slo_break_concurrency`` is the first level whose P99 broke a goal."""

    base_url: str
    model: str
    api: str
    prompt_tokens_target: int
    output_tokens_target: int
    ttft_slo_s: float
    tpot_slo_s: float
    prompt_calibration: str  # "tokenize" or "approximate"
    prompt_words: int
    levels: tuple[LevelResult, ...]
    slo_break_concurrency: int | None
    slo_break_reason: str | None
    warmup_output_tokens: int
    cancelled: bool
    #: why the run stopped early because the server went away (one sentence), or None
    server_lost: str | None = None

    @property
    def output_tokens_total(self) -> int:
        """Every output token the server generated for this run, warm-up included."""
        return self.warmup_output_tokens + sum(lv.output_tokens_total for lv in self.levels)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the CLI's ``--json`` output)."""
        out = asdict(self)
        out["output_tokens_total"] = self.output_tokens_total
        return out


# --- target checks and small requests ------------------------------------------------------


def check_target(base_url: str, *, allow_remote: bool = False) -> str:
    """The server's root URL (read as :func:`~kvpilot.core.base.hosts.server_root` reads it: a
    ``/v1`` or a missing scheme is fine); a host other than this machine is refused.

    Raises:
        LoadTestError: not http(s), no host, or a remote host without ``allow_remote``.
    """
    try:
        root = server_root(base_url)
    except ValueError as exc:
        raise LoadTestError(str(exc)) from exc
    host = httpx.URL(root).host
    if not allow_remote and not is_loopback_host(host):
        raise LoadTestError(
            f"{host} is not a loopback address; load tests go to this machine only "
            "unless --allow-remote is given"
        )
    return root


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def detect_model(
    base_url: str,
    *,
    api_key: str | None = None,
    timeout_s: float = 10.0,
    transport: httpx.BaseTransport | None = None,
) -> str:
    """The first model id listed by ``GET /v1/models``.

    Raises:
        LoadTestError: server unreachable, HTTP error, or no model listed.
    """
    url = base_url.rstrip("/") + "/v1/models"
    try:
        with httpx.Client(timeout=timeout_s, transport=transport, trust_env=False) as client:
            response = client.get(url, headers=_headers(api_key))
    except httpx.HTTPError as exc:
        raise LoadTestError(f"cannot reach {url}: {exc} (is the server running?)") from exc
    if response.status_code == 401:
        raise LoadTestError(f"{url} needs an API key (--api-key-env VAR)")
    if response.status_code != 200:
        raise LoadTestError(f"{url} answered HTTP {response.status_code}: {response.text[:200]}")
    try:
        models = response.json()["data"]
        return str(models[0]["id"])
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise LoadTestError(f"{url} lists no model; pass --model NAME") from exc


# --- prompts -------------------------------------------------------------------------------


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(max(1, n)))


async def _count_tokens(
    client: httpx.AsyncClient, base_url: str, model: str, text: str
) -> int | None:
    try:
        response = await client.post(
            base_url + "/tokenize", json={"model": model, "prompt": text}, timeout=10.0
        )
        if response.status_code != 200:
            return None
        count = response.json().get("count")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return int(count) if isinstance(count, int) and count > 0 else None


async def _calibrate_words(
    client: httpx.AsyncClient, base_url: str, model: str, target_tokens: int, seed: int
) -> tuple[int, str]:
    """Words per prompt for ``target_tokens``, and how it was found."""
    rng = random.Random(seed ^ 0x5EED)
    probe_words = 200
    count = await _count_tokens(client, base_url, model, _words(rng, probe_words))
    if count is None:
        return max(1, round(target_tokens / APPROX_TOKENS_PER_WORD)), "approximate"
    per_word = count / probe_words
    words = max(1, round(target_tokens / per_word))
    for _ in range(3):  # fix the fixed overhead (BOS) and rounding with real prompts
        counts = [
            await _count_tokens(client, base_url, model, _words(rng, words)) for _ in range(3)
        ]
        known = [c for c in counts if c is not None]
        if not known:
            break
        error = target_tokens - float(np.mean(known))
        step = round(error / per_word)
        if step == 0:
            break
        words = max(1, words + step)
    return words, "tokenize"


# --- one request ---------------------------------------------------------------------------


def _request_body(cfg: LoadTestConfig, model: str, prompt: str) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": cfg.output_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    if cfg.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        return "/v1/chat/completions", body
    body["prompt"] = prompt
    return "/v1/completions", body


def _chunk_has_token(obj: dict[str, Any], api: str) -> bool:
    choices = obj.get("choices") or []
    for choice in choices:
        if api == "chat":
            delta = choice.get("delta") or {}
            if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
                return True
            if choice.get("finish_reason"):
                return True
        else:
            return True  # every completions chunk with a choice carries a generated token
    return False


async def _one_request(
    client: httpx.AsyncClient, base_url: str, cfg: LoadTestConfig, model: str, prompt: str
) -> RequestResult:
    path, body = _request_body(cfg, model, prompt)
    start = time.perf_counter()
    ttft: float | None = None
    chunks = 0
    usage: dict[str, Any] = {}

    def failed(message: str, *, connect: bool = False) -> RequestResult:
        out = int(usage.get("completion_tokens") or chunks)
        return RequestResult(False, message[:300], ttft, None, None, None, out, connect)

    try:
        async with client.stream("POST", base_url + path, json=body) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", "replace")
                return failed(f"HTTP {response.status_code}: {_error_text(text)}")
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    obj = json.loads(data)
                except ValueError:
                    return failed(f"bad stream chunk: {data[:80]}")
                if obj.get("error"):
                    return failed(f"stream error: {_error_text(json.dumps(obj))}")
                if obj.get("usage"):
                    usage = obj["usage"]
                if _chunk_has_token(obj, cfg.api):
                    chunks += 1
                    if ttft is None:
                        ttft = time.perf_counter() - start
    except httpx.TimeoutException:
        return failed(f"no answer within {cfg.request_timeout_s:g} s")
    except httpx.ConnectError as exc:
        return failed(f"{type(exc).__name__}: {exc}", connect=True)
    except httpx.HTTPError as exc:
        return failed(f"{type(exc).__name__}: {exc}")
    e2e = time.perf_counter() - start
    out_tokens = int(usage.get("completion_tokens") or chunks)
    prompt_tokens = usage.get("prompt_tokens")
    if ttft is None:
        return failed("the stream ended without a token")
    tpot = (e2e - ttft) / (out_tokens - 1) if out_tokens > 1 else None
    return RequestResult(
        True, None, ttft, e2e, tpot, int(prompt_tokens) if prompt_tokens else None, out_tokens
    )


def _error_text(text: str) -> str:
    try:
        obj = json.loads(text)
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message", err))[:200]
        return str(err)[:200]
    except (ValueError, AttributeError):
        return text.strip()[:200]


# --- levels --------------------------------------------------------------------------------


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _level_result(
    cfg: LoadTestConfig, concurrency: int, results: Sequence[RequestResult], duration_s: float
) -> LevelResult:
    ok = [r for r in results if r.ok]
    errors = [r for r in results if not r.ok]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpot = [r.tpot_s for r in ok if r.tpot_s is not None]
    e2e = [r.e2e_s for r in ok if r.e2e_s is not None]
    good = [
        r
        for r in ok
        if r.ttft_s is not None
        and r.ttft_s <= cfg.ttft_slo_s
        and (r.tpot_s is None or r.tpot_s <= cfg.tpot_slo_s)
    ]
    prompts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    out_total = sum(r.output_tokens for r in results)
    span = max(duration_s, 1e-9)
    ttft_p99, tpot_p99 = _pct(ttft, 99), _pct(tpot, 99)
    meets = (
        bool(ok)
        and (ttft_p99 is not None and ttft_p99 <= cfg.ttft_slo_s)
        and (tpot_p99 is None or tpot_p99 <= cfg.tpot_slo_s)
    )
    examples: list[str] = []
    for r in errors:
        if r.error and r.error not in examples and len(examples) < 3:
            examples.append(r.error)
    return LevelResult(
        concurrency=concurrency,
        requests_sent=len(results),
        requests_ok=len(ok),
        errors=len(errors),
        error_examples=tuple(examples),
        duration_s=duration_s,
        ttft_p50_s=_pct(ttft, 50),
        ttft_p90_s=_pct(ttft, 90),
        ttft_p99_s=ttft_p99,
        tpot_p50_s=_pct(tpot, 50),
        tpot_p90_s=_pct(tpot, 90),
        tpot_p99_s=tpot_p99,
        e2e_p50_s=_pct(e2e, 50),
        e2e_p90_s=_pct(e2e, 90),
        e2e_p99_s=_pct(e2e, 99),
        prompt_tokens_total=sum(prompts),
        prompt_tokens_mean=float(np.mean(prompts)) if prompts else None,
        output_tokens_total=out_total,
        output_tokens_per_s=sum(r.output_tokens for r in ok) / span,
        requests_per_s=len(ok) / span,
        goodput_requests=len(good),
        goodput_per_s=len(good) / span,
        meets_slo_p99=meets,
    )


def _slo_break(cfg: LoadTestConfig, level: LevelResult) -> str | None:
    if level.requests_ok == 0:
        return "no request succeeded"
    if level.ttft_p99_s is not None and level.ttft_p99_s > cfg.ttft_slo_s:
        return f"TTFT P99 {level.ttft_p99_s:.3f} s > {cfg.ttft_slo_s:g} s"
    if level.tpot_p99_s is not None and level.tpot_p99_s > cfg.tpot_slo_s:
        return f"TPOT P99 {level.tpot_p99_s * 1000:.1f} ms > {cfg.tpot_slo_s * 1000:g} ms"
    return None


class _Runner:
    def __init__(
        self,
        cfg: LoadTestConfig,
        base_url: str,
        on_progress: Callable[[LoadTestProgress], None] | None,
        cancel_event: threading.Event | None,
        gpu_samples: Callable[[], Sequence[Any]] | None = None,
    ) -> None:
        self.cfg = cfg
        self.gpu_samples = gpu_samples
        self.base_url = base_url
        self.on_progress = on_progress
        self.cancel_event = cancel_event
        self.cancelled = False
        self.server_lost: str | None = None
        self.level_start_mono = 0.0  # time.monotonic() when the current level started

    def _progress(self, p: LoadTestProgress) -> None:
        if self.on_progress is not None:
            self.on_progress(p)

    async def _watch_cancel(self, tasks: Sequence[asyncio.Task[Any]]) -> None:
        assert self.cancel_event is not None
        while not self.cancel_event.is_set():
            await asyncio.sleep(0.05)
        self.cancelled = True
        for task in tasks:
            task.cancel()

    async def _check_server(self, concurrency: int, error: str) -> None:
        """After a refused connection: if a fresh TCP connection is refused too, the server is
        gone; record why (``server_lost``) so that every worker stops after its request."""
        url = httpx.URL(self.base_url)
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            _reader, writer = await asyncio.wait_for(
                asyncio.open_connection(url.host, port), timeout=2.0
            )
        except (OSError, TimeoutError):
            self.server_lost = (
                f"the server at {self.base_url} stopped accepting connections during the "
                f"concurrency {concurrency} level ({error}); the load test stopped there and "
                "keeps the requests that finished: check why the server ended (kvpilot serve "
                "or the GUI log says) and run it again"
            )
            return
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()

    async def _level(
        self,
        client: httpx.AsyncClient,
        model: str,
        words: int,
        index: int,
        concurrency: int,
    ) -> tuple[list[RequestResult], float, float]:
        cfg = self.cfg
        planned = cfg.requests_for(concurrency)
        rng = random.Random(cfg.seed * 1_000_003 + concurrency)
        prompts = [_words(rng, words) for _ in range(planned)]
        results: list[RequestResult] = []
        next_index = 0
        start = time.perf_counter()
        self.level_start_mono = time.monotonic()
        deadline = start + cfg.duration_s
        last_end = start
        levels_total = len(cfg.concurrency_levels)

        def report() -> None:
            self._progress(
                LoadTestProgress(
                    index,
                    levels_total,
                    concurrency,
                    len(results),
                    planned,
                    sum(1 for r in results if not r.ok),
                    time.perf_counter() - start,
                )
            )

        async def worker() -> None:
            nonlocal next_index, last_end
            while (
                next_index < planned
                and time.perf_counter() < deadline
                and self.server_lost is None
            ):
                prompt = prompts[next_index]
                next_index += 1
                result = await _one_request(client, self.base_url, cfg, model, prompt)
                results.append(result)
                last_end = time.perf_counter()
                report()
                if result.connect_failed and self.server_lost is None:
                    await self._check_server(concurrency, result.error or "")

        report()
        tasks = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
        watcher = asyncio.ensure_future(self._watch_cancel(tasks)) if self.cancel_event else None
        await asyncio.gather(*tasks, return_exceptions=True)
        if watcher is not None:
            watcher.cancel()
        return results, last_end - start, self.level_start_mono + (last_end - start)

    async def _gpu_sample_after(self, end_mono: float, wait_s: float = 1.0) -> None:
        """Wait (at most ``wait_s`` s) for the sampler's first sample after a level ended, so
        that the energy of a level shorter than the sampling period is bracketed too."""
        if self.gpu_samples is None:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            samples = self.gpu_samples()
            if not samples or float(samples[-1].t_monotonic_s) >= end_mono:
                return
            await asyncio.sleep(0.02)

    def _with_gpu(self, level: LevelResult, end_mono: float) -> LevelResult:
        """``level`` with the GPU's energy over it, when samples were given and cover it."""
        if self.gpu_samples is None or not end_mono > self.level_start_mono:
            return level
        energy = gpu_energy(
            self.gpu_samples(), self.level_start_mono, end_mono, level.output_tokens_total
        )
        return level if energy is None else replace(level, gpu=energy)

    async def run(self) -> LoadTestReport:
        cfg = self.cfg
        limits = httpx.Limits(max_connections=max(cfg.concurrency_levels) + 4)
        timeout = httpx.Timeout(cfg.request_timeout_s, connect=min(10.0, cfg.request_timeout_s))
        async with httpx.AsyncClient(
            timeout=timeout, limits=limits, trust_env=False, headers=_headers(cfg.api_key)
        ) as client:
            if cfg.model:
                model = cfg.model
            else:
                model = await asyncio.to_thread(detect_model, self.base_url, api_key=cfg.api_key)
            words, how = await _calibrate_words(
                client, self.base_url, model, cfg.prompt_tokens, cfg.seed
            )
            warm_tokens = 0
            warm_rng = random.Random(cfg.seed + 7)
            for _ in range(cfg.warmup_requests):
                warm = await _one_request(
                    client, self.base_url, cfg, model, _words(warm_rng, words)
                )
                warm_tokens += warm.output_tokens
                if not warm.ok and warm.error and warm.error.startswith("HTTP 4"):
                    raise LoadTestError(f"the server refused the request: {warm.error}")
            levels: list[LevelResult] = []
            brk: tuple[int, str] | None = None
            for index, concurrency in enumerate(cfg.concurrency_levels):
                if self.cancel_event is not None and self.cancel_event.is_set():
                    self.cancelled = True
                if self.cancelled or self.server_lost is not None:
                    break
                results, duration, end_mono = await self._level(
                    client, model, words, index, concurrency
                )
                level = _level_result(cfg, concurrency, results, duration)
                await self._gpu_sample_after(end_mono)
                level = self._with_gpu(level, end_mono)
                levels.append(level)
                reason = _slo_break(cfg, level)
                if brk is None and reason is not None and results:
                    brk = (concurrency, reason)
        return LoadTestReport(
            base_url=self.base_url,
            model=model,
            api=cfg.api,
            prompt_tokens_target=cfg.prompt_tokens,
            output_tokens_target=cfg.output_tokens,
            ttft_slo_s=cfg.ttft_slo_s,
            tpot_slo_s=cfg.tpot_slo_s,
            prompt_calibration=how,
            prompt_words=words,
            levels=tuple(levels),
            slo_break_concurrency=brk[0] if brk else None,
            slo_break_reason=brk[1] if brk else None,
            warmup_output_tokens=warm_tokens,
            cancelled=self.cancelled,
            server_lost=self.server_lost,
        )


def run_load_test(
    config: LoadTestConfig,
    on_progress: Callable[[LoadTestProgress], None] | None = None,
    cancel_event: threading.Event | None = None,
    gpu_samples: Callable[[], Sequence[Any]] | None = None,
) -> LoadTestReport:
    """Run the load test and block until it ends (call it from a worker thread in a GUI).

    ``gpu_samples`` returns the GPU samples taken so far (a running sampler's ``history``);
    each level then gets its energy, J per generated token and throttling (``LevelResult.gpu``).

    ``on_progress`` is called from the calling thread after each finished request. Setting
    ``cancel_event`` stops the run within ~0.1 s; the report then holds the finished levels
    (the interrupted one with the requests that completed) and ``cancelled=True``. A server
    that goes away mid-run (a refused connection, confirmed by a fresh connect) stops it the
    same way, with ``server_lost`` saying so in one sentence.

    Raises:
        LoadTestError: bad settings, a remote target without ``allow_remote``, an unreachable
            server, no model, or a server that refuses the request (HTTP 4xx on warm-up).
    """
    config.validate()
    base_url = check_target(config.base_url, allow_remote=config.allow_remote)
    runner = _Runner(config, base_url, on_progress, cancel_event, gpu_samples)
    return asyncio.run(runner.run())


def gpu_line(gpu: GpuEnergy) -> str:
    """``412.3 J, 2.15 J/token, mean 398 W (counter); THROTTLED: power cap``."""
    per_token = "-" if gpu.j_per_token is None else f"{gpu.j_per_token:.3g} J/token"
    text = f"{gpu.energy_j:.1f} J, {per_token}, mean {gpu.mean_power_w:.0f} W ({gpu.source})"
    if gpu.throttled:
        return f"{text}; THROTTLED: {', '.join(gpu.throttle_reasons)}"
    return text + ("" if gpu.throttled is None else "; not throttled")


def format_report(report: LoadTestReport) -> str:
    """A plain-text table of a report, one line per level."""

    def ms(v: float | None) -> str:
        return "-" if v is None or math.isnan(v) else f"{v * 1000:.0f}"

    lines = [
        f"model {report.model}  api {report.api}  prompt ~{report.prompt_tokens_target} tokens "
        f"({report.prompt_calibration}, {report.prompt_words} words)  output "
        f"{report.output_tokens_target} tokens  goals TTFT {report.ttft_slo_s:g} s, "
        f"TPOT {report.tpot_slo_s * 1000:g} ms",
        f"{'conc':>4} {'ok':>4} {'err':>4} {'TTFT ms p50/p90/p99':>22} "
        f"{'TPOT ms p50/p90/p99':>20} {'E2E ms p50/p90/p99':>22} {'out tok/s':>10} "
        f"{'req/s':>6} {'goodput':>8}",
    ]
    for lv in report.levels:
        lines.append(
            f"{lv.concurrency:>4} {lv.requests_ok:>4} {lv.errors:>4} "
            f"{ms(lv.ttft_p50_s) + '/' + ms(lv.ttft_p90_s) + '/' + ms(lv.ttft_p99_s):>22} "
            f"{ms(lv.tpot_p50_s) + '/' + ms(lv.tpot_p90_s) + '/' + ms(lv.tpot_p99_s):>20} "
            f"{ms(lv.e2e_p50_s) + '/' + ms(lv.e2e_p90_s) + '/' + ms(lv.e2e_p99_s):>22} "
            f"{lv.output_tokens_per_s:>10.1f} {lv.requests_per_s:>6.2f} "
            f"{lv.goodput_requests:>3}/{lv.requests_sent:<4}"
        )
        for example in lv.error_examples:
            lines.append(f"     error: {example}")
        if lv.gpu is not None:
            lines.append(f"     GPU: {gpu_line(lv.gpu)}")
    if report.slo_break_concurrency is not None:
        lines.append(
            f"P99 first breaks a goal at concurrency {report.slo_break_concurrency} "
            f"({report.slo_break_reason})"
        )
    else:
        lines.append("P99 met both goals at every level tested")
    note = throttle_note(report.levels)
    if note is not None:
        lines.append(note)
    if report.server_lost is not None:
        lines.append(f"stopped: {report.server_lost}")
    elif report.cancelled:
        lines.append("cancelled: the last level is incomplete")
    return "\n".join(lines)
