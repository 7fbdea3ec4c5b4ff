"""Find a vLLM installation, read its version and learn which ``vllm serve`` flags it accepts.

Discovery order (first that works wins):

1. the executable or Python interpreter configured in the profile (a Python interpreter is run
   as ``python -m vllm.entrypoints.cli.main``; a virtual-environment folder is accepted too),
2. the ``KVPILOT_VLLM`` environment variable (same forms),
3. ``vllm`` on ``PATH``,
4. a managed runtime at ``<data_dir>/runtimes/<version>-<variant>/bin/vllm`` (the default one
   first, see :mod:`kvpilot.core.runtimes`).

A configured value may also be a managed runtime's id (``0.32.0-cpu``): that pins the profile to
that runtime.

An explicit choice (1 or 2) that does not work raises :class:`RuntimeNotFoundError` naming it,
instead of silently launching a different vLLM than the one the user picked.

Versions are read with ``vllm --version`` and cached on disk per executable fingerprint (path,
mtime and size of the executable, mtime of its ``site-packages``), so reinstalling vLLM in the
same environment invalidates the entry. The flag table of a version comes from
``vllm serve --help=all`` and is cached on disk per raw version string.

Flag checks follow vLLM's parser (``FlexibleArgumentParser``): ``_`` equals ``-`` in flag
names, ``--flag=value`` and dotted keys (``-cc.mode=3``) are accepted, and an unambiguous prefix
of a real flag is a valid abbreviation.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvpilot.core.base import paths
from kvpilot.core.base.errors import CommandError, RuntimeNotFoundError
from kvpilot.core.base.programs import run_for_output
from kvpilot.core.base.versions import (
    Feature,
    Release,
    default_utilization,
    removed_flags,
    supports,
)

ENV_VAR = "KVPILOT_VLLM"
CLI_MODULE = "vllm.entrypoints.cli.main"

SOURCE_PROFILE = "profile"
SOURCE_ENV = "env"
SOURCE_PATH = "path"
SOURCE_MANAGED = "managed"

VERSION_TIMEOUT_S = 90.0
HELP_TIMEOUT_S = 180.0

INSTALL_HINT = (
    "install it with `kvpilot runtime install` (or Install vLLM in the app), or into its own "
    "virtual environment (python -m venv ~/vllm-env && ~/vllm-env/bin/pip install vllm) and "
    f"point kvpilot at ~/vllm-env/bin/vllm in the settings or with {ENV_VAR}=/path/to/vllm"
)

_VERSION_RE = re.compile(r"^\s*v?(\d+\.\d+(?:\.\d+)?(?:[.+\-]?[A-Za-z0-9][A-Za-z0-9.+\-]*)?)\s*$")


# --------------------------------------------------------------------------------------------
# versions


def default_gpu_memory_utilization(version: str | Release) -> float:
    """vLLM's default ``--gpu-memory-utilization`` (see ``versions.FEATURES``)."""
    return default_utilization(version)


def supports_max_model_len_auto(version: str | Release) -> bool:
    """``--max-model-len auto`` / ``-1`` exists (see ``versions.FEATURES``)."""
    return supports("max_model_len_auto", version)


def cudagraph_estimate_in_budget(version: str | Release) -> bool:
    """CUDA-graph memory is reserved before the KV cache (see ``versions.FEATURES``)."""
    return supports("cudagraph_in_budget", version)


def has_cache_config_tokens_metric(version: str | Release) -> bool:
    """``vllm:cache_config_info`` carries the KV token labels (see ``versions.FEATURES``)."""
    return supports("cache_config_tokens_metric", version)


# --------------------------------------------------------------------------------------------
# the runtime record


@dataclass(frozen=True)
class VllmRuntime:
    """One usable vLLM installation.

    ``argv_prefix`` starts every command (``('/x/bin/vllm',)`` or
    ``('/x/bin/python', '-m', 'vllm.entrypoints.cli.main')``); ``version`` is the raw string
    printed by ``vllm --version`` (``'0.32.0+cpu'``); ``source`` is one of ``profile``, ``env``,
    ``path``, ``managed``; ``location`` is the executable or interpreter path.
    """

    argv_prefix: tuple[str, ...]
    version: str
    source: str
    location: str

    @property
    def release(self) -> Release:
        """The release this runtime is (``0.32.0+cpu``: release 0.32.0, build ``cpu``)."""
        return Release.parse(self.version)

    def serve_argv(self) -> tuple[str, ...]:
        """``argv_prefix + ('serve',)``."""
        return (*self.argv_prefix, "serve")


