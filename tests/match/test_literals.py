"""Literals and the search around them: dims compare after both sides are made
non-negative (a captured dim binds the non-negative one), numbers compare across int and
float, a dtype literal tells casts apart; maybe chains whose inner pattern can start
mid-chain, nested named alts undone together on a failure, a chain broken at any depth.
Each checked with a tracer and without (same match, same solutions, no more steps)."""

from __future__ import annotations

import pytest
import torch
from torch import fx

from graphfuse import Rule
from graphfuse import dsl as P
from graphfuse.match import Match, Tracer, match_rule

from ._models import fake_input_graph
from ._outcomes import both
from ._outcomes import keep_root as _keep

aten = torch.ops.aten
prims = torch.ops.prims


def _softmax_graph(dim: object, kw: bool = False) -> tuple[fx.Graph, fx.Node]:
    """x (2, 3, 4) -> permute([0, 2, 1]) -> _softmax(dim) -> neg, dim positional or kw."""
    g, x, val = fake_input_graph(2, 3, 4)
    p = g.call_function(aten.permute.default, (x, [0, 2, 1]))
    if kw:
        s = g.call_function(aten._softmax.default, (p,), {"dim": dim, "half_to_float": False})
    else:
        s = g.call_function(aten._softmax.default, (p, dim, False))
    out = g.call_function(aten.neg.default, (s,))
    for n in (p, s, out):
        n.meta["val"] = val
    g.output(out)
    return g, out


def _softmax_pattern(dim: P.Pattern) -> P.Pattern:
    inner = P.op(aten.permute.default, P.tensor("x"), [0, 2, 1])
    return P.op(aten.neg.default, P.op(aten._softmax.default, inner, dim, False))


# dims spelled both ways, in the pattern and in the node (rank 3: -1 is 2, -3 is 0)
@pytest.mark.parametrize("spelled", [-1, 2, -2, 1])
@pytest.mark.parametrize("wanted", [-1, 2, -3, 0])
@pytest.mark.parametrize("kw", [False, True])
def test_dim_literals_compare_as_made_non_negative(spelled: int, wanted: int, kw: bool) -> None:
    g, out = _softmax_graph(spelled, kw)
    rule = Rule("sm", _softmax_pattern(P.lit(wanted)), _keep)
    got = both(rule, out)
    same = spelled % 3 == wanted % 3
    assert (got[0] == "match") == same
    if not same:
        assert got == ("none",)


@pytest.mark.parametrize("spelled", [-1, 2, [-1], [2], [0, -1]])
def test_captured_and_listed_dims_are_made_non_negative(spelled: object) -> None:
    """A capture at a dim binds the dim made non-negative; a list literal matches spelled
    either way."""
    g, x, val = fake_input_graph(2, 3, 4)
    s = g.call_function(aten.sum.dim_IntList, (x, spelled, True))
    s.meta["val"] = val
    g.output(s)
    want = 2 if isinstance(spelled, int) else [2] if len(spelled) == 1 else [0, 2]
    for dim, binds in ((P.any("d"), True), (P.lit(want), False), (P.lit(spelled), False)):
        rule = Rule("sum", P.op(aten.sum.dim_IntList, P.tensor("x"), dim, True), _keep)
        got = both(rule, s)
        assert got[0] == "match"
        if binds:
            d = got[1]["d"]
            assert list(d) == want if isinstance(want, list) else d == want
        if isinstance(spelled, list):
            # a wrong list never matches
            bad = Rule("bad", P.op(aten.sum.dim_IntList, P.tensor("x"), [1], True), _keep)
            assert both(bad, s) == ("none",)


def _chain_variants() -> list[tuple[str, fx.Node]]:
    """The chain of ``_chain_pattern``, whole and broken at each depth."""
    out = []
    for broken in ("none", "neg_arg", "sm_dim", "sm_flag", "perm", "perm_dims", "exp", "x"):
        g, x, val = fake_input_graph(2, 3, 3)
        src = g.placeholder("y") if broken == "x" else x
        src.meta["val"] = val if broken != "x" else 1.0
        e = g.call_function(aten.relu.default if broken == "exp" else aten.exp.default, (src,))
        perm = [0, 1, 2] if broken == "perm_dims" else [0, 2, 1]
        t = aten.clone.default if broken == "perm" else aten.permute.default
        p = g.call_function(t, (e, perm) if t is aten.permute.default else (e,))
        s = g.call_function(
            aten._softmax.default,
            (p, 1 if broken == "sm_dim" else 2, broken == "sm_flag"),
        )
        out_node = g.call_function(aten.neg.default, (e if broken == "neg_arg" else s,))
        for n in (e, p, s, out_node):
            n.meta["val"] = val
        g.output(out_node)
        out.append((broken, out_node))
    return out


def _chain_pattern() -> P.Pattern:
    x = P.tensor("x")
    inner = P.op(aten.permute.default, P.op(aten.exp.default, x), [0, 2, 1])
    return P.op(aten.neg.default, P.op(aten._softmax.default, inner, -1, False))


def _wrapped_pattern() -> P.Pattern:
    """Alts, maybes and a shared (named) call."""
    x = P.tensor("x", shape=("B", "S", "D"))
    e = P.op(aten.exp.default, x, name="e")
    inner = P.op(aten.permute.default, P.maybe([aten.clone.default], e, name="c"), [0, 2, 1])
    sm = P.op(aten._softmax.default, P.alt("how", plain=inner, other=e), -1, False)
    return P.op(aten.neg.default, P.maybe([aten.view.default], sm, name="v"))


