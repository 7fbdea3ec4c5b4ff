"""A launch specification -> the ``vllm serve`` argv and environment (pure, no I/O).

:func:`build_command` never calls a shell: the result is an argv tuple for ``subprocess.Popen``
plus the environment variables to add. Secrets (the API key, the Hugging Face token) travel in
the environment only (``VLLM_API_KEY``, ``HF_TOKEN``), so they never show in ``ps``, in the log's
``non-default args`` line or in an exported command (:meth:`LaunchCommand.redacted`).

Only settings that differ from vLLM's defaults are passed, so the command stays short and valid
across versions (0.11 to 0.33). User extra arguments are split with :func:`shlex.split` and may
not repeat a flag that kvpilot itself sets (the message names the setting to change instead).

:func:`port_is_free` / :func:`find_free_port` probe the port the way vLLM binds it
(``SO_REUSEADDR``), so a port in ``TIME_WAIT`` counts as free and a listening one does not.
"""

from __future__ import annotations

import json
import shlex
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Protocol

from kvpilot.core.base import versions
from kvpilot.core.base.errors import CommandError, FitError
from kvpilot.core.base.hosts import check_listen_address
from kvpilot.core.base.plan import PlanInputs, ServingSettings, settings_dict
from kvpilot.core.base.speculative_config import parse_speculative_config
from kvpilot.core.base.versions import supports
from kvpilot.core.runtimes.discovery import (
    FlagSet,
    VllmRuntime,
    check_flags,
    learn_flags,
    normalize_flag,
    supports_max_model_len_auto,
)

REDACTED = "***"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
#: the flags that cap the CUDA-graph capture sizes, newest first (see kvpilot.core.base.versions)
CAPTURE_SIZE_FLAGS = ("--max-cudagraph-capture-size", "--cuda-graph-sizes")

#: flags kvpilot sets itself -> the setting to change instead of passing them as extra args
MANAGED_FLAGS: Mapping[str, str] = MappingProxyType(
    {
        "--model": "the model",
        "--host": "the host setting",
        "--port": "the port setting",
        "--api-key": "the API key setting (it is passed through VLLM_API_KEY)",
        "--hf-token": "the Hugging Face token setting (it is passed through HF_TOKEN)",
        "--served-model-name": "the served model name setting",
        "--max-model-len": "the context length (max_model_len) setting",
        "--max-num-seqs": "the concurrent sequences (max_num_seqs) setting",
        "--max-num-batched-tokens": "the batched tokens (max_num_batched_tokens) setting",
        "--gpu-memory-utilization": "the GPU memory fraction (gpu_memory_utilization) setting",
        "--device-memory-utilization": "the GPU memory fraction (gpu_memory_utilization) setting",
        "--kv-cache-memory-bytes": "the KV cache size (kv_cache_memory_bytes) setting",
        "--kv-cache-dtype": "the KV cache dtype setting",
        "--quantization": "the quantization setting",
        "-q": "the quantization setting",
        "--enforce-eager": "the eager mode (enforce_eager) setting",
        "--no-enforce-eager": "the eager mode (enforce_eager) setting",
        "--enable-prefix-caching": "the prefix caching setting",
        "--no-enable-prefix-caching": "the prefix caching setting",
        "--disable-prefix-caching": "the prefix caching setting",
        "--tensor-parallel-size": "the tensor parallel size setting",
        "-tp": "the tensor parallel size setting",
        "--dtype": "the dtype setting",
        "--load-format": "the load format setting",
        "--block-size": "the block size setting",
        "--limit-mm-per-prompt": "the images per prompt (limit_mm_per_prompt) setting",
        "--enable-lora": "the LoRA (enable_lora) setting",
        "--max-loras": "the LoRA slots (max_loras) setting",
        "--max-lora-rank": "the LoRA rank (max_lora_rank) setting",
        "--max-cpu-loras": "the cached LoRA adapters (max_cpu_loras) setting",
        "--lora-dtype": "the LoRA dtype setting",
        "--speculative-config": "the speculative decoding (speculative_config) setting",
        "--runner": "the runner setting",
    }
)

