"""What the ``trtllm`` checks leave in ``m.memo`` for the rewrite (sizes, mask, causal mode,
softmax scale, layout) is what the rewrite derives on its own from the match, for every
model of the suite."""

from __future__ import annotations

from typing import Any

import pytest

import graphfuse
from graphfuse.match import Match, match_rule
from graphfuse.patterns.trtllm import _rules

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
