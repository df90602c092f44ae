"""The commands that make rules visible, end to end at 80 columns: ``patterns --show``,
``explain --node``, ``apply --dry-run`` and ``apply -v`` on a user's rule file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
MODEL = """\
import torch

F8 = torch.float8_e4m3fn


class Quants(torch.nn.Module):
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


torch.manual_seed(0)
args = (torch.randn(8, 64), torch.tensor(2.0), torch.rand(1, 64) + 1)
torch.export.save(torch.export.export(Quants(), args), "quants.pt2")
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """my_rules.py, quants_model.py and the quants.pt2 it writes (run in that folder, so
    the stack traces name ``quants_model.py``), and fused.pt2 from ``apply``."""
    d = tmp_path_factory.mktemp("views")
    (d / "my_rules.py").write_text(RULES)
    (d / "quants_model.py").write_text(MODEL)
    subprocess.run([sys.executable, "quants_model.py"], cwd=d, check=True, timeout=600)
    res = gf("apply", "quants.pt2", "-p", "my_rules.py", "-o", "fused.pt2", cwd=d)
    assert res.returncode == 0, res.stderr
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


GRAPH = """\
quants.pt2 - 31 nodes, as graph code
x: f32[8, 64] = input
s: f32[] = input
s2: f32[1, 64] = input
div: f32[8, 64] = aten.div.Tensor(x, s)
div_1: f32[8, 64] = aten.div.Tensor(x, s)
clamp: f32[8, 64] = aten.clamp.default(div_1, -448, 448)
_assert_tensor_metadata_default = aten._assert_tensor_metadata.default(
    clamp, dtype=torch.float32, device='cpu', layout=torch.strided)
to: f8e4m3fn[8, 64] = aten.to.dtype(clamp, torch.float8_e4m3fn)
div_2: f32[8, 64] = aten.div.Tensor(x, s2)
clamp_1: f32[8, 64] = aten.clamp.default(div_2, -448, 448)
_assert_tensor_metadata_default_1 = aten._assert_tensor_metadata.default(
    clamp_1, dtype=torch.float32, device='cpu', layout=torch.strided)
to_1: f8e4m3fn[8, 64] = aten.to.dtype(clamp_1, torch.float8_e4m3fn)
div_3: f32[8, 64] = aten.div.Tensor(x, s)
clamp_2: f32[8, 64] = aten.clamp.default(div_3, -400, 400)
_assert_tensor_metadata_default_2 = aten._assert_tensor_metadata.default(
    clamp_2, dtype=torch.float32, device='cpu', layout=torch.strided)
to_2: f8e4m3fn[8, 64] = aten.to.dtype(clamp_2, torch.float8_e4m3fn)
reciprocal: f32[] = aten.reciprocal.default(s)
mul: f32[8, 64] = aten.mul.Tensor(x, reciprocal)
clamp_3: f32[8, 64] = aten.clamp.default(mul, -448, 448)
_assert_tensor_metadata_default_3 = aten._assert_tensor_metadata.default(
    clamp_3, dtype=torch.float32, device='cpu', layout=torch.strided)
to_3: f8e4m3fn[8, 64] = aten.to.dtype(clamp_3, torch.float8_e4m3fn)
_assert_tensor_metadata_default_4 = aten._assert_tensor_metadata.default(x,
    dtype=torch.float32, device='cpu', layout=torch.strided)
to_4: bf16[8, 64] = aten.to.dtype(x, torch.bfloat16)
div_4: bf16[8, 64] = aten.div.Tensor(to_4, s)
clamp_4: bf16[8, 64] = aten.clamp.default(div_4, -448, 448)
_assert_tensor_metadata_default_5 = aten._assert_tensor_metadata.default(
    clamp_4, dtype=torch.bfloat16, device='cpu', layout=torch.strided)
to_5: f8e4m3fn[8, 64] = aten.to.dtype(clamp_4, torch.float8_e4m3fn)
clamp_5: f32[8, 64] = aten.clamp.default(div, -448, 448)
_assert_tensor_metadata_default_6 = aten._assert_tensor_metadata.default(
    clamp_5, dtype=torch.float32, device='cpu', layout=torch.strided)
to_6: f8e4m3fn[8, 64] = aten.to.dtype(clamp_5, torch.float8_e4m3fn)
return (to, to_1, to_2, to_3, to_5, to_6, div)
"""


