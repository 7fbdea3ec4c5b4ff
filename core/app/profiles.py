"""A settings profile: the records kept in ``settings.json`` and what makes one valid.

:class:`Profile` is one named launch configuration (its goal, the serving settings the user
fixed, runtime, server address, secrets, extra arguments, display choices), :class:`Settings`
the whole file. :func:`profile_problems` says what is wrong with a profile, each problem naming
the field, the fix and the field whose default repairs it. Reading and writing the file is
:mod:`kvpilot.core.app.settings`, which re-exports everything here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvpilot.core.base.errors import SettingsError
from kvpilot.core.base.goal import Goal
from kvpilot.core.base.hosts import key_is_sendable
from kvpilot.core.base.plan import ServingSettings

#: the schema version this code writes
SCHEMA_VERSION = 2

KV_DTYPES: tuple[str, ...] = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")
THEMES: tuple[str, ...] = ("system", "light", "dark")
MAX_SAMPLING_HZ = 20.0
DEFAULT_PROFILE_NAME = "Default"
#: the goal fields a profile stores (the release and the model filter are set where it is planned)
GOAL_FIELDS: tuple[str, ...] = ("use_case", "context_tokens", "users", "min_weight_bits")


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Profile:
    """One named launch configuration.

    Attributes:
        name: unique, shown in the profile selector.
        model_ref: catalog id, Hugging Face repo id or local path ("" = none chosen yet).
        goal: what the user wants (use case, context, users, quality floor): the recommender's
            :class:`~kvpilot.core.base.goal.Goal`, of which the profile stores
            :data:`GOAL_FIELDS`.
        plan: the serving settings the user fixed (``None``/``"auto"``/False: the planner
            chooses), e.g. a KV dtype, a utilization, eager mode.
        vllm_runtime: path to a ``vllm`` executable or its Python ("" = detect automatically).
        host, port: where ``vllm serve`` listens (127.0.0.1 unless the user widens it).
        api_key: passed as ``--api-key`` ("" = none); never logged (excluded from ``repr``).
        hf_cache_dir: ``HF_HOME``-style cache directory ("" = library default).
        hf_token: Hugging Face token for gated models ("" = none); never logged.
        extra_args: extra ``vllm serve`` arguments as typed by the user (shell-style quoting).
        sampling_hz: telemetry samples per second (NVML and /metrics), 0 < hz <= 20.
        theme: ``system``, ``light`` or ``dark``.
        served_model_name: the model name clients send (``--served-model-name``; "" = the
            model reference), what a front lists and routes by.
        auto_fallback: after a failed launch, relaunch with the best fallback by itself (at
            most :data:`kvpilot.core.app.launch.MAX_AUTO_FALLBACKS` times in a row), as
            ``kvpilot serve --auto-fallback`` does.
        unknown: keys from a newer schema, written back unchanged.
    """

    name: str
    model_ref: str = ""
    goal: Goal = field(default_factory=Goal)
    plan: ServingSettings = field(default_factory=ServingSettings)
    vllm_runtime: str = ""
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str = field(default="", repr=False)
    hf_cache_dir: str = ""
    hf_token: str = field(default="", repr=False)
    extra_args: str = ""
    sampling_hz: float = 2.0
    theme: str = "system"
    auto_fallback: bool = False
    served_model_name: str = ""
    unknown: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Settings:
    """Everything in the settings file.

    ``window_geometry`` is an opaque base64 string from the GUI ("" = default placement);
    ``unknown`` holds top-level keys from a newer schema; ``schema_version`` is the version of
    the file as read (kept when a newer app wrote it, so that it does not re-migrate its data).
    """

    profiles: tuple[Profile, ...] = (Profile(name=DEFAULT_PROFILE_NAME),)
    active_profile: str = DEFAULT_PROFILE_NAME
    window_geometry: str = ""
    schema_version: int = SCHEMA_VERSION
    unknown: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def active(self) -> Profile:
        """The active profile (the first one when the stored name is missing)."""
        for p in self.profiles:
            if p.name == self.active_profile:
                return p
        return self.profiles[0]

    def profile(self, name: str) -> Profile:
        """The profile called ``name``; raises SettingsError when there is none."""
        for p in self.profiles:
            if p.name == name:
                return p
        raise SettingsError(f"no profile named '{name}'; existing: {', '.join(self.names)}")

    @property
    def names(self) -> tuple[str, ...]:
        """Profile names in display order."""
        return tuple(p.name for p in self.profiles)


@dataclass(frozen=True)
class SettingsWarning:
    """Something the user should be told about the settings file (the app keeps running).

    ``kind`` is ``corrupt`` (file moved aside to ``backup_path``), ``invalid_value`` (a field
    reset to its default), ``newer_version`` (file written by a newer kvpilot) or
    ``permissions`` (file readable by others).
    """

    kind: str
    message: str
    backup_path: Path | None = None


@dataclass(frozen=True)
class LoadResult:
    """The settings that were loaded and what the user must be told about them."""

    settings: Settings
    warnings: tuple[SettingsWarning, ...] = ()
    path: Path | None = None


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True)
class SettingsProblem:
    """One invalid setting of a profile.

    ``label`` is the name the user knows (``context``, ``port``); ``message`` one sentence with the
    fix; ``reset`` the :class:`Profile` field (``plan.<name>`` for plan fields) that loading a file
    resets to its default to repair it, or None when no reset repairs it (an empty name).
    """

    label: str
    message: str
    reset: str | None

    @property
    def text(self) -> str:
        """``label: message``, as shown to the user."""
        return f"{self.label}: {self.message}"


def profile_problems(profile: Profile) -> list[SettingsProblem]:
    """Every problem with a profile ([] = valid), each naming the field, the fix and the repair."""
    problems: list[SettingsProblem] = []

    def add(label: str, message: str, reset: str | None) -> None:
        problems.append(SettingsProblem(label, message, reset))

    if not profile.name.strip():
        add("name", "must not be empty", None)
    if not 1 <= profile.port <= 65535:
        add("port", f"{profile.port} is not a TCP port; use 1024-65535", "port")
    if not profile.host.strip():
        add("host", "must not be empty; use 127.0.0.1 to stay on this machine", "host")
    elif profile.host not in ("127.0.0.1", "localhost", "::1") and not profile.api_key:
        add(
            "api_key",
            f"the server listens on {profile.host}, reachable from other machines; "
            "set an API key or use host 127.0.0.1",
            "host",  # the safe repair: back to this machine only
        )
    if not key_is_sendable(profile.api_key):
        add(
            "api_key",
            "holds a space, a line break or a non-ASCII character, which no HTTP client can "
            "send; use printable ASCII characters only",
            "api_key",
        )
    if not 0 < profile.sampling_hz <= MAX_SAMPLING_HZ:
        add(
            "sampling_hz",
            f"{profile.sampling_hz:g} is out of range; use a value in (0, {MAX_SAMPLING_HZ:g}]",
            "sampling_hz",
        )
    if profile.theme not in THEMES:
        add("theme", f"'{profile.theme}' is unknown; use one of {', '.join(THEMES)}", "theme")
    goal = profile.goal
    for label, name in (("use_case", "use_case"), ("context", "context_tokens"),
                        ("users", "users"), ("quality floor", "min_weight_bits")):
        alone = replace(Goal(), **{name: getattr(goal, name)})
        for message in alone.problems():
            add(label, message, f"goal.{name}")
    plan = profile.plan
    if plan.max_model_len is not None and plan.max_model_len < 16:
        add(
            "max_model_len",
            f"{plan.max_model_len} tokens is too small; use at least 16 or leave it to the planner",
            "plan.max_model_len",
        )
    if plan.max_num_seqs is not None and plan.max_num_seqs < 1:
        add("max_num_seqs", f"{plan.max_num_seqs} must be at least 1", "plan.max_num_seqs")
    if plan.kv_cache_dtype not in KV_DTYPES:
        add(
            "kv_cache_dtype",
            f"'{plan.kv_cache_dtype}' is unknown; use one of {', '.join(KV_DTYPES)}",
            "plan.kv_cache_dtype",
        )
    if plan.gpu_memory_utilization is not None and not 0 < plan.gpu_memory_utilization <= 1:
        add(
            "gpu_memory_utilization",
            f"{plan.gpu_memory_utilization:g} must be in (0, 1] or auto",
            "plan.gpu_memory_utilization",
        )
    problems.extend(
        SettingsProblem("extra_args", message, "extra_args")
        for message in _extra_args_messages(profile.extra_args)
    )
    return problems


def validate_profile(profile: Profile) -> list[str]:
    """Problems with a profile, one sentence each naming the field and the fix ([] = valid)."""
    return [problem.text for problem in profile_problems(profile)]


def problems_here(profile: Profile) -> list[str]:
    """What keeps an edited ``profile`` from being saved on this machine, one sentence each
    ([] = none): :func:`validate_profile`'s, and a vLLM choice that names nothing here
    (:func:`kvpilot.core.runtimes.discovery.configured_problem`: a path that does not exist, a
    command not on ``PATH``)."""
    from kvpilot.core.runtimes.discovery import configured_problem

    problems = validate_profile(profile)
    runtime_problem = configured_problem(profile.vllm_runtime)
    if runtime_problem:
        problems.append(f"vLLM: {runtime_problem}")
    return problems


def validate_extra_args(text: str) -> list[str]:
    """Problems with the extra ``vllm serve`` arguments typed by the user ([] = valid).

    Uses :func:`kvpilot.core.vllm.command.parse_extra_args`, which knows vLLM's flags and the
    ones kvpilot sets itself.
    """
    return [f"extra_args: {message}" for message in _extra_args_messages(text)]


def _extra_args_messages(text: str) -> list[str]:
    if not text.strip():
        return []
    from kvpilot.core.vllm import command

    try:
        command.parse_extra_args(text)
    except Exception as exc:  # noqa: BLE001 - any parse failure is a user-facing problem
        return [getattr(exc, "message", None) or str(exc)]
    return []
