"""Random programs with planted attention -> FP8-quant blocks, near misses and distractors.

A program is a list of steps (plain data, drawn by hypothesis) interpreted by
:class:`RandomProgram.forward`, so ``torch.export`` traces exactly the ops the steps name.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

FP8 = torch.float8_e4m3fn
B, S, HID, H, HKV, D = 2, 8, 64, 4, 2, 16
NEAR_MISSES = ("none", "extra_user", "per_channel_scale", "dropout")


@dataclass(frozen=True)
class AttnStep:
    src: int  # pool index feeding q/k/v
    form: str  # "sdpa" | "hand"
    gqa: str  # "repeat_kv" | "interleave" | "enable_gqa"
    mask: str  # "none" | "causal" | "bool" | "additive"
    layout: str  # "bhsd" | "bshd" | "bs(hd)" | "(bs)(hd)"
    quant: str  # "div" | "mul_recip" | "min_max" | "op"
    near_miss: str  # one of NEAR_MISSES

    @property
    def eligible(self) -> bool:
        return self.near_miss == "none"


@dataclass(frozen=True)
class MixStep:
    a: int
    b: int
    op: str  # "add" | "mul" | "sub" | "tanh" | "relu"


def steps_strategy(max_steps: int = 6) -> st.SearchStrategy:
    attn = st.builds(
        AttnStep,
        src=st.integers(0, 50),
        form=st.sampled_from(["sdpa", "hand"]),
        gqa=st.sampled_from(["repeat_kv", "interleave", "enable_gqa"]),
        mask=st.sampled_from(["none", "causal", "bool", "additive"]),
        layout=st.sampled_from(["bhsd", "bshd", "bs(hd)", "(bs)(hd)"]),
        quant=st.sampled_from(["div", "mul_recip", "min_max", "op"]),
        near_miss=st.sampled_from(NEAR_MISSES),
    )
    mix = st.builds(
        MixStep,
        a=st.integers(0, 50),
        b=st.integers(0, 50),
        op=st.sampled_from(["add", "mul", "sub", "tanh", "relu"]),
    )
    return st.lists(st.one_of(attn, mix), min_size=1, max_size=max_steps)


def _heads(x: torch.Tensor, n: int) -> torch.Tensor:
    return x[..., : n * D].reshape(B, S, n, D).transpose(1, 2)


def _repeat_kv(x: torch.Tensor, n: int) -> torch.Tensor:
    b, h, s, d = x.shape
    return x[:, :, None].expand(b, h, n, s, d).reshape(b, h * n, s, d)


def _attention(step: AttnStep, x: torch.Tensor, mask_bool: torch.Tensor) -> torch.Tensor:
    q, k, v = _heads(x, H), _heads(torch.tanh(x), HKV), _heads(torch.sin(x), HKV)
    gqa = step.gqa == "enable_gqa" and step.form == "sdpa"
    if not gqa:
        if step.gqa == "interleave":
            k, v = k.repeat_interleave(H // HKV, dim=1), v.repeat_interleave(H // HKV, dim=1)
        else:
            k, v = _repeat_kv(k, H // HKV), _repeat_kv(v, H // HKV)
    mask = None
    if step.form == "hand" or step.mask == "additive":
        # hand-written softmax over a fully masked row gives NaN (SDPA gives zeros): keep the
        # diagonal so every row has a key
        mask_bool = mask_bool | torch.eye(S, dtype=torch.bool)
    if step.mask == "bool":
        mask = mask_bool
    elif step.mask == "additive":
        mask = torch.zeros(B, 1, S, S).masked_fill(~mask_bool, float("-inf"))
    p_drop = 0.25 if step.near_miss == "dropout" else 0.0
    if step.form == "sdpa":
        return F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            is_causal=step.mask == "causal",
            enable_gqa=gqa,
            dropout_p=p_drop,
        )
    w = q @ k.transpose(-2, -1) * (D**-0.5)
    if step.mask == "causal":
        w = w.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), float("-inf"))
    elif step.mask == "bool":
        w = w.masked_fill(~mask, float("-inf"))
    elif step.mask == "additive":
        w = w + mask
    w = w.softmax(dim=-1)
    if p_drop:
        w = F.dropout(w, p_drop, training=True)
    return w @ v


def _layout(o: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "bhsd":
        return o
    o = o.transpose(1, 2)
    if layout == "bshd":
        return o
    if layout == "bs(hd)":
        return o.reshape(B, S, H * D)
    return o.reshape(B * S, H * D)


def _quant(o: torch.Tensor, scale: torch.Tensor, spelling: str) -> torch.Tensor:
    if spelling == "op":
        return torch.ops.graphfuse.fp8_static_quant(o, scale)
    if spelling == "div":
        y = (o / scale).clamp(-448, 448)
    elif spelling == "mul_recip":
        y = (o * scale.reciprocal()).clamp(min=-448.0, max=448.0)
    else:
        y = (o / scale).clamp_min(-448.0).clamp_max(448.0)
    return y.to(FP8)


def _mix(op: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if op == "add":
        return a + b
    if op == "mul":
        return a * b
    if op == "sub":
        return a - b
    return getattr(torch, op)(a)


class RandomProgram(torch.nn.Module):
    """Interprets a list of steps over a pool of [B, S, HID] float tensors."""

    def __init__(self, steps: list) -> None:
        super().__init__()
        self.steps = steps
        self.register_buffer("scale", torch.tensor(2.0 / 448.0))
        self.register_buffer("channel_scale", torch.full((HID,), 2.0 / 448.0))

    def forward(self, x0: torch.Tensor, x1: torch.Tensor, mask: torch.Tensor):
        pool, quants = [x0, x1], []
        for step in self.steps:
            if isinstance(step, MixStep):
                a, b = pool[step.a % len(pool)], pool[step.b % len(pool)]
                pool.append(_mix(step.op, a, b))
                continue
            o = _attention(step, pool[step.src % len(pool)], mask)
            y = _layout(o, step.layout)
            scale = self.scale
            if step.near_miss == "per_channel_scale":
                y = o.transpose(1, 2).reshape(B, S, H * D)
                scale = self.channel_scale
            spelling = "div" if step.near_miss == "per_channel_scale" else step.quant
            q8 = _quant(y, scale, spelling)
            quants.append(q8)
            back = q8.float().reshape(B, S, H * D) * 0.5
            if step.near_miss == "extra_user":
                back = back + o.transpose(1, 2).reshape(B, S, H * D)
            pool.append(back)
        # every value is an output: an extra user must stay live (DCE would drop it)
        return tuple(quants) + tuple(pool[2:]) + (pool[-1],)


def example_inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x0 = torch.randn(B, S, HID, generator=g)
    x1 = torch.randn(B, S, HID, generator=g)
    mask = torch.ones(B, 1, S, S, dtype=torch.bool).tril()
    mask[0, :, :2] = False  # left padding: fully masked query rows
    mask[0, :, 2:, :2] = False
    return x0, x1, mask


# Three fixed programs (attention spellings, GQA, masks, layouts, scales, extra users,
# dropout) that several tests run.
SAMPLE_STEPS = [
    [
        AttnStep(0, "sdpa", "repeat_kv", "bool", "bs(hd)", "div", "none"),
        MixStep(0, 2, "mul"),
        AttnStep(3, "hand", "interleave", "causal", "bhsd", "min_max", "extra_user"),
    ],
    [
        AttnStep(0, "hand", "repeat_kv", "additive", "bshd", "mul_recip", "none"),
        AttnStep(1, "sdpa", "enable_gqa", "none", "(bs)(hd)", "op", "none"),
        MixStep(1, 2, "add"),
        AttnStep(2, "hand", "interleave", "bool", "bs(hd)", "div", "per_channel_scale"),
    ],
    [
        MixStep(0, 1, "tanh"),
        AttnStep(2, "sdpa", "repeat_kv", "none", "bhsd", "div", "dropout"),
        AttnStep(0, "hand", "repeat_kv", "causal", "bs(hd)", "min_max", "none"),
    ],
]
