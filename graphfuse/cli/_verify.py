"""``apply --verify``: run the input and the rewritten program on the same random inputs."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from ._common import CliError

TOLERANCE = 0.05
_FP8 = {
    d
    for d in (getattr(torch, n, None) for n in dir(torch) if n.startswith("float8_"))
    if isinstance(d, torch.dtype)
}


def _random_like(t: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Fresh values shaped like ``t``: randn for floats (fp8 by casting), ints in ``t``'s
    range, bools kept (masks are structure, not data)."""
    if t.dtype in _FP8:
        return torch.randn(t.shape, generator=g).clamp(-448, 448).to(t.dtype)
    if t.dtype.is_floating_point or t.dtype.is_complex:
        x = torch.randn(t.shape, generator=g, dtype=torch.float32)
        x = torch.where(x == 0, torch.full_like(x, 0.5), x)  # never zero
        return x.to(t.dtype)
    if t.dtype == torch.bool:
        return t.clone()
    lo, hi = (int(t.min()), int(t.max())) if t.numel() else (0, 0)
    return torch.randint(lo, hi + 1, t.shape, generator=g, dtype=t.dtype)


def _placeholder_like(val: Any, name: str) -> torch.Tensor:
    if not all(isinstance(d, int) for d in val.shape):
        raise CliError(
            f"--verify: input {name} has a symbolic shape and the program has no sample inputs"
        )
    if val.dtype.is_floating_point:
        return torch.ones(val.shape, dtype=val.dtype)
    if val.dtype == torch.bool:
        return torch.ones(val.shape, dtype=torch.bool)
    return (
        torch.arange(16, dtype=val.dtype)
        .repeat(val.numel() // 16 + 1)[: val.numel()]
        .view(val.shape)
    )


def random_inputs(ep: torch.export.ExportedProgram, seed: int = 0) -> tuple[tuple, dict]:
    """Random (args, kwargs) matching the program's inputs (from its sample inputs)."""
    g = torch.Generator().manual_seed(seed)
    if ep.example_inputs is not None:
        args, kwargs = ep.example_inputs
    else:
        nodes = {n.name: n for n in ep.graph.nodes}
        args = tuple(
            _placeholder_like(nodes[s.arg.name].meta["val"], s.arg.name)
            for s in ep.graph_signature.input_specs
            if s.kind.name == "USER_INPUT"
        )
        kwargs = {}
    return pytree.tree_map(
        lambda t: _random_like(t, g) if isinstance(t, torch.Tensor) else t, (tuple(args), kwargs)
    )


def _compare(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    if a.shape != b.shape:
        return float("inf"), float("inf")
    a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)
    both_nan = a.isnan() & b.isnan()
    a, b = a.masked_fill(both_nan, 0.0), b.masked_fill(both_nan, 0.0)
    if a.isnan().any() or b.isnan().any():
        return float("inf"), float("inf")
    d = (a - b).abs()
    rel = (d.norm() / a.norm().clamp_min(1e-30)).item() if d.numel() else 0.0
    return rel, d.max().item() if d.numel() else 0.0


def verify(
    before: torch.export.ExportedProgram, after: torch.export.ExportedProgram, seed: int = 0
) -> tuple[list[dict[str, Any]], bool]:
    """Run both programs on one set of random inputs; per output leaf, the errors.

    Returns:
        (rows, ok): rows with ``output``, ``shape``, ``rel_l2``, ``max_abs``; ok when every
        relative L2 error is at most :data:`TOLERANCE`.
    """
    args, kwargs = random_inputs(before, seed)
    with torch.no_grad():
        ref = pytree.tree_leaves(before.module()(*args, **kwargs))
        out = pytree.tree_leaves(after.module()(*args, **kwargs))
    if len(ref) != len(out):
        raise CliError(f"--verify: the programs return {len(ref)} and {len(out)} values")
    rows, ok = [], True
    for i, (r, o) in enumerate(zip(ref, out)):
        if not isinstance(r, torch.Tensor):
            continue
        rel, max_abs = _compare(r, o)
        ok = ok and rel <= TOLERANCE
        shape = "[" + ", ".join(str(d) for d in r.shape) + "]"
        rows.append({"output": str(i), "shape": shape, "rel_l2": rel, "max_abs": max_abs})
    return rows, ok
