"""The output layout the ``trtllm`` checks read from random chains of transposes, permutes,
flattens and reshapes (views, unsafe views) on int shapes: the answer is the layout the
chain really produces (the chain run on a tensor whose elements name their B, H, S, D
position, compared with each layout's arrangement), asked once or again, and identity ops
(clone, cast) spliced into the chain change nothing."""

from __future__ import annotations

import random

import pytest
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

from graphfuse.patterns.trtllm import _layout

aten = torch.ops.aten
SIZES = {"B": 2, "H": 3, "S": 4, "D": 5}
B, H, S, D = SIZES.values()
_RESHAPES = (aten.reshape.default, aten.view.default, aten._unsafe_view.default)
SEEDS = range(40)


def _step(rng: random.Random, val: torch.Tensor) -> tuple:
    """(target, args after the input, the output value) of one random layout op."""
    rank = val.dim()
    pick = rng.randrange(4)
    if pick == 0 and rank >= 2:
        d0, d1 = rng.sample(range(-rank, rank), 2)
        if d0 % rank != d1 % rank:
            return aten.transpose.int, (d0, d1), val.transpose(d0, d1)
    if pick == 1 and rank >= 2:
        perm = rng.sample(range(rank), rank)
        return aten.permute.default, (perm,), val.permute(perm)
    if pick == 2 and rank >= 2:
        i = rng.randrange(rank - 1)
        return aten.flatten.using_ints, (i, i + 1), val.flatten(i, i + 1)
    flat = val.contiguous().reshape(-1)
    shape = list(val.shape)
    if rank >= 2 and rng.random() < 0.5:  # merge two neighbours
        i = rng.randrange(rank - 1)
        shape[i : i + 2] = [shape[i] * shape[i + 1]]
    return rng.choice(_RESHAPES), (shape,), flat.reshape(shape)


def _chain(seed: int, identity_every: int = 0) -> tuple:
    """(start, chain outermost first): ``identity_every`` > 0 splices a clone / cast after
    every that many ops (the same random ops otherwise)."""
    rng = random.Random(seed)
    g = fx.Graph()
    with FakeTensorMode():
        val = torch.empty(B, H, S, D)
        start = node = g.placeholder("attn")
        node.meta["val"] = val
        chain = []
        for i in range(rng.randrange(1, 5)):
            target, args, val = _step(rng, val)
            node = g.call_function(target, (node, *args))
            node.meta["val"] = val
            chain.append(node)
            if identity_every and i % identity_every == 0:
                same = g.call_function(aten.clone.default, (node,))
                same.meta["val"] = val.clone()
                cast = g.call_function(aten._to_copy.default, (same,), {"dtype": torch.float32})
                cast.meta["val"] = val.clone()
                chain += [same, cast]
                node = cast
    return start, tuple(reversed(chain))


_POSITIONS = torch.arange(B * H * S * D).reshape(B, H, S, D)  # each element its position
ARRANGED = {
    "bhsd": _POSITIONS,
    "bshd": _POSITIONS.permute(0, 2, 1, 3),
    "bs(hd)": _POSITIONS.permute(0, 2, 1, 3).reshape(B, S, H * D),
    "(bs)(hd)": _POSITIONS.permute(0, 2, 1, 3).reshape(B * S, H * D),
}


def _really(chain: tuple[fx.Node, ...]) -> str | None:
    """The layout the chain produces, by running it on the position tensor."""
    t = _POSITIONS
    for node in reversed(chain):
        args = node.args[1:]
        if node.target is aten.transpose.int:
            t = t.transpose(*args)
        elif node.target is aten.permute.default:
            t = t.permute(*args)
        elif node.target is aten.flatten.using_ints:
            t = t.flatten(*args)
        elif node.target in _RESHAPES:
            t = t.reshape(*args)  # (a view of the same elements in the same logical order)
        else:
            assert node.target in (aten.clone.default, aten._to_copy.default)
    found = [
        name for name, want in ARRANGED.items() if t.shape == want.shape and torch.equal(t, want)
    ]
    assert len(found) <= 1
    return found[0] if found else None


@pytest.mark.parametrize("seed", SEEDS)
def test_a_random_chain_gets_the_layout_it_produces(seed: int) -> None:
    start, chain = _chain(seed)
    want = _really(chain)
    assert _layout.output_layout(start, chain, dict(SIZES)) == want
    assert _layout.output_layout(start, chain, dict(SIZES)) == want  # asked again
    assert _layout.bhsd_layout(start, chain, (B, H, S, D)) == want
    start2, chain2 = _chain(seed, identity_every=1)
    assert len(chain2) == 3 * len(chain)
    assert _really(chain2) == want
    assert _layout.output_layout(start2, chain2, dict(SIZES)) == want


def test_the_seeds_cover_every_layout_and_kind() -> None:
    answers, kinds = set(), set()
    for seed in SEEDS:
        start, chain = _chain(seed)
        answers.add(_layout.output_layout(start, chain, dict(SIZES)))
        kinds.update(_layout._kind(n.target) for n in chain)
    assert {None, "bhsd", "bshd"} <= answers
    assert kinds == {_layout._TRANSPOSE, _layout._PERMUTE, _layout._RESHAPE}
    assert _layout._kind(aten.clone.default) is None