NODE = """\
clamp_2: f32[8, 64] = aten.clamp.default(div_3, -400, 400)
  File "quants_model.py", line 12, in forward: (x / s).clamp(-400, 400).to(F8),
  # another literal
Arguments

 name   value   note
 ───────────────────
 self   div_3
 min    -400
 max    400

Reads
  div_3: f32[8, 64] = aten.div.Tensor(x, s)
Read by
  _assert_tensor_metadata_default_2 = aten._assert_tensor_metadata.default(
      clamp_2, dtype=torch.float32, device='cpu', layout=torch.strided)
  to_2: f8e4m3fn[8, 64] = aten.to.dtype(clamp_2, torch.float8_e4m3fn)
"""


DIFF = """\
quants.pt2 -> fused.pt2
nodes: 31 -> 24 (-7)
Disappeared from quants.pt2

 op                                     count
 ────────────────────────────────────────────
 aten._assert_tensor_metadata.default      -2
 aten.clamp.default                        -2
 aten.to.dtype                             -2
 aten.div.Tensor                           -1
 aten.mul.Tensor                           -1
 aten.reciprocal.default                   -1

Appeared in fused.pt2

 op                                           count
 ──────────────────────────────────────────────────
 graphfuse.fp8_static_quant.default (fused)      +2

fused ops appeared: 2

@@ fp8_static_quant_default (graphfuse.fp8_static_quant.default)
- div_1: f32[8, 64] = aten.div.Tensor(x, s)
- clamp: f32[8, 64] = aten.clamp.default(div_1, -448, 448)
- _assert_tensor_metadata_default = aten._assert_tensor_metadata.default(
      clamp, dtype=torch.float32, device='cpu', layout=torch.strided)
- to: f8e4m3fn[8, 64] = aten.to.dtype(clamp, torch.float8_e4m3fn)
+ fp8_static_quant_default: f8e4m3fn[8, 64]
      = graphfuse.fp8_static_quant.default(x, s)
- return (to, to_1, to_2, to_3, to_5, to_6, div)
+ return (fp8_static_quant_default, to_1, to_2, fp8_static_quant_default_1,
      to_5, to_6, div)

@@ fp8_static_quant_default_1 (graphfuse.fp8_static_quant.default)
- reciprocal: f32[] = aten.reciprocal.default(s)
- mul: f32[8, 64] = aten.mul.Tensor(x, reciprocal)
- clamp_3: f32[8, 64] = aten.clamp.default(mul, -448, 448)
- _assert_tensor_metadata_default_3 = aten._assert_tensor_metadata.default(
      clamp_3, dtype=torch.float32, device='cpu', layout=torch.strided)
- to_3: f8e4m3fn[8, 64] = aten.to.dtype(clamp_3, torch.float8_e4m3fn)
+ fp8_static_quant_default_1: f8e4m3fn[8, 64]
      = graphfuse.fp8_static_quant.default(x, s)
- return (to, to_1, to_2, to_3, to_5, to_6, div)
+ return (fp8_static_quant_default, to_1, to_2, fp8_static_quant_default_1,
      to_5, to_6, div)
"""


def test_inspect_graph(files) -> None:
    assert _text(run(files, "inspect", "quants.pt2", "--graph")) == GRAPH
    res = run(files, "inspect", "quants.pt2", "--graph", "--json")
    code = json.loads(res.stdout)["code"]
    assert code[5] == "clamp: f32[8, 64] = aten.clamp.default(div_1, -448, 448)"


def test_inspect_node_lists_literal_arguments(files) -> None:
    assert _text(run(files, "inspect", "quants.pt2", "--node", "clamp_2")) == NODE
    info = json.loads(run(files, "inspect", "quants.pt2", "--node", "clamp_2", "--json").stdout)
    assert info["arguments"] == [
        {"name": "self", "value": "div_3", "how": ""},
        {"name": "min", "value": "-400", "how": ""},
        {"name": "max", "value": "400", "how": ""},
    ]
    assert info["source"].startswith('File "quants_model.py", line 12, in forward')


