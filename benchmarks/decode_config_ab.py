"""The paged decode kernel's shipped configuration against alternative knob sets, per shape, on
CUDA, in one process, with FlashInfer's XQA beside it where it imports.

    python -m benchmarks.decode_config_ab                      # the open questions below
    python -m benchmarks.decode_config_ab --shape 64,32,8,4096 \\
        --config 'wide={"block_n": 128, "num_warps": 4, "splits": 1}' [--no-peer] [--json PATH]

A shape is ``B,HQ,HKV,CTX`` (D = 128, FP8 paged KV in pages of 16, full contexts, bf16 q,
FP8 out); a ``--config`` is ``NAME=JSON`` of ``decode.config.KNOBS`` overrides, applied to
every ``--shape``. Without ``--shape`` the built-in cases run: the FP8 long-context rows (the
64-token two-warp row against the 128-token four-warp row it replaced, from B=32 to B=256)
and B=128 ctx 1024 (the one-warp row against forced splits, 16-token tiles and two warps: by
the sm_90 compile the row's programs fit 10 an SM, 16-token tiles 15, two warps 7). Each
variant is a CUDA graph of back-to-back calls over inputs rotated past L2, timed in
interleaved rounds (medians, ``attention_gpu.interleaved``); each row also gives the
variants' KV bandwidth, their speed against XQA (above 1: graphfuse is faster) and the
fraction of their output bytes equal to the shipped configuration's. A variant that does not
compile is reported and left out.
"""

from __future__ import annotations

import argparse
import json
import math

import torch

from benchmarks import flashinfer_peer as peer
from benchmarks.attention_gpu import DEV, FP8, L2_ROTATE_BYTES, _paged_set, interleaved
from benchmarks.common import GraphTimer, print_table, result_path, write_json
from graphfuse.ops.paged_ref import paged_decode_fp32
from graphfuse.triton.decode.config import KNOBS, decode_config

D = 128
# the row the FP8 long-context row replaced, and the row itself (decode/config.CLASSES)
ROW_128 = dict(zip(KNOBS, (128, 4, 3, 1, False, True, True, False)))
ROW_64 = dict(zip(KNOBS, (64, 2, 3, 1, False, True, True, False)))
LONG = {"tiles128_warps4": ROW_128, "tiles64_warps2": ROW_64}
CASES: tuple[tuple[tuple[int, int, int, int], dict], ...] = (
    ((64, 32, 8, 4096), LONG),
    ((128, 40, 8, 1024), {
        "splits2": {"splits": 2}, "splits4": {"splits": 4}, "warps2": {"num_warps": 2},
        "tiles16": {"block_n": 16}, "tiles16_splits2": {"block_n": 16, "splits": 2},
        "tiles16_splits4": {"block_n": 16, "splits": 4},
    }),
    ((64, 32, 8, 2048), LONG),
    ((128, 32, 8, 4096), LONG),
    ((256, 32, 8, 2048), LONG),
    ((32, 32, 8, 4096), LONG),
)  # fmt: skip


def parse_config(text: str) -> tuple[str, dict]:
    """``NAME=JSON`` -> (name, knob overrides); unknown knobs raise SystemExit.

    Example:
        >>> parse_config('wide={"block_n": 128}')
        ('wide', {'block_n': 128})
    """
    name, sep, body = text.partition("=")
    if not sep or not name:
        raise SystemExit(f"decode_config_ab: --config wants NAME=JSON, got {text!r}")
    try:
        knobs = json.loads(body)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"decode_config_ab: --config {name}: {exc}") from None
    if not isinstance(knobs, dict) or set(knobs) - set(KNOBS):
        raise SystemExit(f"decode_config_ab: --config {name}: a JSON object of {KNOBS}")
    return name, knobs


def parse_shape(text: str) -> tuple[int, int, int, int]:
    """``B,HQ,HKV,CTX`` -> a tuple (CTX a multiple of the page, 16).

    Example:
        >>> parse_shape("64,32,8,4096")
        (64, 32, 8, 4096)
    """
    try:
        b, hq, hkv, ctx = (int(v) for v in text.split(","))
    except ValueError:
        raise SystemExit(f"decode_config_ab: --shape wants B,HQ,HKV,CTX, got {text!r}") from None
    if min(b, hq, hkv, ctx) < 1 or hq % hkv or ctx % 16:
        raise SystemExit(f"decode_config_ab: --shape {text}: HKV divides HQ, CTX a multiple of 16")
    return b, hq, hkv, ctx


