"""vLLM's sleep mode: when a runtime and a platform allow it, and its three endpoints.

A server started with ``--enable-sleep-mode`` can be put to sleep (``POST /sleep?level=1``: the
weights are copied to host memory and the KV cache is dropped, so the GPU memory is given back
while the process and its compiled graphs stay) and woken again (``POST /wake_up``);
``GET /is_sleeping`` answers ``{"is_sleeping": bool}``. The endpoints are development endpoints:
vLLM registers them only with ``VLLM_SERVER_DEV_MODE=1`` in its environment (see the shared
reference ``vllm.md``, the endpoint table).

Where it is allowed (:func:`sleep_support`): vLLM's documentation of the feature says "This
feature is only supported on CUDA platform" (docs.vllm.ai/en/v0.10.2/features/sleep_mode.html;
the latest page adds ROCm, which kvpilot does not drive), and 0.10.2 is the oldest release whose
documentation describes the HTTP endpoints kvpilot calls, so older releases are not trusted
with it. The CPU build (``+cpu``) and the CPU backend never sleep: there is no GPU memory to give
back.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.base.versions import Release

#: the oldest vLLM release whose documentation describes ``--enable-sleep-mode`` with the
#: ``/sleep``, ``/wake_up`` and ``/is_sleeping`` endpoints (docs.vllm.ai/en/v0.10.2)
SLEEP_MODE_SINCE = "0.10.2"
#: the flag that makes vLLM allocate through its sleep-capable pool
SLEEP_FLAG = "--enable-sleep-mode"
#: the environment that makes vLLM register the sleep endpoints
SLEEP_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
#: level 1: weights to host memory, KV cache dropped (level 2 would drop the weights too)
SLEEP_LEVEL = 1
#: seconds a sleep or wake-up call may take (copying the weights back is bounded by PCIe)
SLEEP_CALL_TIMEOUT_S = 120.0


class SleepError(KvpilotError):
    """A sleep, wake-up or state call that did not succeed (the message says what answered)."""


@dataclass(frozen=True)
class SleepSupport:
    """Whether profiles may sleep instead of stopping (``allowed``) and why (``reason``, one
    sentence)."""

    allowed: bool
    reason: str


def sleep_support(runtime_version: str, *, cuda_device: bool) -> SleepSupport:
    """Whether a server of vLLM ``runtime_version`` on this device may be put to sleep.

    ``cuda_device`` is True when the server runs on an NVIDIA GPU (not vLLM's CPU backend).
    The rule: a CUDA device, a build that is not the CPU build, and a release from
    :data:`SLEEP_MODE_SINCE` on.
    """
    release = Release.parse(runtime_version)
    if release.is_cpu_build or not cuda_device:
        return SleepSupport(False, "sleep mode needs an NVIDIA GPU (vLLM supports it on CUDA "
                            "only); profiles are stopped and started instead")
    if release.variant is not None and release.variant.startswith("rocm"):
        return SleepSupport(False, "kvpilot uses sleep mode on CUDA only; profiles are stopped "
                            "and started instead")
    if not release.at_least(SLEEP_MODE_SINCE):
        return SleepSupport(False, f"vLLM {release.number} predates the sleep endpoints "
                            f"kvpilot uses ({SLEEP_MODE_SINCE} or newer); profiles are stopped "
                            "and started instead")
    return SleepSupport(True, f"vLLM {release.number} on CUDA: idle profiles sleep (level "
                        f"{SLEEP_LEVEL}) and wake on the next request")


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def _post(client: httpx.AsyncClient, url: str, api_key: str | None) -> None:
    try:
        reply = await client.post(url, headers=_headers(api_key), timeout=SLEEP_CALL_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise SleepError(f"{url} did not answer: {exc}") from None
    if reply.status_code != 200:
        raise SleepError(f"{url} answered {reply.status_code}: {reply.text[:200]}")


async def put_to_sleep(
    client: httpx.AsyncClient, base_url: str, api_key: str | None, level: int = SLEEP_LEVEL
) -> None:
    """``POST /sleep?level=N`` on the server at ``base_url``.

    Raises:
        SleepError: no answer, or an answer other than 200.
    """
    await _post(client, f"{base_url}/sleep?level={level}", api_key)


async def wake_up(client: httpx.AsyncClient, base_url: str, api_key: str | None) -> None:
    """``POST /wake_up`` on the server at ``base_url``.

    Raises:
        SleepError: no answer, or an answer other than 200.
    """
    await _post(client, f"{base_url}/wake_up", api_key)


async def is_sleeping(client: httpx.AsyncClient, base_url: str, api_key: str | None) -> bool:
    """``GET /is_sleeping`` on the server at ``base_url``.

    Raises:
        SleepError: no answer, an answer other than 200, or one without ``is_sleeping``.
    """
    url = f"{base_url}/is_sleeping"
    try:
        reply = await client.get(url, headers=_headers(api_key), timeout=10.0)
    except httpx.HTTPError as exc:
        raise SleepError(f"{url} did not answer: {exc}") from None
    if reply.status_code != 200:
        raise SleepError(f"{url} answered {reply.status_code}: {reply.text[:200]}")
    try:
        value = reply.json()["is_sleeping"]
    except (ValueError, KeyError, TypeError):
        raise SleepError(f"{url} answered without is_sleeping: {reply.text[:200]}") from None
    return bool(value)
