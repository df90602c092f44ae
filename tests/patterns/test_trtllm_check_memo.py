"""What the ``trtllm`` checks leave in ``m.memo`` for the rewrite (sizes, mask, causal mode,
softmax scale, layout) is what the rewrite derives on its own from the match, for every
model of the suite; and ``bhsd_layout`` is ``output_layout`` with sizes B, H, S, D."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import graphfuse
from graphfuse._match import Match
from graphfuse._match_rule import match_rule
from graphfuse.patterns.trtllm import _layout, _rules

from .conftest import CASES, exported


class _Calls:
    """Stands in for the Builder: records what ``_op_args`` asks it to build."""

    def call(self, target: Any, *args: Any) -> tuple:
        return ("call", target, args)


def _matches(name: str, kind: str) -> list[Match]:
    ep = exported(name, kind)[1]
    rules = graphfuse.load_patterns("trtllm")
    found = []
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        for rule in rules:
            m = match_rule(rule, node)
            if isinstance(m, Match):
                found.append(m)
    return found


@pytest.mark.parametrize("name", sorted(CASES))
def test_memo_is_what_the_rewrite_derives(name: str, kind: str) -> None:
    checked = 0
    for m in _matches(name, kind):
        if m.rule.name.startswith("paged") or "attention" not in m.memo:
            continue  # a rule that does not go through check_attention
        q, v = m.val("q"), m.val("v")
        assert m.memo["sizes"] == (q.shape[0], q.shape[1], q.shape[2], v.shape[3])
        with_memo = _rules._op_args(m, _Calls())  # type: ignore[arg-type]
        m.memo.clear()
        fresh = _rules._op_args(m, _Calls())  # type: ignore[arg-type]
        assert with_memo == fresh
        assert (m.memo["layout"] or "bhsd") == with_memo[9]
        checked += 1
    assert checked, f"no fused attention matched in {name}"


def test_bhsd_layout_is_output_layout() -> None:
    with torch._subclasses.fake_tensor.FakeTensorMode():
        out = torch.empty(2, 4, 8, 16)
        moved = out.transpose(1, 2)
        flat = torch.empty(2, 8, 64)
    g = torch.fx.Graph()
    start = g.placeholder("attn")
    start.meta["val"] = out
    tr = g.call_function(torch.ops.aten.transpose.int, (start, 1, 2))
    tr.meta["val"] = moved
    rs = g.call_function(torch.ops.aten.reshape.default, (tr, [2, 8, 64]))
    rs.meta["val"] = flat
    for chain in ((), (tr,), (rs, tr)):
        _layout._CACHE.clear()
        sizes = {"B": 2, "H": 4, "S": 8, "D": 16}
        want = _layout._simulate(start, chain, sizes)
        assert _layout.output_layout(start, chain, sizes) == want
        assert _layout.bhsd_layout(start, chain, (2, 4, 8, 16)) == want  # a cache hit
        assert _layout.output_layout(start, chain, sizes) == want
    assert [_layout._simulate(start, c, sizes) for c in ((), (tr,), (rs, tr))] == [
        "bhsd",
        "bshd",
        "bs(hd)",
    ]
