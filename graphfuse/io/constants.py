"""The values of a program's constant tensors, for checks that need a number which export
stored as a tensor (compressed-tensors' FP8 clamp bounds are lifted constant tensors, whose
values an exported program keeps in ``ExportedProgram.constants``, not in the graph).

Example::

    with constants_of(ep):                  # graphfuse.apply and explain do this
        constant_value(bound_node)          # tensor(448.)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from torch import fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

_VALUES: ContextVar[Mapping[str, torch.Tensor] | None] = ContextVar(
    "graphfuse_constants", default=None
)


@contextmanager
def constants_of(program: Any) -> Iterator[None]:
    """While active, :func:`constant_value` reads the lifted constant tensors of
    ``program`` (an ``ExportedProgram``; anything else has none) by placeholder name, so
    on its graph and on copies of it (:func:`copy_graph` keeps the names)."""
    values: dict[str, torch.Tensor] = {}
    if isinstance(program, ExportedProgram):
        constants = program.constants
        for spec in program.graph_signature.input_specs:
            if spec.kind == InputKind.CONSTANT_TENSOR and spec.target in constants:
                values[spec.arg.name] = constants[spec.target]
    token = _VALUES.set(values)
    try:
        yield
    finally:
        _VALUES.reset(token)


def constant_value(node: Any) -> torch.Tensor | None:
    """The value of the constant tensor ``node`` stands for, or None (a graph input, a
    computed value, or a constant nobody recorded).

    Looked up in order: the constant the tracer recorded on the fake value (pre-dispatch
    exports keep small constants there), the lifted constants of the program being
    rewritten (:func:`constants_of`), a ``get_attr`` tensor of the graph's module."""
    if not isinstance(node, fx.Node):
        return None
    recorded = getattr(node.meta.get("val"), "constant", None)
    if isinstance(recorded, torch.Tensor):
        return recorded
    value: Any = None
    if node.op == "placeholder":
        value = (_VALUES.get() or {}).get(node.name)
    elif node.op == "get_attr" and node.graph.owning_module is not None:
        value = node.graph.owning_module
        for part in str(node.target).split("."):
            value = getattr(value, part, None)
    if isinstance(value, torch.Tensor) and not isinstance(value, torch._subclasses.FakeTensor):
        return value
    return None
