"""The planner's adapter inputs: LoRA slots and rank, a drafter and its tokens (one form row).

The widgets only read and show values; the settings they mean come from
:func:`kvpilot.core.app.adapters.adapter_settings`.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QSpinBox, QWidget

from kvpilot.core.app.adapters import adapter_settings, planner_adapters
from kvpilot.core.base.plan import ALLOWED_RANKS, DEFAULT_MAX_LORA_RANK, ServingSettings


class AdapterInputs(QObject):
    """LoRA (slots: 0 = off, rank) and a drafter (off / ngram / MTP, tokens) on one row."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._other_speculative: str | None = None
        self.lora_slots = QSpinBox()
        self.lora_slots.setObjectName("loraSlots")
        self.lora_slots.setRange(0, 64)
        self.lora_slots.setSpecialValueText("off")
        self.lora_slots.setToolTip("LoRA slots, adapters in one batch: vLLM's --enable-lora "
                                   "--max-loras (each slot's GPU stacks come out of the KV cache)")
        self.lora_rank = QComboBox()
        self.lora_rank.setObjectName("loraRank")
        for rank in ALLOWED_RANKS:
            self.lora_rank.addItem(f"r{rank}", rank)
        self.lora_rank.setCurrentIndex(ALLOWED_RANKS.index(DEFAULT_MAX_LORA_RANK))
        self.lora_rank.setToolTip("The largest adapter rank: vLLM's --max-lora-rank")
        self.lora_rank.setEnabled(False)
        self.drafter = QComboBox()
        self.drafter.setObjectName("drafter")
        for label, method in (("off", ""), ("ngram", "ngram"), ("MTP", "mtp")):
            self.drafter.addItem(label, method)
        self.drafter.setToolTip("Draft: speculative decoding, vLLM's --speculative-config (ngram: "
                                "prompt lookup; MTP: the checkpoint's MTP layers)")
        self.draft_tokens = QSpinBox()
        self.draft_tokens.setObjectName("draftTokens")
        self.draft_tokens.setRange(1, 8)
        self.draft_tokens.setValue(2)
        self.draft_tokens.setPrefix("×")
        self.draft_tokens.setToolTip("num_speculative_tokens: draft tokens per step")
        self.draft_tokens.setEnabled(False)
        self.lora_slots.valueChanged.connect(self._sync)
        self.drafter.currentIndexChanged.connect(self._sync)
        self.lora_rank.currentIndexChanged.connect(self._emit)
        self.draft_tokens.valueChanged.connect(self._emit)

    def row(self) -> QHBoxLayout:
        """One form row: LoRA slots and rank, the drafter and its tokens."""
        row = QHBoxLayout()
        row.setSpacing(4)
        self.drafter.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        row.addWidget(self.lora_slots)
        row.addWidget(self.lora_rank)
        row.addWidget(self.drafter, 1)
        row.addWidget(self.draft_tokens)
        return row

    def values(self) -> tuple[int, int, str, int]:
        """(LoRA slots, rank, drafter method or "", draft tokens)."""
        rank = self.lora_rank.currentData()
        return (self.lora_slots.value(), int(rank) if rank else DEFAULT_MAX_LORA_RANK,
                str(self.drafter.currentData() or ""), self.draft_tokens.value())

    def settings(self) -> dict[str, Any]:
        """The serving settings these inputs mean (a drafter they do not offer, shown to them
        by :meth:`show_settings`, is kept while the drafter is off)."""
        slots, rank, method, tokens = self.values()
        values = adapter_settings(lora_slots=slots, lora_rank=rank, speculative_method=method,
                                  speculative_tokens=tokens)
        if not method and self._other_speculative:
            values["speculative_config"] = self._other_speculative
        return values

    def show_settings(self, settings: ServingSettings) -> None:
        """Show what ``settings`` fix (the caller suppresses the change signal)."""
        shown = planner_adapters(settings)
        self._other_speculative = shown.other_speculative_config
        self.lora_slots.setValue(shown.lora_slots)
        i = self.lora_rank.findData(shown.lora_rank)
        self.lora_rank.setCurrentIndex(i if i >= 0 else ALLOWED_RANKS.index(DEFAULT_MAX_LORA_RANK))
        self.drafter.setCurrentIndex(max(0, self.drafter.findData(shown.speculative_method)))
        self.draft_tokens.setValue(shown.speculative_tokens)

    def _sync(self, *_: object) -> None:
        self.lora_rank.setEnabled(self.lora_slots.value() > 0)
        self.draft_tokens.setEnabled(bool(self.drafter.currentData()))
        self.changed.emit()

    def _emit(self, *_: object) -> None:
        self.changed.emit()
