"""The trtllm layout cache's key (``_layout._cache_key``: per chain op its kind and what it
reads, identity ops left out) gives every chain the answer the uncached simulation gives:
random chains of transposes, permutes, reshapes and copies on int shapes, each looked up
cold, again, and with identity ops (clone, cast) spliced in (a hit, the same answer)."""

from __future__ import annotations

import random

import pytest
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

from graphfuse.patterns.trtllm import _layout

aten = torch.ops.aten
SIZES = {"B": 2, "H": 3, "S": 4, "D": 5}
_RESHAPES = (aten.reshape.default, aten.view.default, aten._unsafe_view.default)


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
        val = torch.empty(*SIZES.values())
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


@pytest.mark.parametrize("seed", range(40))
def test_cached_answers_are_the_simulation(seed: int) -> None:
    _layout._CACHE.clear()
    start, chain = _chain(seed)
    want = _layout._simulate(start, chain, dict(SIZES))
    assert _layout.output_layout(start, chain, dict(SIZES)) == want
    hits = _layout.STATS["hits"]
    assert _layout.output_layout(start, chain, dict(SIZES)) == want
    assert _layout.STATS["hits"] == hits + 1
    start2, chain2 = _chain(seed, identity_every=1)
    assert len(chain2) == 3 * len(chain)
    assert _layout._simulate(start2, chain2, dict(SIZES)) == want
    assert _layout.output_layout(start2, chain2, dict(SIZES)) == want
    assert _layout.STATS["hits"] == hits + 2  # identity ops are not part of the key


def test_the_seeds_cover_every_layout_and_kind() -> None:
    answers, kinds = set(), set()
    for seed in range(40):
        start, chain = _chain(seed)
        answers.add(_layout._simulate(start, chain, dict(SIZES)))
        kinds.update(_layout._kind(n.target) for n in chain)
    assert {None, "bhsd", "bshd"} <= answers
    assert kinds == {_layout._TRANSPOSE, _layout._PERMUTE, _layout._RESHAPE}
    assert _layout._kind(aten.clone.default) is None


def test_kind_follows_the_target_not_its_id(monkeypatch) -> None:
    """A stale entry (an id reused by another target) is not trusted."""
    monkeypatch.setattr(_layout, "_KINDS", {id(aten.clone.default): (object(), "stale")})
    assert _layout._kind(aten.clone.default) is None
    assert _layout._kind(aten.transpose.int) == _layout._TRANSPOSE


def test_one_cache_for_every_chain() -> None:
    """Chains that differ in what an op reads (a transpose's dims, a reshape's sizes) get
    different keys: one cache, filled by all of them, answers each as the simulation."""
    _layout._CACHE.clear()
    chains = [_chain(seed) for seed in range(40)] * 2
    for start, chain in chains:
        want = _layout._simulate(start, chain, dict(SIZES))
        assert _layout.output_layout(start, chain, dict(SIZES)) == want
    assert len(_layout._CACHE) < 40  # (some share a key)
