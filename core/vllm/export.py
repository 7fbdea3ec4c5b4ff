"""A plan taken elsewhere: the ``vllm serve`` command, ``docker run``, a compose file, Helm values.

Every format starts from the same :class:`~kvpilot.core.vllm.command.LaunchSpec` and the argv
that :func:`~kvpilot.core.vllm.command.build_argv_tail` builds for it, so an exported deployment
passes exactly the flags a local launch would. What differs per target:

* ``command``: ``vllm serve ...`` for this machine, with the environment kvpilot would set;
* ``docker``: ``docker run`` of the ``vllm/vllm-openai`` image (its entry point is
  ``vllm serve``), the GPUs reserved with ``--gpus``, the Hugging Face cache mounted, ``/health``
  as the health check, the port published on 127.0.0.1 unless the plan binds wider;
* ``compose``: the same as a Compose service (``deploy.resources.reservations.devices``);
* ``helm``: values for the vLLM production-stack chart, one ``modelSpec`` entry whose
  ``vllmConfig`` holds the settings the chart knows and ``extraArgs`` the rest.

Secrets never appear: the API key and the Hugging Face token are references to environment
variables (``${VLLM_API_KEY}``) or Kubernetes secrets. The model revision (the cached snapshot's
commit) pins the checkpoint; the predicted and, when there is one, measured capacity are written
as comments at the top.
"""

from __future__ import annotations

import math
import re
import shlex
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import yaml

from kvpilot.core.base.errors import CommandError
from kvpilot.core.base.plan import Capacity, PlanInputs
from kvpilot.core.base.units import GiB, gib_text
from kvpilot.core.fit.measurements import Measured
from kvpilot.core.hub.cache import is_repo_id
from kvpilot.core.vllm.command import (
    SECRET_ENV,
    LaunchSpec,
    build_argv_tail,
    build_command,
    build_env,
)

FORMATS = ("command", "docker", "compose", "helm")
IMAGE = "vllm/vllm-openai"
CONTAINER_HF_CACHE = "/root/.cache/huggingface"
HOST_HF_CACHE = "${HOME}/.cache/huggingface"
CONTAINER_MODELS = "/models"
HEALTH_START_PERIOD_S = 600  # loading and compiling a large model takes minutes
HEALTH_INTERVAL_S = 30
HEALTH_TIMEOUT_S = 10
HEALTH_RETRIES = 3
API_KEY_SECRET = "vllm-api-key"
HF_TOKEN_SECRET = "hf-token"

#: environment variables that only make sense for a child process of kvpilot on this machine
LOCAL_ONLY_ENV = frozenset(
    {"VLLM_LOGGING_COLOR", "NO_COLOR", "PYTHONUNBUFFERED", "HF_HOME", "HF_HUB_OFFLINE",
     "CUDA_VISIBLE_DEVICES"}
)

#: production-stack ``vllmConfig`` keys -> the vLLM flag its template emits for them
HELM_VLLM_CONFIG = {
    "--max-model-len": "maxModelLen",
    "--dtype": "dtype",
    "--tensor-parallel-size": "tensorParallelSize",
    "--max-num-seqs": "maxNumSeqs",
    "--gpu-memory-utilization": "gpuMemoryUtilization",
}
HELM_INT_KEYS = frozenset({"maxModelLen", "tensorParallelSize", "maxNumSeqs"})


@dataclass(frozen=True)
class ExportPlan:
    """What an export needs: the launch, the checkpoint's revision, the capacity to note.

    ``spec.model`` is what the target loads (a Hugging Face repo id for containers); ``revision``
    a branch, tag or commit (None: the default branch). ``gpu_count`` GPUs are reserved
    (default: tensor x pipeline parallel size); ``gpu_ids`` pins device UUIDs or indices
    instead. ``vllm_version`` picks the image tag (``latest`` when None).
    """

    spec: LaunchSpec
    revision: str | None = None
    vllm_version: str | None = None
    capacity: Capacity | None = None
    measured: Measured | None = None
    gpu_name: str = ""
    gpu_count: int | None = None
    gpu_ids: tuple[str, ...] = ()
    pipeline_parallel_size: int = 1
    weights_bytes: int | None = None
    repo_id: str | None = None

    @property
    def gpus(self) -> int:
        """GPUs the deployment reserves."""
        if self.gpu_ids:
            return len(self.gpu_ids)
        if self.gpu_count is not None:
            return self.gpu_count
        return max(1, self.spec.tensor_parallel_size) * self.stages

    @property
    def stages(self) -> int:
        """Pipeline stages: the plan's, or the launch settings' (``--pipeline-parallel-size``)."""
        return max(1, self.pipeline_parallel_size, self.spec.pipeline_parallel_size)

    @property
    def image(self) -> str:
        """``vllm/vllm-openai:vX.Y.Z`` for the planned release (``latest`` without one)."""
        tag = f"v{self.vllm_version.split('+')[0]}" if self.vllm_version else "latest"
        return f"{IMAGE}:{tag}"


