"""Each DSL feature, positive and negative, on graphs exported with torch.export
(pre-dispatch, after run_decompositions(), static and dynamic shapes)."""

from __future__ import annotations

import operator

import pytest
import torch

from graphfuse import dsl as P

from ._models import aten, dims, export, gfmatch, matches, misses

X4 = (torch.randn(2, 3, 4, 16),)


@pytest.fixture(scope="module")
def softmax_eps() -> dict[str, torch.export.ExportedProgram]:
    fn = lambda x: torch.softmax(x, -1) + torch.log_softmax(x, dim=1)  # noqa: E731
    dyn = {"x": {0: dims("B")[0]}}
    return {
        "pre": export(fn, X4),
        "decomposed": export(fn, X4, decompose=True),
        "dynamic": export(fn, X4, dynamic_shapes=dyn),
    }


# ----------------------------------------------------------------------------- targets


def test_overload_matches_only_that_overload(softmax_eps):
    pat = P.op(aten.softmax.int, P.tensor("x"), -1)
    assert len(matches(softmax_eps["pre"], pat)) == 1
    assert len(matches(softmax_eps["dynamic"], pat)) == 1
    assert matches(softmax_eps["decomposed"], pat) == []  # there it is aten._softmax


def test_packet_matches_any_overload(softmax_eps):
    pat = P.op(aten._softmax, P.tensor("x"), 3)
    (m,) = matches(softmax_eps["decomposed"], pat)
    assert m.root.target is aten._softmax.default
    assert matches(softmax_eps["pre"], pat) == []
    assert matches(softmax_eps["pre"], P.op(aten.log_softmax, P._, 1))
    assert matches(softmax_eps["pre"], P.op(aten.sigmoid, P._)) == []


def test_set_of_targets(softmax_eps):
    pat = P.op({aten.softmax.int, aten._softmax.default}, P.tensor("x"), dim=-1)
    for kind in ("pre", "decomposed", "dynamic"):
        (m,) = matches(softmax_eps[kind], pat)
        assert m["x"].op == "placeholder"
    assert matches(softmax_eps["pre"], P.op({aten.relu.default, aten.tanh.default}, P._)) == []


# ----------------------------------------------------------------------------- captures


@pytest.fixture(scope="module")
def scaled() -> torch.export.ExportedProgram:
    return export(lambda x, y: (x * 2.0) + (y * x), (torch.randn(4, 8), torch.randn(4, 8)))


def test_tensor_capture_positive_and_negative(scaled):
    # two muls in the graph; only y * x has a tensor second operand (x * 2.0 has a number)
    (m,) = matches(scaled, P.op(aten.mul.Tensor, P.tensor("a"), P.tensor("b")))
    assert m["a"].name == "y" and m["b"].name == "x"
    assert isinstance(m.val("a"), torch.Tensor)
    why = misses(scaled, P.op(aten.mul.Tensor, P.tensor("a"), P.tensor("b")))
    assert why == ["rule probe at mul: b is the constant 2.0, not a tensor"]


def test_scalar_and_literal_captures(scaled):
    (m,) = matches(scaled, P.op(aten.mul.Tensor, P.tensor("x"), P.scalar("c")))
    assert m["c"] == 2.0 and m.val("c") == 2.0 and m["x"].name == "x"
    assert len(matches(scaled, P.op(aten.mul.Tensor, P._, 2.0))) == 1
    assert len(matches(scaled, P.op(aten.mul.Tensor, P._, 2))) == 1  # 2 == 2.0
    assert matches(scaled, P.op(aten.mul.Tensor, P._, 3.0)) == []
    # a scalar capture refuses a tensor node, a tensor capture refuses a number
    (only,) = matches(scaled, P.op(aten.mul.Tensor, P.tensor("x"), P.tensor("y")))
    assert only["y"].name == "x"
    assert matches(scaled, P.op(aten.mul.Tensor, P.scalar("c"), P._)) == []


def test_scalar_capture_binds_symint_node_on_dynamic_export():
    fn = lambda x: x * x.shape[0]  # noqa: E731
    ep = export(fn, (torch.randn(5, 3),), dynamic_shapes={"x": {0: dims("B")[0]}})
    (m,) = matches(ep, P.op(aten.mul, P.tensor("x"), P.scalar("n")))
    assert isinstance(m.val("n"), torch.SymInt)
    assert matches(ep, P.op(aten.mul, P.tensor("x"), P.tensor("n"))) == []


