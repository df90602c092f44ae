"""RMSNorm / SiLU-and-mul + static quant: graphfuse's fused C++ ops vs the eager unfused graph.

The graphs are transformers' spellings (LlamaRMSNorm, a residual add in front whose sum is
returned, ``silu(gate) * up`` on the halves of a merged [T, 2I] projection) followed by the
static FP8 quant ``(y.float() / s).clamp(-448, 448).to(fp8)`` or ``graphfuse::nvfp4_quant``.
bf16 inputs, hidden 4096, intermediate 14336, T tokens; same process, same inputs,
interleaved, median of repeats; outputs checked against the unfused graph first (docs/numerics
acceptance). Target (docs/serving.md): >= 3x the eager graph at T = 4096.

    python -m benchmarks.norm_act_quant [--tokens 16 256 4096] [--repeats 7]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F

import graphfuse  # noqa: F401
from benchmarks.common import interleaved, print_table, result_path, write_json

OPS = torch.ops.graphfuse
FP8 = torch.float8_e4m3fn
HIDDEN, INTER = 4096, 14336


def eager_fp8(y: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return (y.float() / s).clamp(-448, 448).to(FP8)


def llama_norm(h: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    hf = h.to(torch.float32)
    hf = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
    return w * hf.to(h.dtype)


def cases(t: int) -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    gen = torch.Generator().manual_seed(t)
    x = torch.randn(t, HIDDEN, generator=gen).bfloat16()
    res = torch.randn(t, HIDDEN, generator=gen).bfloat16()
    w = (torch.rand(HIDDEN, generator=gen) + 0.5).bfloat16()
    merged = torch.randn(t, 2 * INTER, generator=gen).bfloat16()
    gate, up = merged.chunk(2, dim=-1)
    s, g = torch.tensor(0.0213), torch.tensor(448 * 6 / 8.0)

    def add_norm_eager():
        h = x + res
        return eager_fp8(llama_norm(h, w), s), h

    def act_eager():
        return eager_fp8(F.silu(gate) * up, s)

    return {
        "rmsnorm+fp8": (
            lambda: OPS.rms_norm_quant_fp8(x, w, 1e-6, s),
            lambda: eager_fp8(llama_norm(x, w), s),
        ),
        "add+rmsnorm+fp8": (lambda: OPS.add_rms_norm_quant_fp8(x, res, w, 1e-6, s), add_norm_eager),
        "rmsnorm+nvfp4": (
            lambda: OPS.rms_norm_quant_nvfp4(x, w, 1e-6, g),
            lambda: OPS.nvfp4_quant(llama_norm(x, w), g),
        ),
        "silu_and_mul+fp8": (lambda: OPS.act_and_mul_quant_fp8(gate, up, s), act_eager),
        "silu_and_mul+nvfp4": (
            lambda: OPS.act_and_mul_quant_nvfp4(gate, up, g),
            lambda: OPS.nvfp4_quant(F.silu(gate) * up, g),
        ),
    }


def _check(fast: Callable[[], object], eager: Callable[[], object]) -> float:
    """Fraction of equal bytes between the fused and the eager outputs (FP8 / packed
    NVFP4), after asserting every returned residual is bit-equal."""
    a, b = fast(), eager()
    a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
    if len(a) == 2 and a[1].dtype == torch.bfloat16:
        assert torch.equal(a[1], b[1]), "the returned residual differs"
    q_a, q_b = a[0].view(torch.uint8), b[0].view(torch.uint8)
    return (q_a == q_b).double().mean().item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[16, 256, 4096])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", default=result_path("norm_act_quant"))
    args = ap.parse_args()
    rows = []
    for t in args.tokens:
        for name, (fast, eager) in cases(t).items():
            equal = _check(fast, eager)
            times = interleaved({"graphfuse": fast, "eager": eager}, args.repeats)
            f, e = times["graphfuse"], times["eager"]
            rows.append(
                {
                    "case": name,
                    "tokens": t,
                    "graphfuse_ms": f,
                    "eager_ms": e,
                    "speedup": e / f,
                    "bytes_equal": equal,
                }  # fmt: skip
            )
    print_table(
        ["case", "T", "graphfuse ms", "eager ms", "speedup", "bytes equal"],
        [
            [
                r["case"],
                r["tokens"],
                r["graphfuse_ms"],
                r["eager_ms"],
                f"{r['speedup']:.1f}x",
                f"{r['bytes_equal']:.4f}",
            ]
            for r in rows
        ],  # fmt: skip
        fmt=".3f",
    )
    big = [r for r in rows if r["tokens"] == max(args.tokens)]
    worst = min(big, key=lambda r: r["speedup"])
    write_json(
        args.json,
        {
            "hidden": HIDDEN,
            "intermediate": INTER,
            "dtype": "bfloat16",
            "threads": torch.get_num_threads(),
            "repeats": args.repeats,
            "rows": rows,
            "min_speedup_at_max_tokens": worst["speedup"],
        },  # fmt: skip
    )
    print(
        f"min speedup over eager at T={max(args.tokens)}: {worst['speedup']:.1f}x "
        f"({worst['case']}; target >= 3x)"
    )


if __name__ == "__main__":
    main()
