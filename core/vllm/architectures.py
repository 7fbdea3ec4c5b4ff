"""The model architectures an installed vLLM registers (``ModelRegistry``), asked once and cached.

The runtime's own Python is run once with a short script that prints
``vllm.ModelRegistry.get_supported_archs()`` as JSON; the answer is kept in the user cache
directory under the runtime's fingerprint (path, size and modification times), so a later
call, even offline, costs one file read. A new or upgraded runtime is asked again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kvpilot.core.base.errors import RuntimeNotFoundError
from kvpilot.core.runtimes import discovery as vllm_runtime

#: what the runtime's Python runs (vLLM's import alone takes seconds on a CPU build)
_QUERY = (
    "import json, sys\n"
    "from vllm import ModelRegistry\n"
    "sys.stdout.write('KVPILOT-ARCHS ' + json.dumps(sorted(ModelRegistry.get_supported_archs())))\n"
)
_MARK = "KVPILOT-ARCHS "
QUERY_TIMEOUT_S = 180.0
CACHE_FILE = "architectures.json"


@dataclass(frozen=True)
class RegisteredArchitectures:
    """``architectures`` (config.json class names) the runtime ``version`` at ``location``
    serves; ``from_cache`` tells whether the runtime was asked now."""

    version: str
    location: str
    architectures: frozenset[str]
    from_cache: bool


def runtime_python(rt: vllm_runtime.VllmRuntime) -> Path:
    """The interpreter of ``rt``: ``argv_prefix[0]`` when it is Python, else ``bin/python``
    next to the ``vllm`` executable."""
    first = Path(rt.argv_prefix[0])
    if first.name.startswith("python"):
        return first
    return first.parent / "python"


def registered_architectures(
    rt: vllm_runtime.VllmRuntime | None = None,
    *,
    cache_dir: Path | None = None,
    timeout_s: float = QUERY_TIMEOUT_S,
) -> RegisteredArchitectures:
    """The architectures ``rt`` (default: the vLLM kvpilot would launch) registers.

    Raises:
        RuntimeNotFoundError: no vLLM is installed, or its Python cannot list its registry
            (the message names the runtime and what it printed).
    """
    rt = rt or vllm_runtime.discover()
    python = runtime_python(rt)
    folder = cache_dir if cache_dir is not None else vllm_runtime._cache_dir(None)
    cache_file = folder / CACHE_FILE
    key = vllm_runtime._fingerprint((str(python),))
    if key is None:
        raise RuntimeNotFoundError(
            f"the vLLM runtime at {rt.location} has no Python interpreter at {python}; "
            "reinstall it with `kvpilot runtime install`"
        )
    cached = vllm_runtime._read_json(cache_file)
    hit = cached.get(key)
    if isinstance(hit, list) and all(isinstance(a, str) for a in hit):
        return RegisteredArchitectures(rt.version, rt.location, frozenset(hit), True)
    archs = _ask(python, timeout_s)
    cached[key] = sorted(archs)
    vllm_runtime._write_json(cache_file, cached)
    return RegisteredArchitectures(rt.version, rt.location, archs, False)


def _ask(python: Path, timeout_s: float) -> frozenset[str]:
    proc = vllm_runtime.ask_runtime([str(python), "-c", _QUERY], timeout_s,
                                    silent=f"{python} did not list vLLM's architectures")
    for line in proc.stdout.splitlines():
        if line.startswith(_MARK):
            try:
                names = json.loads(line[len(_MARK) :])
            except ValueError:
                break
            if isinstance(names, list):
                return frozenset(str(n) for n in names)
    raise RuntimeNotFoundError(
        f"{python} could not list vLLM's model registry ({vllm_runtime.last_words(proc)})")
