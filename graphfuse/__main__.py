"""``python -m graphfuse``: the command line."""

from __future__ import annotations

import sys

from graphfuse.cli import main

if __name__ == "__main__":
    sys.exit(main())
