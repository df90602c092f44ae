"""Where the Gluon prefill kernel's fast mode spends its time (B=4 S=4096 causal, 32/8 heads,
D=128, FP8 q/k/v, FP8 out): the V^T tile copy alone, the kernel with the copy made
beforehand, the whole call, beside the Triton kernel's fast mode and both default precisions
(``do_bench`` medians, one process; needs a CUDA device)::

    python -m benchmarks.fast_mode_split
"""

from __future__ import annotations

from collections.abc import Callable

import torch

FP8 = torch.float8_e4m3fn


def main() -> int:
    from triton.testing import do_bench

    from graphfuse.triton.ops import attention_run as run
    from graphfuse.triton.prefill import launch

    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.fast_mode_split: no CUDA device")
    torch.manual_seed(0)
    b, hq, hkv, s, d = 4, 32, 8, 4096, 128
    q, k, v = (torch.randn(b, h, s, d, device="cuda").to(FP8) for h in (hq, hkv, hkv))
    one = torch.ones(1, device="cuda")
    o8 = torch.empty(q.shape, dtype=FP8, device="cuda")
    so = torch.tensor([0.01], device="cuda")

    def ms(fn: Callable[[], object]) -> float:
        return do_bench(fn, warmup=10, rep=60, return_mode="median")

    def call(prec: str, cfg: dict) -> Callable[[], None]:
        args = (q, k, v, one, one, one, None, "top_left", None, "bhsd", prec, o8, 1, so)
        return lambda: run(*args, config=cfg)

    res = {
        "fast_v_tiles": ms(lambda: launch.fast_v_tiles(v)),
        "k_major": ms(lambda: launch.k_major(v)),
        "copy_same_bytes": ms(lambda: v.clone()),
    }
    for prec in ("default", "fast"):
        res[f"{prec}_gluon"] = ms(call(prec, {}))
        res[f"{prec}_triton"] = ms(call(prec, {"WS": False}))
    tiles, real = launch.fast_v_tiles(v), launch.fast_v_tiles
    launch.fast_v_tiles = lambda _v: tiles  # the kernel alone: V^T tiles made beforehand
    try:
        res["fast_gluon_kernel_only"] = ms(call("fast", {}))
    finally:
        launch.fast_v_tiles = real
    for name, t in res.items():
        print(f"{name:28s} {t * 1e3:8.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
