"""The NVFP4 output of the Gluon prefill kernel (``gluon_kernel.py``): a consumer's ``[64, D]``
rows in the wgmma accumulator layout written as packed e2m1 codes and swizzled block-scale
bytes, with the arithmetic of ``store_attention_acc`` (the helpers of ``formats.py``) and
each block scale computed once, by one of the 4 lanes that hold the block
(``block_owner_layout``)."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..formats import block_amax, nvfp4_block_scale, pack_e2m1, swizzled_offset


@gluon.constexpr_function
def block_owner_layout(rows, blocks):
    """A ``[rows, blocks]`` layout of the 4 warps' wgmma accumulator rows (``rows`` = 64) in
    which each (row, block) value has one owner: of the 4 lanes that hold a 16-column block
    in the accumulator layout (lane bits 0-1: column pairs), lane bits 0-1 now index the
    top two bits of the block number, a register bit the rest; rows keep the accumulator's
    lanes (bits 2-4), register (row + 8) and warps. A block scale is then computed once
    rather than in all 4 lanes, for 4 (D = 64) or 8 (D = 128) blocks."""
    k = blocks.bit_length() - 1
    if rows != 64 or blocks != 1 << k or k < 2:
        raise ValueError(f"block_owner_layout: rows 64 and 4, 8, ... blocks, got {rows} x {blocks}")
    return gl.DistributedLinearLayout(
        reg_bases=[[0, 1 << i] for i in range(k - 2)] + [[8, 0]],
        lane_bases=[[0, 1 << (k - 2)], [0, 1 << (k - 1)], [1, 0], [2, 0], [4, 0]],
        warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[rows, blocks],
    )  # fmt: skip


@gluon.jit
def store_nvfp4(acc, row_scale, out_ptr, g_ptr, sf_ptr, nv_row, nms, nv_col, nv_k, nv_kbpad):
    """Writes ``acc * row_scale`` (``[64, HD]`` in the wgmma accumulator layout) as NVFP4 rows
    ``nv_row + i * nms`` of the 2-D ``[M, nv_k]`` view from column ``nv_col``: the arithmetic
    of ``store_attention_acc`` with the helpers of ``formats.py`` (``block_amax``,
    ``nvfp4_block_scale``, ``pack_e2m1``); only the layouts are Gluon's.

    A 16-column block lies in 4 lanes of the accumulator layout (2 x 2 columns each): the
    block amax is a reduction across them, the codes of each column pair are in one thread."""
    R: gl.constexpr = acc.shape[0]
    HD: gl.constexpr = acc.shape[1]
    NB: gl.constexpr = HD // 16
    g = gl.load(g_ptr).to(gl.float32)
    ab = gl.reshape(acc, [R, NB, 16])
    blk_l: gl.constexpr = ab.type.layout
    bs_l: gl.constexpr = gl.SliceLayout(2, blk_l)  # [R, NB]
    rs = gl.expand_dims(gl.convert_layout(row_scale, gl.SliceLayout(1, bs_l)), 1)
    amax = block_amax(ab) * rs  # fl(max|a| * s) == max fl(|a| * s), s >= 0
    own_l: gl.constexpr = block_owner_layout(R, NB)
    inv_o, sbits = nvfp4_block_scale(gl.convert_layout(amax, own_l), g)
    inv = gl.convert_layout(inv_o, bs_l)
    packed = pack_e2m1(ab * gl.expand_dims(inv * rs, 2))
    pk_l: gl.constexpr = packed.type.layout
    prow = nv_row + gl.arange(0, R, layout=gl.SliceLayout(1, pk_l)).to(gl.int64) * nms
    pcol = nv_col // 2 + gl.arange(0, NB * 8, layout=gl.SliceLayout(0, pk_l))
    gl.store(out_ptr + gl.expand_dims(prow * (nv_k // 2), 1) + gl.expand_dims(pcol, 0), packed)
    srow = nv_row + gl.arange(0, R, layout=gl.SliceLayout(1, own_l)).to(gl.int64) * nms
    scol = nv_col // 16 + gl.arange(0, NB, layout=gl.SliceLayout(0, own_l))
    soff = swizzled_offset(gl.expand_dims(srow, 1), gl.expand_dims(scol, 0), nv_kbpad // 4)
    gl.store(sf_ptr + soff, sbits)
