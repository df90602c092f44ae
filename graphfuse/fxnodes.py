"""Facts about ``fx.Node`` every layer reads: which calls only assert metadata."""

from __future__ import annotations

import torch
from torch import fx

_ASSERT_IDS = frozenset(
    id(overload)
    for name in (
        "_assert_tensor_metadata",
        "sym_constrain_range",
        "sym_constrain_range_for_size",
        "_assert_scalar",
    )
    if (packet := getattr(torch.ops.aten, name, None)) is not None
    for overload in [getattr(packet, "default", packet)]
)


def is_metadata_assert(node: fx.Node) -> bool:
    """True for calls that only assert metadata (``aten._assert_tensor_metadata``,
    ``aten.sym_constrain_range*``, ``aten._assert_scalar``): as users they never keep a
    match's intermediate alive, and a rewrite removes them with the nodes they check."""
    return node.op == "call_function" and id(node.target) in _ASSERT_IDS
