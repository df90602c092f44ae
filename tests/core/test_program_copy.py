"""The program copy that ``apply`` rewrites: the same graph as fx's own ``graph_copy``."""

from __future__ import annotations

import torch
from torch import fx

from graphfuse import _program
from graphfuse._program import copy_graph_module


class _Block(torch.nn.Module):
    def forward(self, x: torch.Tensor, input: torch.Tensor) -> tuple[torch.Tensor, ...]:  # noqa: A002
        a = torch.softmax(x @ input.transpose(-1, -2) * 0.5, dim=-1)
        b = a.clamp(min=-1.0, max=1.0).to(torch.bfloat16)
        return b, torch.cat([a, a], dim=0).sum(dim=(0, 1), keepdim=True)


def _describe(graph: fx.Graph) -> list[tuple]:
    def arg(a: object) -> object:
        return fx.map_arg(a, lambda n: ("node", n.name))

    return [(n.name, n.op, n.target, arg(n.args), arg(n.kwargs), n.type) for n in graph.nodes]


def test_fast_copy_equals_fx_graph_copy() -> None:
    ep = torch.export.export(_Block(), (torch.randn(2, 3, 4), torch.randn(2, 3, 4)))
    src = ep.graph_module
    assert _program.FAST, "torch's Graph lost an internal the fast copy uses"
    fast = copy_graph_module(src)
    ref_graph = fx.Graph()
    ref_map: dict[fx.Node, fx.Node] = {}
    value, old_out = ref_graph.graph_copy(src.graph, ref_map, return_output_node=True)
    ref_graph.output(value)
    for old, new in ref_map.items():  # what copy_graph_module does after fx's copy
        new.name = old.name
    assert _describe(fast.graph) == _describe(ref_graph)
    fast.graph.lint()
    for old, new in zip(src.graph.nodes, fast.graph.nodes):
        assert new is not old and new.graph is fast.graph
        assert new.meta == old.meta and new.meta is not old.meta  # shallow copy
        assert set(u.name for u in new.users) == set(u.name for u in old.users)
    # the op index is filled: find_nodes sees the copied calls
    for target in {n.target for n in src.graph.nodes if n.op == "call_function"}:
        want = [n.name for n in src.graph.find_nodes(op="call_function", target=target)]
        got = [n.name for n in fast.graph.find_nodes(op="call_function", target=target)]
        assert got == want
    for op in ("placeholder", "output"):
        assert [n.name for n in fast.graph.find_nodes(op=op)] == [
            n.name for n in src.graph.find_nodes(op=op)
        ]
    x, y = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    for a, b in zip(fast(x, y), src(x, y)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # the copy is independent: erasing in it leaves the source alone
    n_src = len(src.graph.nodes)
    sums = fast.graph.find_nodes(op="call_function", target=torch.ops.aten.sum.dim_IntList)
    assert sums
    out = fast.graph.output_node()
    out.args = ((out.args[0][0], out.args[0][0]),)
    fast.graph.erase_node(sums[0])
    assert len(src.graph.nodes) == n_src


def test_fallback_copy_is_fx_graph_copy(monkeypatch) -> None:
    ep = torch.export.export(_Block(), (torch.randn(2, 3, 4), torch.randn(2, 3, 4)))
    fast = copy_graph_module(ep.graph_module)
    monkeypatch.setattr(_program, "FAST", False)
    slow = copy_graph_module(ep.graph_module)
    assert _describe(fast.graph) == _describe(slow.graph)


def test_create_name_gives_fx_names_and_state() -> None:
    """graphfuse's name creation (the copy's, the rewrite's) names exactly as fx's
    ``_Namespace``: the same names and namespace state, over edge cases and random
    candidates."""
    import random

    from torch.fx import graph as fx_graph

    from graphfuse._fxedit import create_name

    rng = random.Random(0)
    pool = ["to", "to_1", "a_", "_1", "a__1", "a_01", "if", "input", "list", "x.y", "3d", ""]
    pool += ["conv_2_3", "é", "a_1_2", "_", "__", "mul_9", "mul", "mul", "mul_1", "a٣_1"]
    pool += ["".join(rng.choice("ab_1_0") for _ in range(rng.randint(1, 8))) for _ in range(5000)]
    ours, theirs = fx_graph._Namespace(), fx_graph._Namespace()
    for candidate in pool:
        assert create_name(ours, candidate) == theirs.create_name(candidate, None), candidate
    assert ours._used_names == theirs._used_names
    assert ours._base_count == theirs._base_count


def test_recompile_generates_fx_code_and_keeps_the_node_table() -> None:
    """``_program.recompile`` hides the find-nodes table from fx's repr override only
    while generating code: the same code as ``GraphModule.recompile``, and the table is
    the graph's own again afterwards (with every node still filed, also after a raise)."""
    ep = torch.export.export(_Block(), (torch.randn(2, 4, 8), torch.randn(2, 4, 8)))
    gm = copy_graph_module(ep.graph_module)
    table = gm.graph._find_nodes_lookup_table
    gm.recompile()
    expected = gm.code
    _program.recompile(gm)
    assert gm.code == expected
    assert gm.graph._find_nodes_lookup_table is table
    gm.graph.lint()  # checks every node is in the table
    softmax = gm.graph.find_nodes(op="call_function", target=torch.ops.aten.softmax.int)
    assert [n.name for n in softmax] == [
        n.name for n in gm.graph.nodes if n.target is torch.ops.aten.softmax.int
    ]

    class Boom(Exception):
        pass

    def fail(*args: object, **kwargs: object) -> None:
        raise Boom

    gm.graph.python_code = fail  # type: ignore[method-assign]
    try:
        _program.recompile(gm)
    except Boom:
        pass
    assert gm.graph._find_nodes_lookup_table is table
