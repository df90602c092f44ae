"""The replacement's value check reads what the fake propagator remembers of the values it
made (dtype, shape and whether every size is a plain int): it gives the answer and the
message the uncached check gives, for equal, different and symbolic shapes, and adds no
guard to a shape env."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from graphfuse._fake import FakePropagator
from graphfuse._rewriter import _same_value_type

aten = torch.ops.aten


def _made(fake: FakePropagator, val: torch.Tensor) -> torch.Tensor:
    """A value ``fake`` made: ``aten.clone`` of a node holding ``val``."""
    g = fx.Graph()
    p = g.placeholder("p")
    p.meta["val"] = val
    out = fake(aten.clone.default, (p,), {})
    assert fake.described(out)[2] is not None  # remembered
    return out


def test_described_remembers_made_values_only() -> None:
    env = ShapeEnv()
    with FakeTensorMode(shape_env=env):
        t = torch.empty(2, 3, dtype=torch.float16)
        s = torch.empty(env.create_unbacked_symint(), 3)
    fake = FakePropagator()
    made, made_sym = _made(fake, t), _made(fake, s)
    assert fake.described(made) == (torch.float16, torch.Size([2, 3]), True)
    dtype, shape, ints = fake.described(made_sym)
    assert dtype == torch.float32 and ints is False and shape[1] == 3
    assert fake.described(t) == (t.dtype, t.shape, None)  # not made here: read, unknown
    assert fake.described(made)[:2] == (torch.float16, torch.Size([2, 3]))


_SHAPES = [(2, 3), (2, 4), (3, 2), (2, 3, 1), (6,)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_value_check_with_the_remembered_values_answers_as_without(dtype: torch.dtype) -> None:
    with FakeTensorMode():
        vals = [torch.empty(s, dtype=d) for s in _SHAPES for d in (torch.float32, dtype)]
    fake = FakePropagator()
    made = [_made(fake, v) for v in vals]
    differ = 0
    for (new, plain_new), old in itertools.product(zip(made, vals), vals):
        why = _same_value_type(new, old, fake)
        assert why == _same_value_type(plain_new, old)  # the message, or None, unchanged
        differ += why is not None
    assert 0 < differ < len(vals) ** 2
    assert "shape [2, 3] where the graph had [2, 3, 1]" in [
        _same_value_type(made[0], old, fake) for old in vals
    ]


def test_value_check_of_a_made_int_shape_against_a_symbolic_one_adds_no_guard() -> None:
    env = ShapeEnv()
    u0 = env.create_unbacked_symint()
    with FakeTensorMode(shape_env=env):
        sym = torch.empty(u0, 8)
        three = torch.empty(3, 8)
        sym4 = torch.empty(u0, 4)
    fake = FakePropagator()
    made3, made_sym = _made(fake, three), _made(fake, sym)
    before = len(env.guards)
    assert _same_value_type(made3, sym, fake) is not None  # 3 vs u0: not provably equal
    assert _same_value_type(made_sym, sym, fake) is None
    assert _same_value_type(made_sym, sym4, fake) == "shape [u0, 8] where the graph had [u0, 4]"
    assert len(env.guards) == before
