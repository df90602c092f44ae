"""Triton split-KV decode kernels (one query token per sequence), launched by ``launch.py``;
device helpers in ``tiles.py``.

``decode_kernel``: grid ``(B, Hkv, splits)``, or ``(Hkv, B, splits)`` with HEAD_MAJOR (the
programs of one sequence's KV heads run side by side); a program takes the ``G = Hq / Hkv``
query heads of one KV head (padded to 16 rows for the tensor cores), so each KV byte is read
once. Paged or dense KV.

With one split the kernel writes the final output itself; with more, each split writes its
unnormalised partial (fp32 acc, running max, sum) and ``decode_merge`` combines them and then
quantizes (FP8 / NVFP4 / 16-bit): the quantizer sees the merged output, never a partial.
Where the configuration row says ``pdl`` (``config.py``; sm_90 and later) both kernels are
programmatic dependent launches (``PDL``). The decode kernel lets the merge launch at its
start, so the merge's programs are resident and waiting (``griddepcontrol.wait``: the decode
grid complete, its writes visible) when the last decode program ends, instead of being
launched then; the merge lets the next kernel launch once its wait returns (at its start it
would put the next call's decode programs on the SMs beside this call's, which measured
slower). The decode kernel waits for the kernel before it (the previous call's merge, or
whatever wrote q and the cache) before its first load, so its launch overlaps that kernel's
end where that kernel lets it (FlashInfer launches its XQA decode this way); after a kernel
that does not signal, it launches when that kernel ends, as a plain launch does.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from ..formats import zero_sf_pad
from .tiles import merge_splits, q_prep, walk_kv, write_rows


@triton.jit
def decode_kernel(
    Q, K, V, QS, KS, VS, BT, LENS, OSC, OUT, SF, PO, PML,
    sqb, sqh, skb, skh, skt, svb, svh, svt, sbt, PAGE: tl.constexpr,
    HQ, G, SKV, D: tl.constexpr, sm_scale, CHUNK, sob, soh, NV_M, NV_K: tl.constexpr,
    NV_KBPAD: tl.constexpr, HAS_QS: tl.constexpr, HAS_KS: tl.constexpr, HAS_VS: tl.constexpr,
    PAGED: tl.constexpr, SPLIT_OUT: tl.constexpr, OUT_KIND: tl.constexpr, DOT_DT: tl.constexpr,
    Q_RESCALE: tl.constexpr, GP: tl.constexpr, BLOCK_N: tl.constexpr, DP: tl.constexpr,
    PREFETCH: tl.constexpr, BT_AHEAD: tl.constexpr, HEAD_MAJOR: tl.constexpr,
    SF_PAD: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    if PDL:  # the merge may launch; then the previous kernel's writes (module docstring)
        gdc_launch_dependents()
        gdc_wait()
    if HEAD_MAJOR:
        hk = tl.program_id(0).to(tl.int64)
        b = tl.program_id(1).to(tl.int64)
    else:
        b = tl.program_id(0).to(tl.int64)
        hk = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    nsplit = tl.num_programs(2)
    offs_g = tl.arange(0, GP)
    offs_d = tl.arange(0, DP)
    heads = hk * G + offs_g
    gmask = offs_g < G
    q, qk_scale = q_prep(
        Q + b * sqb, heads * sqh, gmask, offs_d, D, QS, KS, sm_scale,
        HAS_QS, HAS_KS, Q_RESCALE, DOT_DT,
    )  # fmt: skip
    if PAGED:
        seq_len = tl.load(LENS + b)
        kv = (K + hk * skh, V + hk * svh, skb, skt, svb, svt)
    else:
        seq_len = SKV
        kv = (K + b * skb + hk * skh, V + b * svb + hk * svh, skb, skt, svb, svt)
    lo = split * CHUNK
    hi = tl.minimum(lo + CHUNK, seq_len)
    bt_hi = tl.minimum(lo + CHUNK, SKV)  # the split's part of the block-table row
    acc, m_i, l_i = walk_kv(
        q, qk_scale, tl.zeros([GP, DP], tl.float32), tl.full([GP], float("-inf"), tl.float32),
        tl.zeros([GP], tl.float32), kv, BT + b * sbt, lo, hi, bt_hi, PAGE,
        tl.arange(0, BLOCK_N), offs_d, offs_d < D, DOT_DT, PAGED, PREFETCH, BT_AHEAD, BLOCK_N,
    )  # fmt: skip
    if SPLIT_OUT:  # the unnormalised partials: PO [B, HQ, S, DP] fp32, PML [B, HQ, S, 2]
        base = (b * HQ + heads) * nsplit + split
        tl.store(PO + base[:, None] * DP + offs_d[None, :], acc, mask=gmask[:, None])
        tl.store(PML + base * 2, m_i, mask=gmask)
        tl.store(PML + base * 2 + 1, l_i, mask=gmask)
    else:
        write_rows(
            acc, l_i, b, heads, gmask, VS, OSC, OUT, SF, sob, soh, D, NV_K, NV_KBPAD,
            HAS_VS, OUT_KIND, DP,
        )  # fmt: skip
    if SF_PAD:  # one split: the padding rows of the NVFP4 scales (the merge's otherwise)
        np0 = tl.num_programs(0)
        np1 = tl.num_programs(1)
        pid = (split * np1 + tl.program_id(1)) * np0 + tl.program_id(0)
        zero_sf_pad(SF, NV_M, NV_KBPAD, pid, np0 * np1 * nsplit, 128)


@triton.jit
def decode_merge(
    PO, PML, VS, OSC, OUT, SF, NROWS, HQ: tl.constexpr, NSPLIT, D: tl.constexpr, sob, soh,
    NV_M, NV_K: tl.constexpr, NV_KBPAD: tl.constexpr, HAS_VS: tl.constexpr,
    OUT_KIND: tl.constexpr, SC: tl.constexpr, DP: tl.constexpr, SF_PAD: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    """Program ``r < NROWS`` merges the splits of row ``r`` (flat ``b * HQ + h``), SC a step
    (``merge_splits``), and writes the row in the output format. With ``SF_PAD`` the programs
    from ``NROWS`` on zero the padding rows of the NVFP4 scales, beside the rows' programs
    rather than as a tail on every decode program."""
    pid = tl.program_id(0)
    if PDL:  # launched early: wait until the decode kernel's partials are written, then let
        gdc_wait()  # the next kernel launch
        gdc_launch_dependents()
    if pid >= NROWS:
        if SF_PAD:
            zero_sf_pad(SF, NV_M, NV_KBPAD, pid - NROWS, tl.num_programs(0) - NROWS, 128)
    else:
        rows = pid + tl.arange(0, 1)
        rmask = rows < NROWS
        o, l_tot = merge_splits(PO, PML, rows, rmask, NSPLIT, tl.arange(0, DP), SC, DP)
        write_rows(
            o, l_tot, (rows // HQ).to(tl.int64), rows % HQ, rmask, VS, OSC, OUT, SF, sob, soh,
            D, NV_K, NV_KBPAD, HAS_VS, OUT_KIND, DP,
        )  # fmt: skip
