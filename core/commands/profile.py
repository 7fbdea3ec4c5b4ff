"""``kvpilot profile``: the window's profiles from the command line.

    kvpilot profile list [--json]
    kvpilot profile show NAME [--json]
    kvpilot profile add NAME --model REF [serving flags] [--served-model-name N] [--host H]
                        [--port P] [--vllm PATH] [--extra-args TEXT] [--[no-]auto-fallback]
                        [--api-key-from-env | --no-api-key] [device flags] [--force]
    kvpilot profile edit NAME [the same flags, only those given change] [--rename NEW]
    kvpilot profile remove NAME

The serving flags are ``kvpilot plan``'s, spelled as vLLM spells them (``--max-model-len``,
``--max-num-seqs``, ``--kv-cache-dtype``, ``--gpu-memory-utilization``, ...). ``add`` and ``edit``
plan the profile as ``kvpilot plan`` plans it (this machine's GPU unless ``--gpu`` names one, the
profile's vLLM, this GPU's measurements) and refuse to save a plan that does not fit, with the
reason, unless ``--force``. The records are the settings file's, the ones the window edits
(:mod:`kvpilot.core.app.settings`); the API key goes to the keyring (or the 0600 settings file) and
is read from ``KVPILOT_API_KEY`` with ``--api-key-from-env``, never from the command line.
``--json`` prints the records with the secrets replaced by whether they are set.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import TYPE_CHECKING, Any

from kvpilot.core.base.errors import CommandError, KvpilotError, SettingsError
from kvpilot.core.commands import Subparsers
from kvpilot.core.commands.serving_args import (
    add_device_arguments,
    add_serving_arguments,
    device_and_settings,
    settings_from_args,
)

if TYPE_CHECKING:
    from kvpilot.core.app.settings import Profile, Settings, SettingsStore
    from kvpilot.core.base.plan import Capacity, ServingSettings

API_KEY_ENV = "KVPILOT_API_KEY"
#: the ServingSettings fields the serving flags set (the others stay as the profile has them)
_FLAG_FIELDS = (
    "max_model_len", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization",
    "kv_cache_memory_bytes", "kv_cache_dtype", "quantization", "enforce_eager",
    "enable_prefix_caching", "tensor_parallel_size", "dtype", "block_size",
    "limit_mm_per_prompt", "enable_lora", "max_loras", "max_lora_rank", "max_cpu_loras",
    "lora_dtype", "speculative_config", "runner",
)
#: what stands for "not given" in ``edit`` (argparse leaves it when a flag is absent)
_UNSET: Any = object()


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Register ``kvpilot profile`` and its actions."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "profile", help="list, show, add, edit and remove profiles",
        description="The window's profiles from the command line.",
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    lst = sub.add_parser("list", help="the profiles, the active one marked")
    lst.add_argument("--json", action="store_true", help="one JSON object")
    show = sub.add_parser("show", help="one profile's settings")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", help="one JSON object")
    add = sub.add_parser("add", help="a new profile, planned before it is saved")
    add.add_argument("name")
    _profile_flags(add, editing=False)
    edit = sub.add_parser("edit", help="change a profile, planned before it is saved")
    edit.add_argument("name")
    edit.add_argument("--rename", metavar="NEW", help="a new name for the profile")
    _profile_flags(edit, editing=True)
    remove = sub.add_parser("remove", help="delete a profile")
    remove.add_argument("name")
    return p


def _profile_flags(parser: argparse.ArgumentParser, *, editing: bool) -> None:
    parser.add_argument("--model", required=not editing,
                        help="model directory, Hugging Face repo id or catalog id")
    add_device_arguments(parser)
    add_serving_arguments(parser)
    parser.add_argument("--served-model-name", help="the model name clients send")
    parser.add_argument("--host", help="where vLLM listens (non-local needs an API key)")
    parser.add_argument("--port", type=int, help="the port vLLM listens on")
    parser.add_argument("--vllm", help="vllm executable, Python interpreter or environment")
    parser.add_argument("--extra-args", metavar="TEXT", help="extra vllm serve arguments")
    parser.add_argument("--auto-fallback", action=argparse.BooleanOptionalAction, default=None,
                        help="relaunch with the best fallback after a failed start")
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument("--api-key-from-env", action="store_true",
                      help=f"the API key from {API_KEY_ENV}")
    keys.add_argument("--no-api-key", action="store_true", help="remove the API key")
    parser.add_argument("--force", action="store_true",
                        help="save even when the plan does not fit")
    if editing:  # an absent flag keeps the profile's value
        parser.set_defaults(**{name: _UNSET for name in _FLAG_FIELDS})


# ------------------------------------------------------------------------------- records


def public_json(profile: Profile, active: bool = False) -> dict[str, Any]:
    """A profile's record without its secrets (``api_key_set``, ``hf_token_set`` instead)."""
    from kvpilot.core.app.settings import profile_to_json

    out = profile_to_json(profile)
    out.pop("api_key", None)
    out.pop("hf_token", None)
    out["api_key_set"] = bool(profile.api_key)
    out["hf_token_set"] = bool(profile.hf_token)
    out["active"] = active
    return out


