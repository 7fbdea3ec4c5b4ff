"""Profiles and app settings on disk: a versioned JSON file in the platform config directory.

The records themselves (:class:`Profile`, :class:`Settings`) and what makes a profile valid are
:mod:`kvpilot.core.app.profiles`; this module reads, repairs, migrates and writes them, and names
them for its callers.

The file is ``settings.json`` in ``platformdirs.user_config_dir("kvpilot")`` (or in
``$KVPILOT_CONFIG_DIR`` when set, which tests use). It holds a list of :class:`Profile` records,
the name of the active one, and app-wide state such as the window geometry.

Guarantees:

* writes are atomic (:func:`kvpilot.core.base.paths.atomic_write_text`) and the file is
  created with permissions 0600; the API key and Hugging Face token go to the system keyring
  when there is one (:mod:`kvpilot.core.app.secrets`; secrets still in an older file move there on
  the first load) and stay in this file only as the last resort
  (``SettingsStore.secrets.describe()`` says which, in words, for the settings dialog);
* a file that is not valid JSON, or not a settings object, is moved aside as
  ``settings.json.corrupt-<timestamp>`` and :meth:`SettingsStore.load` returns the defaults with a
  :class:`SettingsWarning` naming the backup; the app keeps running;
* a field with a value of the wrong type or out of range falls back to its default with a warning
  (the rest of the file is kept);
* keys this version does not know (written by a newer kvpilot) are kept and written back
  unchanged, both at the top level and inside each profile;
* older files are brought up to :data:`SCHEMA_VERSION` by the functions in :data:`MIGRATIONS`.

Profile operations (:func:`create_profile`, :func:`duplicate_profile`, :func:`rename_profile`,
:func:`delete_profile`, :func:`switch_profile`) return a new :class:`Settings`; they raise
:class:`~kvpilot.core.base.errors.SettingsError` for a name that is empty or taken, an unknown
profile or deleting the last one.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvpilot.core.app.profiles import (
    DEFAULT_PROFILE_NAME,
    GOAL_FIELDS,
    KV_DTYPES,
    MAX_SAMPLING_HZ,
    SCHEMA_VERSION,
    THEMES,
    LoadResult,
    Profile,
    Settings,
    SettingsProblem,
    SettingsWarning,
    profile_problems,
    validate_extra_args,
    validate_profile,
)
from kvpilot.core.base.errors import SettingsError
from kvpilot.core.base.goal import Goal
from kvpilot.core.base.paths import atomic_write_text, write_failure
from kvpilot.core.base.plan import (
    ServingSettings,
    serving_field_names,
    settings_from_dict,
)

if TYPE_CHECKING:
    from kvpilot.core.app.secrets import KeyringConsent

#: the records and their validation live in :mod:`kvpilot.core.app.profiles`; all are named here
__all__ = [
    "CONFIG_DIR_ENV",
    "DEFAULT_PROFILE_NAME",
    "FILE_NAME",
    "GOAL_FIELDS",
    "KV_DTYPES",
    "MAX_SAMPLING_HZ",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SECRETS_STORAGE",
    "THEMES",
    "LoadResult",
    "Profile",
    "Settings",
    "SettingsProblem",
    "SettingsStore",
    "SettingsWarning",
    "create_profile",
    "default_config_dir",
    "delete_profile",
    "duplicate_profile",
    "migrate",
    "profile_problems",
    "profile_to_json",
    "rename_profile",
    "settings_from_json",
    "settings_to_json",
    "switch_profile",
    "update_profile",
    "validate_extra_args",
    "validate_profile",
]

log = logging.getLogger("kvpilot.settings")

#: file name inside the config directory
FILE_NAME = "settings.json"
#: environment variable that overrides the config directory (tests, portable installs)
CONFIG_DIR_ENV = "KVPILOT_CONFIG_DIR"
#: how secrets are stored when no keyring is usable, in words for the settings dialog
#: (``SettingsStore.secrets.describe()`` says where they are on this machine)
SECRETS_STORAGE = (
    "API key and Hugging Face token are stored in the settings file, readable only by you "
    "(permissions 0600); no system keyring is used."
)

# --------------------------------------------------------------------------- (de)serialisation

_PLAN_FIELDS = set(serving_field_names())
_PROFILE_FIELDS = {f.name for f in fields(Profile)} - {"unknown", "plan", "goal"}
_TOP_KEYS = {"schema_version", "profiles", "active_profile", "window_geometry"}


def _check_type(value: Any, default: Any, optional: bool = False) -> bool:
    if value is None:
        return optional
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int) and not isinstance(default, bool):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float) or optional:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, str):
        return isinstance(value, str)
    return True


def _goal_from_json(raw: Any, where: str, warnings: list[SettingsWarning]) -> Goal:
    default = Goal()
    if not isinstance(raw, dict):
        if raw is not None:
            warnings.append(
                SettingsWarning("invalid_value", f"{where}.goal: not an object; using defaults")
            )
        return default
    values: dict[str, Any] = {}
    for name in GOAL_FIELDS:
        if name not in raw:
            continue
        dv = getattr(default, name)
        if _check_type(raw[name], dv):
            values[name] = raw[name]
        else:
            warnings.append(
                SettingsWarning(
                    "invalid_value",
                    f"{where}.goal.{name}: {raw[name]!r} has the wrong type; using {dv!r}",
                )
            )
    return replace(default, **values)


def _plan_from_json(raw: Any, where: str, warnings: list[SettingsWarning]) -> ServingSettings:
    default = ServingSettings()
    if not isinstance(raw, dict):
        if raw is not None:
            warnings.append(
                SettingsWarning("invalid_value", f"{where}.plan: not an object; using defaults")
            )
        return default
    values: dict[str, Any] = {}
    for name in _PLAN_FIELDS:
        if name not in raw:
            continue
        dv = getattr(default, name)
        v = raw[name]
        try:
            settings_from_dict({name: v})
            ok = v is not None or dv is None
        except TypeError:
            ok = False
        if ok and name == "gpu_memory_utilization" and v is not None:
            v = float(v)
        if ok:
            values[name] = v
        else:
            warnings.append(
                SettingsWarning(
                    "invalid_value",
                    f"{where}.plan.{name}: {raw[name]!r} has the wrong type; using {dv!r}",
                )
            )
    return replace(default, **values)


def _profile_from_json(raw: Any, index: int, warnings: list[SettingsWarning]) -> Profile | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"].strip():
        warnings.append(
            SettingsWarning("invalid_value", f"profiles[{index}]: no name; profile dropped")
        )
        return None
    name = raw["name"].strip()
    where = f"profile '{name}'"
    default = Profile(name=name)
    values: dict[str, Any] = {}
    for key in _PROFILE_FIELDS - {"name"}:
        if key not in raw:
            continue
        dv = getattr(default, key)
        if _check_type(raw[key], dv):
            values[key] = float(raw[key]) if isinstance(dv, float) else raw[key]
        else:
            warnings.append(
                SettingsWarning(
                    "invalid_value", f"{where}.{key}: {raw[key]!r} has the wrong type; using {dv!r}"
                )
            )
    goal = _goal_from_json(raw.get("goal"), where, warnings)
    plan = _plan_from_json(raw.get("plan"), where, warnings)
    unknown = {k: v for k, v in raw.items() if k not in _PROFILE_FIELDS | {"plan", "goal"}}
    for key, known in (("plan", _PLAN_FIELDS), ("goal", set(GOAL_FIELDS))):
        inner = raw.get(key)
        extra = {k: v for k, v in inner.items() if k not in known} if isinstance(inner, dict) \
            else {}
        if extra:
            unknown[f"__{key}__"] = extra
    profile = Profile(name=name, goal=goal, plan=plan, unknown=unknown, **values)
    # out-of-range values: reset the offending field to its default, keep the rest
    # (a reset can reveal another problem: a dropped API key on a wide host; so until stable)
    for _ in range(len(_PROFILE_FIELDS) + len(_PLAN_FIELDS) + len(GOAL_FIELDS)):
        repairable = [p for p in profile_problems(profile) if p.reset is not None]
        if not repairable:
            break
        for problem in repairable:
            assert problem.reset is not None
            profile = _reset_field(profile, problem.reset)
            warnings.append(
                SettingsWarning("invalid_value", f"{where}: {problem.text}; reset to the default")
            )
    return profile


def _reset_field(profile: Profile, name: str) -> Profile:
    """``profile`` with the field ``name`` (``plan.<field>``, ``goal.<field>`` inside those) at
    its default."""
    if name.startswith("plan."):
        key = name.removeprefix("plan.")
        default_plan = getattr(ServingSettings(), key)
        return replace(profile, plan=replace(profile.plan, **{key: default_plan}))
    if name.startswith("goal."):
        key = name.removeprefix("goal.")
        return replace(profile, goal=replace(profile.goal, **{key: getattr(Goal(), key)}))
    return replace(profile, **{name: getattr(Profile(name=profile.name), name)})


def settings_from_json(
    data: Mapping[str, Any],
) -> tuple[Settings, list[SettingsWarning]]:
    """Build :class:`Settings` from a parsed (and migrated) JSON object.

    Raises:
        SettingsError: ``data`` is not a settings object at all (no usable profile list).
    """
    warnings: list[SettingsWarning] = []
    raw_profiles = data.get("profiles", [])
    if not isinstance(raw_profiles, list):
        raise SettingsError("'profiles' is not a list")
    profiles: list[Profile] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_profiles):
        p = _profile_from_json(raw, i, warnings)
        if p is None:
            continue
        if p.name in seen:
            warnings.append(
                SettingsWarning(
                    "invalid_value", f"profile '{p.name}' appears twice; second dropped"
                )
            )
            continue
        seen.add(p.name)
        profiles.append(p)
    if not profiles:
        profiles = [Profile(name=DEFAULT_PROFILE_NAME)]
    active = data.get("active_profile")
    if not isinstance(active, str) or active not in seen:
        active = profiles[0].name
    geometry = data.get("window_geometry", "")
    if not isinstance(geometry, str):
        geometry = ""
    version = data.get("schema_version", SCHEMA_VERSION)
    unknown = {k: v for k, v in data.items() if k not in _TOP_KEYS}
    return (
        Settings(
            profiles=tuple(profiles),
            active_profile=active,
            window_geometry=geometry,
            schema_version=max(int(version), SCHEMA_VERSION),
            unknown=unknown,
        ),
        warnings,
    )


def profile_to_json(profile: Profile) -> dict[str, Any]:
    """The JSON object for one profile, unknown keys included."""
    unknown = dict(profile.unknown)
    plan = {name: getattr(profile.plan, name) for name in serving_field_names()}
    plan.update({k: v for k, v in unknown.pop("__plan__", {}).items() if k not in plan})
    goal = {name: getattr(profile.goal, name) for name in GOAL_FIELDS}
    goal.update({k: v for k, v in unknown.pop("__goal__", {}).items() if k not in goal})
    out: dict[str, Any] = {"name": profile.name}
    for f in fields(Profile):
        if f.name in ("name", "unknown", "plan", "goal"):
            continue
        out[f.name] = getattr(profile, f.name)
    out["goal"] = goal
    out["plan"] = plan
    out.update({k: v for k, v in unknown.items() if k not in out})
    return out


def settings_to_json(settings: Settings) -> dict[str, Any]:
    """The JSON object for the whole file, unknown keys included."""
    out: dict[str, Any] = {
        "schema_version": settings.schema_version,
        "active_profile": settings.active_profile,
        "window_geometry": settings.window_geometry,
        "profiles": [profile_to_json(p) for p in settings.profiles],
    }
    out.update({k: v for k, v in settings.unknown.items() if k not in out})
    return out


# --------------------------------------------------------------------------- migration


def _migrate_0_to_1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 0 (no ``schema_version``) kept profiles as a mapping name -> fields."""
    profiles = data.get("profiles")
    if isinstance(profiles, dict):
        data["profiles"] = [
            {"name": name, **(body if isinstance(body, dict) else {})}
            for name, body in profiles.items()
        ]
    data["schema_version"] = 1
    return data