@dataclass(frozen=True)
class _Candidate:
    argv_prefix: tuple[str, ...]
    source: str
    location: str


def _is_python(path: Path) -> bool:
    return path.name.lower().startswith("python")


def _managed_folder(value: str) -> Path | None:
    """The managed runtime folder a value like ``0.32.0-cpu`` names (a profile pin), else None."""
    from kvpilot.core.runtimes.store import parse_runtime_id, runtimes_root

    if os.sep in value or parse_runtime_id(value) is None or Path(value).exists():
        return None
    return runtimes_root() / value.strip()


def configured_problem(value: str) -> str | None:
    """Why a profile's vLLM choice (an executable, a Python, an environment folder, a managed
    runtime id or a command on ``PATH``) names nothing on this machine, in one sentence; None
    when it names something (whether that runs is :func:`discover`'s to say)."""
    text = value.strip()
    if not text:
        return None
    if _managed_folder(text) is not None:
        return None  # a managed runtime id: discover says when it is not installed
    if Path(text).expanduser().exists():
        return None
    if os.sep not in text and shutil.which(text):
        return None
    return (f"{text} does not exist; pick the vllm executable or its environment's python "
            "(Browse…), or auto-detect")


def _candidate_for(value: str, source: str) -> _Candidate:
    """A configured value: an executable, a Python interpreter or an environment folder."""
    path = Path(value).expanduser()
    managed = _managed_folder(value)
    if managed is not None:
        path = managed
    if path.is_dir():
        for exe in ("bin/vllm", "Scripts/vllm.exe", "bin/python", "Scripts/python.exe"):
            if (path / exe).exists():
                path = path / exe
                break
    if not path.is_absolute() and os.sep not in value and not path.exists():
        found = shutil.which(value)
        if found:
            path = Path(found)
    if _is_python(path):
        return _Candidate((str(path), "-m", CLI_MODULE), source, str(path))
    return _Candidate((str(path),), source, str(path))


def _managed_candidates(data_dir: Path) -> list[_Candidate]:
    """Managed runtimes in the order :func:`kvpilot.core.runtimes.store.managed_executables`
    gives (the default first; never a folder that is being installed)."""
    from kvpilot.core.runtimes.store import managed_executables

    return [
        _Candidate((str(exe),), SOURCE_MANAGED, str(exe))
        for exe in managed_executables(data_dir)
    ]


def _candidates(configured: str | None, data_dir: Path | None) -> list[_Candidate]:
    found: list[_Candidate] = []
    if configured:
        found.append(_candidate_for(configured, SOURCE_PROFILE))
    env = os.environ.get(ENV_VAR)
    if env:
        found.append(_candidate_for(env, SOURCE_ENV))
    on_path = shutil.which("vllm")
    if on_path:
        found.append(_Candidate((on_path,), SOURCE_PATH, on_path))
    found.extend(_managed_candidates(data_dir or paths.data_dir()))
    unique: list[_Candidate] = []
    seen: set[tuple[str, ...]] = set()
    for cand in found:
        if cand.argv_prefix not in seen:
            seen.add(cand.argv_prefix)
            unique.append(cand)
    return unique


# --------------------------------------------------------------------------------------------
# on-disk caches


def _cache_dir(cache_dir: Path | None) -> Path:
    return cache_dir if cache_dir is not None else paths.cache_dir() / "vllm"


def _read_json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: dict[str, object]) -> None:
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs time
        paths.atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True))


def _fingerprint(argv_prefix: Sequence[str]) -> str | None:
    """Path + mtime + size of the executable and mtime of its site-packages (None if missing)."""
    exe = Path(argv_prefix[0])
    try:
        st = exe.stat()
    except OSError:
        return None
    parts = [" ".join(argv_prefix), str(st.st_mtime_ns), str(st.st_size)]
    env_root = exe.parent.parent
    for site in sorted(env_root.glob("lib/python*/site-packages")):
        try:
            parts.append(f"{site}:{site.stat().st_mtime_ns}")
        except OSError:
            continue
    return "|".join(parts)


