"""Entry script of the frozen executable: the same ``main`` as the ``kvpilot`` console script."""

from __future__ import annotations

import sys

from kvpilot.core.cli import main

if __name__ == "__main__":
    sys.exit(main())
