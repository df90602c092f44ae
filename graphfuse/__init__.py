"""graphfuse: declarative fusion passes for PyTorch graphs."""

from __future__ import annotations

from . import ops as ops  # registers every graphfuse:: op
