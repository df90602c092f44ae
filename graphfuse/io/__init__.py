"""Programs in and out: checked ``.pt2`` loading (nothing runs from the file unless
trusted), atomic saving, and the in-memory copy a rewrite works on.

Example::

    from graphfuse.io import load_program, save_program
    save_program(graphfuse.apply(load_program("model.pt2")).program, "fused.pt2")
"""

from __future__ import annotations

from .constants import constant_value as constant_value
from .constants import constants_of as constants_of
from .program import copy_graph as copy_graph
from .program import finish_program as finish_program
from .program import graph_module_of as graph_module_of
from .pt2 import load_program as load_program
from .pt2 import save_program as save_program

__all__ = [
    "constant_value",
    "constants_of",
    "copy_graph",
    "finish_program",
    "graph_module_of",
    "load_program",
    "save_program",
]