#: environment variables kvpilot sets itself (extra_env may not override them)
MANAGED_ENV = frozenset(
    {
        "VLLM_NO_USAGE_STATS",
        "VLLM_LOGGING_LEVEL",
        "VLLM_LOGGING_COLOR",
        "NO_COLOR",
        "PYTHONUNBUFFERED",
        "HF_HUB_OFFLINE",
        "HF_HOME",
        "HF_TOKEN",
        "CUDA_VISIBLE_DEVICES",
        "VLLM_API_KEY",
    }
)
SECRET_ENV = frozenset({"VLLM_API_KEY", "HF_TOKEN"})


@dataclass(frozen=True, kw_only=True)
class LaunchSpec(ServingSettings):
    """Everything needed to start one ``vllm serve``: the serving settings plus the process.

    ``None`` means "leave vLLM's default". Memory sizes are bytes; ``max_model_len`` is tokens;
    ``auto_max_model_len`` passes ``--max-model-len auto`` (vLLM >= 0.14) instead.
    ``api_key`` and ``hf_token`` never enter the argv.
    """

    model: str
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = field(default=None, repr=False)
    auto_max_model_len: bool = False
    load_format: str | None = None
    #: the release's capture-size flag (None: ``--max-cudagraph-capture-size``)
    cudagraph_size_flag: str | None = None
    extra_args: tuple[str, ...] = ()
    cuda_visible_devices: str | None = None
    hf_home: str | None = None
    hf_token: str | None = field(default=None, repr=False)
    hf_offline: bool = False
    logging_level: str = "INFO"
    extra_env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_plan(cls, inputs: PlanInputs, model: str, **overrides: object) -> LaunchSpec:
        """The spec that launches ``inputs`` with ``model`` (a local path or repo id).

        The serving settings are the plan's; ``--quantization`` is only added when the plan
        names no method and the checkpoint says the flag is needed. ``overrides`` replace any
        field.
        """
        values: dict[str, Any] = {**settings_dict(inputs), "model": model}
        checkpoint_quant = inputs.model.quantization
        if (
            inputs.quantization is None
            and checkpoint_quant is not None
            and checkpoint_quant.cli_flag_needed
        ):
            values["quantization"] = checkpoint_quant.method
        values["cudagraph_size_flag"] = versions.cudagraph_size_flag(inputs.vllm_version)
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True, repr=False)
class LaunchCommand:
    """The argv to exec (no shell) and the environment variables to add to the parent's.

    ``env`` holds secrets (``VLLM_API_KEY``, ``HF_TOKEN``) for the child; show
    :attr:`display_env` / :meth:`redacted` instead (``repr`` redacts them too).
    """

    argv: tuple[str, ...]
    env: dict[str, str]
    host: str
    port: int
    served_model_name: str
    api_key: str | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        """``http://host:port`` (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def __repr__(self) -> str:
        return (
            f"LaunchCommand(argv={self.display_argv!r}, env={self.display_env!r}, "
            f"host={self.host!r}, port={self.port!r}, "
            f"served_model_name={self.served_model_name!r})"
        )

    @property
    def display_env(self) -> dict[str, str]:
        """``env`` with secret values replaced by ``***``."""
        return {k: (REDACTED if k in SECRET_ENV else v) for k, v in self.env.items()}

    @property
    def display_argv(self) -> tuple[str, ...]:
        """The argv with any secret replaced by ``***`` (kvpilot never puts one there)."""
        secrets = {v for k, v in self.env.items() if k in SECRET_ENV and v}
        return tuple(REDACTED if a in secrets else a for a in self.argv)

    def redacted(self) -> str:
        """A copy-paste shell command: ``VAR=value ... vllm serve ...`` with secrets as ``***``."""
        assigns = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.display_env.items())]
        return " ".join([*assigns, shlex.join(self.display_argv)])


def _fmt_float(value: float) -> str:
    return f"{value:.4f}".rstrip("0").rstrip(".")


def _positive(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CommandError(f"{name} must be a positive integer, got {value!r}")


def _validate(spec: LaunchSpec, runtime: VllmRuntime | None) -> None:
    if not spec.model or not spec.model.strip():
        raise CommandError("no model given: pass a local checkpoint folder or a repo id")
    if spec.model.startswith("-"):
        raise CommandError(f"the model {spec.model!r} looks like a flag; pass a path or repo id")
    if not spec.host:
        raise CommandError("the host is empty; use 127.0.0.1 to serve on this machine only")
    check_listen_address(spec.host, spec.port, spec.api_key)
    if spec.auto_max_model_len:
        if spec.max_model_len is not None:
            raise CommandError(
                f"max_model_len is both 'auto' and {spec.max_model_len}; choose one"
            )
        if runtime is not None and not supports_max_model_len_auto(runtime.version):
            raise CommandError(
                f"vLLM {runtime.version} has no --max-model-len auto (it needs 0.14 or newer); "
                "give a number of tokens"
            )
    else:
        _positive("max_model_len", spec.max_model_len)
    _positive("max_num_seqs", spec.max_num_seqs)
    _positive("max_num_batched_tokens", spec.max_num_batched_tokens)
    _positive("kv_cache_memory_bytes", spec.kv_cache_memory_bytes)
    _positive("tensor_parallel_size", spec.tensor_parallel_size)
    _positive("block_size", spec.block_size)
    limit = spec.limit_mm_per_prompt
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise CommandError(f"limit_mm_per_prompt must be 0 or more images, got {limit!r}")
    _positive("max_cudagraph_capture_size", spec.max_cudagraph_capture_size)
    _positive("max_loras", spec.max_loras)
    _positive("max_lora_rank", spec.max_lora_rank)
    _positive("max_cpu_loras", spec.max_cpu_loras)
    lora_set = [name for name in ("max_loras", "max_lora_rank", "max_cpu_loras", "lora_dtype",
                                  "fully_sharded_loras")
                if getattr(spec, name) not in (None, False)]
    if lora_set and not spec.enable_lora:
        raise CommandError(
            f"{', '.join(lora_set)} given without enable_lora; turn LoRA on (--enable-lora) "
            "or leave them out"
        )
    if spec.speculative_config is not None:
        try:
            parse_speculative_config(spec.speculative_config)
        except FitError as exc:
            raise CommandError(exc.message) from None
    if spec.cudagraph_mode is not None and spec.cudagraph_mode.upper() not in CUDAGRAPH_MODES:
        raise CommandError(
            f"cudagraph_mode must be one of {', '.join(CUDAGRAPH_MODES)}, got "
            f"{spec.cudagraph_mode!r}"
        )
    util = spec.gpu_memory_utilization
    if util is not None and not 0.0 < util <= 1.0:
        raise CommandError(f"gpu_memory_utilization must be in (0, 1], got {util}")
    if spec.logging_level.upper() not in LOG_LEVELS:
        raise CommandError(
            f"logging level {spec.logging_level!r} is not one of {', '.join(LOG_LEVELS)}"
        )
    for key, value in spec.extra_env.items():
        if key in MANAGED_ENV:
            raise CommandError(
                f"extra environment variable {key} is set by kvpilot; change the matching "
                "setting instead"
            )
        if not key or "=" in key or not isinstance(value, str):
            raise CommandError(f"bad extra environment entry {key!r}={value!r}")


def validate_extra_args(args: Iterable[str], *, flags: FlagSet | None = None) -> tuple[str, ...]:
    """Check user extra arguments: no flag kvpilot sets, and (with ``flags``) no unknown flag.

    Raises:
        CommandError: naming the flag and the setting to change instead.
    """
    result = tuple(args)
    for token in result:
        if token == "--":
            break
        if not token.startswith("-") or token == "-" or token[1:2].isdigit():
            continue
        name = normalize_flag(token)
        if flags is not None:
            resolved = flags.resolve(token)
            if resolved is not None:
                name = resolved
        if name in MANAGED_FLAGS:
            raise CommandError(
                f"extra argument {token} duplicates a flag kvpilot sets; change "
                f"{MANAGED_FLAGS[name]} instead"
            )
        if flags is None and name.startswith("--") and len(name) > 4:
            hits = sorted({MANAGED_FLAGS[f] for f in MANAGED_FLAGS if f.startswith(name)})
            if hits:
                raise CommandError(
                    f"extra argument {token} abbreviates a flag kvpilot sets; change "
                    f"{' or '.join(hits)} instead"
                )
    if flags is not None:
        check_flags(flags, result)
    return result


class LaunchProfile(Protocol):
    """What a launch reads from a settings profile (:class:`kvpilot.core.app.settings.Profile`
    has these; named here so that this module does not import the settings)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def api_key(self) -> str: ...
    @property
    def extra_args(self) -> str: ...
    @property
    def hf_cache_dir(self) -> str: ...
    @property
    def hf_token(self) -> str: ...


