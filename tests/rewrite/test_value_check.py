"""The replacement's value check (``same_value_type(new, old)``): None when the new value has
the old one's dtype and shape, else one phrase saying what differs (dtype first, then rank
and sizes, for each output of a tuple); symbolic sizes compare without adding a guard to
the shape env (a size not provably equal differs)."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from graphfuse.rewrite import same_value_type

_SHAPES = [(2, 3), (2, 4), (3, 2), (2, 3, 1), (6,)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_equal_and_different_values(dtype: torch.dtype) -> None:
    with FakeTensorMode():
        vals = [torch.empty(s, dtype=d) for s in _SHAPES for d in (torch.float32, dtype)]
    for new, old in itertools.product(vals, vals):
        why = same_value_type(new, old)
        if new.dtype != old.dtype:
            assert why == f"dtype {new.dtype} where the graph had {old.dtype}"
        elif new.shape != old.shape:
            assert why == f"shape {list(new.shape)} where the graph had {list(old.shape)}"
        else:
            assert why is None
    assert same_value_type(vals[0], vals[0].new_empty(2, 3, 1)) == (
        "shape [2, 3] where the graph had [2, 3, 1]"
    )


def test_tuples_and_non_tensors() -> None:
    with FakeTensorMode():
        a, b = torch.empty(2, 3), torch.empty(2)
    assert same_value_type((a, b), (a, b)) is None
    assert same_value_type([a, b], (a, b)) is None
    assert same_value_type((a,), (a, b)) == "a different number of outputs"
    assert same_value_type((b, a), (a, b)) == "shape [2] where the graph had [2, 3]"
    assert same_value_type(a, (a, b)) == "a different number of outputs"
    assert same_value_type(3, a) == "a int where the graph had a tensor"
    assert same_value_type(a, 3) is None  # (the graph's value was no tensor: nothing to hold)


def test_symbolic_sizes_compare_without_guards() -> None:
    env = ShapeEnv()
    u0 = env.create_unbacked_symint()
    with FakeTensorMode(shape_env=env):
        a = torch.empty(u0, 8)
        b = torch.empty(u0, 8)
        c = torch.empty(u0, 4)
        three = torch.empty(3, 8)
    before = len(env.guards)
    assert same_value_type(a, b) is None
    assert same_value_type(c, a) == "shape [u0, 4] where the graph had [u0, 8]"
    assert same_value_type(a, c) == "shape [u0, 8] where the graph had [u0, 4]"
    assert same_value_type(three, a) == "shape [3, 8] where the graph had [u0, 8]"
    assert same_value_type(a, three) is not None  # u0 vs 3: not provably equal
    assert len(env.guards) == before
