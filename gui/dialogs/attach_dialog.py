"""The "Attach" dialog: the URL of a vLLM server kvpilot did not start, its API key and,
optionally, a saved log of it (its capacity lines stand in when ``/metrics`` has none).

The key is used for this session only (never saved); the dialog validates nothing itself:
:func:`kvpilot.core.app.watch.normalize_url` and the first contact do.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)


class AttachDialog(QDialog):
    """Asks for ``http://host:port`` and an optional API key."""

    def __init__(self, parent: QWidget | None = None, url: str = "http://127.0.0.1:8000") -> None:
        super().__init__(parent)
        self.setObjectName("attachDialog")
        self.setWindowTitle("Attach to a vLLM server")
        self.url = QLineEdit(url)
        self.url.setObjectName("attachUrl")
        self.url.setPlaceholderText("http://127.0.0.1:8000")
        self.api_key = QLineEdit()
        self.api_key.setObjectName("attachApiKey")
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("only if the server needs one (not saved)")
        self.log_path = QLineEdit()
        self.log_path.setObjectName("attachLog")
        self.log_path.setPlaceholderText("optional: a saved log (docker logs > FILE) for capacity")
        note = QLabel(
            "Watch a server that runs elsewhere (a Docker container, another machine): the "
            "dashboard, pressure signals and load test work as usual; kvpilot never stops it."
        )
        note.setWordWrap(True)
        form = QFormLayout()
        form.addRow("URL", self.url)
        form.addRow("API key", self.api_key)
        form.addRow("Log file", self.log_path)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Attach")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(note)
        lay.addLayout(form)
        lay.addWidget(buttons)

    def values(self) -> tuple[str, str | None, str | None]:
        """(URL, API key or None, log file or None)."""
        return (self.url.text().strip(), self.api_key.text() or None,
                self.log_path.text().strip() or None)
