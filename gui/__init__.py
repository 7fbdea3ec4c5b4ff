"""kvpilot desktop app (PySide6 + pyqtgraph): adapts core objects to widgets, owns no logic."""

import os as _os
import sys as _sys

# pyqtgraph picks the first Qt binding it can import unless told; kvpilot is PySide6 only.
_os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")


def _reserve_singleton_references() -> None:
    """WORKAROUND for a reference-count bug of PySide6 6.12 (6.11.3 is not affected).

    When C++ calls a Python override of a virtual that returns ``void`` or a ``QVariant``
    (``paint``, ``itemChange``, ... which pyqtgraph overrides), 6.12 drops one reference too many
    of the returned object: ``None`` or a bool. Measured: about ten per dashboard frame and three
    per repaint of a graphics item. Python 3.12+ makes ``None``/``True``/``False`` immortal, so
    nothing happens there; on 3.10/3.11 their count reaches zero after enough frames or at exit
    and the interpreter aborts ("none_dealloc" / "bool_dealloc"). A large reserve of references
    has the same effect as 3.12's immortality.
    """
    if _sys.version_info >= (3, 12) or not hasattr(_sys, "getrefcount"):
        return
    import ctypes

    for obj in (None, True, False):
        ctypes.c_ssize_t.from_address(id(obj)).value += 1 << 40


_reserve_singleton_references()
