"""load_patterns errors, RuleSet composition, and rule locations."""

from __future__ import annotations

import inspect
import textwrap

import pytest
import torch

import graphfuse
from graphfuse import dsl as P

aten = torch.ops.aten

RULE_FILE = """
import torch
import graphfuse
from graphfuse import dsl as P

aten = torch.ops.aten
x = P.tensor("x")
RULES = graphfuse.RuleSet("mine", [
    graphfuse.Rule("relu_relu", P.op(aten.relu, P.op(aten.relu, x)),
                   lambda m, b: b.call(aten.relu.default, m["x"])),
])
"""


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def _one_line_error(arg):
    with pytest.raises(graphfuse.PatternLoadError) as err:
        graphfuse.load_patterns(arg)
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_loads_a_user_file(tmp_path):
    path = _write(tmp_path, "mine.py", RULE_FILE)
    rs = graphfuse.load_patterns(path)
    assert rs.name == "mine" and [r.name for r in rs] == ["relu_relu"]
    assert rs["relu_relu"].where == f"{path}:9"


def test_unknown_name():
    msg = _one_line_error("no_such_rules")
    assert msg.startswith("unknown rule set 'no_such_rules'; bundled: ")
    assert msg.endswith("(or give a path to a .py rule file)")


def test_missing_file(tmp_path):
    path = str(tmp_path / "absent.py")
    assert _one_line_error(path) == f"rule file {path} does not exist or is not a file"


def test_syntax_error(tmp_path):
    path = _write(tmp_path, "broken.py", "x = 1\ndef f(:\n    pass\n")
    assert _one_line_error(path) == f"rule file {path} has a syntax error at line 2: invalid syntax"


def test_raising_at_import(tmp_path):
    path = _write(
        tmp_path, "raises.py", "import os\n\nraise RuntimeError('no GPU here\\nsecond line')\n"
    )
    assert _one_line_error(path) == (
        f"rule file {path} raised RuntimeError at import (line 3): no GPU here"
    )


def test_no_rule_set_in_file(tmp_path):
    path = _write(tmp_path, "empty.py", "x = 1\n")
    assert _one_line_error(path) == (
        f"rule file {path} defines 0 RuleSet values and no RULES; "
        "name the one to use RULES = RuleSet(...)"
    )


def test_not_a_name():
    assert _one_line_error("") == "a rule set is a name or a .py path, not ''"


def _rule(name, **kw):
    return graphfuse.Rule(name, P.op(aten.relu, P.tensor("x")), lambda m, b: m["x"], **kw)


def test_rule_set_plus_and_duplicates():
    a, b, c = _rule("a"), _rule("b"), _rule("c")
    both = graphfuse.RuleSet("one", [a, b]) + graphfuse.RuleSet("two", [c])
    assert both.name == "one+two" and [r.name for r in both] == ["a", "b", "c"]
    assert len(both) == 3 and both["c"] is c
    with pytest.raises(KeyError, match="rule set one\\+two has no rule 'd'"):
        both["d"]
    with pytest.raises(ValueError, match=r"rule set x: duplicate rule names \['a'\]"):
        graphfuse.RuleSet("x", [a, b, _rule("a")])
    with pytest.raises(ValueError, match=r"duplicate rule names \['a'\]"):
        graphfuse.RuleSet("one", [a]) + graphfuse.RuleSet("two", [_rule("a")])
    assert graphfuse.load_patterns(both) is both


def test_rule_location_points_at_this_file():
    line = inspect.currentframe().f_lineno + 1
    rule = _rule_here()
    assert rule.where == f"{__file__}:{_RULE_LINE}"
    assert repr(rule) == f"Rule('here', defined at {__file__}:{_RULE_LINE})"
    assert line > 0


_RULE_LINE = inspect.currentframe().f_lineno + 4


def _rule_here():
    return graphfuse.Rule("here", P.op(aten.relu, P.tensor("x")), lambda m, b: m["x"])


def test_rule_doc_from_rewrite_docstring():
    def rewrite(m, b):
        """Fuse the relu.

        More text."""
        return m["x"]

    rule = graphfuse.Rule("d", P.op(aten.relu, P.tensor("x")), rewrite)
    assert rule.doc == "Fuse the relu."

    def wrapped(m, b):
        """Fuse x.relu() (any
        dtype) into one op. More text."""
        return m["x"]

    rule = graphfuse.Rule("w", P.op(aten.relu, P.tensor("x")), wrapped)
    assert rule.doc == "Fuse x.relu() (any dtype) into one op."

    def abbreviated(m, b):
        """Fuse a unary op, e.g. relu, i.e. one
        call. More text."""
        return m["x"]

    rule = graphfuse.Rule("a", P.op(aten.relu, P.tensor("x")), abbreviated)
    assert rule.doc == "Fuse a unary op, e.g. relu, i.e. one call."


def test_rules_must_be_rooted_at_an_op():
    with pytest.raises(ValueError, match="must be rooted at an op call"):
        graphfuse.Rule("bad", P.tensor("x"), lambda m, b: None)
    with pytest.raises(TypeError, match="rule bad: pattern must be a dsl Pattern"):
        graphfuse.Rule("bad", torch.relu, lambda m, b: None)
