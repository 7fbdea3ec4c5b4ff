"""``--speculative-config``, read once for every part of kvpilot that needs it.

The flag is a JSON object (``config/speculative.py`` ``SpeculativeConfig`` in the 0.20.0 and
0.32.0 wheels): ``method`` (``mtp``, ``eagle``, ``eagle3``, ``draft_model``, ``ngram`` ...),
``num_speculative_tokens``, the draft ``model`` and ``draft_tensor_parallel_size``. As vLLM
does, a missing method is inferred from the model (``ngram`` / ``[ngram]`` -> ngram, a name
with ``eagle-`` -> eagle, with ``eagle3`` -> eagle3, else draft_model), every ``*_mtp``
spelling becomes ``mtp`` ("method `...` is deprecated and replaced with mtp"), and the methods
without a network of their own name no draft model.

:func:`parse_speculative_config` is the strict reading (the planner's and the command line's:
a malformed object is one sentence); :func:`speculative_settings` the lenient one (None for no
flag or text vLLM would refuse anyway: the runner choice and the draft look-up use it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kvpilot.core.base.errors import FitError

METHOD_MTP = "mtp"
METHOD_EAGLE = "eagle"
METHOD_EAGLE3 = "eagle3"
METHOD_DRAFT_MODEL = "draft_model"
METHOD_NGRAM = "ngram"

#: methods that run a second network with its own checkpoint
DRAFT_CHECKPOINT_METHODS = frozenset({METHOD_EAGLE, METHOD_EAGLE3, METHOD_DRAFT_MODEL,
                                      "medusa", "mlp_speculator", "dflash", "dspark"})
#: methods without a network of their own (no weights, no KV)
NO_NETWORK_METHODS = frozenset({METHOD_NGRAM, "ngram_gpu", "suffix"})
#: methods whose drafter has no attention layers (weights only)
NO_KV_METHODS = frozenset({"medusa", "mlp_speculator"})

#: methods for which vLLM has no default ``num_speculative_tokens``: an MTP head and a draft
#: checkpoint default to their config's ``n_predict`` and suffix decoding to its tree depth
#: (``SpeculativeConfig.__post_init__`` / ``_validate_suffix_decoding``, 0.32.0)
_TOKENS_REQUIRED = frozenset({METHOD_NGRAM, "ngram_gpu"})

_EXAMPLE = '\'{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}\''


@dataclass(frozen=True)
class SpeculativeSettings:
    """A parsed ``--speculative-config``: ``method`` as vLLM normalises it, draft tokens per
    step (None: the method's default, the MTP layer count for ``mtp``), the draft checkpoint
    (None: none named, always None for a method without a network) and its tensor-parallel
    size (None: the target's)."""

    method: str
    num_speculative_tokens: int | None
    model: str | None
    draft_tensor_parallel_size: int | None


def _whole(data: dict[str, object], key: str, what: str) -> int | None:
    value = data.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 1):
        raise FitError(f"--speculative-config {key} must be {what}, got {value!r}")
    return value


def _method_of(method: str | None, model: str | None) -> str:
    """``method`` as vLLM normalises it, or the one it infers from ``model``."""
    if method is None:
        if model is None:
            raise FitError('--speculative-config names neither a "method" nor a "model"; give '
                           'e.g. "method": "mtp" or "ngram", or a draft "model"')
        low = model.lower()
        if low in ("ngram", "[ngram]"):
            return METHOD_NGRAM
        if "eagle-" in low:
            return METHOD_EAGLE
        if "eagle3" in low:
            return METHOD_EAGLE3
        return METHOD_DRAFT_MODEL
    if method == "[ngram]":
        return METHOD_NGRAM
    if method.endswith("_mtp"):
        return METHOD_MTP
    return method


def parse_speculative_config(text: str) -> SpeculativeSettings:
    """The settings of a ``--speculative-config`` JSON object.

    Raises:
        FitError: not a JSON object, a count that is not a positive whole number, a method or
            model that is not text, neither a method nor a model named, a draft method without
            its model, or n-gram lookup without ``num_speculative_tokens`` (the message says
            what to give).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FitError(f"--speculative-config is not JSON ({exc.msg}); give e.g. "
                       f"{_EXAMPLE}") from None
    if not isinstance(data, dict):
        raise FitError("--speculative-config must be a JSON object, e.g. "
                       '\'{"method": "mtp", "num_speculative_tokens": 1}\'')
    method = data.get("method")
    model = data.get("model")
    if method is not None and not isinstance(method, str):
        raise FitError(f"--speculative-config method must be text, got {method!r}")
    if model is not None and not isinstance(model, str):
        raise FitError(f"--speculative-config model must be text, got {model!r}")
    model = model.strip() or None if model is not None else None
    tokens = _whole(data, "num_speculative_tokens", "a whole number of at least 1")
    draft_tp = _whole(data, "draft_tensor_parallel_size", "at least 1")
    method = _method_of(method, model)
    if method in DRAFT_CHECKPOINT_METHODS and not model:
        raise FitError(f'--speculative-config method "{method}" needs the draft "model" '
                       "(a directory or repo id)")
    if method in _TOKENS_REQUIRED and tokens is None:
        raise FitError(f'--speculative-config method "{method}" needs '
                       '"num_speculative_tokens"')
    return SpeculativeSettings(method, tokens,
                               None if method in NO_NETWORK_METHODS else model, draft_tp)


def speculative_settings(text: str | None) -> SpeculativeSettings | None:
    """:func:`parse_speculative_config` of ``text``, or None for no flag or one vLLM would
    refuse (never raises)."""
    if not text or not text.strip():
        return None
    try:
        return parse_speculative_config(text)
    except FitError:
        return None
