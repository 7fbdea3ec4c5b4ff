"""``kvpilot export``: the plan as a command line, ``docker run``, a Compose file or Helm values.

Contract::

    kvpilot export --model M [plan flags] [--format command|docker|compose|helm]
                   [--host H] [--port P] [--served-model-name N] [--revision REV] [--force]

The text goes to stdout. A plan predicted not to start is not exported: the reason goes to
stderr and the exit status is 1, unless ``--force`` exports it anyway (with the reason as a
warning on stderr). A utilization kvpilot chose because none was given is said on stderr.

The device (as for ``kvpilot plan``: ``--gpu`` / ``--gpu-total-mib``,
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

from kvpilot.core.base import paths
from kvpilot.core.base.errors import FitError
from kvpilot.core.base.plan import PlanInputs, settings_dict
from kvpilot.core.commands import Subparsers
from kvpilot.core.commands.plan import add_plan_arguments, plan_inputs_and_choice
from kvpilot.core.commands.serving_args import (
    detected_gpu,
    selected_indices,
    settings_from_args,
)
from kvpilot.core.fit.measurements import MeasurementStore
from kvpilot.core.vllm.command import LaunchSpec, parse_extra_args
from kvpilot.core.vllm.export import FORMATS

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
    p.add_argument("--force", action="store_true",
                   help="export a plan predicted not to start (with a warning)")
    return p


def run(args: argparse.Namespace) -> int:
    """Print the export (0); a plan predicted not to start is refused (1) unless ``--force``."""
    from kvpilot.core.app.export import export_plan
    from kvpilot.core.hub.resolve import load_model_spec

    store = MeasurementStore(paths.measurements_path())
    inputs: PlanInputs | None
    weights_bytes: int | None = None
    try:
        inputs, choice = plan_inputs_and_choice(args)
    except FitError:  # no GPU given or found: export without a capacity
        inputs = None
        weights_bytes = load_model_spec(args.model).weights_bytes
    else:
        if choice.sentence:
            print(f"kvpilot: {choice.sentence}", file=sys.stderr)
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
    export = export_plan(
        spec, inputs, args.format, store=store, revision=args.revision, gpu_ids=gpu_ids,
        weights_bytes=weights_bytes, force=args.force,
    )
    if export.refusal and not args.force:
        print(f"kvpilot: not exported: {export.refusal} Change the plan, or pass --force to "
              "export it anyway.", file=sys.stderr)
        return 1
    if export.refusal:
        print(f"kvpilot: warning: {export.refusal} Exported anyway (--force).", file=sys.stderr)
    sys.stdout.write(export.text)
    return 0
