"""Exported programs shared by the ``trtllm`` tests: each model is exported once per test
session (pre-dispatch) and decomposed once (core ATen), then fused once per kind."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
import torch
from torch.export import ExportedProgram

import graphfuse

from . import _models as M

B, S, H, HKV, D = 2, 16, 4, 2, 64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def padding_mask(b: int, s: int, pad: int = 5) -> torch.Tensor:
    """[B, S] with the last sequence left-padded by ``pad`` tokens (fully masked rows)."""
    am = torch.ones(b, s, dtype=torch.long)
    am[-1, :pad] = 0
    return am


def hidden(b: int, s: int, dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    return torch.randn(b, s, 256, generator=_gen(seed)).to(dtype)


def qkv(dtype: torch.dtype, d: int = D, seed: int = 2) -> tuple[torch.Tensor, ...]:
    g = _gen(seed)
    q = torch.randn(B, H, S, d, generator=g).to(dtype)
    k = torch.randn(B, HKV, S, d, generator=g).to(dtype)
    v = torch.randn(B, HKV, S, d, generator=g).to(dtype)
    return q, k, v


@dataclass
class Case:
    """A model, its example inputs and the rewrites the rule set must make."""

    build: Callable[[], torch.nn.Module]
    inputs: Callable[[], tuple]
    counts: dict[str, int]


def _cases(dtype: torch.dtype) -> dict[str, Case]:
    cfg = M.Config(dtype=dtype)
    mha = M.Config(dtype=dtype, kv_heads=4)
    return {
        "llama": Case(
            lambda: M.LlamaLayer(cfg, layers=2),
            lambda: (hidden(B, S, dtype), padding_mask(B, S)),
            {"attention_fp8_out": 2},
        ),
        "bert_sdpa": Case(
            lambda: M.BertSelfAttention(mha),
            lambda: (hidden(B, S, dtype), padding_mask(B, S)),
            {"attention_fp8_out": 1},
        ),
        "bert_eager": Case(
            lambda: M.BertSelfAttention(mha, eager=True),
            lambda: (hidden(B, S, dtype), padding_mask(B, S)),
            {"attention_fp8_out": 1},
        ),
        "gpt2": Case(
            lambda: M.GPT2Attention(mha), lambda: (hidden(B, S, dtype),), {"attention_fp8_out": 1}
        ),
        "decode": Case(
            lambda: M.FP8CacheDecode(cfg, B, 32),
            lambda: (torch.randn(B, H, 1, D, generator=_gen(3)).to(dtype), torch.tensor([5, 32])),
            {"attention_fp8_inputs": 1},
        ),
        "decode_fp8_out": Case(
            lambda: M.FP8CacheDecode(cfg, B, 32, quant_out=True),
            lambda: (torch.randn(B, H, 1, D, generator=_gen(3)).to(dtype), torch.tensor([5, 32])),
            {"attention_fp8_out": 1},
        ),
        "nvfp4": Case(
            lambda: M.NVFP4OutAttention(cfg),
            lambda: (*qkv(dtype), M.causal_bool_mask(padding_mask(B, S))),
            {"attention_nvfp4_out": 1},
        ),
    }


# fp32 models: the original program is docs/numerics.md's wide reference itself. The bf16
# models (the dtype real checkpoints use) are exported for a few tests only.
CASES = _cases(torch.float32)
CASES_BF16 = _cases(torch.bfloat16)


@cache
def exported(name: str, kind: str, bf16: bool = False) -> tuple[torch.nn.Module, ExportedProgram]:
    """(module, program) for case ``name``; ``kind`` is "pre" or "core"."""
    if kind == "core":
        mod, ep = exported(name, "pre", bf16)
        return mod, ep.run_decompositions()
    case = (CASES_BF16 if bf16 else CASES)[name]
    mod = case.build().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return mod, torch.export.export(mod, case.inputs())


@cache
def fused(name: str, kind: str, bf16: bool = False) -> graphfuse.Result:
    return graphfuse.apply(exported(name, kind, bf16)[1], "trtllm")


def flat(out: Any) -> list[torch.Tensor]:
    return torch.utils._pytree.tree_leaves(out)


@pytest.fixture(params=["pre", "core"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param