#: where version 1 kept the goal inside ``plan``: plan key -> goal key
_V1_GOAL_KEYS = {"use_case": "use_case", "max_model_len": "context_tokens",
                 "max_num_seqs": "users"}


def _migrate_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 kept the goal in ``plan``: the context as ``max_model_len``, the users as
    ``max_num_seqs``, the quality floor as ``allow_4bit``. Version 2 has a ``goal`` object, and
    ``plan`` holds only the serving settings the user fixed."""
    profiles = data.get("profiles")
    for profile in profiles if isinstance(profiles, list) else ():
        plan = profile.get("plan") if isinstance(profile, dict) else None
        if not isinstance(plan, dict) or "goal" in profile:
            continue
        goal = {new: plan.pop(old) for old, new in _V1_GOAL_KEYS.items() if old in plan}
        if "allow_4bit" in plan:
            allow = plan.pop("allow_4bit")
            goal["min_weight_bits"] = (4 if allow else 8) if isinstance(allow, bool) else allow
        profile["goal"] = goal
    data["schema_version"] = 2
    return data


#: version N -> function turning a version-N object into a version-N+1 object
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    0: _migrate_0_to_1, 1: _migrate_1_to_2,
}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a settings object up to :data:`SCHEMA_VERSION` (newer versions are left as they are).

    Raises:
        SettingsError: ``schema_version`` is not an integer or no migration exists for it.
    """
    version = data.get("schema_version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise SettingsError(f"schema_version {version!r} is not a non-negative integer")
    data = copy.deepcopy(data)
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise SettingsError(f"no migration from settings schema version {version}")
        data = step(data)
        version = int(data.get("schema_version", version + 1))
    return data


# --------------------------------------------------------------------------- storage


def default_config_dir() -> Path:
    """``$KVPILOT_CONFIG_DIR`` when set, else the platform's per-user config dir for kvpilot."""
    from kvpilot.core.base.paths import config_dir

    return config_dir()


def _secrets_in_file(data: Mapping[str, Any]) -> bool:
    """True when a parsed settings file holds an API key or token in any profile."""
    raw_profiles = data.get("profiles")
    if isinstance(raw_profiles, dict):
        bodies: Any = raw_profiles.values()
    elif isinstance(raw_profiles, list):
        bodies = raw_profiles
    else:
        return False
    return any(
        isinstance(p, dict) and any(isinstance(p.get(k), str) and p.get(k) for k in
                                    ("api_key", "hf_token"))
        for p in bodies
    )


class SettingsStore:
    """Reads and writes ``settings.json`` in one directory.

    Args:
        config_dir: the directory (default :func:`default_config_dir`).
    """

    def __init__(self, config_dir: Path | None = None, *, secrets: Any | None = None) -> None:
        self.config_dir = Path(config_dir) if config_dir is not None else default_config_dir()
        self.path = self.config_dir / FILE_NAME
        self._secrets = secrets
        self._known_profiles: tuple[str, ...] = ()

    @property
    def secrets(self) -> Any:
        """Where API keys and tokens live (:class:`kvpilot.core.app.secrets.SecretStore`)."""
        if self._secrets is None:
            from kvpilot.core.app.secrets import default_store

            self._secrets = default_store(self.config_dir)
        return self._secrets

    def load(self) -> LoadResult:
        """Read the settings; never raises for file content problems (see module docstring).

        Returns defaults when the file does not exist yet.

        Raises:
            SettingsError: the file exists but cannot be read at all (permissions, I/O error).
        """
        try:
            text = self.path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):  # a file in the folder's place: none
            return LoadResult(Settings(), (), self.path)
        except (OSError, UnicodeDecodeError) as exc:
            if isinstance(exc, UnicodeDecodeError):
                return self._corrupt(f"not UTF-8 text ({exc.reason})")
            raise SettingsError(f"cannot read {self.path}: {exc.strerror or exc}") from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            return self._corrupt(f"not valid JSON (line {exc.lineno}, column {exc.colno})")
        except (ValueError, RecursionError) as exc:  # a number too long, nesting too deep
            return self._corrupt(f"not usable JSON ({exc})")
        if not isinstance(data, dict):
            return self._corrupt("not a JSON object")
        warnings: list[SettingsWarning] = []
        in_file = _secrets_in_file(data)
        try:
            data = migrate(data)
            migrated = self._fill_secrets(data)
            settings, warnings = settings_from_json(data)
        except SettingsError as exc:
            return self._corrupt(exc.message)
        if settings.schema_version > SCHEMA_VERSION:
            warnings.insert(
                0,
                SettingsWarning(
                    "newer_version",
                    f"{self.path} was written by a newer kvpilot (schema "
                    f"{settings.schema_version}, this is {SCHEMA_VERSION}); settings this version "
                    "does not know are kept unchanged",
                ),
            )
        has_secrets = in_file
        with contextlib.suppress(OSError):
            if has_secrets and self.path.stat().st_mode & 0o077:
                warnings.append(
                    SettingsWarning(
                        "permissions",
                        f"{self.path} holds an API key or token and is readable by other "
                        "users; "
                        "it will be written back with permissions 0600",
                    )
                )
        self._known_profiles = settings.names
        if migrated:  # the secrets are in the keyring now: write the file without them
            with contextlib.suppress(SettingsError):
                self.save(settings)
                log.info("settings: moved the secrets of %d profile(s) to the %s",
                         len(migrated), self.secrets.kind)
        for w in warnings:
            log.warning("settings: %s", w.message)
        return LoadResult(settings, tuple(warnings), self.path)


    def file_fallback_choice(self) -> KeyringConsent:
        """The keyring file-fallback choice and the store in use
        (:class:`kvpilot.core.app.secrets.KeyringConsent`)."""
        from kvpilot.core.app.secrets import fallback_choice

        return fallback_choice(self.secrets, self.config_dir)

    def set_file_fallback(self, accepted: bool, settings: Settings) -> KeyringConsent:
        """Accept (or withdraw) keyring's file fallback and move the secrets of ``settings``
        (the saved ones) to the store that follows from it: into ``keyrings.alt``'s file, or
        back into the 0600 settings file, removing them from the store they leave.

        Returns the new :class:`kvpilot.core.app.secrets.KeyringConsent`.

        Raises:
            SettingsError: the settings file cannot be written (the consent and the store are
                left as they were).
        """
        from kvpilot.core.app import secrets as sec

        old = self.secrets
        was_accepted = sec.fallback_accepted(self.config_dir)
        try:
            sec.accept_file_fallback(self.config_dir, accepted)
        except OSError as exc:
            raise SettingsError(
                f"cannot record the choice in {self.config_dir}: {exc.strerror or exc}; check "
                f"the directory permissions or set {CONFIG_DIR_ENV} to a writable directory"
            ) from exc
        new = sec.default_store(self.config_dir)
        if new.kind != old.kind:
            self._secrets = new
            try:
                self.save(settings)
            except SettingsError:
                self._secrets = old
                with contextlib.suppress(OSError):
                    sec.accept_file_fallback(self.config_dir, was_accepted)
                raise
            if not old.in_settings_file:
                old.forget_profiles((), settings.names)
            log.info("settings: secrets moved from the %s to the %s", old.kind, new.kind)
        return self.file_fallback_choice()

    def _fill_secrets(self, data: dict[str, Any]) -> list[str]:
        from kvpilot.core.app.secrets import hydrate_json

        return hydrate_json(data, self.secrets)

    def save(self, settings: Settings) -> None:
        """Write ``settings`` atomically with permissions 0600 (secrets to the keyring when
        there is one, see :mod:`kvpilot.core.app.secrets`).

        Raises:
            SettingsError: the file cannot be written (names the path and the OS reason).
        """
        from kvpilot.core.app.secrets import strip

        store = self.secrets
        on_disk = strip(settings, store)
        if not store.in_settings_file:
            store.forget_profiles(settings.names, self._known_profiles)
        self._known_profiles = settings.names
        text = json.dumps(settings_to_json(on_disk), indent=2, sort_keys=False) + "\n"
        try:
            atomic_write_text(self.path, text)
        except OSError as exc:
            import errno


            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                needed = len(text.encode("utf-8"))
                raise SettingsError(
                    write_failure(self.path, exc, needed, env_var=CONFIG_DIR_ENV)
                ) from exc
            raise SettingsError(
                f"cannot write {self.path}: {exc.strerror or exc}; check the directory "
                f"permissions or set {CONFIG_DIR_ENV} to a writable directory"
            ) from exc

    def _corrupt(self, why: str) -> LoadResult:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        backup = self.path.with_name(f"{FILE_NAME}.corrupt-{stamp}")
        n = 1
        while backup.exists():
            backup = self.path.with_name(f"{FILE_NAME}.corrupt-{stamp}-{n}")
            n += 1
        try:
            self.path.replace(backup)
        except OSError as exc:
            msg = (
                f"{self.path} is {why} and could not be moved aside ({exc.strerror or exc}); "
                "starting with default settings"
            )
            log.warning("settings: %s", msg)
            return LoadResult(Settings(), (SettingsWarning("corrupt", msg),), self.path)
        msg = (
            f"{self.path} is {why}; it was kept as {backup.name} and kvpilot started with "
            "default settings"
        )
        log.warning("settings: %s", msg)
        return LoadResult(Settings(), (SettingsWarning("corrupt", msg, backup),), self.path)