def test_any_capture_and_wildcard(scaled):
    got = matches(scaled, P.op(aten.mul.Tensor, P._, P.any("v")))
    assert sorted(str(m["v"]) for m in got) == ["2.0", "x"]
    got = matches(scaled, P.op(aten.mul.Tensor, P._, P._))
    assert len(got) == 2 and all(m.binds == {} for m in got)


def test_name_bound_twice_binds_the_same_node():
    x = P.tensor("x")
    pat = P.op(aten.mul, x, P.op(aten.sigmoid, x))
    same = export(lambda a: a * torch.sigmoid(a), (torch.randn(3, 4),))
    other = export(lambda a, b: a * torch.sigmoid(b), (torch.randn(3, 4), torch.randn(3, 4)))
    (m,) = matches(same, pat)
    assert m["x"].name == "a"
    assert matches(other, pat) == []
    assert misses(other, pat) == ["rule probe at mul: x would be both a and b"]


# ----------------------------------------------------------------------------- alternatives


def _spellings():
    x, s = P.tensor("x"), P.tensor("s")
    return P.alt(
        "spelling",
        div=P.op(aten.div.Tensor, x, s),
        mul=P.op(aten.mul.Tensor, x, P.op(aten.reciprocal, s)),
    )


@pytest.mark.parametrize(
    ("fn", "tag"),
    [(lambda x, s: x / s, "div"), (lambda x, s: x * s.reciprocal(), "mul")],
)
def test_tagged_alternatives_record_the_branch(fn, tag):
    ep = export(lambda x, s: torch.relu(fn(x, s)), (torch.randn(4, 8), torch.rand(1) + 1))
    (m,) = matches(ep, P.op(aten.relu, _spellings()))
    assert m.tag("spelling") == tag and m["s"].name == "s"


def test_alternatives_negative_and_untagged():
    ep = export(lambda x, s: torch.relu(x + s), (torch.randn(4, 8), torch.rand(1)))
    assert matches(ep, P.op(aten.relu, _spellings())) == []
    either = P.op(aten.sub.Tensor, P._, P._) | P.op(aten.add.Tensor, P._, P._)
    (m,) = matches(ep, P.op(aten.relu, either))
    assert m.tags == {}
    assert (
        matches(ep, P.op(aten.relu, P.op(aten.sub.Tensor, P._, P._) | P.op(aten.mul, P._, P._)))
        == []
    )


# ----------------------------------------------------------------------------- commutative


@pytest.mark.parametrize("swap", [False, True])
def test_commutative_operands(swap):
    from ._models import Silu

    ep = export(Silu(swap), (torch.randn(3, 4),))
    x = P.tensor("x")
    comm = P.op(aten.mul, x, P.op(aten.sigmoid, x), commutative=True)
    (m,) = matches(ep, comm)
    assert m["x"].name == "x"
    plain = P.op(aten.mul, x, P.op(aten.sigmoid, x))
    assert len(matches(ep, plain)) == (0 if swap else 1)


# ----------------------------------------------------------------------------- see-through chains

_LAYOUT = [aten.view, aten.reshape, aten.to, aten._to_copy, aten.clone]


@pytest.mark.parametrize("decompose", [False, True])
def test_maybe_sees_through_views_and_casts(decompose):
    fn = lambda x: torch.relu(x.view(6, 4).to(torch.float16).to(torch.float32))  # noqa: E731
    ep = export(fn, (torch.randn(2, 3, 4),), decompose=decompose)
    (m,) = matches(ep, P.op(aten.relu, P.maybe(_LAYOUT, P.tensor("x"), name="pre")))
    assert m["x"].name == "x"
    chain = m.chain("pre")
    assert len(chain) == 3 and chain[0] is m.root.args[0]  # outermost first
    assert [str(n.meta["val"].dtype) for n in chain] == [
        "torch.float32",
        "torch.float16",
        "torch.float32",
    ]


