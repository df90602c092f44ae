"""A keyword pattern argument reads the node's argument however the node spells it: as a
keyword, positionally, or not at all (the schema default); with a tracer and without."""

from __future__ import annotations

import pytest
import torch

from graphfuse import Rule
from graphfuse import dsl as P
from graphfuse.match.args import normalize

from ._models import fake_input_graph
from ._outcomes import both
from ._outcomes import keep_root as _keep

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
    kind, binds, *_ = both(rule, node)
    assert kind == "match"
    assert binds["x"] is x
    assert binds["d"] == (None if spelled == "default" else torch.bfloat16)
    assert binds["d"] == normalize(node)[1]