def build_export_plan(
    spec: LaunchSpec,
    inputs: PlanInputs | None = None,
    *,
    capacity: Capacity | None = None,
    measured: Measured | None = None,
    revision: str | None = None,
    gpu_ids: Sequence[str] = (),
    pipeline_parallel_size: int = 1,
) -> ExportPlan:
    """The export of ``spec`` (built from ``inputs`` when given, e.g. by
    :meth:`LaunchSpec.from_plan`): revision from the cached snapshot unless given, the GPU, the
    vLLM release and the checkpoint size from the plan."""
    model = inputs.model if inputs is not None else None
    repo_id = None
    if model is not None and is_repo_id(model.model_id) and not is_local_model(model.model_id):
        repo_id = model.model_id
    if revision is None and model is not None:
        revision = revision_from_source(model.source)
    return ExportPlan(
        spec=spec,
        revision=revision,
        vllm_version=inputs.vllm_version if inputs is not None else None,
        capacity=capacity,
        measured=measured,
        gpu_name=inputs.gpu_name if inputs is not None else "",
        gpu_ids=tuple(gpu_ids),
        pipeline_parallel_size=pipeline_parallel_size,
        weights_bytes=model.weights_bytes if model is not None else None,
        repo_id=repo_id,
    )


def revision_from_source(source: str) -> str | None:
    """The commit of a spec read from the Hub cache (``hub-cache:org/name@<sha>``), else None."""
    if source.startswith(("hub-cache:", "hub:")) and "@" in source:
        rev = source.rsplit("@", 1)[1].strip()
        return rev or None
    return None


# --------------------------------------------------------------------------------------------
# shared pieces


def _served_tail(plan: ExportPlan, *, host: str) -> list[str]:
    """The argv after ``vllm serve`` for the target (host replaced, revision added)."""
    spec = replace(plan.spec, host=host, pipeline_parallel_size=plan.stages)
    tail = build_argv_tail(spec)
    if plan.revision:
        tail += ["--revision", plan.revision]
    return tail


def _check(plan: ExportPlan) -> None:
    """The plan's own launch rules (ports, API key for network hosts, extra args).

    Raises:
        CommandError: as :func:`~kvpilot.core.vllm.command.build_command`.
    """
    build_command(plan.spec)


def is_local_model(model: str) -> bool:
    """True when ``model`` is a folder on this machine rather than a Hugging Face repo id."""
    return model.startswith(("/", "./", "../", "~")) or model.count("/") > 1


def _container_plan(plan: ExportPlan) -> tuple[ExportPlan, list[str]]:
    """The plan as a container sees it: the Hub repo of a cached snapshot, else a local folder
    mounted read-only under /models."""
    if not is_local_model(plan.spec.model):
        return plan, []
    if plan.repo_id:
        return replace(plan, spec=replace(plan.spec, model=plan.repo_id)), []
    host_dir = plan.spec.model.rstrip("/")
    inside = f"{CONTAINER_MODELS}/{_service_name(host_dir)}"
    return replace(plan, spec=replace(plan.spec, model=inside)), [f"{host_dir}:{inside}:ro"]


def _public_env(plan: ExportPlan) -> dict[str, str]:
    """Non-secret environment the target should set (kvpilot's local-only variables dropped)."""
    env = build_env(replace(plan.spec, api_key=None, hf_token=None))
    return {k: v for k, v in sorted(env.items()) if k not in LOCAL_ONLY_ENV}