def profile_launch_fields(profile: LaunchProfile) -> dict[str, Any]:
    """The :class:`LaunchSpec` fields a settings profile sets (served model name when it has
    one, host, port, API key, extra arguments, Hugging Face cache and token), for
    ``LaunchSpec.from_plan(..., **fields)``: the launch, the command shown and the export all
    read a profile through this one mapping.

    Raises:
        CommandError: the profile's extra arguments cannot be split (unbalanced quotes).
    """
    served = (getattr(profile, "served_model_name", "") or "").strip()
    return {
        **({"served_model_name": served} if served else {}),
        "host": profile.host,
        "port": profile.port,
        "api_key": profile.api_key or None,
        "extra_args": parse_extra_args(profile.extra_args),
        "hf_home": profile.hf_cache_dir or None,
        "hf_token": profile.hf_token or None,
    }


def parse_extra_args(
    text: str, *, runtime: VllmRuntime | None = None, flags: FlagSet | None = None
) -> tuple[str, ...]:
    """Split user extra arguments like a POSIX shell would, without running one, and validate.

    With a ``runtime`` (or its ``flags``), flags that version does not know are refused too.

    Raises:
        CommandError: unbalanced quotes, a duplicate of a kvpilot-managed flag, an unknown flag.
    """
    try:
        args = shlex.split(text, comments=False, posix=True)
    except ValueError as exc:
        raise CommandError(f"cannot split the extra vLLM arguments: {exc}") from exc
    if flags is None and runtime is not None:
        flags = learn_flags(runtime)
    return validate_extra_args(args, flags=flags)


