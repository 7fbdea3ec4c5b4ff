"""The executable leaves huggingface_hub's Xet client (``hf_xet``, 11 MB) out of the bundle
(packaging/kvpilot.spec). Model downloads must work without it, also from a repository whose
files are in Xet storage: huggingface_hub then falls back to plain HTTP, and kvpilot's
downloader fetches the bytes itself anyway.

The download runs in a child Python whose site-packages hold everything of this environment
except ``hf_xet`` (module and metadata): the situation of the frozen app.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import sysconfig
from pathlib import Path

from fakes.fake_hub import FakeHub

REPO = "acme/xet-stored"
CHILD = r"""
import importlib.metadata, importlib.util, json, site, sys
site.addsitedir(sys.argv[1])
assert importlib.util.find_spec("hf_xet") is None, "hf_xet is importable"
try:
    importlib.metadata.version("hf_xet")
except importlib.metadata.PackageNotFoundError:
    pass
else:
    raise AssertionError("hf_xet's metadata is still there")
from huggingface_hub import get_hf_file_metadata, hf_hub_url
from kvpilot.core.hub import download as dl
meta = get_hf_file_metadata(hf_hub_url(sys.argv[2], "model.safetensors"))
snapshot = dl.ensure_downloaded(sys.argv[2])
print(json.dumps({"snapshot": str(snapshot), "xet_stored": meta.xet_file_data is not None}))
"""


def _safetensors(n_floats: int) -> bytes:
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [n_floats], "data_offsets": [0, 4 * n_floats]}}
    ).encode()
    header += b" " * (-len(header) % 8)
    data = b"".join(hashlib.sha256(struct.pack("<I", i)).digest() for i in range(n_floats // 8))
    return struct.pack("<Q", len(header)) + header + data


def _site_without_hf_xet(target: Path) -> Path:
    """A folder of links to this environment's site-packages, hf_xet left out."""
    target.mkdir()
    for key in ("purelib", "platlib"):
        for entry in Path(sysconfig.get_paths()[key]).iterdir():
            if entry.name.lower().startswith(("hf_xet", "hf-xet")):
                continue
            link = target / entry.name
            if not link.exists():
                link.symlink_to(entry)
    return target


def test_download_from_xet_storage_works_without_hf_xet(tmp_path: Path) -> None:
    files = {
        "config.json": json.dumps({"architectures": ["LlamaForCausalLM"]}).encode(),
        "tokenizer.json": b'{"model": {"vocab": {}}}',
        "tokenizer_config.json": b"{}",
        "model.safetensors": _safetensors(400_000),  # LFS, and so in "Xet storage"
    }
    shadow = _site_without_hf_xet(tmp_path / "site")
    with FakeHub(xet=True) as hub:
        hub.add_repo(REPO, files)
        env = {
            k: v for k, v in os.environ.items()
            if not k.startswith(("HF_", "HUGGING_FACE_", "PYTHON"))
        }
        env.update(
            HF_ENDPOINT=hub.endpoint,
            HF_HOME=str(tmp_path / "hf-home"),
            HF_HUB_CACHE=str(tmp_path / "hf-home" / "hub"),
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HUB_DISABLE_PROGRESS_BARS="1",
        )
        proc = subprocess.run(
            [sys.executable, "-S", "-c", CHILD, str(shadow), REPO],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        cdn_gets = [r for r in hub.requests if r.server == "cdn" and r.method == "GET"]
    assert result["xet_stored"] is True  # the Hub said Xet; without hf_xet, HTTP it was
    snapshot = Path(result["snapshot"])
    for name, content in files.items():
        assert (snapshot / name).read_bytes() == content
    assert cdn_gets, "the weights did not come over plain HTTP from the CDN"