def test_inspect_diff_new_against_old_node_by_node(files) -> None:
    assert _text(run(files, "inspect", "fused.pt2", "--diff", "quants.pt2", "--nodes")) == DIFF
    res = run(files, "inspect", "fused.pt2", "--diff", "quants.pt2", "--nodes", "--json")
    delta = json.loads(res.stdout)
    assert delta["nodes"] == [31, 24] and delta["disappeared"]["aten.clamp.default"] == 2
    assert [len(h["removed"]) for h in delta["hunks"]] == [4, 5]
    assert [h["added"][0].split(":")[0] for h in delta["hunks"]] == [
        "fp8_static_quant_default",
        "fp8_static_quant_default_1",
    ]


def test_inspect_usage_errors(files) -> None:
    _error(run(files, "inspect", "quants.pt2", "--nodes"), "--nodes needs --diff", code=2)
    _error(run(files, "inspect", "quants.pt2", "--graph", "--node", "x"), "give one", code=2)


DRY_RUN = """\
Rule set mine (dry run)

 rule       would fire
 ─────────────────────
 my_quant            2

2 match(es) would fire; nothing was rewritten

Would fire: 2 match(es)
  my_quant at to  my_rules.py:27
    removes to, clamp, div_1
  my_quant at to_3  my_rules.py:27
    removes to_3, clamp_3, mul, reciprocal
wrote matches.json
"""


def test_apply_dry_run_lists_what_would_fire(files) -> None:
    """No -o needed; nothing but the report is written; the report's ``fired`` is what
    ``graphfuse.apply(..., dry_run=True).report.fired`` holds, and what a real apply fires."""
    import graphfuse
    from graphfuse.io import load_program

    before = sorted(p.name for p in files["dir"].iterdir())
    res = run(
        files, "apply", "quants.pt2", "-p", "my_rules.py", "--dry-run", "--json", "matches.json"
    )
    assert _text(res) == DRY_RUN
    report = json.loads((files["dir"] / "matches.json").read_text())
    (files["dir"] / "matches.json").unlink()
    assert sorted(p.name for p in files["dir"].iterdir()) == before
    assert report["dry_run"] and report["counts"] == {"my_quant": 2}
    rules = graphfuse.load_patterns(str(files["my_rules.py"]))
    ep = load_program(files["quants.pt2"])
    dry = graphfuse.apply(ep, rules, dry_run=True).report
    assert [f.to_dict() for f in dry.fired] == report["fired"]
    assert [(f.rule, f.root, f.removed) for f in dry.fired] == [
        ("my_quant", "to", ("to", "clamp", "div_1")),
        ("my_quant", "to_3", ("to_3", "clamp_3", "mul", "reciprocal")),
    ]
    assert dry.fired[0].where == f"{files['my_rules.py']}:27"
    done = graphfuse.apply(ep, rules).report
    assert [(f.rule, f.root, f.removed) for f in done.fired] == [
        (f.rule, f.root, f.removed) for f in dry.fired
    ]


def test_apply_dry_run_usage(files) -> None:
    _error(run(files, "apply", "quants.pt2", "--dry-run", "-o", "x.pt2"), "leave out -o", code=2)
    _error(run(files, "apply", "quants.pt2", "--dry-run", "--verify"), "--verify", code=2)
    _error(run(files, "apply", "quants.pt2"), "-o/--output (or --dry-run)", code=2)


EXPLAIN_STOP = """\
to_2: f8e4m3fn[8, 64] = aten.to.dtype(clamp_2, torch.float8_e4m3fn)
  File "quants_model.py", line 12, in forward: (x / s).clamp(-400, 400).to(F8),
  # another literal
Rule set mine: 1 rule(s) tried at to_2

my_quant  my_rules.py:27  (priority 0)
  stopped: argument 'min' of clamp_2 is -400; the pattern needs -448
  aten.to.dtype                               to_2
    aten.clamp                                clamp_2
      alt 'spelling'                          ✓
        div: aten.div.Tensor                  div_3
          P.tensor('x', dtype=torch.float32)  x
          P.tensor('s')                       s
        mul: aten.mul.Tensor  commutative …
      -448                                    ✗ -400  stopped here
      448
    torch.float8_e4m3fn
"""


