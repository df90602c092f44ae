"""What a lazy running max costs in accuracy: a float64 CPU model of the Gluon prefill kernel's
online softmax (docs/gpu.md, "Conditional rescale for 16-bit P").

    python -m benchmarks.lazy_max_numerics [--json PATH]

The model runs the key tiles of 128 in order, as the kernel does: a row's running max moves
when a tile's max exceeds it by more than ``threshold`` (log2; 0 is the exact max), P is
rounded to fp16 (the default precision's P with an FP8 V upcast to fp16) for ``P·V``, the row
sum and the accumulator stay wide. The row sum adds up either P before that rounding (``p_sum``
"fp32": the kernel's ``FADD``s) or the rounded P that ``P·V`` multiplies ("rounded": a row
sum by the tensor cores, docs/gpu.md "The row sums by the tensor cores"). Against exact
attention (float64, no rounding) it reports the RMSE over the exact-max model's with the same
row sum, the share of 16-row warp-tiles whose rescale factors are all 1
(the ones ``_rescaled`` skips; tile 0 not counted), and the share of FP8 bytes (per-tensor
scale from the exact output's amax) and bf16 values equal to exact attention's. Scores are
``q k^T / sqrt(D)`` with unit-normal k and v and q of standard deviation ``score_scale``
(256 queries, 4096 keys, D = 128, seeded).
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import print_table, result_path, write_json

LOG2E = 1.4426950408889634
TILE = 128
WARP_ROWS = 16


def online_softmax(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, threshold: float, rounded_sum: bool
) -> tuple[torch.Tensor, float]:
    """Attention of float64 ``q`` / ``k`` / ``v`` by tiles with P rounded to fp16 and a running
    max that moves only when a tile's max exceeds it by more than ``threshold`` (0: exact
    max); the row sum of the rounded P (``rounded_sum``) or of P in fp32. Returns the output
    and the share of warp-tiles whose factors were all 1."""
    scores = q @ k.T * (LOG2E / q.shape[1] ** 0.5)
    m = torch.full((q.shape[0],), float("-inf"), dtype=torch.float64)
    row_sum = torch.zeros(q.shape[0], dtype=torch.float64)
    acc = torch.zeros(q.shape[0], v.shape[1], dtype=torch.float64)
    skipped = counted = 0
    for j in range(0, k.shape[0], TILE):
        s = scores[:, j : j + TILE]
        m_tile = s.max(1).values
        m_new = torch.where(m_tile > m + threshold, m_tile, m) if threshold else m.maximum(m_tile)
        alpha = torch.exp2(m - m_new)
        if j:
            moved = (alpha != 1).view(-1, WARP_ROWS).any(1)
            skipped += int((~moved).sum())
            counted += moved.numel()
        p32 = torch.exp2(s - m_new[:, None]).float()
        p = p32.to(torch.float16).double()
        row_sum = row_sum * alpha + (p if rounded_sum else p32.double()).sum(1)
        acc = acc * alpha[:, None] + p @ v[j : j + TILE]
        m = m_new
    return acc / row_sum[:, None], skipped / max(counted, 1)


def _fp8(o: torch.Tensor, s_o: torch.Tensor) -> torch.Tensor:
    return (o / s_o).float().to(torch.float8_e4m3fn).view(torch.uint8)


def run(thresholds=(0.0, 1.0, 2.0, 8.0), score_scales=(1.0, 4.0), seed: int = 0) -> list[dict]:
    """One record per (score scale, row sum, threshold)."""
    gen = torch.Generator().manual_seed(seed)
    records = []
    for score_scale in score_scales:
        q = torch.randn(256, 128, dtype=torch.float64, generator=gen) * score_scale
        k = torch.randn(4096, 128, dtype=torch.float64, generator=gen)
        v = torch.randn(4096, 128, dtype=torch.float64, generator=gen)
        exact = torch.softmax(q @ k.T / 128**0.5, -1) @ v
        s_o = exact.abs().max() / 448
        for p_sum in ("fp32", "rounded"):
            base = None
            for threshold in thresholds:
                out, skipped = online_softmax(q, k, v, threshold, p_sum == "rounded")
                rmse = float((out - exact).pow(2).mean().sqrt())
                base = base if base is not None else rmse
                records.append({
                    "score_scale": score_scale, "p_sum": p_sum, "threshold": threshold,
                    "rmse": rmse, "rmse_over_exact_max": rmse / base,
                    "warp_tiles_skipped": skipped,
                    "fp8_equal": float((_fp8(out, s_o) == _fp8(exact, s_o)).double().mean()),
                    "bf16_equal": float((out.bfloat16() == exact.bfloat16()).double().mean()),
                })  # fmt: skip
    return records


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=result_path("lazy_max_numerics"))
    args = ap.parse_args(argv)
    records = run()
    keys = ("score_scale", "p_sum", "threshold", "rmse", "rmse_over_exact_max",
            "warp_tiles_skipped", "fp8_equal", "bf16_equal")  # fmt: skip
    rows = [[r[k] for k in keys] for r in records]
    print_table(
        ["score std", "row sum of P", "threshold", "RMSE", "RMSE / exact max's",
         "warp-tiles skipped", "FP8 equal", "bf16 equal"], rows, ".4g",
    )  # fmt: skip
    write_json(args.json, {"records": records})


if __name__ == "__main__":
    main()
