"""The planner's adapter inputs: LoRA slots and rank, a drafter and its tokens (one form row).

The widgets only read and show values; the settings they mean come from
:func:`kvpilot.core.fit.adapters.adapter_settings`.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QSpinBox, QWidget

from kvpilot.core.fit.lora import ALLOWED_RANKS, DEFAULT_MAX_LORA_RANK


class AdapterInputs(QObject):
    """LoRA (slots: 0 = off, rank) and a drafter (off / ngram / MTP, tokens) on one row."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
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

    def set_values(self, slots: int, rank: int, method: str, tokens: int) -> None:
        """Show these values (no ``changed`` is emitted by the caller's suppression)."""
        self.lora_slots.setValue(max(0, slots))
        i = self.lora_rank.findData(rank)
        self.lora_rank.setCurrentIndex(i if i >= 0 else ALLOWED_RANKS.index(DEFAULT_MAX_LORA_RANK))
        j = self.drafter.findData(method)
        self.drafter.setCurrentIndex(max(0, j))
        self.draft_tokens.setValue(max(1, tokens))

    def _sync(self, *_: object) -> None:
        self.lora_rank.setEnabled(self.lora_slots.value() > 0)
        self.draft_tokens.setEnabled(bool(self.drafter.currentData()))
        self.changed.emit()

    def _emit(self, *_: object) -> None:
        self.changed.emit()
