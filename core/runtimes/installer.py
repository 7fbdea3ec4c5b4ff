"""Install a managed vLLM runtime: checks first, then venv + packages with progress, then verify.

:class:`RuntimeInstaller` does one install of one
:class:`~kvpilot.core.runtimes.releases.RuntimeBuild`
into ``<data_dir>/runtimes/<version>-<variant>/``:

1. :meth:`~RuntimeInstaller.precheck`: free disk in the data directory against the release's
   measured size, a Python interpreter the release supports (with ``venv``/``ensurepip`` for
   pip), the package index reachable. Every failure is one sentence with the fix.
2. a virtual environment (``uv venv`` or ``python -m venv``) and the packages (``uv pip install``
   when ``uv`` is on ``PATH`` or importable as the ``uv`` Python package, else ``pip install``),
   every output line written to the log in ``runtimes/logs/`` and parsed into
   :class:`~kvpilot.core.runtimes.progress.InstallProgress` (packages and bytes);
3. the release's fix-ups (CPU build: uninstall CUDA-only companions, add the ``vllm`` dist-info
   alias);
4. verification: ``vllm --version`` must print the release, ``vllm serve --help=all`` must give a
   flag table (both through :mod:`kvpilot.core.runtimes.discovery`, which caches them), and a CUDA
   build's torch must see the GPU;
5. the manifest is written (the runtime becomes selectable) and, when asked or when there is no
   usable default yet, it becomes the default.

:meth:`~RuntimeInstaller.cancel` (from any thread) kills the installer's whole process tree
(psutil) and the half-made folder is removed; any failure removes it too. The previous default is
never touched unless the new runtime is verified.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from kvpilot.core.base.errors import (
    RuntimeInstallCancelled,
    RuntimeInstallError,
    RuntimeNotFoundError,
)
from kvpilot.core.base.programs import run_for_output
from kvpilot.core.base.units import size_text
from kvpilot.core.hardware import proctree
from kvpilot.core.runtimes import managed_python, store
from kvpilot.core.runtimes.indexconf import IndexConfig, installer_config
from kvpilot.core.runtimes.progress import InstallProgress, OutputParser
from kvpilot.core.runtimes.releases import RuntimeBuild

DEFAULT_INDEX = "https://pypi.org/simple"
#: the index with PyTorch's ``+cpu`` builds (not on PyPI), tried for the CPU variant
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
NETWORK_TIMEOUT_S = 10.0
PYTHON_NAMES: tuple[str, ...] = (
    "python3.14",
    "python3.13",
    "python3.12",
    "python3.11",
    "python3.10",
    "python3",
)
_PY_PROBE = (
    "import sys, venv\n"
    "try:\n    import ensurepip\n    ep = 1\nexcept ImportError:\n    ep = 0\n"
    "print('%d.%d.%d' % sys.version_info[:3], ep)\n"
)
_TORCH_CHECK = (
    "import sys, torch\n"
    "ok = torch.cuda.is_available()\n"
    "print('torch', torch.__version__, 'cuda', torch.version.cuda, 'devices', "
    "torch.cuda.device_count() if ok else 0)\n"
    "sys.exit(0 if ok and torch.cuda.device_count() > 0 else 3)\n"
)

ProgressCallback = Callable[[InstallProgress], None]
LineCallback = Callable[[str], None]


def find_uv() -> str | None:
    """The ``uv`` executable: the packaged kvpilot's own, else on ``PATH``, else from the ``uv``
    Python package; None if none."""
    found = managed_python.bundled_uv() or shutil.which("uv")
    if found:
        return found
    try:
        import uv

        path = uv.find_uv_bin()
    except (ImportError, FileNotFoundError, AttributeError):
        return None
    return str(path) if path and Path(path).exists() else None


@dataclass(frozen=True)
class PythonCandidate:
    """An interpreter found for the venv: its path, version and whether ``ensurepip`` exists."""

    path: str
    version: str
    has_ensurepip: bool


def probe_python(path: str, timeout_s: float = 20.0) -> PythonCandidate | None:
    """Version of the interpreter at ``path`` and whether it can make a venv with pip."""
    try:
        proc = run_for_output([path, "-c", _PY_PROBE], timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = proc.stdout.split()
    if proc.returncode != 0 or len(parts) != 2:
        return None
    return PythonCandidate(path, parts[0], parts[1] == "1")


def python_candidates(explicit: str | None = None) -> list[str]:
    """Interpreters to try, in order: ``explicit``, this one (when not frozen), then PATH."""
    out: list[str] = []
    if explicit:
        out.append(explicit)
    if not getattr(sys, "frozen", False) and sys.executable:
        base = getattr(sys, "_base_executable", None) or sys.executable
        out.append(base)
    for name in PYTHON_NAMES:
        found = shutil.which(name)
        if found:
            out.append(found)
    seen: set[str] = set()
    unique: list[str] = []
    for p in out:
        if p not in seen:
            seen.add(p)
            unique.append(p)
    return unique


@dataclass(frozen=True)
class InstallResult:
    """A finished install: the runtime, whether it was already there, the log and the sizes."""

    runtime: store.InstalledRuntime
    already_installed: bool
    log_path: Path | None
    elapsed_s: float
    progress: InstallProgress = field(default_factory=InstallProgress)


def _free_bytes(path: Path) -> tuple[Path, int]:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe, shutil.disk_usage(probe).free


def folder_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (links not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(Path(root) / name)
                total += st.st_size
    return total


class RuntimeInstaller:
    """One install of ``release`` (see the module docstring).

    Args:
        release: what to install.
        data_dir: kvpilot's data directory (default :func:`kvpilot.core.base.paths.data_dir`).
        cache_dir: where :mod:`kvpilot.core.runtimes.discovery` caches versions and flag tables.
        installer: ``auto`` (uv when found, else pip), ``uv`` or ``pip``.
        index_url: the package index (None: the installer's own configuration, which the
            reachability check reads too: pip's or uv's, see :mod:`.indexconf`; else PyPI).
        no_index: use only ``find_links`` (no index at all).
        find_links: local wheel folders or pages (``PIP_FIND_LINKS`` is passed to uv too).
        python: the interpreter for the venv (None: search, see :func:`python_candidates`).
        make_default: True: becomes the default; None: only when there is no usable default.
        on_progress, on_line: called (from the installing thread) on progress and each line.
        check_gpu: verify that a CUDA build's torch sees the GPU.
        network_timeout_s: timeout of each reachability check.
        torch_index_url: where a CPU build's ``+cpu`` torch comes from when no wheel folder
            has it.
    """

    def __init__(
        self,
        release: RuntimeBuild,
        *,
        data_dir: Path | None = None,
        cache_dir: Path | None = None,
        installer: str = "auto",
        index_url: str | None = None,
        no_index: bool = False,
        find_links: Sequence[str] = (),
        python: str | None = None,
        make_default: bool | None = None,
        on_progress: ProgressCallback | None = None,
        on_line: LineCallback | None = None,
        check_gpu: bool = True,
        network_timeout_s: float = NETWORK_TIMEOUT_S,
        torch_index_url: str = TORCH_CPU_INDEX,
    ) -> None:
        if installer not in ("auto", "uv", "pip"):
            raise RuntimeInstallError(f"unknown installer {installer!r}; use auto, uv or pip")
        self.release = release
        self.data_dir = data_dir
        self.cache_dir = cache_dir
        self.root = store.runtimes_root(data_dir)
        self.target = self.root / release.runtime_id
        self.index_url = index_url
        self.no_index = no_index
        env_links = os.environ.get("PIP_FIND_LINKS", "").split()
        self.find_links = tuple(dict.fromkeys([*find_links, *env_links]))
        self.python = python
        self.make_default = make_default
        self.on_progress = on_progress
        self.on_line = on_line
        self.check_gpu = check_gpu
        self.network_timeout_s = network_timeout_s
        self.torch_index_url = torch_index_url
        self.uv = find_uv() if installer in ("auto", "uv") else None
        if installer == "uv" and self.uv is None:
            raise RuntimeInstallError(
                "uv was asked for but is neither on PATH nor installed as a Python package; "
                "install it (pip install uv) or use --installer pip"
            )
        self.installer = "uv" if self.uv else "pip"
        self.parser = OutputParser()
        self.log_path: Path | None = None
        self.extra_index_urls: list[str] = []
        self._index_config: IndexConfig | None = None
        self._python: PythonCandidate | None = None
        self._managed: managed_python.ManagedPython | None = None  # uv provides the Python
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._log: object = None
        self.killed_pids: list[int] = []

    # ---------------------------------------------------------------- public

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self._cancel.is_set()

    def cancel(self) -> None:
        """Stop the install from any thread: the running installer's process tree is killed;
        :meth:`run` then removes the half-made folder and raises RuntimeInstallCancelled."""
        self._cancel.set()
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            self.killed_pids.extend(proctree.kill_tree(proc.pid))

    def precheck(self) -> list[str]:
        """Problems that stop the install before it starts, one sentence each with the fix."""
        problems: list[str] = []
        existing = store.get_installed(self.release.runtime_id, self.data_dir)
        if existing is not None and store.install_in_progress(existing.path):
            problems.append(
                f"another install of {self.release.runtime_id} is running (pid "
                f"{store.installing_pid(existing.path)}); wait for it or cancel it"
            )
        where, free = _free_bytes(self.root)
        need = self.release.peak_bytes
        if existing is not None and not existing.usable:
            need = max(0, need - folder_bytes(existing.path))  # the leftover is removed first
        if free < need:
            how = "measured" if self.release.measured else "estimated"
            problems.append(
                f"only {size_text(free)} is free in {where}, and installing vLLM "
                f"{self.release.version} ({self.release.variant}) takes {size_text(need)} "
                f"({how}; {size_text(self.release.installed_bytes)} once installed); free "
                "some space or move kvpilot's data directory to a larger disk with "
                "KVPILOT_DATA_DIR"
            )
        py_problem = self._choose_python()
        if py_problem:
            problems.append(py_problem)
        problems.extend(self._check_index())
        return problems

    def run(self) -> InstallResult:
        """Check, install, verify; blocking (call it from a worker thread in a GUI).

        Raises:
            RuntimeInstallError: a check failed, the installer failed or the result does not
                work (the message names the log); the half-made folder is removed.
            RuntimeInstallCancelled: :meth:`cancel` was called; the folder is removed.
        """
        start = time.monotonic()
        existing = store.get_installed(self.release.runtime_id, self.data_dir)
        if existing is not None and existing.usable:
            if self.make_default:
                existing = store.set_default(existing.runtime_id, self.data_dir)
            return InstallResult(existing, True, None, 0.0, self.parser.progress)
        self._emit(self.parser.set_phase("checking"))
        problems = self.precheck()
        if problems:
            raise RuntimeInstallError(" ".join(p.rstrip(".") + "." for p in problems).rstrip("."))
        if self._cancel.is_set():
            raise RuntimeInstallCancelled("the install was cancelled before it started")
        self.root.mkdir(parents=True, exist_ok=True)
        self._open_log()
        try:
            if existing is not None:
                self._say(f"removing the leftover of an earlier install in {self.target}")
                shutil.rmtree(self.target)
            self.target.mkdir(parents=True)
            (self.target / store.INSTALLING_MARKER).write_text(str(os.getpid()), "utf-8")
            runtime = self._install_and_verify()
        except BaseException as exc:
            self._cleanup()
            self._close_log(f"install failed: {exc}")
            if self._cancel.is_set():
                raise RuntimeInstallCancelled(
                    f"the install of vLLM {self.release.runtime_id} was cancelled and "
                    f"{self.target} removed; nothing else changed (log: {self.log_path})",
                    log_path=str(self.log_path),
                ) from None
            if isinstance(exc, RuntimeInstallError):
                raise
            if isinstance(exc, (OSError, RuntimeNotFoundError)):
                raise RuntimeInstallError(
                    f"installing vLLM {self.release.runtime_id} failed: {exc}; the half-made "
                    f"folder was removed (log: {self.log_path})",
                    log_path=str(self.log_path),
                ) from exc
            raise
        self._close_log("install finished")
        self._emit(self.parser.set_phase("done"))
        return InstallResult(
            runtime, False, self.log_path, time.monotonic() - start, self.parser.progress
        )

    # ---------------------------------------------------------------- checks

    def _choose_python(self) -> str | None:
        found: list[PythonCandidate] = []
        paths = [self.python] if self.python else python_candidates()
        for path in paths:
            cand = probe_python(path)
            if cand is None:
                continue
            found.append(cand)
            if self.release.python_ok(cand.version) and (
                cand.has_ensurepip or self.installer == "uv"
            ):
                self._python = cand
                return None
        if self.python and not any(c.path == self.python for c in found):
            return (
                f"the Python interpreter {self.python} does not run; give the path of a working "
                f"Python {self.release.requires_python}"
            )
        request = self.release.requires_python
        if self.uv and not self.python and managed_python.downloadable(self.uv, request):
            self._managed = managed_python.ManagedPython(request)
            self._python = PythonCandidate(self._managed.path, "", False)
            return None
        seen = ", ".join(f"{c.version} ({c.path})" for c in found) or "none"
        no_pip = [c for c in found if self.release.python_ok(c.version) and not c.has_ensurepip]
        if no_pip:
            return (
                f"Python {no_pip[0].version} at {no_pip[0].path} cannot make a virtual environment "
                "with pip (its ensurepip module is missing); install the venv package (e.g. sudo "
                f"apt install python{no_pip[0].version.rsplit('.', 1)[0]}-venv) or install uv"
            )
        return (
            f"vLLM {self.release.version} needs Python {self.release.requires_python} for its "
            f"environment, and the Pythons found are: {seen}; install a Python in that range "
            "(e.g. python3.12 with its venv package) and put it on PATH"
        )

    def installer_index_config(self) -> IndexConfig:
        """What pip's or uv's own configuration says about the index (read once)."""
        if self._index_config is None:
            python = self._python.path if self._python else self.python
            self._index_config = installer_config(self.installer, python)
        return self._index_config

    def _index_for_check(self) -> str | None:
        """The index the install will use; None when it uses no index (wheel folders only)."""
        if self.no_index:
            return None
        if self.index_url:
            return self.index_url
        conf = self.installer_index_config()
        if conf.no_index:
            return None
        return conf.index_url or DEFAULT_INDEX

    def _index_source(self) -> str:
        """`` (set by ...)`` for an index that comes from the installer's configuration."""
        if self.index_url or self.no_index:
            return ""
        source = self.installer_index_config().source
        return f" (set by {source})" if source else ""

    def _all_find_links(self) -> tuple[str, ...]:
        if self.index_url or self.no_index:
            return self.find_links
        return tuple(dict.fromkeys([*self.find_links, *self.installer_index_config().find_links]))

    def _reach(self, url: str) -> tuple[int | None, str]:
        try:
            resp = httpx.get(
                url, timeout=self.network_timeout_s, follow_redirects=True,
                headers={"Accept": "text/html"},
            )
        except httpx.HTTPError as exc:
            return None, str(exc) or type(exc).__name__
        return resp.status_code, ""

    def _local_has(self, name: str) -> bool:
        prefix = name.replace("-", "_").lower()
        for link in self._all_find_links():
            folder = Path(link.removeprefix("file://"))
            if folder.is_dir() and any(
                p.name.lower().replace("-", "_").startswith(prefix + "-")
                or p.name.lower().startswith(prefix + "-")
                for p in folder.iterdir()
            ):
                return True
        return False

    def _check_index(self) -> list[str]:
        problems: list[str] = []
        pkg = self.release.package
        index = self._index_for_check()
        source = self._index_source()
        if index is None:
            if not self._local_has(pkg):
                where = ", ".join(self._all_find_links()) or "no folder"
                problems.append(
                    f"no index is used{source} and the wheel folders ({where}) hold no {pkg} "
                    "package; add the folder with --find-links or allow the index"
                )
        elif index.startswith("file://") or index.startswith("/"):
            folder = Path(index.removeprefix("file://"))
            if not folder.is_dir():
                fix = source[len(" (set by ") : -1] if source else "--index-url"
                problems.append(
                    f"the package index folder {folder}{source} does not exist; fix {fix}"
                )
        else:
            status, why = self._reach(index.rstrip("/") + f"/{pkg}/")
            if status is None:
                problems.append(
                    f"cannot reach the package index {index}{source} ({why}); check the network "
                    "connection or proxy, or point kvpilot at a reachable index with --index-url "
                    "or at a wheel folder with --find-links"
                )
            elif status == 404 and not self._local_has(pkg):
                problems.append(
                    f"the package index {index}{source} has no package {pkg}; use an index that "
                    "has it (PyPI does) with --index-url"
                )
            elif status >= 400 and status != 404:
                problems.append(
                    f"the package index {index}{source} answered HTTP {status}; check the index "
                    "URL, proxy or credentials"
                )
        if self.release.variant == "cpu" and "+cpu" in self.release.torch:
            torch_pin = self.release.torch
            if self._local_has("torch") or index is None:
                return problems
            status, why = self._reach(self.torch_index_url.rstrip("/") + "/torch/")
            if status is not None and status < 400:
                self.extra_index_urls.append(self.torch_index_url)
            else:
                problems.append(
                    f"{pkg} needs torch {torch_pin}, which is not on PyPI, and "
                    f"{self.torch_index_url} cannot be reached ({why or status}); allow that "
                    "site, or download the wheel into a folder and pass it with --find-links"
                )
        return problems

    # ---------------------------------------------------------------- steps

    def _install_and_verify(self) -> store.InstalledRuntime:
        assert self._python is not None
        py_env = self.target / "bin" / "python"
        self._emit(self.parser.set_phase("creating"))
        self._say(
            f"vLLM {self.release.version} ({self.release.variant}, {self.release.requirement}) "
            f"into {self.target} with {self.installer}, Python {self._python.version} "
            f"({self._python.path})"
        )
        if self.uv and self._managed is not None:
            self._say(managed_python.describe(self._managed))
            self._step(managed_python.venv_argv(self.uv, self._managed, self.target),
                       "creating the virtual environment with uv's managed Python",
                       managed_python.uv_env(self.data_dir))
            self._python = probe_python(str(py_env)) or self._python
        elif self.uv:
            self._step([self.uv, "venv", "--allow-existing", "--python", self._python.path,
                        str(self.target)],
                       "creating the virtual environment")
        else:
            self._step([self._python.path, "-m", "venv", str(self.target)],
                       "creating the virtual environment")
        if not py_env.exists():
            raise RuntimeInstallError(
                f"the virtual environment at {self.target} has no bin/python after creating it; "
                f"see the log {self.log_path}",
                log_path=str(self.log_path),
            )
        self._emit(self.parser.set_phase("resolving"))
        index_args: list[str] = []
        if self.no_index:
            index_args.append("--no-index")
        elif self.index_url:
            index_args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            index_args += ["--extra-index-url", url]
        for link in self.find_links:
            index_args += ["--find-links", link]
        if self.uv:
            # uv writes no bytecode unless asked; without it every vLLM start compiles its
            # modules again in each of its processes where .pyc files cannot be written
            # (PYTHONDONTWRITEBYTECODE, a read-only folder): 46 s instead of 26 s to ready on
            # two cores for the CPU build. pip compiles by default.
            argv = [
                self.uv, "pip", "install", "--python", str(py_env), "--compile-bytecode",
                *index_args,
            ]
            if self.extra_index_urls:
                argv += ["--index-strategy", "unsafe-best-match"]
            argv.append(self.release.requirement)
        else:
            argv = [
                str(py_env), "-m", "pip", "install", "--disable-pip-version-check",
                "--no-input", "--progress-bar", "off", *index_args, self.release.requirement,
            ]
        self._step(argv, f"installing {self.release.requirement}")
        self._emit(self.parser.set_phase("finishing"))
        self._fixups(py_env)
        self._emit(self.parser.set_phase("verifying"))
        return self._verify(py_env)

    def _fixups(self, py_env: Path) -> None:
        names = list(self.release.remove_after_install)
        if names:
            probe = (
                "import importlib.metadata as m, sys\n"
                "for n in sys.argv[1:]:\n"
                "    try:\n        m.version(n)\n        print(n)\n"
                "    except m.PackageNotFoundError:\n        pass\n"
            )
            out = self._step([str(py_env), "-c", probe, *names], "looking for CUDA-only extras")
            present = [n for n in out.split() if n in names]
            if present:
                if self.uv:
                    argv = [self.uv, "pip", "uninstall", "--python", str(py_env), *present]
                else:
                    argv = [str(py_env), "-m", "pip", "uninstall", "-y", *present]
                self._step(argv, f"removing {', '.join(present)} (they break imports on CPU)")
        if self.release.dist_alias:
            out = self._step(
                [str(py_env), "-c",
                 "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                "finding site-packages",
            )
            site = Path(out.strip().splitlines()[-1])
            alias = site / f"{self.release.dist_alias}-{self.release.local_version}.dist-info"
            alias.mkdir(parents=True, exist_ok=True)
            (alias / "METADATA").write_text(
                "Metadata-Version: 2.1\n"
                f"Name: {self.release.dist_alias}\nVersion: {self.release.local_version}\n",
                encoding="utf-8",
            )
            (alias / "RECORD").write_text("", encoding="utf-8")
            self._say(f"added the {self.release.dist_alias} {self.release.local_version} alias")

    def _verify(self, py_env: Path) -> store.InstalledRuntime:
        from kvpilot.core.base.versions import release_number
        from kvpilot.core.runtimes.discovery import (
            VllmRuntime,
            learn_flags,
            read_version,
        )

        exe = self.target / "bin" / "vllm"
        if not exe.exists():
            raise RuntimeInstallError(
                f"{self.release.requirement} installed no vllm command into {exe.parent}; "
                f"the package is not a vLLM build (log: {self.log_path})",
                log_path=str(self.log_path),
            )
        # first: a CUDA build of vLLM that finds no GPU fails even `vllm --version` ("Failed to
        # infer device type", 0.19.1), which would hide the cause behind "does not run"
        if self.release.variant == "cuda" and self.check_gpu:
            try:
                self._step([str(py_env), "-c", _TORCH_CHECK], "checking that torch sees the GPU")
            except RuntimeInstallError as exc:
                raise RuntimeInstallError(
                    f"vLLM {self.release.version} was installed but its torch does not see the "
                    f"GPU ({exc.cause or exc.message}); check the driver with nvidia-smi (on "
                    "WSL2, the Windows driver), then install again. The half-made runtime was "
                    f"removed and the previous default is unchanged (log: {self.log_path})",
                    log_path=str(self.log_path),
                ) from exc
        self._say(f"verifying: {exe} --version")
        try:
            version = read_version((str(exe),), cache_dir=self.cache_dir)
        except RuntimeNotFoundError as exc:
            raise self._removed(
                f"vLLM {self.release.runtime_id} was installed but does not run: {exc}"
            ) from exc
        if release_number(version) != release_number(self.release.version):
            raise self._removed(f"{exe} reports version {version}, not {self.release.version}")
        self._say(f"vllm --version: {version}")
        if self._cancel.is_set():
            raise RuntimeInstallCancelled("cancelled")
        self._say(f"verifying: {exe} serve --help=all")
        rt = VllmRuntime((str(exe),), version, "managed", str(exe))
        try:
            flags = learn_flags(rt, cache_dir=self.cache_dir)
        except RuntimeNotFoundError as exc:
            raise self._removed(
                f"vLLM {version} was installed but its flags cannot be read: {exc}"
            ) from exc
        self._say(f"flag table: {len(flags.flags)} flags")
        if self._cancel.is_set():
            raise RuntimeInstallCancelled("cancelled")
        size = folder_bytes(self.target)
        self._say(f"environment size: {size} bytes ({size_text(size)})")
        store.write_manifest(
            self.target,
            {
                "version": self.release.version,
                "variant": self.release.variant,
                "package": self.release.package,
                "vllm_version": version,
                "installed_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "installer": self.installer,
                "python": self._python.version if self._python else "",
                "size_bytes": size,
                "flags_count": len(flags.flags),
                "log_path": str(self.log_path or ""),
            },
        )
        (self.target / store.INSTALLING_MARKER).unlink()
        current = store.read_default(self.data_dir)
        current_rt = store.get_installed(current, self.data_dir) if current else None
        if self.make_default or (
            self.make_default is None and (current_rt is None or not current_rt.usable)
        ):
            return store.set_default(self.release.runtime_id, self.data_dir)
        result = store.get_installed(self.release.runtime_id, self.data_dir)
        assert result is not None
        return result

    # ---------------------------------------------------------------- processes and log

    def _removed(self, what: str) -> RuntimeInstallError:
        """The error for a runtime that failed verification: ``what``, then that its folder was
        removed and where the log is."""
        return RuntimeInstallError(
            f"{what}; the folder was removed (log: {self.log_path})", log_path=str(self.log_path)
        )

    def _step(self, argv: list[str], what: str, extra_env: dict[str, str] | None = None) -> str:
        """Run one installer command; its output goes to the log and the parser.

        Returns the output. Raises RuntimeInstallError (non-zero exit) or
        RuntimeInstallCancelled.
        """
        if self._cancel.is_set():
            raise RuntimeInstallCancelled("cancelled")
        self._say(f"{what}: {' '.join(argv)}")
        env = dict(
            os.environ,
            PYTHONUNBUFFERED="1",
            NO_COLOR="1",
            PIP_NO_INPUT="1",
            VLLM_NO_USAGE_STATS="1",
            **(extra_env or {}),
        )
        env.pop("VIRTUAL_ENV", None)
        env.pop("PYTHONHOME", None)
        out: list[str] = []
        with self._lock:
            if self._cancel.is_set():
                raise RuntimeInstallCancelled("cancelled")
            try:
                proc = subprocess.Popen(
                    argv,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    text=True,
                    errors="replace",
                    bufsize=1,
                    env=env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise RuntimeInstallError(
                    f"cannot run {argv[0]} ({exc.strerror or exc}) while {what}; check that it "
                    "exists and is executable",
                    log_path=str(self.log_path),
                ) from exc
            self._proc = proc
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            self._write(line)
            if self.on_line is not None:
                self.on_line(line.rstrip("\n"))
            if self.parser.feed(line):
                self._emit(self.parser.progress)
        proc.stdout.close()  # one pipe per step: never left to the garbage collector
        rc = proc.wait()
        with self._lock:
            self._proc = None
        self._write(f"[exit status {rc}]\n")
        if self._cancel.is_set():
            raise RuntimeInstallCancelled("cancelled")
        if rc != 0:
            errors = [e for e in self.parser.errors if e]
            tail = [ln.strip() for ln in out if ln.strip()][-3:]
            why = "; ".join(errors[-3:] or tail) or f"exit status {rc}"
            raise RuntimeInstallError(
                f"{what} failed: {why}. The half-made runtime was removed and the previous "
                f"default is unchanged; the full log is {self.log_path}",
                log_path=str(self.log_path),
                cause=why,
            )
        return "".join(out)

    def _open_log(self) -> None:
        logs = store.logs_dir(self.data_dir)
        logs.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.log_path = logs / f"install-{self.release.runtime_id}-{stamp}.log"
        self._log = self.log_path.open("a", encoding="utf-8")

    def _write(self, text: str) -> None:
        fh = self._log
        if fh is not None:
            with contextlib.suppress(OSError, ValueError):
                fh.write(text)  # type: ignore[attr-defined]
                fh.flush()  # type: ignore[attr-defined]

    def _say(self, text: str) -> None:
        self._write(f"[kvpilot] {text}\n")
        if self.on_line is not None:
            self.on_line(f"[kvpilot] {text}")

    def _close_log(self, final: str) -> None:
        self._say(final)
        fh = self._log
        self._log = None
        if fh is not None:
            with contextlib.suppress(OSError):
                fh.close()  # type: ignore[attr-defined]

    def _emit(self, progress: InstallProgress) -> None:
        if self.on_progress is not None:
            self.on_progress(progress)

    def _cleanup(self) -> None:
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            self.killed_pids.extend(proctree.kill_tree(proc.pid))
        if self.target.exists():
            for _ in range(3):
                try:
                    shutil.rmtree(self.target)
                    break
                except OSError:
                    time.sleep(0.5)
        self._say(f"removed {self.target}")
