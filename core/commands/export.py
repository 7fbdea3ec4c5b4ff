"""``kvpilot export``: the plan as a command line, ``docker run``, a Compose file or Helm values.

Contract::

    kvpilot export --model M [plan flags] [--format command|docker|compose|helm]
                   [--host H] [--port P] [--served-model-name N] [--revision REV]

The text goes to stdout. The device (as for ``kvpilot plan``: ``--gpu`` / ``--gpu-total-mib``,
else this machine's GPU) is only needed for the capacity noted in the header; without one the
export has no capacity line.
The API key is taken from ``KVPILOT_API_KEY`` as for ``kvpilot serve`` and is exported only as a
reference to ``VLLM_API_KEY`` (or a Kubernetes secret), never as its value.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

from kvpilot.core import paths
from kvpilot.core.commands import Subparsers
from kvpilot.core.commands.plan import add_plan_arguments, inputs_from_args, plan
from kvpilot.core.commands.serving_args import (
    detected_gpu,
    selected_indices,
    settings_from_args,
)
from kvpilot.core.errors import FitError
from kvpilot.core.fit.calibrate import key_for
from kvpilot.core.fit.plan import Capacity, PlanInputs, settings_dict
from kvpilot.core.measurements import Measured, MeasurementStore
from kvpilot.core.vllm.command import LaunchSpec, parse_extra_args
from kvpilot.core.vllm.export import FORMATS, build_export_plan, render

API_KEY_ENV = "KVPILOT_API_KEY"


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Register ``kvpilot export``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "export", help="print the plan as a command, docker run, compose file or Helm values",
        description="Print the plan for another place: vllm serve, docker run, compose, Helm.",
    )
    add_plan_arguments(p)
    p.add_argument("--format", choices=FORMATS, default="command")
    p.add_argument("--host", default="127.0.0.1", help="bind address (non-local needs an API key)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name")
    p.add_argument("--revision", help="model revision (default: the cached snapshot's commit)")
    p.add_argument("--extra-args", default="", help="extra vllm serve arguments, one string")
    return p


def run(args: argparse.Namespace) -> int:
    from kvpilot.core.models.resolve import load_model_spec

    store = MeasurementStore(paths.measurements_path())
    capacity: Capacity | None = None
    measured: Measured | None = None
    inputs: PlanInputs | None
    try:
        inputs = inputs_from_args(args)
    except FitError:  # no GPU given or found: export without a capacity
        inputs = None
        model = load_model_spec(args.model)
    else:
        model = inputs.model
        capacity = plan(inputs, store)
        measured = store.lookup(key_for(inputs))
    if inputs is not None:
        spec = LaunchSpec.from_plan(inputs, args.model)
    else:
        spec = LaunchSpec(model=args.model, **settings_dict(settings_from_args(args)))
    spec = replace(
        spec,
        host=args.host,
        port=args.port,
        served_model_name=args.served_model_name,
        api_key=os.environ.get(API_KEY_ENV) or None,
        extra_args=parse_extra_args(args.extra_args),
    )
    gpu_ids: tuple[str, ...] = ()
    indices = selected_indices(args)
    if indices is not None:  # this machine's GPUs, pinned by UUID
        device = detected_gpu(indices)
        if device is not None:
            gpu_ids = device.uuids
            spec = replace(spec, cuda_visible_devices=device.cuda_visible_devices)
    export = build_export_plan(
        spec, inputs, capacity=capacity, measured=measured, revision=args.revision,
        gpu_ids=gpu_ids,
        pipeline_parallel_size=inputs.pipeline_parallel_size if inputs is not None else 1,
    )
    if inputs is None:
        export = replace(export, weights_bytes=model.weights_bytes)
    sys.stdout.write(render(export, args.format))
    return 0