def _store() -> SettingsStore:
    from kvpilot.core.app.settings import SettingsStore

    return SettingsStore()


def _load(store: SettingsStore) -> Settings:
    loaded = store.load()
    damaged = [w.message for w in loaded.warnings if w.kind == "corrupt"]
    if damaged:
        raise SettingsError(f"the settings file is damaged: {damaged[0]}; restore the backup "
                            "or start again from the defaults")
    return loaded.settings


# ------------------------------------------------------------------------------- run


def run(args: argparse.Namespace) -> int:
    store = _store()
    settings = _load(store)
    if args.action == "list":
        return _list(settings, as_json=args.json)
    if args.action == "show":
        profile = settings.profile(args.name)
        if args.json:
            print(json.dumps(public_json(profile, profile.name == settings.active_profile),
                             indent=2))
        else:
            print(render_profile(profile))
        return 0
    if args.action == "remove":
        from kvpilot.core.app.settings import delete_profile

        store.save(delete_profile(settings, args.name))
        print(f"kvpilot: profile {args.name!r} removed")
        return 0
    return _add_or_edit(args, store, settings)


def _list(settings: Settings, *, as_json: bool) -> int:
    if as_json:
        print(json.dumps({
            "active_profile": settings.active_profile,
            "profiles": [public_json(p, p.name == settings.active_profile)
                         for p in settings.profiles],
        }, indent=2))
        return 0
    for p in settings.profiles:
        mark = "*" if p.name == settings.active_profile else " "
        served = f" as {p.served_model_name}" if p.served_model_name else ""
        print(f"{mark} {p.name:24} {p.model_ref or '(no model)'}{served}  "
              f"{p.host}:{p.port}")
    return 0


def render_profile(profile: Profile) -> str:
    """A profile's settings as ``key  value`` lines (secrets as set / not set)."""
    data = public_json(profile)
    lines = []
    for key, value in data.items():
        if isinstance(value, dict):
            for inner, v in value.items():
                if v not in (None, False, "", "auto") or inner == "kv_cache_dtype":
                    lines.append(f"{key}.{inner:24} {v}")
        else:
            lines.append(f"{key:29} {value}")
    return "\n".join(lines)