def test_maybe_with_nothing_to_see_through_and_negative():
    ep = export(lambda x: torch.relu(x) + torch.relu(x.sum(0)), (torch.randn(3, 4),))
    got = matches(ep, P.op(aten.relu, P.maybe(_LAYOUT, P.op(aten.sum, P._, P._), name="pre")))
    assert len(got) == 1 and got[0].chain("pre") == ()
    # the inner pattern must match after the chain
    assert matches(ep, P.op(aten.relu, P.maybe(_LAYOUT, P.op(aten.mean, P._)))) == []


# ----------------------------------------------------------------------------- type predicates


def test_dtype_rank_device_predicates():
    ep = export(
        lambda x, y: torch.relu(x) + torch.relu(y).float().sum(),
        (torch.randn(2, 3, 4), torch.randn(5).bfloat16()),
    )
    relu = lambda **kw: P.op(aten.relu, P.tensor("x", **kw))  # noqa: E731
    assert [m["x"].name for m in matches(ep, relu(dtype=torch.float32))] == ["x"]
    assert [m["x"].name for m in matches(ep, relu(dtype=[torch.float16, torch.bfloat16]))] == ["y"]
    assert matches(ep, relu(dtype=torch.float8_e4m3fn)) == []
    assert [m["x"].name for m in matches(ep, relu(rank=1))] == ["y"]
    assert matches(ep, relu(rank=2)) == []
    assert len(matches(ep, relu(device="cpu"))) == 2
    assert matches(ep, relu(device="cuda")) == []


def _scores(k_shape=("B", "H", "T", "D"), k_through=()):
    q = P.tensor("q", shape=["B", "H", "S", "D"])
    k = (
        P.maybe(list(k_through), P.tensor("k", shape=list(k_shape)))
        if k_through
        else P.tensor("k", shape=list(k_shape))
    )
    kt = P.op(aten.transpose.int, k, -1, -2)
    return P.op(aten.softmax.int, P.op(aten.matmul, q, kt), -1)


class _Attn(torch.nn.Module):
    def __init__(self, gqa: int = 1, heads: int | None = None) -> None:
        super().__init__()
        self.gqa, self.heads = gqa, heads

    def forward(self, q, k):
        if self.gqa > 1:
            k = k.repeat(1, self.gqa, 1, 1)[:, : self.heads]
        return torch.softmax(q @ k.transpose(-1, -2), dim=-1)