def limit_mm_argv(images: int, vllm_version: str | None) -> list[str]:
    """``--limit-mm-per-prompt`` for ``images`` per prompt, in the syntax of that release.

    vLLM up to 0.7 parses ``image=N`` pairs only; 0.8 and 0.9 take JSON or pairs; from 0.10 only
    JSON (``engine/arg_utils.py``: ``nullable_kvs`` until 0.9.2). Text only (0) also sets
    videos to 0, so that vLLM profiles no encoder (and, from 0.10.1, skips loading the tower).
    None (unknown release) gives JSON.
    """
    counts = {"image": images, "video": 0} if images == 0 else {"image": images}
    if vllm_version is not None and not supports("limit_mm_per_prompt_json", vllm_version):
        value = ",".join(f"{k}={v}" for k, v in counts.items())
    else:
        value = json.dumps(counts, separators=(",", ":"))
    return ["--limit-mm-per-prompt", value]


def build_argv_tail(spec: LaunchSpec, vllm_version: str | None = None) -> list[str]:
    """The arguments after ``vllm serve`` (model first), without validation.

    ``vllm_version`` picks the syntax of flags whose value format changed between releases
    (``--limit-mm-per-prompt``); None means a recent release.
    """
    tail: list[str] = [spec.model, "--host", spec.host, "--port", str(spec.port)]
    if spec.served_model_name:
        tail += ["--served-model-name", spec.served_model_name]
    if spec.dtype:
        tail += ["--dtype", spec.dtype]
    if spec.load_format:
        tail += ["--load-format", spec.load_format]
    if spec.quantization:
        tail += ["--quantization", spec.quantization]
    if spec.tensor_parallel_size != 1:
        tail += ["--tensor-parallel-size", str(spec.tensor_parallel_size)]
    if spec.pipeline_parallel_size != 1:
        tail += ["--pipeline-parallel-size", str(spec.pipeline_parallel_size)]
    if spec.auto_max_model_len:
        tail += ["--max-model-len", "auto"]
    elif spec.max_model_len is not None:
        tail += ["--max-model-len", str(spec.max_model_len)]
    if spec.max_num_seqs is not None:
        tail += ["--max-num-seqs", str(spec.max_num_seqs)]
    if spec.max_num_batched_tokens is not None:
        tail += ["--max-num-batched-tokens", str(spec.max_num_batched_tokens)]
    if spec.gpu_memory_utilization is not None:
        tail += ["--gpu-memory-utilization", _fmt_float(spec.gpu_memory_utilization)]
    if spec.kv_cache_memory_bytes is not None:
        tail += ["--kv-cache-memory-bytes", str(spec.kv_cache_memory_bytes)]
    if spec.kv_cache_dtype and spec.kv_cache_dtype != "auto":
        tail += ["--kv-cache-dtype", spec.kv_cache_dtype]
    if spec.block_size is not None:
        tail += ["--block-size", str(spec.block_size)]
    if spec.max_cudagraph_capture_size is not None:
        flag = spec.cudagraph_size_flag or CAPTURE_SIZE_FLAGS[0]
        tail += [flag, str(spec.max_cudagraph_capture_size)]
    if spec.cudagraph_mode:
        mode = {"cudagraph_mode": spec.cudagraph_mode.upper()}
        tail += ["--compilation-config", json.dumps(mode, separators=(",", ":"))]
    if spec.enforce_eager:
        tail.append("--enforce-eager")
    if spec.enable_prefix_caching is True:
        tail.append("--enable-prefix-caching")
    elif spec.enable_prefix_caching is False:
        tail.append("--no-enable-prefix-caching")
    if spec.language_model_only:
        tail.append("--language-model-only")
    elif spec.limit_mm_per_prompt is not None:
        tail += limit_mm_argv(spec.limit_mm_per_prompt, vllm_version)
    tail += memory_argv(spec)
    tail += adapter_argv(spec)
    tail += list(spec.extra_args)
    return tail


