"""The commands that make rules visible, end to end at 80 columns: ``patterns --show``,
``explain --node``, ``apply --dry-run`` and ``apply -v`` on a user's rule file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.cli.test_cli_e2e import _error, gf

RULES = '''\
import torch

import graphfuse
from graphfuse import dsl as P

aten = torch.ops.aten

x = P.tensor("x", dtype=torch.float32)
scaled = P.alt(
    "spelling",
    div=P.op(aten.div.Tensor, x, P.tensor("s")),
    mul=P.op(aten.mul.Tensor, x, P.op(aten.reciprocal, P.tensor("s")), commutative=True),
)
QUANT = P.op(aten.to.dtype, P.op(aten.clamp, scaled, -448, 448), torch.float8_e4m3fn)


def check_scale(m):
    """The scale is one number."""
    return m.single_element("s")


def quant(m, b):
    """(x / s).clamp(-448, 448).to(fp8) as graphfuse::fp8_static_quant."""
    return b.call(torch.ops.graphfuse.fp8_static_quant.default, m["x"], m["s"])


RULES = graphfuse.RuleSet("mine", [graphfuse.Rule("my_quant", QUANT, quant, check_scale)])
'''
F8 = torch.float8_e4m3fn


class _Quants(torch.nn.Module):
    def forward(self, x, s, s2):
        y = x / s
        return (
            (x / s).clamp(-448, 448).to(F8),  # fires
            (x / s2).clamp(-448, 448).to(F8),  # the scale is [1, 64]: the check says no
            (x / s).clamp(-400, 400).to(F8),  # another literal
            (x * torch.reciprocal(s)).clamp(-448, 448).to(F8),  # fires (the mul spelling)
            (x.to(torch.bfloat16) / s).clamp(-448, 448).to(F8),  # dtype
            y.clamp(-448, 448).to(F8),  # escape: y is an output too
            y,
        )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("views")
    (d / "my_rules.py").write_text(RULES)
    args = (torch.randn(8, 64), torch.tensor(2.0), torch.rand(1, 64) + 1)
    torch.export.save(torch.export.export(_Quants(), args), d / "quants.pt2")
    return {p.name: p for p in d.iterdir()} | {"dir": d}


def run(files, *args: object):
    """``graphfuse ARGS`` in the folder of the rule file and the program (paths as a user
    in that folder types them)."""
    return gf(*args, cwd=files["dir"])


def _text(res) -> str:
    assert res.returncode == 0, res.stderr
    text = res.stdout
    assert max(len(line) for line in text.splitlines()) <= 80, text
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


SHOW = """\
my_quant (rule set mine, priority 0)
defined at my_rules.py:27
(x / s).clamp(-448, 448).to(fp8) as graphfuse::fp8_static_quant.

Pattern, rooted at aten.to.dtype
  aten.to.dtype
    aten.clamp
      alt 'spelling'
        div: aten.div.Tensor
          P.tensor('x', dtype=torch.float32)
          P.tensor('s')
        mul: aten.mul.Tensor  commutative
          P.tensor('x', dtype=torch.float32)
          aten.reciprocal
            P.tensor('s')
      -448
      448
    torch.float8_e4m3fn

Check: check_scale  my_rules.py:17
  def check_scale(m):
      \"\"\"The scale is one number.\"\"\"
      return m.single_element("s")
Also checked: a name bound twice binds one value; no matched node but the
root(s) is used outside the match.

Rewrite: quant  my_rules.py:22
"""


def test_patterns_show(files) -> None:
    assert _text(run(files, "patterns", "-p", "my_rules.py", "--show", "my_quant")) == SHOW


def test_patterns_show_json(files) -> None:
    res = run(files, "patterns", "-p", "my_rules.py", "--show", "my_quant", "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["rule"] == "my_quant" and info["rule_set"] == "mine"
    assert info["location"] == "my_rules.py:27" and info["roots"] == ["aten.to.dtype"]
    assert info["pattern"].startswith("P.op(aten.to.dtype, P.op(aten.clamp, P.alt('spelling'")
    assert info["tree"][:2] == ["aten.to.dtype", "  aten.clamp"]
    assert info["check"]["name"] == "check_scale" and info["check"]["source"][0].startswith("def")
    assert info["rewrite"]["location"] == "my_rules.py:22"


def test_patterns_show_bundled_rule(files) -> None:
    res = gf("patterns", "--show", "fp8_static_quant")
    assert res.returncode == 0, res.stderr
    assert "defined at patterns/trtllm/_rules.py:" in res.stdout
    assert "alt 'quant_spelling'  [2]" in res.stdout and "[2] as above" in res.stdout
    assert "Check: _check_quant  patterns/trtllm/_rules.py:" in res.stdout


def test_patterns_show_unknown_rule(files) -> None:
    _error(gf("patterns", "--show", "fp8_statc_quant"), "no rule named", "fp8_static_quant")


DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


@pytest.mark.parametrize("name", ["RULES", "SHOW"])
def test_docs_show_the_real_output(name: str) -> None:
    """docs/cli.md holds each golden output above word for word."""
    assert globals()[name] in DOCS.read_text()