def _secret_names(plan: ExportPlan) -> list[str]:
    """The secret variables the deployment reads: the API key when the plan has one, and the
    Hugging Face token (gated checkpoints need it; an empty one is ignored)."""
    names = ["HF_TOKEN"]
    if plan.spec.api_key:
        names.append("VLLM_API_KEY")
    return [n for n in names if n in SECRET_ENV]


def _gib(n: int | None) -> str:
    return "?" if n is None else gib_text(n)


def capacity_lines(plan: ExportPlan) -> list[str]:
    """Comment lines (no ``#``) naming the plan's predicted and measured capacity."""
    lines = [f"kvpilot plan for {plan.spec.model}"
             + (f" at revision {plan.revision}" if plan.revision else "")
             + (f", vLLM {plan.vllm_version}" if plan.vllm_version else "")
             + (f", {plan.gpus}x {plan.gpu_name}" if plan.gpu_name else f", {plan.gpus} GPU(s)")]
    cap = plan.capacity
    if cap is not None:
        kind = cap.failure.kind if cap.failure else ""
        verdict = "fits" if cap.fits else f"does not fit ({kind})"
        lines.append(
            f"predicted: KV cache {_gib(cap.available_kv_bytes)}, {cap.kv_cache_tokens:,} tokens, "
            f"maximum concurrency {cap.max_concurrency:.2f}x at {cap.max_model_len:,} tokens; "
            f"{verdict}"
        )
    m = plan.measured
    if m is not None and m.available_kv_bytes is not None:
        text = f"measured ({m.source}, {m.measured_at}): KV cache {_gib(m.available_kv_bytes)}"
        if m.kv_cache_tokens is not None:
            text += f", {m.kv_cache_tokens:,} tokens"
        if m.max_concurrency is not None and m.concurrency_for_len:
            text += f", maximum concurrency {m.max_concurrency:.2f}x at {m.concurrency_for_len:,}"
        lines.append(text)
    return lines


def _comment(lines: Sequence[str]) -> str:
    """``# line`` comments, wrapped at 98 characters (YAML linters keep lines short)."""
    wrapped = [part for line in lines for part in textwrap.wrap(line, 96) or [""]]
    return "".join(f"# {line}\n" for line in wrapped)


def _published_port(plan: ExportPlan) -> str:
    """``127.0.0.1:P:P`` for a local plan, ``P:P`` when the plan serves the network."""
    port = plan.spec.port
    local = plan.spec.host in ("127.0.0.1", "localhost", "::1")
    return f"127.0.0.1:{port}:{port}" if local else f"{port}:{port}"


def _health_probe(port: int) -> list[str]:
    """``/health`` from inside the container with the image's own Python (no curl needed)."""
    code = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/health')"
    return ["CMD", "python3", "-c", code]


def _service_name(model: str) -> str:
    """A DNS-1123 label from a model id (``Qwen/Qwen3-8B`` -> ``qwen3-8b``)."""
    base = model.rstrip("/").rsplit("/", 1)[-1].lower()
    name = re.sub(r"[^a-z0-9-]+", "-", base).strip("-")[:50].strip("-")
    return name or "vllm"


def _yaml(data: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=False, width=100)


# --------------------------------------------------------------------------------------------
# formats


def export_command(plan: ExportPlan) -> str:
    """``VAR=value ... vllm serve ...`` for this machine (secrets as ``${VAR:?}`` references)."""
    _check(plan)
    env = {k: shlex.quote(v) for k, v in _public_env(plan).items()}
    if plan.spec.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = shlex.quote(plan.spec.cuda_visible_devices)
    if plan.spec.api_key:
        env["VLLM_API_KEY"] = '"${VLLM_API_KEY:?set VLLM_API_KEY}"'
    assigns = [f"{k}={v}" for k, v in sorted(env.items())]
    argv = ["vllm", "serve", *_served_tail(plan, host=plan.spec.host)]
    return _comment(capacity_lines(plan)) + " ".join([*assigns, shlex.join(argv)]) + "\n"


def _docker_gpus(plan: ExportPlan) -> str:
    if plan.gpu_ids:
        return f'"device={",".join(plan.gpu_ids)}"'
    return str(plan.gpus)


