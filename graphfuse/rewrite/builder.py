"""The builder a rule's ``rewrite`` receives: it adds the replacement's call nodes."""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import fx

from ..errors import RewriteError
from .edits import add_call
from .fake import FakePropagator

# source metadata a new node takes from the match's root
COPIED_META = ("stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn", "custom")


class Builder:
    """Creates the replacement's nodes (passed to a rule's ``rewrite``).

    Example (inside a rewrite)::

        return b.call(torch.ops.graphfuse.fp8_static_quant.default, m["x"], m["s"])
    """

    def __init__(self, graph: fx.Graph, meta_from: fx.Node, fake: FakePropagator) -> None:
        self.graph = graph
        self.created: list[fx.Node] = []
        self._meta_from = meta_from
        self._fake = fake

    def call(self, target: Any, *args: Any, **kwargs: Any) -> fx.Node:
        """Add a call of ``target`` (an ``OpOverload`` or a Python callable) and return it.

        Its ``meta["val"]`` comes from the op's fake impl; source metadata
        (``stack_trace``, ``nn_module_stack``, ``source_fn_stack``) from the match's root.
        """
        if isinstance(target, torch._ops.OpOverloadPacket):
            target = target.default
        foreign: list[fx.Node] = []
        fx.map_arg((args, kwargs), lambda n: foreign.append(n) if n.graph is not self.graph else n)
        if foreign:
            raise RewriteError(
                f"the replacement's argument {foreign[0].name} is a node of another graph"
            )
        node = add_call(self.graph, target, args, kwargs)
        self.created.append(node)
        src = self._meta_from.meta
        for key in COPIED_META:
            if key in src:
                node.meta[key] = src[key]
        val = self._fake(target, node.args, node.kwargs)
        if val is not None:
            node.meta["val"] = val
        return node

    def getitem(self, node: fx.Node, index: int) -> fx.Node:
        """Output ``index`` of a multi-output node."""
        return self.call(operator.getitem, node, index)
