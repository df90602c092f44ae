"""The Inductor pass is a CustomGraphPass whose uuid() follows the rule set."""

from __future__ import annotations

import textwrap

import pytest

import graphfuse

RULE_FILE = """
import torch
from graphfuse import Rule, RuleSet
from graphfuse import dsl as P

aten = torch.ops.aten
RULES = RuleSet("mine", [Rule(
    "relu_to_clamp",
    P.op(aten.relu.default, P.tensor("x")),
    lambda m, b: b.call(aten.clamp_min.default, m["x"], {bound}),
)])
"""


def _write(path, bound: str) -> str:
    path.write_text(textwrap.dedent(RULE_FILE.format(bound=bound)))
    return str(path)


def test_pass_is_an_inductor_custom_graph_pass():
    from torch._inductor.custom_graph_pass import CustomGraphPass, CustomInferenceAwareGraphPass

    gpass = graphfuse.inductor_pass()
    assert isinstance(gpass, CustomGraphPass)
    assert isinstance(gpass, CustomInferenceAwareGraphPass)
    assert gpass.uuid() == graphfuse.inductor_pass("trtllm").uuid()
    assert gpass.uuid().startswith("graphfuse:trtllm:")
    assert gpass.report is None


def test_uuid_changes_with_the_rules(tmp_path):
    trtllm = graphfuse.inductor_pass().uuid()
    path = _write(tmp_path / "mine.py", "0.0")
    first = graphfuse.inductor_pass(path).uuid()
    assert first != trtllm
    # Same rule names, different code: a different uuid (the source is hashed).
    _write(tmp_path / "mine.py", "0.0 + 0.0")
    assert graphfuse.inductor_pass(path).uuid() != first
    combined = graphfuse.load_patterns("trtllm") + graphfuse.load_patterns(path)
    assert graphfuse.inductor_pass(combined).uuid() not in (trtllm, first)


def test_bad_inner_is_one_clear_error():
    with pytest.raises(ValueError, match="compile_backend: inner is 'inductor' or 'eager'"):
        graphfuse.compile_backend(inner="aot_eager")