def export_docker(plan: ExportPlan) -> str:
    """A ``docker run`` line for the ``vllm/vllm-openai`` image (multi-line, ``\\`` joined)."""
    _check(plan)
    plan, mounts = _container_plan(plan)
    port = plan.spec.port
    parts: list[str] = ["docker run -d --name " + _service_name(plan.spec.model)]
    parts.append(f"--gpus {shlex.quote(_docker_gpus(plan))}")
    parts.append("--ipc=host")
    parts.append(f"-p {_published_port(plan)}")
    parts.append(f'-v "{HOST_HF_CACHE}:{CONTAINER_HF_CACHE}"')
    parts += [f"-v {shlex.quote(m)}" for m in mounts]
    for key, value in _public_env(plan).items():
        parts.append(f"-e {shlex.quote(f'{key}={value}')}")
    for key in _secret_names(plan):
        parts.append(f"-e {key}")  # passed through from the caller's environment
    code = _health_probe(port)[3]  # single quotes only, so it nests in double quotes
    parts.append(f'--health-cmd "python3 -c \\"{code}\\""')
    parts.append(f"--health-interval {HEALTH_INTERVAL_S}s")
    parts.append(f"--health-timeout {HEALTH_TIMEOUT_S}s")
    parts.append(f"--health-retries {HEALTH_RETRIES}")
    parts.append(f"--health-start-period {HEALTH_START_PERIOD_S}s")
    parts.append(plan.image)
    parts.append(shlex.join(_served_tail(plan, host="0.0.0.0")))
    return _comment(capacity_lines(plan)) + " \\\n  ".join(parts) + "\n"


def compose_document(plan: ExportPlan) -> dict[str, Any]:
    """The Compose file as a mapping (one service, ``services.<name>``)."""
    _check(plan)
    plan, mounts = _container_plan(plan)
    device: dict[str, Any] = {"driver": "nvidia", "capabilities": ["gpu"]}
    if plan.gpu_ids:
        device["device_ids"] = list(plan.gpu_ids)
    else:
        device["count"] = plan.gpus
    env: dict[str, str] = dict(_public_env(plan))
    for key in _secret_names(plan):
        env[key] = f"${{{key}:-}}" if key == "HF_TOKEN" else f"${{{key}:?set {key}}}"
    service: dict[str, Any] = {
        "image": plan.image,
        "command": _served_tail(plan, host="0.0.0.0"),
        "ports": [_published_port(plan)],
        "volumes": [f"{HOST_HF_CACHE}:{CONTAINER_HF_CACHE}", *mounts],
        "environment": env,
        "ipc": "host",
        "healthcheck": {
            "test": _health_probe(plan.spec.port),
            "interval": f"{HEALTH_INTERVAL_S}s",
            "timeout": f"{HEALTH_TIMEOUT_S}s",
            "retries": HEALTH_RETRIES,
            "start_period": f"{HEALTH_START_PERIOD_S}s",
        },
        "deploy": {"resources": {"reservations": {"devices": [device]}}},
        "restart": "unless-stopped",
    }
    return {"services": {_service_name(plan.spec.model): service}}


def export_compose(plan: ExportPlan) -> str:
    """``compose.yaml`` text (a header comment with the capacity, then the document)."""
    return "---\n" + _comment(capacity_lines(plan)) + _yaml(compose_document(plan))


