"""A settings profile as a launch: what the window and ``kvpilot serve --profile`` both start.

A profile (:class:`~kvpilot.core.app.settings.Profile`) names a model, its serving settings (the
plan), where vLLM listens, the API key and Hugging Face token (from the keyring), extra ``vllm
serve`` arguments, the vLLM to run and whether a failed launch falls back by itself. The window
launches a plan of the profile's goal; ``kvpilot serve --profile NAME`` launches the profile's
own settings without a window. Both build the launch through :func:`profile_spec` and
:func:`fallback_policy`, so the two faces cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from kvpilot.core.app.launch import FallbackPolicy
from kvpilot.core.base.errors import SecretsUnavailableError, SettingsError
from kvpilot.core.base.plan import PlanInputs, ServingSettings, settings_dict

if TYPE_CHECKING:
    from kvpilot.core.app.settings import Profile
    from kvpilot.core.hardware.target import DeviceTarget
    from kvpilot.core.vllm.command import LaunchSpec


def profile_spec(
    profile: Profile,
    model: str,
    plan: PlanInputs | ServingSettings,
    overrides: Mapping[str, object] | None = None,
) -> LaunchSpec:
    """The :class:`LaunchSpec` that launches ``model`` for ``profile``.

    ``plan`` is the planned launch (the window's selected plan: its settings, the checkpoint's
    quantization flag and the release's capture-size flag) or, without a plan yet, the serving
    settings alone (``kvpilot serve --profile``: the profile's own, planned after the model is
    local). The profile adds host, port, API key, Hugging Face cache and token and the extra
    arguments; ``overrides`` (LaunchSpec fields: the GPUs, a test's dtype) are applied last.

    Raises:
        CommandError: the profile's extra arguments cannot be split (unbalanced quotes) or
            repeat a flag kvpilot sets.
    """
    from kvpilot.core.vllm.command import LaunchSpec, profile_launch_fields

    values = profile_launch_fields(profile)
    values.update(overrides or {})
    if isinstance(plan, PlanInputs):
        return LaunchSpec.from_plan(plan, model, **values)
    merged: dict[str, object] = {**settings_dict(plan), "model": model}
    merged.update(values)
    return LaunchSpec(**merged)  # type: ignore[arg-type]  # fields checked by the dataclass


def fallback_policy(profile: Profile | None) -> FallbackPolicy:
    """The profile's fallback policy (``auto_fallback``); no profile: never by itself."""
    return FallbackPolicy(automatic=bool(profile.auto_fallback) if profile is not None else False)


def profile_settings(profile: Profile) -> ServingSettings:
    """The serving settings a profile launches with: those its plan fixes, and for a context
    and a number of sequences it leaves open, its goal's (``context_tokens`` as
    ``max_model_len``, ``users`` as ``max_num_seqs``, as the window's plans of that goal do); a
    utilization of None ("auto") is chosen at launch by :func:`auto_utilization`."""
    fixed = profile.plan.settings
    return replace(
        fixed,
        max_model_len=fixed.max_model_len or profile.goal.context_tokens,
        max_num_seqs=fixed.max_num_seqs or profile.goal.users,
    )


def auto_utilization(profile: Profile, device: DeviceTarget) -> float | None:
    """The GPU memory utilization a profile left on "auto" is launched with: the one the
    window's planner and ``kvpilot serve`` choose
    (:func:`kvpilot.core.app.launch_settings.choose_utilization`: the most that passes vLLM's
    start-up check on the memory free now, capped). None where the profile fixes it, fixes a KV
    size instead, or nothing was read to choose by (the CPU backend: vLLM's own default)."""
    from kvpilot.core.app.launch_settings import choose_utilization

    choice = choose_utilization(device, profile_settings(profile))
    return choice.utilization if choice.automatic else None


@dataclass(frozen=True)
class LoadedProfile:
    """A profile read for a launch, with where it came from (``settings_path``) and what the
    settings file's reader had to say about the file (``warnings``, one sentence each)."""

    profile: Profile
    settings_path: Path | None
    warnings: tuple[str, ...] = ()


def load_profile(
    name: str, config_dir: Path | None = None, *, need_model: bool = True
) -> LoadedProfile:
    """The profile called ``name`` from the settings file (secrets from the keyring, or the
    0600 fallback file).

    Raises:
        SettingsError: no profile of that name (the message lists the ones there are), the
            settings file is damaged (it was moved aside; the message names the backup), the
            profile names no model (when ``need_model``), or the file cannot be read.
    """
    from kvpilot.core.app.settings import SettingsStore

    store = SettingsStore(config_dir)
    loaded = store.load()
    damaged = [w.message for w in loaded.warnings if w.kind == "corrupt"]
    if damaged:
        raise SettingsError(
            f"the settings file is damaged, so profile {name!r} cannot be read: {damaged[0]}; "
            "open the window to set the profile up again, or restore the backup"
        )
    names = loaded.settings.names
    if name not in names:
        known = ", ".join(repr(n) for n in names) or "none"
        raise SettingsError(
            f"no profile called {name!r} in {store.path} (profiles: {known}); "
            "create it in the settings dialog or pick one of these"
        )
    profile = loaded.settings.profile(name)
    if (name, "api_key") in store.secrets.unreadable:
        raise SecretsUnavailableError(
            f"the API key of profile {name!r} could not be read from the {store.secrets.kind} "
            "(locked, or no keyring service in this session); kvpilot does not serve it without "
            "its key: unlock the keyring (log in to the desktop) and start it again"
        )
    if need_model and not profile.model_ref.strip():
        raise SettingsError(
            f"profile {name!r} names no model; choose one in the window's planner first"
        )
    return LoadedProfile(profile, loaded.path, tuple(w.message for w in loaded.warnings))