def memory_argv(settings: ServingSettings) -> list[str]:
    """``--cpu-offload-gb``, ``--mamba-cache-mode`` and ``--mamba-ssm-cache-dtype`` (vLLM's
    spelling; each only when set)."""
    tail: list[str] = []
    if settings.cpu_offload_gb:
        tail += ["--cpu-offload-gb", _fmt_float(settings.cpu_offload_gb)]
    if settings.mamba_cache_mode:
        tail += ["--mamba-cache-mode", settings.mamba_cache_mode]
    if settings.mamba_ssm_cache_dtype and settings.mamba_ssm_cache_dtype != "auto":
        tail += ["--mamba-ssm-cache-dtype", settings.mamba_ssm_cache_dtype]
    return tail


def adapter_argv(settings: ServingSettings) -> list[str]:
    """``--runner``, ``--enable-lora`` and its slots, ``--speculative-config`` (vLLM's spelling;
    the JSON passed as given, compacted)."""
    tail: list[str] = []
    if settings.runner:
        tail += ["--runner", settings.runner]
    if settings.enable_lora:
        tail.append("--enable-lora")
        for flag, value in (("--max-loras", settings.max_loras),
                            ("--max-lora-rank", settings.max_lora_rank),
                            ("--max-cpu-loras", settings.max_cpu_loras),
                            ("--lora-dtype", settings.lora_dtype)):
            if value is not None:
                tail += [flag, str(value)]
        if settings.fully_sharded_loras:
            tail.append("--fully-sharded-loras")
    if settings.speculative_config:
        try:
            text = json.dumps(json.loads(settings.speculative_config), separators=(",", ":"))
        except json.JSONDecodeError:
            text = settings.speculative_config
        tail += ["--speculative-config", text]
    return tail


#: the endpoints kvpilot itself polls while a server runs (readiness, hang check, telemetry)
POLLED_ENDPOINTS = ("/health", "/metrics")
ACCESS_LOG_FILTER_FLAG = "--disable-access-log-for-endpoints"
_ACCESS_LOG_FLAGS = (ACCESS_LOG_FILTER_FLAG, "--disable-uvicorn-access-log",
                     "--enable-uvicorn-access-log", "--no-disable-uvicorn-access-log")


def quiet_polling_argv(extra_args: Iterable[str], flags: FlagSet | None) -> list[str]:
    """``--disable-access-log-for-endpoints /health,/metrics`` where the runtime has that flag.

    kvpilot polls ``/health`` and ``/metrics`` several times a second; uvicorn logs each poll,
    which buried the user's own requests (six lines in ten of a served log) and filled the
    log view with them. Only a runtime whose learned flag table lists the filter gets it (the
    flag is recent, and an older vLLM refuses unknown flags); nothing is added when the
    user's extra arguments already set an access-log flag.
    """
    if flags is None or ACCESS_LOG_FILTER_FLAG not in flags.flags:
        return []
    for token in extra_args:
        if token == "--":
            break
        # the flag the token names, as validate_extra_args reads it (underscores, "=value",
        # an abbreviation the runtime would expand)
        if token.startswith("--") and (flags.resolve(token) or normalize_flag(token)) in (
            _ACCESS_LOG_FLAGS
        ):
            return []
    return [ACCESS_LOG_FILTER_FLAG, ",".join(POLLED_ENDPOINTS)]