def _split_flags(tail: Sequence[str]) -> list[tuple[str, str | None]]:
    """``[--flag, value, --switch, ...]`` -> ``[(flag, value), (switch, None), ...]``."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(tail):
        token = tail[i]
        nxt = tail[i + 1] if i + 1 < len(tail) else None
        if nxt is not None and not nxt.startswith("--"):
            out.append((token, nxt))
            i += 2
        else:
            out.append((token, None))
            i += 1
    return out


def _host_memory_gi(weights_bytes: int | None) -> str:
    """Host RAM to request: the checkpoint passes through it while loading (plus 25 %), at
    least 16 Gi."""
    if not weights_bytes:
        return "32Gi"
    return f"{max(16, math.ceil(weights_bytes * 1.25 / GiB))}Gi"


def _storage_gi(weights_bytes: int | None) -> str:
    """PVC size for the checkpoint: weights plus 30 %, at least 20 Gi."""
    if not weights_bytes:
        return "50Gi"
    return f"{max(20, int(weights_bytes * 1.3 / GiB) + 1)}Gi"


def helm_values(plan: ExportPlan) -> dict[str, Any]:
    """production-stack values: ``servingEngineSpec.modelSpec[0]`` from the plan.

    Raises:
        CommandError: the model is a local folder (a cluster pulls it from the Hub), or the plan
            could not be launched.
    """
    _check(plan)
    plan, _ = _container_plan(plan) if plan.repo_id else (plan, [])
    if is_local_model(plan.spec.model):
        raise CommandError(
            f"the model {plan.spec.model} is a local folder, which a cluster cannot pull; "
            "export with its Hugging Face repo id (--model org/name)"
        )
    managed = replace(plan.spec, extra_args=(), host="0.0.0.0", pipeline_parallel_size=plan.stages)
    tail = build_argv_tail(managed)[5:]  # drop model, --host H, --port P (the chart sets them)
    config: dict[str, Any] = {}
    extra: list[str] = []
    for flag, value in _split_flags(tail):
        key = HELM_VLLM_CONFIG.get(flag)
        if key is not None and value is not None:
            if key in HELM_INT_KEYS and value.isdigit():
                config[key] = int(value)
            elif key == "gpuMemoryUtilization":
                config[key] = float(value)
            else:
                config[key] = value
        elif flag == "--no-enable-prefix-caching":
            config["enablePrefixCaching"] = False
        elif flag == "--enable-prefix-caching":
            config["enablePrefixCaching"] = True
        else:
            extra += [flag] if value is None else [flag, value]
    config.setdefault("enablePrefixCaching", True)  # the chart always passes one of the two
    extra += list(plan.spec.extra_args)
    if extra:
        config["extraArgs"] = extra
    env = [{"name": k, "value": v} for k, v in _public_env(plan).items()]
    entry: dict[str, Any] = {
        "name": _service_name(plan.spec.model),
        "repository": IMAGE,
        "tag": plan.image.split(":", 1)[1],
        "modelURL": plan.spec.model,
    }
    if plan.revision:
        entry["modelRevision"] = plan.revision
    entry.update(
        {
            "replicaCount": 1,
            # the chart takes this block over its simplified fields; requestGPU it reads too
            "resources": {
                "requests": {"cpu": "8", "memory": _host_memory_gi(plan.weights_bytes),
                             "nvidia.com/gpu": plan.gpus},
                "limits": {"nvidia.com/gpu": plan.gpus},
            },
            "requestGPU": plan.gpus,
            "pvcStorage": _storage_gi(plan.weights_bytes),
            "shmSize": "16Gi",
            "vllmConfig": config,
            "env": env,
            "hf_token": {"secretName": HF_TOKEN_SECRET, "secretKey": "token"},
        }
    )
    spec: dict[str, Any] = {"runtimeClassName": "nvidia", "modelSpec": [entry]}
    if plan.spec.api_key:
        spec["vllmApiKey"] = {"secretName": API_KEY_SECRET, "secretKey": "key"}
    return {"servingEngineSpec": spec}


def export_helm(plan: ExportPlan) -> str:
    """``values.yaml`` text for ``helm install -f`` with the production-stack chart."""
    notes = [
        *capacity_lines(plan),
        f"the Hugging Face token is read from the secret {HF_TOKEN_SECRET} (key: token)",
    ]
    if plan.spec.api_key:
        notes.append(f"the API key is read from the secret {API_KEY_SECRET} (key: key)")
    return _comment(notes) + _yaml(helm_values(plan))


def render(plan: ExportPlan, fmt: str) -> str:
    """The plan as ``fmt`` (one of :data:`FORMATS`).

    Raises:
        CommandError: an unknown format, or a plan that could not be launched (see
            :func:`~kvpilot.core.vllm.command.build_command`).
    """
    renderers = {
        "command": export_command,
        "docker": export_docker,
        "compose": export_compose,
        "helm": export_helm,
    }
    if fmt not in renderers:
        raise CommandError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    return renderers[fmt](plan)