def _add_or_edit(args: argparse.Namespace, store: SettingsStore, settings: Settings) -> int:
    from kvpilot.core.app.settings import Profile, update_profile
    from kvpilot.core.base.plan import ServingSettings

    editing = args.action == "edit"
    if editing:
        old = settings.profile(args.name)
    else:
        from kvpilot.core.app.settings import create_profile

        settings = create_profile(settings, args.name, activate=False)
        old = Profile(name=args.name.strip())
    plan = _merged_settings(args, old.plan if editing else ServingSettings())
    values: dict[str, Any] = {"plan": plan}
    for flag, name in (("model", "model_ref"), ("served_model_name", "served_model_name"),
                       ("host", "host"), ("port", "port"), ("vllm", "vllm_runtime"),
                       ("extra_args", "extra_args"), ("auto_fallback", "auto_fallback")):
        value = getattr(args, flag)
        if value is not None:
            values[name] = value
    if args.api_key_from_env:
        key = os.environ.get(API_KEY_ENV, "")
        if not key:
            raise CommandError(f"--api-key-from-env reads {API_KEY_ENV}, which is not set; "
                               "export it first")
        values["api_key"] = key
    elif args.no_api_key:
        values["api_key"] = ""
    if editing and args.rename:
        values["name"] = args.rename.strip()
    new = dataclasses.replace(old, **values)
    capacity = plan_profile(args, new)
    if capacity is not None and not capacity.fits:
        why = (capacity.failure.message if capacity.failure is not None
               else "it does not fit").rstrip(".")
        kind = f" ({capacity.failure.kind})" if capacity.failure is not None else ""
        if not args.force:
            raise PlanDoesNotFit(
                f"profile {new.name!r} not saved: the plan does not fit{kind}: {why}; change "
                "the settings (e.g. --max-model-len, --kv-cache-dtype fp8) or pass --force"
            )
        print(f"kvpilot: warning: the plan does not fit{kind}: {why}; saved anyway (--force)")
    settings = update_profile(settings, new, old_name=old.name)
    store.save(settings)
    verb = "changed" if editing else "added"
    if capacity is not None:
        print(f"kvpilot: profile {new.name!r} {verb}: {capacity.verdict.words}, KV "
              f"{capacity.kv_cache_tokens:,} tokens, maximum concurrency "
              f"{capacity.max_concurrency:.2f}x at {capacity.max_model_len:,} tokens, "
              f"utilization {capacity.gpu_memory_utilization:g}")
    else:
        print(f"kvpilot: profile {new.name!r} {verb} (not planned)")
    return 0


class PlanDoesNotFit(KvpilotError):
    """A profile's plan does not fit and ``--force`` was not given (exit status 1)."""

    exit_status = 1


def _merged_settings(args: argparse.Namespace, base: ServingSettings) -> ServingSettings:
    """``base`` with the serving flags that were given (every flag for ``add``), validated as
    ``kvpilot plan`` validates them."""
    merged = argparse.Namespace(**vars(args))
    for name in _FLAG_FIELDS:
        if getattr(args, name, _UNSET) is _UNSET:
            setattr(merged, name, getattr(base, name))
    if merged.runner is None:
        merged.runner = "auto"
    fresh = settings_from_args(merged)
    return dataclasses.replace(
        fresh, max_cudagraph_capture_size=base.max_cudagraph_capture_size,
        cudagraph_mode=base.cudagraph_mode,
    )


def plan_profile(args: argparse.Namespace, profile: Profile) -> Capacity | None:
    """The profile planned as ``kvpilot plan`` plans it: the device the flags name (else this
    machine's), the profile's vLLM (else the installed one, else the newest kvpilot knows),
    its settings (a context and users its plan leaves open from its goal; an "auto"
    utilization as a launch picks it) and this GPU's measurements. None when ``--force`` is
    given and the model cannot be read.

    Raises:
        KvpilotError: the model cannot be read (without ``--force``), or no device to plan for.
    """
    from kvpilot.core.app.profile_launch import auto_utilization, profile_settings
    from kvpilot.core.base import paths
    from kvpilot.core.commands.plan import DEFAULT_VLLM_VERSION, detected_vllm_version
    from kvpilot.core.commands.plan import plan as plan_capacity
    from kvpilot.core.fit.measurements import MeasurementStore
    from kvpilot.core.hub.resolve import load_model_spec

    version = (getattr(args, "vllm_version", None)
               or detected_vllm_version(profile.vllm_runtime or None) or DEFAULT_VLLM_VERSION)
    device, settings = device_and_settings(args, version, profile_settings(profile))
    util = auto_utilization(profile, device)
    if util is not None:
        settings = dataclasses.replace(settings, gpu_memory_utilization=util)
    try:
        model = load_model_spec(profile.model_ref)
    except KvpilotError as exc:
        if not args.force:
            raise
        print(f"kvpilot: warning: not planned: {exc.message}")
        return None
    inputs = device.plan_inputs(model, version, settings)
    return plan_capacity(inputs, MeasurementStore(paths.measurements_path()))