def build_env(spec: LaunchSpec) -> dict[str, str]:
    """The environment variables to add for ``spec`` (secrets included; never log this dict)."""
    env: dict[str, str] = dict(spec.extra_env)
    env.update(
        {
            "VLLM_NO_USAGE_STATS": "1",
            "VLLM_LOGGING_LEVEL": spec.logging_level.upper(),
            "VLLM_LOGGING_COLOR": "0",
            "NO_COLOR": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if spec.hf_offline:
        env["HF_HUB_OFFLINE"] = "1"
    if spec.hf_home:
        env["HF_HOME"] = spec.hf_home
    if spec.hf_token:
        env["HF_TOKEN"] = spec.hf_token
    if spec.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = spec.cuda_visible_devices
    if spec.api_key:
        env["VLLM_API_KEY"] = spec.api_key
    return env


def build_command(
    spec: LaunchSpec,
    runtime: VllmRuntime | None = None,
    *,
    flags: FlagSet | None = None,
) -> LaunchCommand:
    """``vllm serve`` argv + env for ``spec``; checked against ``runtime``'s flags when given.

    Without a runtime the argv starts with ``vllm``. ``flags`` (a :class:`FlagSet`) can be passed
    to skip learning them from the runtime.

    Raises:
        CommandError: an invalid setting, a network host without an API key, a port out of
            range, an extra argument that repeats a managed flag, or a flag the runtime lacks.
    """
    _validate(spec, runtime)
    if flags is None and runtime is not None:
        flags = learn_flags(runtime)
    validate_extra_args(spec.extra_args, flags=flags)
    if flags is not None and spec.max_cudagraph_capture_size is not None:
        known = [f for f in CAPTURE_SIZE_FLAGS if f in flags.flags]
        if known and (spec.cudagraph_size_flag or CAPTURE_SIZE_FLAGS[0]) not in known:
            spec = replace(spec, cudagraph_size_flag=known[0])
    tail = build_argv_tail(spec, runtime.version if runtime is not None else None)
    tail += quiet_polling_argv(spec.extra_args, flags)
    if flags is not None:
        check_flags(flags, tail)
    prefix = runtime.argv_prefix if runtime is not None else ("vllm",)
    return LaunchCommand(
        argv=(*prefix, "serve", *tail),
        env=build_env(spec),
        host=spec.host,
        port=spec.port,
        served_model_name=spec.served_model_name or spec.model,
        api_key=spec.api_key,
    )


# --------------------------------------------------------------------------------------------
# ports


def _bind_family(host: str) -> tuple[socket.AddressFamily, str]:
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise CommandError(f"cannot resolve host {host!r}: {exc}") from exc
    family, _, _, _, sockaddr = infos[0]
    return family, str(sockaddr[0])


def port_is_free(host: str, port: int) -> bool:
    """True when vLLM could bind ``host:port`` now (``SO_REUSEADDR``, as vLLM binds).

    Raises:
        CommandError: the host cannot be resolved or the port is out of range.
    """
    if not 1 <= port <= 65535:
        raise CommandError(f"port {port} is out of range; pick one in 1-65535")
    family, addr = _bind_family(host)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((addr, port))
        except OSError:
            return False
    return True


def find_free_port(host: str, preferred: int, *, attempts: int = 50) -> int:
    """``preferred`` if free, else the next free port above it, else one the OS picks.

    Raises:
        CommandError: the host cannot be resolved or no port could be bound.
    """
    start = preferred if 1 <= preferred <= 65535 else 8000
    for port in range(start, min(start + attempts, 65536)):
        if port_is_free(host, port):
            return port
    family, addr = _bind_family(host)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((addr, 0))
        except OSError as exc:
            raise CommandError(f"no free port on {host}: {exc}") from exc
        return int(sock.getsockname()[1])
