"""The ``graphfuse`` command line (thin over the library; rich output).

Example::

    graphfuse apply model.pt2 -o fused.pt2 --json report.json
"""

from __future__ import annotations

from ._main import main as main
from ._main import run_command as run_command

__all__ = ["main", "run_command"]
