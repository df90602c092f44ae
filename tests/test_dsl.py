"""Pattern values: immutable, composable, printable as the code that builds them."""

from __future__ import annotations

import dataclasses
import operator

import pytest
import torch

from graphfuse import dsl as P

aten = torch.ops.aten


def test_repr_reads_as_code():
    x, s = P.tensor("x"), P.tensor("s")
    quant = P.op(aten.clamp, P.op(aten.div, x, s), -448, 448)
    assert (
        repr(quant) == "P.op(aten.clamp, P.op(aten.div, P.tensor('x'), P.tensor('s')), -448, 448)"
    )
    assert (
        repr(P.op(aten.softmax.int, x, dim=-1)) == "P.op(aten.softmax.int, P.tensor('x'), dim=-1)"
    )
    assert repr(P.op({aten.mul.Tensor, aten.mul.Scalar}, x, P._, commutative=True)) == (
        "P.op({aten.mul.Scalar, aten.mul.Tensor}, P.tensor('x'), P._, commutative=True)"
    )
    assert repr(P.scalar("c")) == "P.scalar('c')" and repr(P.any("v")) == "P.any('v')"
    assert repr(P.lit(torch.float8_e4m3fn)) == "torch.float8_e4m3fn"
    assert repr(P.tensor("q", dtype=torch.float16, shape=["B", "H", "S", "D"])) == (
        "P.typed(P.tensor('q'), dtype=torch.float16, shape=['B', 'H', 'S', 'D'])"
    )
    assert repr(P.maybe([aten.view, aten._to_copy.default], x, name="layout")) == (
        "P.maybe([aten.view, aten._to_copy], P.tensor('x'), name='layout')"
    )
    assert repr(P.getitem(P.op(aten.max.dim, x, -1), 1)) == (
        "P.op(operator.getitem, P.op(aten.max.dim, P.tensor('x'), -1), 1)"
    )
    assert (
        repr(P.op(aten.view, x, [P.any("B"), -1]))
        == "P.op(aten.view, P.tensor('x'), [P.any('B'), -1])"
    )


def test_alternatives():
    a, b, c = P.op(aten.relu, P._), P.op(aten.tanh, P._), P.op(aten.gelu, P._)
    either = a | b | c  # flattens, tags are positions
    assert either.name is None and [t for t, _ in either.branches] == ["0", "1", "2"]
    assert repr(either) == f"({a!r} | {b!r} | {c!r})"
    tagged = P.alt("act", relu=a, tanh=b)
    assert tagged.name == "act" and [t for t, _ in tagged.branches] == ["relu", "tanh"]
    assert repr(tagged) == f"P.alt('act', relu={a!r}, tanh={b!r})"
    # a named alternative stays one branch when combined with |
    mixed = tagged | c
    assert [t for t, _ in mixed.branches] == ["0", "1"] and mixed.branches[0][1] is tagged
    with pytest.raises(ValueError, match="at least one branch"):
        P.alt("empty")


def test_patterns_are_immutable_values():
    x = P.tensor("x")
    pat = P.op(aten.relu, x)
    with pytest.raises(dataclasses.FrozenInstanceError):
        pat.args = ()
    assert pat == P.op(aten.relu, P.tensor("x")) and hash(pat) == hash(P.op(aten.relu, x))
    # a sub-pattern is reused by value
    two = P.op(aten.add, pat, pat)
    assert two.args[0] is two.args[1] is pat


def test_constructor_errors():
    with pytest.raises(ValueError, match="commutative=True\\) needs two positional"):
        P.op(aten.mul, P._, commutative=True)
    with pytest.raises(ValueError, match="shape \\['B', 'D'\\] disagrees with rank 3"):
        P.tensor("x", rank=3, shape=["B", "D"])


def test_plain_values_become_literals_and_lists():
    pat = P.op(aten.view, P.tensor("x"), [P.any("B"), -1])
    assert isinstance(pat.args[1], P.ListOf)
    assert pat.args[1].items[1] == P.Literal(-1)
    assert P.op(aten.view, P._, [2, 3]).args[1] == P.Literal([2, 3])
    assert P.getitem(P._, 0).targets == (operator.getitem,)


def test_set_targets_are_sorted_for_a_stable_repr():
    a = P.op({aten.relu.default, aten.gelu.default}, P._)
    b = P.op({aten.gelu.default, aten.relu.default}, P._)
    assert a == b and repr(a) == repr(b) == "P.op({aten.gelu, aten.relu}, P._)"


def test_patterns_refuse_what_can_never_match() -> None:
    """A string target, or one name captured as a tensor and as a scalar, is an error when
    the pattern or rule is built (it would otherwise never match, silently)."""
    import pytest
    import torch

    import graphfuse
    from graphfuse import dsl as P

    with pytest.raises(TypeError, match=r"write torch\.ops\.aten\.rsqrt"):
        P.op("aten.rsqrt", P.tensor("x"))
    mixed = P.op(torch.ops.aten.mul.Tensor, P.tensor("x"), P.scalar("x"))
    with pytest.raises(ValueError, match="captured both as a tensor and as a scalar"):
        graphfuse.Rule("r", mixed, lambda m, b: None)
