"""FlashInfer, the fastest public peer, beside graphfuse's GPU rows (``benchmarks/attention_gpu``).

Used only where ``import flashinfer`` works (it is not a graphfuse dependency). Each builder
returns ``(call, out)``: a zero-argument callable that writes the bf16 ``out`` it allocated
once, so it can be captured in a CUDA graph; the FlashInfer wrapper objects stay alive with the
callable's closure (a freed wrapper's buffers would be reused under a replaying graph). FlashInfer
compiles its kernels on first use (minutes each for FA3); ``warm`` builds them beforehand, in
parallel processes:

    python -m benchmarks.flashinfer_peer warm [NAME ...]     # names: see KERNELS

The kernels: XQA (FlashInfer's fastest FP8-KV decode), the tensor-core paged decode (bf16 or
FP8 KV, the GQA group as the MMA's M dimension) and the FA3 ragged prefill (bf16 or FP8 q/k/v).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

import torch

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16
WORKSPACE_BYTES = 128 * 1024 * 1024
Peer = tuple[Callable[[], object], torch.Tensor]  # (call, the bf16 output it writes)
KERNELS = ("decode_xqa", "decode_tc_fp8", "decode_tc_bf16", "prefill_fa3_bf16", "prefill_fa3_fp8")


def version() -> str | None:
    """FlashInfer's version, or None where it cannot be imported."""
    try:
        import flashinfer
    except Exception:  # noqa: BLE001 (any import failure means: no peer columns)
        return None
    return flashinfer.__version__


def _workspace(device: torch.device) -> torch.Tensor:
    return torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)  # XQA wants zeros


def decode_xqa(q, cache, tables, lens, k_scale: float, v_scale: float) -> Peer:
    """XQA decode over an FP8 paged cache ``[blocks, 2, page, Hkv, D]`` (NHD), bf16 out.
    ``q`` is ``[B, Hq, D]`` bf16; ``tables`` ``[B, pages]`` int32; ``lens`` ``[B]`` int32."""
    from flashinfer.decode import xqa_batch_decode_with_kv_cache

    out = torch.empty(q.shape, device=q.device, dtype=BF16)
    ws = _workspace(q.device)
    lens_u32 = lens.view(torch.uint32)
    max_len = int(lens.max())
    sm_scale = q.shape[-1] ** -0.5

    def run():
        return xqa_batch_decode_with_kv_cache(
            q, cache, ws, tables, lens_u32, max_len,
            bmm1_scale=sm_scale * k_scale, bmm2_scale=v_scale, out=out,
        )  # fmt: skip

    return run, out


def decode_paged(q, cache, tables, lens, k_scale: float | None, v_scale: float | None) -> Peer:
    """FlashInfer's tensor-core paged decode (bf16 or FP8 cache, NHD), bf16 out. Every page of
    ``tables`` is full (the benchmark's contexts are page multiples)."""
    import flashinfer

    b, pages = tables.shape
    page, hkv, d = cache.shape[2:]
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        _workspace(q.device), "NHD", use_tensor_cores=True
    )
    indptr = torch.arange(b + 1, device=q.device, dtype=torch.int32) * pages
    last = torch.full((b,), page, device=q.device, dtype=torch.int32)
    w.plan(
        indptr, tables.flatten().contiguous(), last, q.shape[1], hkv, d, page,
        q_data_type=BF16, kv_data_type=cache.dtype, o_data_type=BF16,
    )  # fmt: skip
    out = torch.empty(q.shape, device=q.device, dtype=BF16)
    scales = {} if k_scale is None else {"k_scale": k_scale, "v_scale": v_scale}

    def run():
        return w.run(q, cache, out=out, **scales)

    return run, out


