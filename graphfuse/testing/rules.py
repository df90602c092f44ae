"""Testing rules in one call: export, apply, lint, count, compare on fresh inputs.

Example::

    from graphfuse.testing import check_rules

    result = check_rules(MyAttention(), (q, k, v, s), "trtllm",
                         expect={"attention_fp8_out": 1}, decompose=True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from ..api import Result, apply
from ..rules import RuleSet
from .numerics import e4m3_ordinal

FP8 = torch.float8_e4m3fn


def fresh_like(value: Any, generator: torch.Generator) -> Any:
    """A new random value like ``value``: normal floats (never zeros), FP8 from normal
    values, bools and ints copied (masks, lengths and indices keep their meaning)."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.dtype == FP8:
        return torch.randn(value.shape, generator=generator).to(FP8)
    if value.is_floating_point():
        if value.numel() == 1:  # a scale: keep it (a random one could be negative)
            return value.clone()
        return torch.randn(value.shape, generator=generator).to(value.dtype)
    return value.clone()


def _nibble_ordinals(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    def ordinal(n: torch.Tensor) -> torch.Tensor:
        mag = (n & 7).to(torch.int16)
        return torch.where((n & 8) != 0, -mag, mag)

    return ordinal(b & 0xF), ordinal(b >> 4)


def assert_outputs_close(
    out: Any, ref: Any, *, rtol: float = 2e-2, atol: float = 2e-2, min_equal: float = 0.99
) -> None:
    """Compare two programs' outputs with the docs/numerics.md-style tolerances:
    FP8 bytes within one e4m3 step and ``min_equal`` of them equal; uint8 (packed NVFP4)
    nibbles within one e2m1 step, ``min_equal`` equal; floats by ``rtol`` / ``atol``;
    everything else exactly."""
    outs, _ = tree_flatten(out)
    refs, _ = tree_flatten(ref)
    assert len(outs) == len(refs), f"{len(outs)} outputs, expected {len(refs)}"
    for i, (o, r) in enumerate(zip(outs, refs)):
        if not isinstance(r, torch.Tensor):
            assert o == r, f"output {i}: {o!r} != {r!r}"
            continue
        assert o.shape == r.shape and o.dtype == r.dtype, (
            f"output {i}: {o.dtype}{list(o.shape)} vs {r.dtype}{list(r.shape)}"
        )
        if r.dtype == FP8:
            ob, rb = o.view(torch.uint8), r.view(torch.uint8)
            far = (e4m3_ordinal(ob) - e4m3_ordinal(rb)).abs() > 1
            assert not far.any(), f"output {i}: {int(far.sum())} FP8 bytes off by > 1 step"
            eq = (ob == rb).double().mean().item() if r.numel() else 1.0
            assert eq >= min_equal, f"output {i}: only {eq:.2%} of FP8 bytes equal"
        elif r.dtype == torch.uint8:
            for a, b in zip(_nibble_ordinals(o), _nibble_ordinals(r)):
                assert ((a - b).abs() <= 1).all(), f"output {i}: e2m1 codes off by > 1 step"
            eq = (o == r).double().mean().item() if r.numel() else 1.0
            assert eq >= min_equal, f"output {i}: only {eq:.2%} of packed bytes equal"
        elif r.is_floating_point():
            torch.testing.assert_close(o.float(), r.float(), rtol=rtol, atol=atol)
        else:
            assert torch.equal(o, r), f"output {i} differs"


def check_rules(
    module: torch.nn.Module,
    example_inputs: Sequence[Any],
    rules: str | RuleSet = "trtllm",
    *,
    expect: dict[str, int] | None = None,
    decompose: bool = False,
    dynamic_shapes: Any = None,
    make_inputs: Callable[[int], Sequence[Any]] | None = None,
    seeds: Sequence[int] = (1, 2),
    rtol: float = 2e-2,
    atol: float = 2e-2,
    min_equal: float = 0.99,
) -> Result:
    """Export ``module``, apply ``rules``, lint, check the rewrite counts and compare the
    fused program with the original on fresh random inputs.

    Args:
        expect: rule name -> expected rewrites (rules not named must not fire; None skips).
        decompose: also run ``run_decompositions()`` before applying (core ATen IR).
        dynamic_shapes: passed to ``torch.export.export``.
        make_inputs: ``seed -> inputs`` for the comparison (default: random like
            ``example_inputs``, see :func:`fresh_like`).
        rtol, atol, min_equal: tolerances of :func:`assert_outputs_close`.

    Returns:
        The :class:`~graphfuse.Result` of the apply.
    """
    ep = torch.export.export(module, tuple(example_inputs), dynamic_shapes=dynamic_shapes)
    if decompose:
        ep = ep.run_decompositions()
    before = ep.graph_module.code
    result = apply(ep, rules)
    assert ep.graph_module.code == before, "apply mutated its input program"
    result.program.graph_module.graph.lint()
    if expect is not None:
        fired = {k: v for k, v in result.report.counts.items() if v}
        want = {k: v for k, v in expect.items() if v}
        assert fired == want, f"rewrites {fired}, expected {want}; {result.report.near_misses}"
    for seed in seeds:
        if make_inputs is not None:
            args = tuple(make_inputs(seed))
        else:
            g = torch.Generator().manual_seed(seed)
            args = tuple(fresh_like(a, g) for a in example_inputs)
        with torch.no_grad():
            ref = ep.module()(*args)
            out = result.program.module()(*args)
        assert_outputs_close(out, ref, rtol=rtol, atol=atol, min_equal=min_equal)
    return result
