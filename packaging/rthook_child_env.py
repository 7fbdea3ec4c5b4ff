"""PyInstaller runtime hook: programs kvpilot starts must not inherit the bundle's library path.

The bootloader points ``LD_LIBRARY_PATH`` at the bundle (saving any earlier value in
``LD_LIBRARY_PATH_ORIG``) so that the frozen process finds its own libraries. Children such as
``vllm serve``, ``nvidia-smi`` or a shell would inherit it and load the bundle's libstdc++,
OpenSSL or zlib instead of their own. The dynamic loader read the path when this process
started, so putting the user's value back now changes nothing here and fixes every child.
"""

import os


def _restore_library_path() -> None:
    original = os.environ.pop("LD_LIBRARY_PATH_ORIG", None)
    if original is None:
        os.environ.pop("LD_LIBRARY_PATH", None)
    else:
        os.environ["LD_LIBRARY_PATH"] = original


_restore_library_path()