EXPLAIN_CHECK = """\
to_1: f8e4m3fn[8, 64] = aten.to.dtype(clamp_1, torch.float8_e4m3fn)
  File "quants_model.py", line 11, in forward: (x / s2).clamp(-448, 448).to(F8),
  # the scale is [1, 64]: the check says no
Rule set mine: 1 rule(s) tried at to_1

my_quant  my_rules.py:27  (priority 0)
  the pattern matches; the check refuses: the scale s2 has shape [1, 64]; the
    rule needs a single element
  aten.to.dtype                               to_1
    aten.clamp                                clamp_1
      alt 'spelling'                          ✓
        div: aten.div.Tensor                  ✗ div_2
          P.tensor('x', dtype=torch.float32)  x
          P.tensor('s')                       s2
        mul: aten.mul.Tensor  commutative …
      -448                                    ✓
      448                                     ✓
    torch.float8_e4m3fn                       ✓
"""


EXPLAIN_INSIDE = """\
clamp_2: f32[8, 64] = aten.clamp.default(div_3, -400, 400)
  File "quants_model.py", line 12, in forward: (x / s).clamp(-400, 400).to(F8),
  # another literal
Rule set mine: 0 rule(s) tried at clamp_2
No rule is rooted at this node's op (rules are tried at their root op):
  my_quant: rooted at aten.to.dtype (its pattern uses this op inside: explain a
    node that reads it)
"""


def test_explain_node_marks_where_matching_stopped(files) -> None:
    assert _text(run(files, "explain", "quants.pt2", "-p", "my_rules.py", "--node", "to_2")) == (
        EXPLAIN_STOP
    )
    res = run(files, "explain", "quants.pt2", "-p", "my_rules.py", "--node", "to_2", "--json")
    (rule,) = json.loads(res.stdout)["rules"]
    assert rule["outcome"] == "structure" and rule["where"] == "my_rules.py:27"
    assert [r["state"] for r in rule["rows"]].count("stop") == 1
    stop = next(r for r in rule["rows"] if r["state"] == "stop")
    assert (stop["text"].strip(), stop["value"]) == ("-448", "-400")


def test_explain_node_check_refusal_and_one_rule(files) -> None:
    args = ("explain", "quants.pt2", "-p", "my_rules.py", "--node", "to_1", "--rule", "my_quant")
    assert _text(run(files, *args)) == EXPLAIN_CHECK


def test_explain_node_no_rule_rooted_there(files) -> None:
    res = run(files, "explain", "quants.pt2", "-p", "my_rules.py", "--node", "clamp_2")
    assert _text(res) == EXPLAIN_INSIDE


def test_explain_node_bundled_rules_at_a_fused_quant(files) -> None:
    """The bundled set at a quant it fuses: every rule rooted there, in sweep order."""
    res = run(files, "explain", "quants.pt2", "--node", "to", "--json")
    info = json.loads(res.stdout)
    assert [r["rule"] for r in info["rules"]][-1] == "fp8_static_quant"
    assert info["rules"][-1]["outcome"] == "match"
    priorities = [r["priority"] for r in info["rules"]]
    assert priorities == sorted(priorities, reverse=True)


def test_explain_node_errors(files) -> None:
    base = ("explain", "quants.pt2", "-p", "my_rules.py")
    _error(run(files, *base, "--node", "tooo"), "no node named 'tooo'", "similar: to")
    _error(run(files, *base, "--node", "to", "--rule", "nope"), "no rule 'nope'", "my_quant")
    _error(run(files, *base, "--rule", "my_quant"), "--rule needs --node", code=2)


