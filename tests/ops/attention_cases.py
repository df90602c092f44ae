"""Input builders shared by the fused attention tests: one case = dtypes, shapes, masking,
layout and output format; ``make_inputs`` draws fresh random tensors (never zeros)."""

from __future__ import annotations

import dataclasses
import itertools
import random

import torch

INPUTS = ("bf16", "f16", "f32", "fp8", "fp8kv")  # fp8kv: bf16 q, FP8 k/v
OUTPUTS = ("fp8", "nvfp4", "wide")
RATIOS = (1, 4, 5, 8)
MASKS = ("top_left", "bottom_right", "bool", "additive", "none")
SQ = (1, 7, 128, 1000)
SKV = (1, 33, 2048)
HEAD_DIMS = (64, 128)
LAYOUTS = ("bhsd", "bshd", "bs(hd)", "(bs)(hd)")

_DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


@dataclasses.dataclass(frozen=True)
class Case:
    inputs: str
    output: str
    ratio: int
    mask: str
    sq: int
    skv: int
    d: int
    layout: str
    batch: int = 1
    hkv: int = 1

    def __str__(self) -> str:
        return (
            f"{self.inputs}-{self.output}-g{self.ratio}-{self.mask}-sq{self.sq}-skv{self.skv}"
            f"-d{self.d}-{self.layout}-b{self.batch}-hkv{self.hkv}"
        )


def full_grid() -> list[Case]:
    """The full cross product (run with ``-m slow``)."""
    return [
        Case(*c)
        for c in itertools.product(INPUTS, OUTPUTS, RATIOS, MASKS, SQ, SKV, HEAD_DIMS, LAYOUTS)
    ]


def sample_grid(seed: int, n: int) -> list[Case]:
    """``n`` cases of the grid drawn with ``seed``; large Sq x Skv products are drawn rarely
    so the default run stays fast."""
    rng = random.Random(seed)
    cases: list[Case] = []
    while len(cases) < n:
        c = Case(
            rng.choice(INPUTS),
            rng.choice(OUTPUTS),
            rng.choice(RATIOS),
            rng.choice(MASKS),
            rng.choice(SQ),
            rng.choice(SKV),
            rng.choice(HEAD_DIMS),
            rng.choice(LAYOUTS),
            batch=rng.choice((1, 2)),
            hkv=rng.choice((1, 2)),
        )
        work = c.sq * c.skv * c.ratio * c.hkv * c.batch
        if work > 2_000_000 and rng.random() > 0.15:
            continue
        cases.append(c)
    return cases


def _fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    s = (x.abs().amax() / 448.0 * (0.5 + torch.rand(()))).reshape(1)
    return (x / s).clamp(-448, 448).to(torch.float8_e4m3fn), s


def make_inputs(case: Case, gen: torch.Generator) -> dict:
    """Fresh random q, k, v (+ scales, mask) for ``case`` as the op's keyword arguments."""
    b, hkv, hq = case.batch, case.hkv, case.hkv * case.ratio
    q = torch.randn(b, hq, case.sq, case.d, generator=gen) * 1.5
    k = torch.randn(b, hkv, case.skv, case.d, generator=gen)
    v = torch.randn(b, hkv, case.skv, case.d, generator=gen) * 2
    scales = {"q_scale": None, "k_scale": None, "v_scale": None}
    if case.inputs in _DT:
        q, k, v = (t.to(_DT[case.inputs]) for t in (q, k, v))
    else:
        if case.inputs == "fp8":
            q, scales["q_scale"] = _fp8(q)
        else:
            q = q.to(torch.bfloat16)
        k, scales["k_scale"] = _fp8(k)
        v, scales["v_scale"] = _fp8(v)
    mask, causal = None, "none"
    if case.mask in ("top_left", "bottom_right"):
        causal = case.mask
    elif case.mask == "bool":
        mask = torch.rand(b, 1, case.sq, case.skv, generator=gen) > 0.3
        mask[:, :, :: max(1, case.sq // 3)] = False  # fully masked rows
    elif case.mask == "additive":
        mask = torch.randn(1, hq, case.sq, case.skv, generator=gen)
        mask[..., :: max(1, case.sq // 3), :] = float("-inf")
    return dict(
        q=q,
        k=k,
        v=v,
        **scales,
        attn_mask=mask,
        causal=causal,
        scale=None,
        layout=case.layout,
        precision="default",
    )
