"""docs/benchmarks.md section 2, attention rows: the fused graphfuse CPU op vs the unfused graph it
replaces, same process, same inputs, interleaved rounds, median.

    python -m benchmarks.attention_cpu [--rounds 7] [--json benchmarks/results/attention_cpu.json]

Shapes: prefill B=1, Hq=32, Hkv=8, S=1024, D=128, causal (bf16 in); decode B=32, Hq=32,
Hkv=8, Skv=2048, D=128, Sq=1 (FP8 KV in). Outputs are checked against the reference before
timing. The last line printed is the headline ratio.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import graphfuse  # noqa: F401
from benchmarks.common import cpu_name, interleaved, print_table, result_path, write_json
from graphfuse.ops.attention_ref import attention_fp32
from graphfuse.ops.quant_ref import fp8_static_quant_ref
from graphfuse.testing.numerics import assert_fp8_close

OPS = torch.ops.graphfuse


def eager_quant(o: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The unfused graph's quant: [B, H, S, D] -> [B, S, H*D] -> FP8 (x / s, clamp, cast)."""
    b, h, sq, d = o.shape
    x = o.transpose(1, 2).reshape(b, sq, h * d)
    return (x.float() / s).clamp(-448, 448).to(torch.float8_e4m3fn)


def prefill(rounds: int) -> dict[str, float]:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 32, 1024, 128, generator=gen).bfloat16()
    k = torch.randn(1, 8, 1024, 128, generator=gen).bfloat16()
    v = torch.randn(1, 8, 1024, 128, generator=gen).bfloat16()
    args = (q, k, v, None, None, None, None, "top_left", None, "bs(hd)", "default")
    wide = attention_fp32(*args)
    s = torch.tensor(wide.abs().max().item() / 448)
    g = torch.tensor(448 * 6 / wide.abs().max().item())
    assert_fp8_close(OPS.attention_fp8(*args, s), fp8_static_quant_ref(wide, s), wide, s)

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    return interleaved(
        {
            "sdpa": sdpa,
            "sdpa+quant": lambda: eager_quant(sdpa(), s),
            "fused_fp8": lambda: OPS.attention_fp8(*args, s),
            "fused_nvfp4": lambda: OPS.attention_nvfp4(*args, g),
        },
        rounds,
    )


def decode(rounds: int) -> dict[str, float]:
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(32, 32, 1, 128, generator=gen).bfloat16()
    kb = torch.randn(32, 8, 2048, 128, generator=gen).bfloat16()
    vb = torch.randn(32, 8, 2048, 128, generator=gen).bfloat16()
    ks, vs = torch.tensor(4.0 / 448), torch.tensor(4.0 / 448)
    k8, v8 = (kb / ks).to(torch.float8_e4m3fn), (vb / vs).to(torch.float8_e4m3fn)
    args = (q, k8, v8, None, ks, vs, None, "none", None, "bs(hd)", "default")
    wide = attention_fp32(*args)
    s = torch.tensor(wide.abs().max().item() / 448)
    g = torch.tensor(448 * 6 / wide.abs().max().item())
    assert_fp8_close(OPS.attention_fp8(*args, s), fp8_static_quant_ref(wide, s), wide, s)

    def dequant_path():
        k = k8.to(torch.bfloat16) * ks.to(torch.bfloat16)
        v = v8.to(torch.bfloat16) * vs.to(torch.bfloat16)
        return eager_quant(F.scaled_dot_product_attention(q, k, v, enable_gqa=True), s)

    return interleaved(
        {
            "dequant+sdpa+quant": dequant_path,
            "bf16kv_sdpa+quant": lambda: eager_quant(
                F.scaled_dot_product_attention(q, kb, vb, enable_gqa=True), s
            ),
            "fused_fp8": lambda: OPS.attention_fp8(*args, s),
            "fused_nvfp4": lambda: OPS.attention_nvfp4(*args, g),
        },
        rounds,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", default=result_path("attention_cpu"))
    a = ap.parse_args()
    with torch.inference_mode():
        pre, dec = prefill(a.rounds), decode(max(3, a.rounds // 2))
    rows = [
        # (what, fused ms, baseline ms, ratio = baseline / fused, target, ok)
        ("prefill FP8 out vs SDPA+quant", pre["fused_fp8"], pre["sdpa+quant"], ">= 1.5x"),
        ("prefill FP8 out vs SDPA alone", pre["fused_fp8"], pre["sdpa"], ">= 0.91x (<= 1.1x t)"),
        ("prefill NVFP4 out vs FP8 out", pre["fused_nvfp4"], pre["fused_fp8"], ">= 0.91x"),
        ("decode FP8 KV/out vs dequant+SDPA+quant", dec["fused_fp8"],
         dec["dequant+sdpa+quant"], ">= 20x"),
        ("decode FP8 KV/out vs bf16-KV SDPA+quant", dec["fused_fp8"],
         dec["bf16kv_sdpa+quant"], "> 1x"),
        ("decode NVFP4 out vs FP8 out", dec["fused_nvfp4"], dec["fused_fp8"], ">= 0.91x"),
    ]  # fmt: skip
    mins = {">= 1.5x": 1.5, ">= 0.91x (<= 1.1x t)": 1 / 1.1, ">= 0.91x": 1 / 1.1,
            ">= 20x": 20.0, "> 1x": 1.0}  # fmt: skip
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {cpu_name()}")
    print("timings (median ms): prefill " + ", ".join(f"{k} {v:.1f}" for k, v in pre.items()))
    print("                     decode  " + ", ".join(f"{k} {v:.1f}" for k, v in dec.items()))
    out_rows = []
    for what, fused, base, target in rows:
        ratio = base / fused
        out_rows.append(
            dict(
                comparison=what,
                fused_ms=fused,
                baseline_ms=base,
                speedup=ratio,
                target=target,
                met=ratio >= mins[target],
            )
        )
    print_table(
        ["comparison", "fused ms", "base ms", "speedup", "target"],
        [
            [
                r["comparison"],
                r["fused_ms"],
                r["baseline_ms"],
                f"{r['speedup']:.2f}x",
                f"{r['target']} {'ok' if r['met'] else 'MISS'}",
            ]
            for r in out_rows
        ],  # fmt: skip
        fmt=".1f",
    )
    write_json(
        a.json,
        dict(threads=torch.get_num_threads(), prefill_ms=pre, decode_ms=dec, rows=out_rows),
    )
    head = pre["sdpa+quant"] / pre["fused_fp8"]
    print(f"headline: prefill bf16-in FP8-out fused is {head:.2f}x faster than SDPA + quant")


if __name__ == "__main__":
    main()
