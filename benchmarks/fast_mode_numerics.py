"""Fast-mode numerics of the Gluon and the Triton prefill kernels side by side, on
``tests/gpu/test_attention_ws_gpu.py``'s fast-mode cases: FP8-out bytes equal, RMSE ratio
and the worst element of the 16-bit output over the output's amax, first for the e4m3
format floor (exact attention with e4m3 P), then for each kernel. docs/numerics.md's
fast-mode rules: 60%, 1.4x and 0.025, or within 3 points / 5% of the floor's figures where
the floor itself misses them. Needs a CUDA device::

    python -m benchmarks.fast_mode_numerics
"""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn


def _figures(name: str, o8, o16, wide, s_o) -> str:
    from graphfuse.ops.quant_ref import fp8_static_quant_ref
    from tests.gpu._accept import fp8_stats

    st = fp8_stats(o8, fp8_static_quant_ref(wide, s_o), wide, s_o.item())
    worst = (o16.float() - wide).abs().max().item() / wide.abs().max().item()
    return f"{name} eq {st['equal']:.3f} rmse {st['rmse_ratio']:.3f} max {worst:.4f}"


def _line(c: dict) -> str:
    """One case's figures: the floor's, the Gluon kernel's, the Triton kernel's."""
    from graphfuse.ops._attention_args import out_shape
    from graphfuse.ops.attention_ref import attention_fp32
    from graphfuse.ops.quant_ref import fp8_static_quant_ref
    from graphfuse.triton.ops import attention_run as run
    from tests.gpu import test_attention_ws_gpu as cases

    q, k, v, qs, ks, vs = cases.ws_inputs(c)
    args = (q, k, v, qs, ks, vs, None, c["causal"], c["scale"], c["layout"], "fast")
    wide = attention_fp32(*args, compute_dtype=torch.float64).float()
    s_o = torch.tensor([wide.abs().max().item() / 448.0], device="cuda")
    floor = attention_fp32(*args, compute_dtype=torch.float64, fp8_p=True).float()
    line = [_figures("floor", fp8_static_quant_ref(floor, s_o), floor, wide, s_o)]
    shape = out_shape(c["layout"], c["b"], c["hq"], c["sq"], c["d"])
    for name, cfg in (("gluon", {}), ("triton", {"WS": False})):
        o8 = torch.full(shape, 0xFF, dtype=torch.uint8, device="cuda").view(FP8)
        run(*args, o8, 1, s_o, config=cfg)
        o16 = torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda")
        run(*args, o16, 0, config=cfg)
        line.append(_figures(name, o8, o16, wide, s_o))
    return " | ".join(line)


def main() -> int:
    from tests.gpu import test_attention_ws_gpu as cases

    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.fast_mode_numerics: no CUDA device")
    keys = ("b", "hq", "hkv", "sq", "skv", "d", "causal", "mem", "layout")
    for seed in (0, 1):
        for c in cases.ws_cases(6, seed):
            c = dict(c, dtype=FP8)
            print(seed, {x: c[x] for x in keys}, _line(c), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
