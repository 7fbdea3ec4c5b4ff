"""What can go wrong fetching a model from the Hub: one error type per cause, each with its
``kind`` (what the GUI and ``kvpilot serve --json`` report) and a message saying what to do.
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import errors as hf_errors

from kvpilot.core.base import failures
from kvpilot.core.base.errors import KvpilotError

#: error kinds (``DownloadError.kind``); the first two are shared with the supervisor
KIND_GATED = failures.GATED_REPO
KIND_NOT_FOUND = failures.MODEL_NOT_FOUND
KIND_AUTH = "hub_auth_rejected"
KIND_UNREACHABLE = "hub_unreachable"
KIND_NO_DISK_SPACE = "not_enough_disk"
KIND_DISK_FULL = "disk_full"
KIND_INTERRUPTED = "download_interrupted"
KIND_NO_WEIGHTS = "no_loadable_weights"
KIND_CANCELLED = "download_cancelled"


class DownloadError(KvpilotError):
    """A model could not be fetched; ``kind`` is one of the ``KIND_*`` strings."""

    kind = "download_failed"


class GatedModelError(DownloadError):
    """The repository is gated and the token (if any) has not been granted access."""

    kind = KIND_GATED


class ModelNotFoundError(DownloadError):
    """No such repository, revision or file (or a private one the token cannot see)."""

    kind = KIND_NOT_FOUND


class HubAuthError(DownloadError):
    """The Hub rejected the token itself (401 invalid credentials)."""

    kind = KIND_AUTH


class HubUnreachableError(DownloadError):
    """The Hub could not be reached and the cache cannot stand in for it."""

    kind = KIND_UNREACHABLE


class NotEnoughDiskError(DownloadError):
    """The cache's file system has less free space than the files still to fetch."""

    kind = KIND_NO_DISK_SPACE

    def __init__(self, message: str, *, needed_bytes: int, free_bytes: int, path: Path) -> None:
        super().__init__(message)
        self.needed_bytes = needed_bytes
        self.free_bytes = free_bytes
        self.path = path


class DiskFullError(DownloadError):
    """Writing a file failed because the disk filled up during the download.

    ``needed_bytes``: what the download still has to write; ``free_bytes``: free on that disk
    now; ``mount``: its mount point; ``partial_path``: the partial file, kept for the resume.
    """

    kind = KIND_DISK_FULL

    def __init__(
        self,
        message: str,
        *,
        needed_bytes: int,
        free_bytes: int | None,
        mount: Path,
        partial_path: Path,
    ) -> None:
        super().__init__(message)
        self.needed_bytes = needed_bytes
        self.free_bytes = free_bytes
        self.mount = mount
        self.partial_path = partial_path


class DownloadInterruptedError(DownloadError):
    """The connection broke mid-file more often than the retry budget allows."""

    kind = KIND_INTERRUPTED


class NoLoadableWeightsError(DownloadError):
    """The repository holds no weights in a format vLLM loads from a HF checkpoint."""

    kind = KIND_NO_WEIGHTS


class DownloadCancelled(DownloadError):
    """The user cancelled; finished files and the partial file stay in the cache."""

    kind = KIND_CANCELLED


def hub_error(
    exc: hf_errors.HfHubHTTPError, repo_id: str, revision: str, endpoint: str
) -> DownloadError:
    """The typed error, with what to do, for the Hub's answer about ``repo_id@revision``."""
    page = f"{endpoint}/{repo_id}"
    status = exc.response.status_code if exc.response is not None else None
    if isinstance(exc, hf_errors.GatedRepoError):
        return GatedModelError(
            f"{repo_id} is gated: open {page}, accept its licence with your Hugging Face account, "
            "then set a read token of that account in Settings (or HF_TOKEN) and try again"
        )
    if isinstance(exc, hf_errors.RevisionNotFoundError):
        return ModelNotFoundError(
            f"{repo_id} has no revision '{revision}'; use 'main' or a branch, tag or commit "
            f"listed on {page}"
        )
    if isinstance(exc, hf_errors.RepositoryNotFoundError):
        return ModelNotFoundError(
            f"model {repo_id} was not found on {endpoint}; check the name (organisation/model), "
            "or, if it is private, set a token with access in Settings (or HF_TOKEN)"
        )
    if isinstance(exc, hf_errors.RemoteEntryNotFoundError):
        return ModelNotFoundError(
            f"a file of {repo_id}@{revision} is missing on {endpoint}: {short_error(exc)}"
        )
    if status == 401:
        return HubAuthError(
            "the Hugging Face token was rejected (401 invalid credentials); set a valid read "
            "token in Settings or HF_TOKEN, or remove it to download public models"
        )
    if status == 403:
        return HubAuthError(
            f"the Hugging Face token may not read {repo_id} (403); use a token with read access "
            "in Settings or HF_TOKEN"
        )
    return DownloadError(f"the Hub at {endpoint} answered {status} for {repo_id}; try again later")


def not_a_hub(endpoint: str, exc: BaseException) -> DownloadError:
    """An answer from ``endpoint`` that is not a Hugging Face Hub's (a proxy, a captive portal)."""
    return DownloadError(
        f"{endpoint} did not answer like a Hugging Face Hub ({short_error(exc)}); check "
        "HF_ENDPOINT and any proxy or firewall in between"
    )


def short_error(exc: BaseException) -> str:
    """The first line of an exception's text (its type name when it has none)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