def test_apply_verbose_lists_fired_and_time_per_rule(files) -> None:
    """``-v``: the matches that fired and each rule's cost. The six quants have seven
    aten.to.dtype nodes: two fire, the check refuses one, one escapes (and is tried again
    in the second sweep)."""
    import re

    import graphfuse
    from graphfuse.io import load_program

    res = run(
        files, "apply", "quants.pt2", "-p", "my_rules.py", "-o", "v.pt2", "-v", "--json", "v.json"
    )
    out = _text(res)
    assert (
        "Fired: 2 match(es)\n  my_quant at to  my_rules.py:27\n    removes to, clamp, div_1" in out
    )
    assert "Time per rule (2 sweep(s))" in out and "phases: copy " in out
    assert re.search(r"\n my_quant +8 +\d+\.\d\d +3 +2 +\d+\.\d\d\n", out), out
    stats = json.loads((files["dir"] / "v.json").read_text())["rule_stats"]["my_quant"]
    assert {k: stats[k] for k in ("candidates", "rejects", "rewrites")} == {
        "candidates": 8,
        "rejects": 3,
        "rewrites": 2,
    }
    assert stats["match_s"] > 0 and stats["rewrite_s"] > 0
    rules = graphfuse.load_patterns(str(files["my_rules.py"]))
    report = graphfuse.apply(load_program(files["quants.pt2"]), rules).report
    got = report.rule_stats["my_quant"]
    assert (got.candidates, got.rejects, got.rewrites) == (8, 3, 2)
    dry = graphfuse.apply(load_program(files["quants.pt2"]), rules, dry_run=True).report
    assert (dry.rule_stats["my_quant"].candidates, dry.rule_stats["my_quant"].rejects) == (7, 2)


DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


@pytest.mark.parametrize(
    "name",
    ["RULES", "MODEL", "SHOW", "GRAPH", "NODE", "DIFF", "DRY_RUN", "EXPLAIN_STOP", "EXPLAIN_CHECK"],
)
def test_docs_show_the_real_output(name: str) -> None:
    """docs/cli.md holds each golden output above word for word."""
    assert globals()[name] in DOCS.read_text()


OVERLAPS = """\
Overlaps: 2 match(es) lost to another
  my_quant lost to fp8_static_quant at to (same priority and root,
    earlier in the rule set)
  my_quant lost to fp8_static_quant at to_3 (same priority and root,
    earlier in the rule set)
"""


@pytest.mark.parametrize("mode", ["--dry-run", "-o"])
def test_apply_reports_a_rule_that_lost_a_tie(files, mode) -> None:
    """A user rule and a bundled rule of one priority at one root: the set named first wins,
    and apply says which rule lost where and why (in its report too)."""
    out = ["--dry-run"] if mode == "--dry-run" else ["-o", "tie.pt2"]
    args = ["apply", "quants.pt2", "-p", "trtllm", "-p", "my_rules.py", "--json", "tie.json"]
    assert OVERLAPS in _text(run(files, *args, *out))
    report = json.loads((files["dir"] / "tie.json").read_text())
    assert report["counts"]["fp8_static_quant"] == 3 and report["counts"]["my_quant"] == 0
    assert [(o["rule"], o["lost_to"], o["node"]) for o in report["overlaps"]] == [
        ("my_quant", "fp8_static_quant", "to"),
        ("my_quant", "fp8_static_quant", "to_3"),
    ]


def test_explain_ranks_near_misses_and_lists_matches_with_all(files) -> None:
    """Refusals of a whole match (the check, an escape) come before partial matches,
    whatever their place in the graph; --all adds what would fire."""
    res = run(files, "explain", "quants.pt2", "-p", "my_rules.py", "--all", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    nodes = [m["node"] for m in out["near_misses"]["my_quant"]]
    assert nodes == ["div_2", "div", "clamp_2", "to_4"]  # check, escape; then partial ones
    assert [(f["rule"], f["root"]) for f in out["fired"]] == [
        ("my_quant", "to"),
        ("my_quant", "to_3"),
    ]
    text = _text(run(files, "explain", "quants.pt2", "-p", "my_rules.py", "--all"))
    assert "Would fire: 2 match(es)" in text
    assert "Would fire" not in _text(run(files, "explain", "quants.pt2", "-p", "my_rules.py"))
