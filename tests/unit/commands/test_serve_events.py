"""``kvpilot serve``'s event lines: the words a user reads and the JSON a script reads."""

from __future__ import annotations

import io
import json

from kvpilot.core.base import lifecycle as phases
from kvpilot.core.commands.serve import EventPrinter
from kvpilot.core.vllm import logparse


def test_a_phase_line_names_the_phase_in_words_and_json_keeps_the_name() -> None:
    event = logparse.PhaseEvent(phase=phases.CAPTURING_CUDA_GRAPHS, line="Capturing CUDA graphs")
    text, js = io.StringIO(), io.StringIO()
    EventPrinter(text, as_json=False).on_event(event)
    EventPrinter(js, as_json=True).on_event(event)
    assert text.getvalue() == "kvpilot:   phase capturing_cuda_graphs (capturing CUDA graphs)\n"
    assert json.loads(js.getvalue()) == {
        "event": "phase", "phase": "capturing_cuda_graphs", "line": "Capturing CUDA graphs"}