@pytest.mark.parametrize("make", [_chain_pattern, _wrapped_pattern])
def test_a_chain_broken_at_any_depth_does_not_match(make) -> None:
    """Whole, the chain matches; broken at any depth it does not (with a tracer, the
    deepest failure is noted); with a tracer and without alike."""
    rule = Rule("chain", make(), _keep)
    for broken, out in _chain_variants():
        got = both(rule, out)
        assert (got[0] == "match") == (broken == "none"), broken
        if broken == "none":
            assert got[1]["x"].name == "x"
            continue
        tracer = Tracer()
        assert match_rule(rule, out, tracer) is None
        assert tracer.failure is not None and str(tracer.failure), broken


def test_a_dtype_literal_tells_casts_apart() -> None:
    """A cast to another dtype than the pattern's is no match; with a tracer, the failure
    names the argument and both dtypes."""
    g, x, val = fake_input_graph(4, 4)
    a1 = g.call_function(prims.convert_element_type.default, (x, torch.bfloat16))
    a2 = g.call_function(prims.convert_element_type.default, (x, torch.bfloat16))
    b = g.call_function(prims.convert_element_type.default, (a1, torch.float16))
    c = g.call_function(prims.convert_element_type.default, (a2, torch.float32))
    for n in (a1, a2, b, c):
        n.meta["val"] = val
    g.output((b, c))
    inner = P.op(prims.convert_element_type.default, P.tensor("x"), torch.bfloat16)
    pat = P.op(prims.convert_element_type.default, inner, torch.float16)
    rule = Rule("cast", pat, _keep)
    got = both(rule, b)
    assert got[0] == "match" and got[1]["x"] is x and got[4] == [b, a1]
    assert both(rule, c) == ("none",)
    tracer = Tracer()
    assert match_rule(rule, c, tracer) is None and tracer.failure is not None
    assert str(tracer.failure) == (
        f"argument 'dtype' of {c.name} is torch.float32; the pattern needs torch.float16"
    )


def test_numbers_compare_across_int_and_float() -> None:
    """``-448`` in the pattern matches ``-448.0`` in the graph."""
    g, x, val = fake_input_graph(4)
    n = g.call_function(aten.clamp.default, (x, -448.0, 448.0))
    n.meta["val"] = val
    g.output(n)
    rule = Rule("clamp", P.op(aten.clamp.default, P.tensor("x"), -448, 448), _keep)
    assert isinstance(match_rule(rule, n), Match)
    assert both(rule, n)[0] == "match"
    other = Rule("other", P.op(aten.clamp.default, P.tensor("x"), -448, 447.5), _keep)
    assert both(other, n) == ("none",)


def test_maybe_chain_inner_may_start_mid_chain() -> None:
    """view -> expand -> view -> relu: the inner pattern may start at a middle step and
    at the end; longest chain first, with a tracer and without."""
    g, x, val = fake_input_graph(2, 3)
    r = g.call_function(aten.relu.default, (x,))
    v1 = g.call_function(aten.view.default, (r, [2, 3]))
    e = g.call_function(aten.expand.default, (v1, [2, 3]))
    v2 = g.call_function(aten.view.default, (e, [2, 3]))
    out = g.call_function(aten.neg.default, (v2,))
    for n in (r, v1, e, v2, out):
        n.meta["val"] = val
    g.output(out)
    chain_ops = [aten.view.default, aten.expand.default]
    for inner, chain in (
        (P.op(aten.relu.default, P.tensor("x")), (v2, e, v1)),
        (P.op(aten.expand.default, P._, P._), (v2,)),  # a chain op: tried at its step
        (P.alt("k", r=P.op(aten.relu.default, P._), e=P.op(aten.expand.default, P._, P._)), None),
        (P.tensor("x"), (v2, e, v1)),
    ):
        pat = P.op(aten.neg.default, P.maybe(chain_ops, inner, name="ch"))
        got = both(Rule("m", pat, _keep), out)
        assert got[0] == "match"
        if chain is not None:
            assert got[3] == {"ch": chain}
        else:  # the longest chain ends at relu: the alt's first branch
            assert got[3] == {"ch": (v2, e, v1)} and got[2] == {"k": "r"}
    # a where-test that stops the chain at the expand
    pat = P.op(
        aten.neg.default,
        P.maybe(chain_ops, P._, name="ch", where=lambda n: n.target is aten.view.default),
    )
    got = both(Rule("w", pat, _keep), out)
    assert got[0] == "match" and got[3] == {"ch": (v2,)}


def test_nested_tags_are_undone_together() -> None:
    """Nested named alts record their tags on the way down; where the call under them
    fails, all of them are undone before the next branch."""
    g, x, val = fake_input_graph(4)
    mul = g.call_function(aten.mul.Tensor, (x, 2.0))
    out = g.call_function(aten.neg.default, (mul,))
    for n in (mul, out):
        n.meta["val"] = val
    g.output(out)
    nested = P.alt("t1", one=P.alt("t2", two=P.op(aten.mul.Tensor, P._, 3.0)))
    outer = P.alt("outer", first=nested, second=P.op(aten.mul.Tensor, P.tensor("x"), 2.0))
    rule = Rule("tags", P.op(aten.neg.default, outer), _keep)
    got = both(rule, out)
    assert got[0] == "match"
    assert got[2] == {"outer": "second"}
    assert got[1] == {"x": x}
