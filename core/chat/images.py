"""Images for vision models: whether the served model takes them, and a file as a data: URL.

vLLM accepts an image in a chat message as an OpenAI ``image_url`` content part; a ``data:``
URL carries the file itself, so that the server needs no access to the user's files.
"""

from __future__ import annotations

import base64
from pathlib import Path

from kvpilot.core.chat import errors
from kvpilot.core.chat.errors import ChatError

#: the largest image file sent (bytes): a photo from a phone fits, a raw scan does not
MAX_IMAGE_BYTES = 20 << 20

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)


def model_takes_images(model_ref: str) -> bool:
    """True when the checkpoint ``model_ref`` (a local folder or a repo id in the Hugging Face
    cache; nothing is downloaded) is a vision-language model kvpilot knows: its
    :class:`~kvpilot.core.base.model_spec.ModelSpec` has a vision encoder. False when it has none
    or cannot be read here (an attached server's model that is not on this machine)."""
    from kvpilot.core.base.errors import KvpilotError
    from kvpilot.core.hub.resolve import load_model_spec

    if not model_ref.strip():
        return False
    try:
        spec = load_model_spec(model_ref, offline=True)
    except (KvpilotError, OSError, ValueError):
        return False
    return spec.vision is not None


def image_mime(head: bytes) -> str | None:
    """The MIME type of an image from its first bytes (PNG, JPEG, GIF, BMP, WebP), or None."""
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return next((mime for magic, mime in _MAGIC if head.startswith(magic)), None)


def image_data_url(path: Path) -> str:
    """The ``data:<mime>;base64,…`` URL of the image file at ``path``.

    Raises:
        ChatError: kind ``image``: the file cannot be read, is larger than
            :data:`MAX_IMAGE_BYTES`, or is not a PNG, JPEG, GIF, BMP or WebP image.
    """
    try:
        size = path.stat().st_size
        if size > MAX_IMAGE_BYTES:
            raise ChatError(
                errors.KIND_IMAGE,
                f"{path.name} is {size / (1 << 20):.1f} MiB; send an image of at most "
                f"{MAX_IMAGE_BYTES >> 20} MiB.",
            )
        data = path.read_bytes()
    except OSError as exc:
        raise ChatError(
            errors.KIND_IMAGE, f"Cannot read {path}: {exc.strerror or exc}."
        ) from None
    mime = image_mime(data[:16])
    if mime is None:
        raise ChatError(
            errors.KIND_IMAGE,
            f"{path.name} is not a PNG, JPEG, GIF, BMP or WebP image; pick one of those.",
        )
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