def _attn(d=16, s=5, t=5, hq=4, hkv=4, dynamic=None):
    args = (torch.randn(2, hq, s, d), torch.randn(2, hkv, t, d))
    mod = _Attn(hq // hkv + (hq % hkv > 0), hq) if hq != hkv else _Attn()
    return torch.export.export(mod, args, dynamic_shapes=dynamic)


@pytest.fixture(scope="module")
def attn() -> dict[str, torch.export.ExportedProgram]:
    b, s, d = dims("B", "S", "D")
    return {
        "d16": _attn(d=16),
        "d8": _attn(d=8),
        "cross": _attn(s=5, t=7),
        "dyn_bs": _attn(dynamic={"q": {0: b, 2: s}, "k": {0: b, 2: s}}),
        "dyn_d": _attn(dynamic={"q": {3: d}, "k": {3: d}}),
        "gqa": _attn(hq=8, hkv=2),
        "gqa_bad": _attn(hq=6, hkv=4),
    }


def test_named_dims_and_constraints_static(attn):
    check = lambda m: m.require("D % 16 == 0")  # noqa: E731
    (m,) = matches(attn["d16"], _scores(), check)
    assert m.dims == {"B": 2, "H": 4, "S": 5, "D": 16, "T": 5}
    assert matches(attn["d8"], _scores(), check) == []
    assert misses(attn["d8"], _scores(), check) == [
        "rule probe at softmax: D % 16 == 0 does not hold (D = 8)"
    ]


def test_a_dim_name_bound_twice_must_agree(attn):
    same_s = _scores(k_shape=("B", "H", "S", "D"))
    assert len(matches(attn["d16"], same_s)) == 1
    assert matches(attn["cross"], same_s) == []
    assert misses(attn["cross"], same_s) == [
        "rule probe at k: k has S = 7, but S = 5 elsewhere in the match"
    ]


def test_named_dims_on_dynamic_shapes(attn):
    check = lambda m: m.require("D % 16 == 0")  # noqa: E731
    (m,) = matches(attn["dyn_bs"], _scores(k_shape=("B", "H", "S", "D")), check)
    assert isinstance(m.dims["B"], torch.SymInt) and m.dims["D"] == 16
    # S is one symbol shared by q and k, so "S" bound twice agrees symbolically
    assert str(m.dims["S"]) == str(m.val("k").shape[2])
    # with D dynamic, D % 16 == 0 cannot be proven: the rule does not fire
    assert matches(attn["dyn_d"], _scores(), check) == []
    (why,) = misses(attn["dyn_d"], _scores(), check)
    assert why.startswith("rule probe at softmax: D % 16 == 0 cannot be proven (D = s")


def _gqa_pattern():
    # k.repeat(1, r, 1, 1)[:, :Hq] exports as repeat + slice (alias for a full slice)
    k = P.maybe([aten.repeat, aten.slice, aten.alias], P.tensor("k", shape=["B", "Hkv", "T", "D"]))
    q = P.tensor("q", shape=["B", "Hq", "S", "D"])
    return P.op(aten.softmax.int, P.op(aten.matmul, q, P.op(aten.transpose.int, k, -1, -2)), -1)


def test_gqa_head_constraint(attn):
    check = lambda m: m.require("Hq % Hkv == 0")  # noqa: E731
    (m,) = matches(attn["gqa"], _gqa_pattern(), check)
    assert (m.dims["Hq"], m.dims["Hkv"]) == (8, 2)
    assert len(m.chain("k")) == 0  # unnamed maybe: nothing recorded
    # Hq=6 over Hkv=4: the longest chain fails the check, so the matcher backtracks to a
    # shorter one (k bound to the 6-head slice), where the constraint holds
    (m,) = matches(attn["gqa_bad"], _gqa_pattern(), check)
    assert (m.dims["Hq"], m.dims["Hkv"]) == (6, 6) and m["k"].target is aten.slice.Tensor


def test_head_constraint_negative():
    cat = lambda hq, hkv: export(  # noqa: E731
        lambda q, k: torch.cat([q, k], dim=1), (torch.randn(1, hq, 3, 4), torch.randn(1, hkv, 3, 4))
    )
    q = P.tensor("q", shape=["B", "Hq", "S", "D"])
    k = P.tensor("k", shape=["B", "Hkv", "S", "D"])
    pat = P.op(aten.cat, [q, k], -3)
    check = lambda m: m.require("Hq % Hkv == 0")  # noqa: E731
    assert len(matches(cat(8, 2), pat, check)) == 1
    bad = cat(6, 4)
    assert matches(bad, pat, check) == []
    assert misses(bad, pat, check) == [
        "rule probe at cat: Hq % Hkv == 0 does not hold (Hq = 6, Hkv = 4)"
    ]


# ----------------------------------------------------------------------------- multi-output


def test_both_outputs_of_max_dim():
    ep = export(lambda x: x.max(dim=-1), (torch.randn(3, 5),))
    mx = P.op(aten.max.dim, P.tensor("x"), -1)
    pats = (P.getitem(mx, 0), P.getitem(mx, 1))
    (m,) = matches(ep, pats)
    assert [r.args[1] for r in m.roots] == [0, 1]
    # one output only: the other getitem is a user outside the match (an escape)
    assert matches(ep, P.getitem(mx, 0)) == []
    assert matches(ep, (P.getitem(mx, 0), P.getitem(mx, 1), P.op(aten.relu, P._))) == []


@pytest.mark.parametrize("decompose", [False, True])
def test_both_outputs_of_var_mean(decompose):
    ep = export(lambda x: torch.var_mean(x, dim=-1), (torch.randn(3, 5),), decompose=decompose)
    vm = P.op(aten.var_mean, P.tensor("x"), [1])
    (m,) = matches(ep, (P.getitem(vm, 0), P.getitem(vm, 1)))
    assert m["x"].name == "x"
    assert matches(ep, (P.getitem(P.op(aten.var_mean, P._, [0]), 0), P.getitem(vm, 1))) == []


def test_both_outputs_of_a_custom_op():
    ep = export(lambda x: gfmatch.minmax(x), (torch.randn(3, 5),))
    mm = P.op(gfmatch.minmax, P.tensor("x"))
    (m,) = matches(ep, (P.getitem(mm, 1), P.getitem(mm, 0)))
    assert [r.args[1] for r in m.roots] == [1, 0]
    assert m.root.target is operator.getitem