# --------------------------------------------------------------------------------------------
# version


def parse_version_output(text: str) -> str | None:
    """The version printed by ``vllm --version`` (last line that is a bare version), or None."""
    for line in reversed(text.splitlines()):
        match = _VERSION_RE.match(line)
        if match:
            return match.group(1)
    return None


def _run(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_COLOR="1", VLLM_LOGGING_COLOR="0", VLLM_NO_USAGE_STATS="1")
    return run_for_output(argv, timeout_s, env)


def ask_runtime(
    argv: Sequence[str], timeout_s: float, *, silent: str, hint: str = ""
) -> subprocess.CompletedProcess[str]:
    """Run a program of a vLLM install (colours and usage statistics off) and return what it
    printed, whatever its exit status. ``silent`` says what did not happen when it times out
    (``'vllm serve --help=all' did not answer``); ``hint`` is added to a program that cannot be
    run (how to install one).

    Raises:
        RuntimeNotFoundError: the program timed out after ``timeout_s`` or cannot be run.
    """
    try:
        return _run(argv, timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeNotFoundError(f"{silent} within {timeout_s:.0f} s") from exc
    except OSError as exc:
        raise RuntimeNotFoundError(
            f"cannot run {argv[0]} ({exc.strerror or exc})" + (f"; {hint}" if hint else "")
        ) from exc


def last_words(proc: subprocess.CompletedProcess[str]) -> str:
    """Why a program failed, in its own words: the last line of its error output (else of its
    output), or its exit status where it printed nothing."""
    tail = (proc.stderr or proc.stdout).strip().splitlines()
    return tail[-1] if tail else f"exit status {proc.returncode}"


def read_version(
    argv_prefix: Sequence[str],
    *,
    cache_dir: Path | None = None,
    timeout_s: float = VERSION_TIMEOUT_S,
) -> str:
    """The raw version string of the vLLM started by ``argv_prefix`` (cached on disk).

    Raises:
        RuntimeNotFoundError: the program is missing, fails, times out or prints no version.
    """
    cache_file = _cache_dir(cache_dir) / "versions.json"
    key = _fingerprint(argv_prefix)
    if key is None:
        raise RuntimeNotFoundError(f"{argv_prefix[0]} does not exist; {INSTALL_HINT}")
    cached = _read_json(cache_file)
    hit = cached.get(key)
    if isinstance(hit, str):
        return hit
    proc = ask_runtime([*argv_prefix, "--version"], timeout_s,
                       silent=f"'{' '.join(argv_prefix)} --version' did not answer",
                       hint=INSTALL_HINT)
    version = parse_version_output(proc.stdout) if proc.returncode == 0 else None
    if version is None:
        raise RuntimeNotFoundError(
            f"'{' '.join(argv_prefix)} --version' did not print a vLLM version "
            f"({last_words(proc)}); "
            f"{INSTALL_HINT}"
        )
    cached[key] = version
    _write_json(cache_file, cached)
    return version


# --------------------------------------------------------------------------------------------
# discovery


def _probe(cand: _Candidate, cache_dir: Path | None) -> VllmRuntime:
    version = read_version(cand.argv_prefix, cache_dir=cache_dir)
    return VllmRuntime(cand.argv_prefix, version, cand.source, cand.location)


def discover(
    configured: str | None = None,
    *,
    data_dir: Path | None = None,
    cache_dir: Path | None = None,
) -> VllmRuntime:
    """The vLLM to launch, in the order described in the module docstring.

    Raises:
        RuntimeNotFoundError: the configured / ``KVPILOT_VLLM`` choice does not work, or no
            candidate works; the message says what to install or set.
    """
    reasons: list[str] = []
    for cand in _candidates(configured, data_dir):
        try:
            return _probe(cand, cache_dir)
        except RuntimeNotFoundError as exc:
            if cand.source in (SOURCE_PROFILE, SOURCE_ENV):
                where = "the configured vLLM" if cand.source == SOURCE_PROFILE else ENV_VAR
                raise RuntimeNotFoundError(
                    f"{where} ({cand.location}) is not usable: {exc}"
                ) from exc
            reasons.append(f"{cand.location}: {exc}")
    tried = f" (tried: {'; '.join(reasons)})" if reasons else ""
    raise RuntimeNotFoundError(f"no usable vLLM found{tried}; {INSTALL_HINT}")


def list_runtimes(
    configured: str | None = None,
    *,
    data_dir: Path | None = None,
    cache_dir: Path | None = None,
) -> list[VllmRuntime]:
    """Every working vLLM that :func:`discover` would consider, in its order (for settings)."""
    found: list[VllmRuntime] = []
    for cand in _candidates(configured, data_dir):
        try:
            found.append(_probe(cand, cache_dir))
        except RuntimeNotFoundError:
            continue
    return found


# --------------------------------------------------------------------------------------------
# flags


@dataclass(frozen=True)
class RemovedFlag:
    """A flag older vLLM versions had: ``removed_in`` (None = before 0.11) and what to do."""

    flag: str
    removed_in: str | None
    advice: str
    readded_in: str | None = None


#: what to do instead of a removed flag; the releases come from ``versions.FEATURES``
_REMOVAL_ADVICE: dict[str, str] = {
    "--swap-space": "drop it; CPU swap space no longer exists (size the KV cache with "
    "--kv-cache-memory-bytes or --gpu-memory-utilization instead)",
    "--disable-log-requests": "drop it; request logging is off by default",
    "--calculate-kv-scales": "drop it; FP8 KV scales come from the checkpoint (1.0 when it has "
    "none)",
    "--task": "use --runner pooling (with --convert embed/classify/reward) for pooling models, "
    "or drop it for text generation",
    "--num-scheduler-steps": "drop it; it belonged to the old V0 engine",
    "--use-v2-block-manager": "drop it; it belonged to the old V0 engine",
    "--preemption-mode": "drop it; it belonged to the old V0 engine",
    "--rope-scaling": "use --hf-overrides instead",
    "--rope-theta": "use --hf-overrides instead",
    "--guided-decoding-backend": "use --structured-outputs-config",
    "--cuda-graph-sizes": "use --max-cudagraph-capture-size",
}


def _removed(row: Feature) -> RemovedFlag:
    assert row.flag is not None
    return RemovedFlag(
        row.flag,
        row.until if row.until_exact else None,
        _REMOVAL_ADVICE.get(row.flag, "drop it"),
        readded_in=row.back_in,
    )


#: every flag some release dropped, from the feature table (one source for the releases)
REMOVED_FLAGS: dict[str, RemovedFlag] = {
    r.flag: r for r in (_removed(row) for row in removed_flags())
}


def normalize_flag(token: str) -> str:
    """``--max_model_len=8`` -> ``--max-model-len`` (name only, ``_`` as ``-``, no dotted key)."""
    name = token.split("=", 1)[0]
    if name.startswith("--"):
        body = name[2:]
        prefix = "--"
    else:
        body = name[1:]
        prefix = "-"
    body = body.split(".", 1)[0]
    return prefix + body.replace("_", "-")


def parse_help_flags(text: str) -> frozenset[str]:
    """Every option string in ``vllm serve --help=all`` output, aliases and negations included.

    Only argparse invocation lines (stripped line starts with ``-``) are read, so flags that
    help texts merely mention are not taken for real ones. Hidden negations are added: an
    ``--enable-X`` / ``--disable-X`` pair also accepts ``--no-enable-X`` and ``--no-disable-X``.
    """
    flags: set[str] = set()
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("-") or line.startswith("---"):
            continue
        invocation = re.split(r"\s{2,}", line, maxsplit=1)[0]
        for part in invocation.split(", "):
            token = part.split(" ", 1)[0].split("=", 1)[0]
            if re.fullmatch(r"--?[A-Za-z][\w.-]*", token):
                flags.add(token)
    for flag in list(flags):
        for stem in ("--enable-", "--disable-"):
            if flag.startswith(stem):
                rest = flag[len(stem) :]
                other = ("--disable-" if stem == "--enable-" else "--enable-") + rest
                if other in flags:
                    flags.add("--no-" + flag[2:])
                    flags.add("--no-" + other[2:])
    return frozenset(flags)


@dataclass(frozen=True)
class FlagSet:
    """The option strings one vLLM version accepts for ``vllm serve``."""

    version: str
    flags: frozenset[str]

    def resolve(self, token: str) -> str | None:
        """The flag ``token`` means (exact, or the one flag it abbreviates), else None.

        Raises:
            CommandError: ``token`` abbreviates several flags (vLLM rejects it as ambiguous).
        """
        name = normalize_flag(token)
        if name in self.flags:
            return name
        if name.startswith("--"):
            matches = sorted(f for f in self.flags if f.startswith(name) and f.startswith("--"))
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                raise CommandError(
                    f"{name} is ambiguous for vLLM {self.version}: it could mean "
                    f"{', '.join(matches[:5])}; write the full flag"
                )
            return None
        # -O3 / -O=3 / -O 3: the parser rewrites them to --optimization-level
        if re.fullmatch(r"-O(?:=?\d*)", token) and "--optimization-level" in self.flags:
            return "--optimization-level"
        # short option with an attached value: -tp2
        for flag in sorted(self.flags, key=len, reverse=True):
            if not flag.startswith("--") and name.startswith(flag):
                return flag
        return None

    def __contains__(self, token: object) -> bool:
        if not isinstance(token, str):
            return False
        try:
            return self.resolve(token) is not None
        except CommandError:
            return False


def removed_flag_message(flag: str, version: str | None) -> str:
    """One sentence for a flag ``version`` does not have, naming the replacement when known."""
    name = normalize_flag(flag)
    removed = REMOVED_FLAGS.get(name)
    on = f"vLLM {version}" if version else "this vLLM"
    if removed is None:
        return f"{on} has no flag {name}; remove it or check `vllm serve --help=all`."
    when = (
        f"was removed in vLLM {removed.removed_in}"
        if removed.removed_in
        else "was removed before vLLM 0.11"
    )
    if removed.readded_in:
        when += f" (and is accepted again from {removed.readded_in})"
    return f"{name} {when} and {on} does not accept it: {removed.advice}."


def _looks_like_flag(token: str) -> bool:
    if not token.startswith("-") or token in ("-", "--"):
        return False
    return not re.fullmatch(r"-\d[\d.eE+-]*", token)


def check_flags(runtime_or_flagset: VllmRuntime | FlagSet, argv: Iterable[str]) -> None:
    """Refuse, before launch, a flag in ``argv`` that this vLLM version does not have.

    ``argv`` is what follows ``vllm serve`` (the model positional may be included; values are
    skipped because they do not start with ``-``).

    Raises:
        CommandError: an unknown or ambiguous flag, with the replacement for removed ones.
    """
    flagset = (
        runtime_or_flagset
        if isinstance(runtime_or_flagset, FlagSet)
        else learn_flags(runtime_or_flagset)
    )
    for token in argv:
        if token == "--":
            break
        if not _looks_like_flag(token):
            continue
        if flagset.resolve(token) is None:
            message = removed_flag_message(token, flagset.version)
            if normalize_flag(token) not in REMOVED_FLAGS:
                close = difflib.get_close_matches(normalize_flag(token), flagset.flags, n=1)
                if close:
                    message = message[:-1] + f" (did you mean {close[0]}?)"
            raise CommandError(message)


def learn_flags(
    runtime: VllmRuntime,
    *,
    cache_dir: Path | None = None,
    timeout_s: float = HELP_TIMEOUT_S,
) -> FlagSet:
    """The flags of ``runtime``'s version, from ``vllm serve --help=all`` (cached per version).

    Raises:
        RuntimeNotFoundError: the help could not be read (program fails or times out).
    """
    safe = re.sub(r"[^0-9A-Za-z.+-]", "_", runtime.version)
    cache_file = _cache_dir(cache_dir) / f"flags-{safe}.json"
    cached = _read_json(cache_file)
    flags = cached.get("flags")
    if isinstance(flags, list) and flags:
        return FlagSet(runtime.version, frozenset(str(f) for f in flags))
    proc = ask_runtime([*runtime.serve_argv(), "--help=all"], timeout_s,
                       silent="'vllm serve --help=all' did not answer")
    found = parse_help_flags(proc.stdout)
    if proc.returncode != 0 or "--max-model-len" not in found:
        raise RuntimeNotFoundError(
            f"could not read the flags of vLLM {runtime.version}: {last_words(proc)}")
    _write_json(cache_file, {"version": runtime.version, "flags": sorted(found)})
    return FlagSet(runtime.version, found)