# --------------------------------------------------------------------------- profile CRUD


def _check_new_name(settings: Settings, name: str) -> str:
    clean = name.strip()
    if not clean:
        raise SettingsError("a profile name must not be empty")
    if clean in settings.names:
        raise SettingsError(f"a profile named '{clean}' already exists; choose another name")
    return clean


def create_profile(settings: Settings, name: str, *, activate: bool = True) -> Settings:
    """Add a profile with default values (made active unless ``activate`` is False)."""
    clean = _check_new_name(settings, name)
    out = replace(settings, profiles=(*settings.profiles, Profile(name=clean)))
    return replace(out, active_profile=clean) if activate else out


def duplicate_profile(
    settings: Settings, source: str, new_name: str, *, activate: bool = True
) -> Settings:
    """Copy profile ``source`` (every field, unknown keys included) under ``new_name``."""
    base = settings.profile(source)
    clean = _check_new_name(settings, new_name)
    copy_ = replace(base, name=clean, unknown=copy.deepcopy(dict(base.unknown)))
    out = replace(settings, profiles=(*settings.profiles, copy_))
    return replace(out, active_profile=clean) if activate else out


def rename_profile(settings: Settings, old: str, new: str) -> Settings:
    """Rename a profile; the active profile follows the rename."""
    settings.profile(old)
    if new.strip() == old:
        return settings
    clean = _check_new_name(settings, new)
    profiles = tuple(replace(p, name=clean) if p.name == old else p for p in settings.profiles)
    active = clean if settings.active_profile == old else settings.active_profile
    return replace(settings, profiles=profiles, active_profile=active)


