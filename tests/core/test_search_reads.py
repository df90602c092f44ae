"""A plan that reads no dims, at a node that does not spell every argument it reads
positionally, is read by generated code inline (``_codegen._read_inline``): keyword,
else positional argument, else schema default, as ``_Plan.read`` and the traced path."""

from __future__ import annotations

import re

import pytest
import torch

from graphfuse import Rule
from graphfuse import dsl as P
from graphfuse._engine import compiled
from graphfuse._matcher import _Tracer
from tests.core._models import fake_input_graph
from tests.core._outcomes import keep_root as _keep
from tests.core._outcomes import match_outcome as _outcome

aten = torch.ops.aten


@pytest.mark.parametrize("spelled", ["keyword", "default", "positional"])
def test_keyword_positional_and_default_reads(spelled: str) -> None:
    g, x, val = fake_input_graph(2, 3)
    kwargs = {"dtype": torch.bfloat16} if spelled == "keyword" else {}
    args = (x, torch.bfloat16) if spelled == "positional" else (x,)
    target = aten.to.dtype if spelled == "positional" else aten._to_copy.default
    node = g.call_function(target, args, kwargs)
    node.meta["val"] = val
    g.output(node)
    rule = Rule("r", P.op(target, P.tensor("x"), dtype=P.any("d")), _keep)
    plan = compiled(rule.patterns[0]).plan_for(target)
    assert plan.direct and plan.reads is not None
    *fast, fast_visits = _outcome(rule, node, None)
    *traced, traced_visits = _outcome(rule, node, _Tracer())
    assert fast == traced and fast_visits == traced_visits
    fast = fast[0]
    assert fast["x"] is x
    assert fast["d"] == (None if spelled == "default" else torch.bfloat16)
    source = plan.code().source
    assert ".read(" not in source and re.search(r"kw\d+ = value\._?kwargs", source)
