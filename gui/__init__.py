"""kvpilot desktop app (PySide6 + pyqtgraph): adapts core objects to widgets, owns no logic."""