def prefill_fa3(q, k, v, scale: float | None) -> Peer:
    """FA3 causal prefill (ragged batch, every sequence the same length), bf16 out.

    ``q`` ``[B, Hq, S, D]``, ``k``/``v`` ``[B, Hkv, S, D]``, bf16 or FP8 with one dequant
    ``scale`` for all three; the token-major copies FlashInfer reads are made here, once.
    the output is ``[B*S, Hq, D]``."""
    import flashinfer

    b, hq, s, d = q.shape

    def nhd(x):
        return x.transpose(1, 2).reshape(b * s, x.shape[1], d).contiguous()

    qn, kn, vn = nhd(q), nhd(k), nhd(v)
    w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(_workspace(q.device), "NHD", backend="fa3")
    indptr = torch.arange(b + 1, device=q.device, dtype=torch.int32) * s
    w.plan(
        indptr, indptr, hq, k.shape[1], d, causal=True,
        q_data_type=q.dtype, kv_data_type=k.dtype, o_data_type=BF16,
    )  # fmt: skip
    out = torch.empty((b * s, hq, d), device=q.device, dtype=BF16)
    if scale is None:

        def run():
            return w.run(qn, kn, vn, out=out)

    else:

        def run():
            return w.run(qn, kn, vn, scale, scale, scale, out=out)  # FA3 FP8: positional scales

    return run, out


def _small(name: str) -> Peer:
    """One kernel of KERNELS on a small problem of the benchmark's head shape (Llama-3-8B:
    32 / 8 heads, D=128, page 16): the JIT modules depend on dtypes and head sizes only."""
    dev = torch.device("cuda")
    if name.startswith("prefill"):
        q, k, v = (torch.randn(1, h, 256, 128, device=dev) for h in (32, 8, 8))
        if name.endswith("fp8"):
            return prefill_fa3(*(x.to(FP8) for x in (q, k, v)), 1.0)
        return prefill_fa3(*(x.to(BF16) for x in (q, k, v)), None)
    q = torch.randn(2, 32, 128, device=dev).to(BF16)
    cache = torch.randn(16, 2, 16, 8, 128, device=dev)
    tables = torch.arange(16, device=dev, dtype=torch.int32).view(2, 8)
    lens = torch.full((2,), 128, device=dev, dtype=torch.int32)
    if name == "decode_xqa":
        return decode_xqa(q, cache.to(FP8), tables, lens, 1.0, 1.0)
    if name == "decode_tc_fp8":
        return decode_paged(q, cache.to(FP8), tables, lens, 1.0, 1.0)
    return decode_paged(q, cache.to(BF16), tables, lens, None, None)


def warm(names: list[str]) -> int:
    """JIT-build the named kernels, one process each, in parallel; prints one line per kernel."""
    unknown = sorted(set(names) - set(KERNELS))
    if unknown:
        raise SystemExit(f"flashinfer_peer: unknown kernel(s) {unknown}; known: {KERNELS}")
    cpus = os.cpu_count() or 2
    t0 = time.time()
    procs = {}
    for n in names:  # FA3's builds are the long ones: they get the most compile jobs
        jobs = max(1, cpus // (2 if n.startswith("prefill") else 5))
        procs[n] = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.flashinfer_peer", "_one", n],
            env={**os.environ, "MAX_JOBS": str(jobs)},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    failed = 0
    for n, p in procs.items():
        out, _ = p.communicate()
        ok = p.returncode == 0
        failed += not ok
        tail = "" if ok else " :: " + " | ".join(out.strip().splitlines()[-3:])[-600:]
        print(f"flashinfer {n}: {'built' if ok else 'FAILED'} at {time.time() - t0:.0f} s{tail}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("warm", "_one"):
        raise SystemExit("usage: python -m benchmarks.flashinfer_peer warm [NAME ...]")
    if version() is None:
        raise SystemExit("flashinfer_peer: flashinfer cannot be imported here")
    if args[0] == "_one":
        run, out = _small(args[1])
        run()
        torch.cuda.synchronize()
        assert torch.isfinite(out.float()).all(), f"{args[1]}: non-finite output"
        return 0
    return warm(args[1:] or list(KERNELS))


if __name__ == "__main__":
    raise SystemExit(main())