def delete_profile(settings: Settings, name: str) -> Settings:
    """Remove a profile; the last one cannot be deleted. The first remaining becomes active."""
    settings.profile(name)
    if len(settings.profiles) == 1:
        raise SettingsError(
            f"'{name}' is the only profile and cannot be deleted; create another first"
        )
    profiles = tuple(p for p in settings.profiles if p.name != name)
    active = settings.active_profile if settings.active_profile != name else profiles[0].name
    return replace(settings, profiles=profiles, active_profile=active)


def switch_profile(settings: Settings, name: str) -> Settings:
    """Make ``name`` the active profile."""
    settings.profile(name)
    return replace(settings, active_profile=name)


def update_profile(
    settings: Settings, profile: Profile, *, old_name: str | None = None
) -> Settings:
    """Replace the profile called ``old_name`` (default ``profile.name``) by ``profile``.

    Raises:
        SettingsError: no such profile, the new name is taken, or the profile is invalid (the
            message lists every problem).
    """
    target = old_name if old_name is not None else profile.name
    settings.profile(target)
    if profile.name != target:
        _check_new_name(settings, profile.name)
    problems = validate_profile(profile)
    if problems:
        raise SettingsError(f"profile '{profile.name}': " + "; ".join(problems))
    profiles = tuple(profile if p.name == target else p for p in settings.profiles)
    active = profile.name if settings.active_profile == target else settings.active_profile
    return replace(settings, profiles=profiles, active_profile=active)
