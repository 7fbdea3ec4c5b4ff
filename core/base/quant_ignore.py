"""Modules a quantized checkpoint leaves unquantized: ``quantization_config.ignore``.

A quantized checkpoint names the modules it kept in the checkpoint dtype. Two spellings are read,
each matched the way vLLM 0.2x matches it:

* NVIDIA ModelOpt (``quant_method: modelopt``; ``ignore`` in config.json, ``exclude_modules`` in
  the older ``hf_quant_config.json``): shell wildcards (``fnmatch``), e.g.
  ``model.language_model.layers.0.self_attn*`` or ``model.vision_tower*``. A pattern ending in
  ``*`` right after a name (not after a dot) stands for that module and its children only
  (``layers.1*`` does not reach ``layers.10``), and a pattern that occurs inside a module's name
  matches it too (vLLM keeps this for checkpoints of ModelOpt before 0.39).
* compressed-tensors (``ignore``): a module's exact name, or a regular expression after ``re:``
  matched from the start of the name, e.g. ``re:.*mlp.gate$``.

Names are the checkpoint's module names (vLLM maps the patterns with the same table it maps the
weights with, so matching the checkpoint's own names gives the same answer):
``<prefix>layers.<i>.<submodule>`` where the prefix depends on the architecture (``model.`` for
causal LMs, ``model.language_model.`` or the older ``language_model.model.`` inside
vision-language wrappers, ``backbone.`` for Nemotron-H), and ``lm_head``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any

__all__ = [
    "STYLE_COMPRESSED_TENSORS",
    "STYLE_MODELOPT",
    "QuantIgnore",
    "checkpoint_dtype_bytes",
    "ignore_from_config",
    "module_names",
    "module_prefixes",
]

#: ModelOpt's matching: exact name, substring, shell wildcard
STYLE_MODELOPT = "modelopt"
#: compressed-tensors' matching: exact name or ``re:`` regular expression
STYLE_COMPRESSED_TENSORS = "compressed-tensors"

#: where the checkpoints of an architecture keep their decoder layers (module name prefixes)
_CAUSAL_PREFIXES = ("model.",)
_WRAPPED_PREFIXES = ("model.language_model.", "language_model.model.")
_PREFIXES: dict[str, tuple[str, ...]] = {
    "NemotronHForCausalLM": ("backbone.",),
    "ChatGLMModel": ("transformer.encoder.",),
    "ChatGLMForConditionalGeneration": ("transformer.encoder.",),
}

#: bytes per element of the checkpoint dtypes an unquantized module is stored in
_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}


@dataclass(frozen=True)
class QuantIgnore:
    """The ``ignore`` list of a quantized checkpoint and the way vLLM matches it.

    Attributes:
        patterns: the list as the checkpoint writes it.
        style: :data:`STYLE_MODELOPT` or :data:`STYLE_COMPRESSED_TENSORS`.
    """

    patterns: tuple[str, ...]
    style: str

    def matches(self, name: str) -> bool:
        """Whether the module ``name`` (a checkpoint module name) is left unquantized."""
        return _matches(self, name)

    def ignored_layers(
        self, architecture: str, submodule: str, layers: tuple[int, ...]
    ) -> int:
        """How many of ``layers`` keep ``submodule`` (e.g. ``self_attn.q_proj``) unquantized.

        A layer-less ``submodule`` (``layers`` empty) names a module of the text model itself
        (``lm_head``, ``per_layer_model_projection``); the answer is then 0 or 1.
        """
        return _ignored_count(self, module_prefixes(architecture), submodule, layers)


def module_prefixes(architecture: str) -> tuple[str, ...]:
    """The module-name prefixes of the text model's layers in ``architecture``'s checkpoints."""
    if architecture in _PREFIXES:
        return _PREFIXES[architecture]
    if architecture.endswith("ForConditionalGeneration"):
        return _WRAPPED_PREFIXES
    return _CAUSAL_PREFIXES


def ignore_from_config(qcfg: Mapping[str, Any] | None) -> QuantIgnore | None:
    """The ignore list of a ``quantization_config`` (None: no list, an empty one, or a method
    whose list is not read here)."""
    if not isinstance(qcfg, Mapping):
        return None
    method = str(qcfg.get("quant_method") or "").lower().replace("_", "-")
    if method.startswith("modelopt"):
        nested = qcfg.get("quantization")
        raw = (nested.get("exclude_modules") if isinstance(nested, Mapping)
               else qcfg.get("ignore"))
        style = STYLE_MODELOPT
    elif method == STYLE_COMPRESSED_TENSORS:
        raw = qcfg.get("ignore")
        style = STYLE_COMPRESSED_TENSORS
    else:
        return None
    if not isinstance(raw, list):
        return None
    patterns = tuple(p for p in raw if isinstance(p, str) and p)
    return QuantIgnore(patterns, style) if patterns else None


def checkpoint_dtype_bytes(torch_dtype: str) -> int:
    """Bytes per element of an unquantized module stored in ``torch_dtype`` (2 when unknown)."""
    return _DTYPE_BYTES.get(torch_dtype.removeprefix("torch.").lower(), 2)


@lru_cache(maxsize=256)
def _compiled(ignore: QuantIgnore) -> tuple[frozenset[str], tuple[str, ...], tuple[Any, ...]]:
    """(exact names, substrings, compiled patterns) of one list."""
    if ignore.style == STYLE_MODELOPT:
        expanded: list[str] = []
        for p in ignore.patterns:
            if len(p) >= 2 and p[-1] == "*" and p[-2] != ".":
                expanded += [p[:-1], p[:-1] + ".*"]  # the module itself and its children
            else:
                expanded.append(p)
        return frozenset(expanded), tuple(expanded), tuple(expanded)
    exact = frozenset(p for p in ignore.patterns if not p.startswith("re:"))
    regexes = []
    for p in ignore.patterns:
        if p.startswith("re:"):
            try:
                regexes.append(re.compile(p[3:]))
            except re.error:
                continue  # a pattern Python's re cannot read matches nothing
    return exact, (), tuple(regexes)


def _matches(ignore: QuantIgnore, name: str) -> bool:
    exact, substrings, patterns = _compiled(ignore)
    if name in exact:
        return True
    if ignore.style == STYLE_MODELOPT:
        short = name.removeprefix("language_model.")
        if any(s in name or s in short for s in substrings):
            return True
        return any(fnmatchcase(name, p) for p in patterns)
    return any(rx.match(name) for rx in patterns)


def module_names(prefixes: tuple[str, ...], submodule: str, layer: int | None) -> list[str]:
    """The checkpoint names ``submodule`` may have in decoder layer ``layer`` under each of
    ``prefixes`` (None: a module of the text model itself, e.g. ``lm_head``)."""
    if layer is not None:
        return [f"{p}layers.{layer}.{submodule}" for p in prefixes]
    names = [submodule, *(p + submodule for p in prefixes)]
    if submodule == "lm_head":
        names.append("language_model.lm_head")
    return names


@lru_cache(maxsize=4096)
def _ignored_count(
    ignore: QuantIgnore, prefixes: tuple[str, ...], submodule: str, layers: tuple[int, ...]
) -> int:
    if not layers:
        return int(any(_matches(ignore, n) for n in module_names(prefixes, submodule, None)))
    return sum(
        1 for i in layers if any(_matches(ignore, n) for n in module_names(prefixes, submodule, i))
    )
