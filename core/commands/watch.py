"""``kvpilot watch``: attach to any vLLM OpenAI server and follow it.

Contract::

    kvpilot watch --url URL [--api-key-env VAR] [--json] [--seconds N] [--interval S]
                  [--gpu NAME | --gpu-total-mib N] [--dtype D] [--log FILE]

Prints who the server is (vLLM version, model, context), then one line per sample (with
``--json`` one JSON object per line): requests running / waiting, KV-cache use, tokens/s,
TTFT / TPOT percentiles, the pressure signals, and the KV capacity the server reports next to
kvpilot's prediction when the model's config.json is readable here. A lost connection is a gap
(``connected: false``) and the watch goes on; it ends after ``--seconds`` or on Ctrl-C (status
0). The server is never stopped: kvpilot does not own it. Unreachable at the start: status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from kvpilot.core.app.watch import ServerWatch, WatchSample, is_local_url, normalize_url
from kvpilot.core.base.errors import FitError
from kvpilot.core.base.hosts import URL_HELP
from kvpilot.core.base.units import GiB, MiB
from kvpilot.core.commands import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Register ``kvpilot watch``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "watch", help="watch any running vLLM server",
        description="Follow a vLLM OpenAI server kvpilot did not start (never stops it).",
    )
    p.add_argument("--url", required=True, help=URL_HELP)
    p.add_argument("--api-key-env", metavar="VAR",
                   help="environment variable holding the server's API key")
    p.add_argument("--json", action="store_true", help="one JSON object per sample")
    p.add_argument("--seconds", type=float, help="stop after N seconds (default: Ctrl-C)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    p.add_argument("--gpu", help="the server's GPU from the spec table, for the prediction")
    p.add_argument("--gpu-total-mib", type=int, help="the server's GPU memory in MiB")
    p.add_argument("--dtype", help="the server's --dtype when not the checkpoint's (prediction)")
    p.add_argument("--log", help="a saved log of the server (e.g. docker logs > FILE): its "
                   "capacity lines count as reported when /metrics has none")
    return p


def _api_key(args: argparse.Namespace) -> str | None:
    if not args.api_key_env:
        return None
    value = os.environ.get(args.api_key_env)
    if not value:
        raise FitError(f"the environment variable {args.api_key_env} is not set; export the "
                       "server's API key in it")
    return value


def _gpu(args: argparse.Namespace, base_url: str) -> tuple[int | None, str]:
    """The server's GPU, (CUDA total bytes, name): the flags, else the local GPU for a server
    on this machine (the one target every command plans against)."""
    from kvpilot.core.base.errors import HardwareError
    from kvpilot.core.commands.serving_args import detected_gpu
    from kvpilot.core.hardware import target

    if args.gpu_total_mib:
        return target.from_size(args.gpu_total_mib * MiB, name=args.gpu or "gpu").total_bytes, \
            args.gpu or ""
    if args.gpu:
        named = target.from_spec(args.gpu)
        return named.total_bytes, named.name
    if not is_local_url(base_url):
        return None, ""
    try:
        found = detected_gpu()
    except HardwareError:
        return None, ""
    return (found.total_bytes, found.name) if found is not None else (None, "")


def _fmt(value: float | None, pattern: str, scale: float = 1.0) -> str:
    return "-" if value is None or value != value else pattern.format(value * scale)


def render_sample(s: WatchSample) -> str:
    """One human line for a sample."""
    if not s.connected:
        return f"{s.t_s:7.1f}s  gap: {s.error}"
    v = s.values
    line = (
        f"{s.t_s:7.1f}s  running {_fmt(v.get('running'), '{:.0f}')}  waiting "
        f"{_fmt(v.get('waiting'), '{:.0f}')}  KV {_fmt(v.get('kv_usage_frac'), '{:.0f}%', 100)}  "
        f"gen {_fmt(v.get('generation_tokens_per_s'), '{:.1f}')} tok/s  TTFT p99 "
        f"{_fmt(v.get('ttft_p99_s'), '{:.3f}')} s  TPOT p99 {_fmt(v.get('tpot_p99_s'), '{:.4f}')} s"
    )
    for p in s.pressure:
        line += f"\n          pressure {p.kind}: {p.message} (fix: {p.fix})"
    if s.error:
        line += f"\n          {s.error}"
    return line


def render_capacity(s: WatchSample) -> str | None:
    """The reported vs predicted KV capacity, once."""
    c = s.capacity
    if c is None:
        return None
    r = c.reported
    text = "capacity  reported: " + ", ".join(
        part for part in (
            f"{r.kv_cache_tokens:,} KV tokens" if r.kv_cache_tokens is not None else "",
            f"{r.num_blocks:,} blocks" if r.num_blocks is not None else "",
            f"{r.kv_bytes / GiB:.2f} GiB" if r.kv_bytes else "",
            f"max concurrency {r.max_concurrency:.2f}x" if r.max_concurrency is not None else "",
        ) if part
    )
    if c.predicted_kv_tokens is not None:
        err = c.token_error_frac
        text += (f"\n          predicted: {c.predicted_kv_tokens:,} KV tokens"
                 + (f" ({err:+.1%})" if err is not None else "") + f", from {c.basis}")
    elif c.basis:
        text += f"\n          {c.basis}"
    else:
        text += "\n          predicted: - (the model's config.json is not in the local cache)"
    return text


def run(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        raise FitError("--interval must be positive (seconds)")
    if args.seconds is not None and args.seconds <= 0:
        raise FitError("--seconds must be positive")
    base_url = normalize_url(args.url)
    total, name = _gpu(args, base_url)
    watch = ServerWatch(
        base_url, api_key=_api_key(args), gpu_total_bytes=total, gpu_name=name, dtype=args.dtype,
        log_path=args.log,
    )
    out = sys.stdout
    try:
        ident = watch.start()
        if not args.json:
            out.write(
                f"watching {base_url}: vLLM {ident.version or '?'}, model {ident.model_id} "
                f"({ident.model_root}), max_model_len {ident.max_model_len or '?'}; "
                "not started by kvpilot, so never stopped by it\n"
            )
            out.flush()
        deadline = None if args.seconds is None else time.monotonic() + args.seconds
        shown_capacity = False
        while True:
            started = time.monotonic()
            sample = watch.poll()
            if args.json:
                out.write(json.dumps(sample.to_json(), sort_keys=True) + "\n")
            else:
                out.write(render_sample(sample) + "\n")
                cap = render_capacity(sample)
                if cap and not shown_capacity:
                    shown_capacity = True
                    out.write(cap + "\n")
            out.flush()
            now = time.monotonic()
            if deadline is not None and now + args.interval > deadline + 1e-6:
                break
            time.sleep(max(0.0, args.interval - (now - started)))
    except KeyboardInterrupt:
        pass
    finally:
        watch.close()
    return 0
