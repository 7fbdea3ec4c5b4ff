"""kvpilot desktop app (PySide6 + pyqtgraph): adapts core objects to widgets, owns no logic."""

import os as _os

# pyqtgraph picks the first Qt binding it can import unless told; kvpilot is PySide6 only.
_os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")
