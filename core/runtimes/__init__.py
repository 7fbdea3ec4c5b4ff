"""Managed vLLM runtimes: kvpilot installs, verifies and keeps vLLM environments itself.

* :mod:`~kvpilot.core.runtimes.releases`: the installable builds (``resources/vllm_runtimes.json``)
  and the choice for this machine (driver's CUDA version against each build's CUDA version).
* :mod:`~kvpilot.core.runtimes.installer`: checks, install with progress, cancel, verification.
* :mod:`~kvpilot.core.runtimes.progress`: pip / uv output -> packages and bytes.
* :mod:`~kvpilot.core.runtimes.store`: the runtimes on disk, the default, removal.

Discovery (:func:`kvpilot.core.runtimes.discovery.discover`) finds them with no setting.
"""