def shape_row(shape: tuple[int, int, int, int], alts: dict, with_peer: bool) -> dict:
    """Times the shipped configuration, each alternative and XQA on one shape."""
    from graphfuse.triton.decode.paged import paged_into

    b, hq, hkv, ctx = shape
    kv_bytes = 2 * b * hkv * ctx * D
    sets = [
        _paged_set(b, hq, hkv, ctx, D, FP8, i)
        for i in range(max(1, min(16, math.ceil(L2_ROTATE_BYTES / kv_bytes))))
    ]
    q, cache, tables, lens, ks, vs = sets[0]
    wide = paged_decode_fp32(q, cache, tables, lens, None, ks, vs, None)
    s_o = torch.tensor([wide.abs().max().item() / 448], device=DEV)
    out = torch.empty((b, hq, D), device=DEV, dtype=FP8)

    def calls(cfg: dict) -> list:
        return [
            (lambda st=st: paged_into(*st[:4], None, st[4], st[5], None, out, 1, s_o, config=cfg))
            for st in sets
        ]

    def output_bytes(cfg: dict) -> torch.Tensor:
        out.view(torch.uint8).fill_(0xFF)
        calls(cfg)[0]()
        return out.view(torch.uint8).clone()

    shipped = output_bytes({})
    timers, equal = {}, {}
    for name, cfg in {"shipped": {}, **alts}.items():
        try:
            equal[name] = (output_bytes(cfg) == shipped).double().mean().item()
            timers[name] = GraphTimer(calls(cfg))
        except Exception as exc:  # a variant that does not compile is reported, not fatal
            print(f"decode_config_ab {shape} {name} failed: {exc!r}"[:300], flush=True)
    if with_peer:
        try:
            built = [peer.decode_xqa(*st[:4], st[4].item(), st[5].item()) for st in sets]
            timers["xqa"] = GraphTimer([c for c, _ in built])
        except Exception as exc:
            print(f"decode_config_ab {shape} xqa failed: {exc!r}"[:300], flush=True)
    ms = interleaved(timers)
    row = {
        "shape": {"B": b, "HQ": hq, "HKV": hkv, "CTX": ctx, "D": D},
        "shipped_config": decode_config(True, b, hkv, ctx),
        "alternatives": alts,
        "ms": ms,
        "kv_TBps": {k: kv_bytes / (t * 1e-3) / 1e12 for k, t in ms.items()},
        "bytes_equal_to_shipped": equal,
    }
    if "xqa" in ms:
        row["vs_xqa"] = {k: ms["xqa"] / t for k, t in ms.items() if k != "xqa"}
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", action="append", type=parse_shape, default=None)
    ap.add_argument("--config", action="append", type=parse_config, default=None)
    ap.add_argument("--no-peer", action="store_true", help="leave out FlashInfer's XQA")
    ap.add_argument("--json", default=result_path("decode_config_ab"))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.decode_config_ab: no CUDA device")
    if args.shape:
        cases = [(s, dict(args.config or ())) for s in args.shape]
    elif args.config:
        cases = [(s, dict(args.config)) for s, _ in CASES]
    else:
        cases = list(CASES)
    with_peer = not args.no_peer and peer.version() is not None
    rows: list[dict] = []
    result = {"flashinfer": peer.version() if with_peer else None, "rows": rows}
    table = []
    for shape, alts in cases:
        torch.manual_seed(0)
        r = shape_row(shape, alts, with_peer)
        rows.append(r)
        write_json(args.json, result, gpu=True)
        for name, t in r["ms"].items():
            table.append([
                ",".join(map(str, shape)), name, f"{t * 1e3:.1f}", f"{r['kv_TBps'][name]:.2f}",
                f"{r['vs_xqa'][name]:.3f}" if name in r.get("vs_xqa", {}) else "-",
                f"{r['bytes_equal_to_shipped'][name]:.4f}" if name != "xqa" else "-",
            ])  # fmt: skip
        torch.cuda.empty_cache()
    print_table(["B,HQ,HKV,CTX", "variant", "µs", "TB/s on KV", "vs XQA", "bytes = shipped"], table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
