"""Images: which models take them (real config.json fixtures), and files as data: URLs."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from testpaths import DATA

from kvpilot.core.chat import errors, images
from kvpilot.core.chat.errors import ChatError

PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.mark.parametrize(
    ("model", "takes"),
    [
        ("qwen2.5-vl-7b-instruct", True),
        ("llava-1.5-7b-hf", True),
        ("gemma-3-12b-it", True),
        ("qwen2.5-7b-instruct", False),
        ("llama-3.1-8b-instruct", False),
    ],
)
def test_vision_models_take_images(model: str, takes: bool) -> None:
    assert images.model_takes_images(str(DATA / "models" / model)) is takes


def test_a_model_that_is_not_here_takes_none(tmp_path: Path) -> None:
    assert images.model_takes_images(str(tmp_path / "missing")) is False
    assert images.model_takes_images("") is False


def test_a_png_becomes_a_data_url(tmp_path: Path) -> None:
    path = tmp_path / "dot.png"
    path.write_bytes(PNG_1X1)
    url = images.image_data_url(path)
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == PNG_1X1


def test_what_cannot_be_sent_is_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    with pytest.raises(ChatError, match=r"notes\.png is not a PNG, JPEG") as caught:
        images.image_data_url(text)
    assert caught.value.kind == errors.KIND_IMAGE
    with pytest.raises(ChatError, match="Cannot read"):
        images.image_data_url(tmp_path / "gone.png")
    monkeypatch.setattr(images, "MAX_IMAGE_BYTES", 10)
    big = tmp_path / "big.png"
    big.write_bytes(PNG_1X1)
    with pytest.raises(ChatError, match="send an image of at most"):
        images.image_data_url(big)
