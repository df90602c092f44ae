"""Golden text of every renderer at 80 columns, no color."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

from graphfuse import dsl as P
from graphfuse.cli import _render, _tree

aten = torch.ops.aten

SUMMARY = {
    "inputs": [
        {"name": "x", "shape": [2, "s0", 128], "dtype": "bfloat16"},
        {"name": "mask", "shape": [2, 1, "s0", "s0"], "dtype": "bool"},
    ],
    "outputs": [
        {"name": "add_2", "shape": [2, "s0", 128], "dtype": "bfloat16"},
        {
            "name": "pair",
            "items": [{"shape": [2], "dtype": "float32"}, {"shape": [], "dtype": "int64"}],
        },
    ],
    "weights": {"parameters": 5, "buffers": 2, "constants": 0, "bytes": 98560},
    "nodes": 44,
    "ops": {"aten.linear.default": 4, "graphfuse.attention_fp8.default": 1, "aten.add.Tensor": 3},
    "fused_ops": {"graphfuse.attention_fp8.default": 1},
}
NODE = {
    "node": {
        "name": "attention_fp8",
        "op": "graphfuse.attention_fp8.default",
        "shape": [1, 16, 2, 64],
        "dtype": "float8_e4m3fn",
    },
    "source": 'File "model.py", line 63, in forward: o = F.scaled_dot_product_attention(',
    "code": "attention_fp8: f8e4m3fn[1, 16, 2, 64] = graphfuse.attention_fp8.default(q, k, v, "
    "None, True, 0.125, 'bhsd', 'default', out_scale)",
    "arguments": [
        {"name": "q", "value": "q", "how": ""},
        {"name": "attn_mask", "value": "None", "how": ""},
        {"name": "dim", "value": "-1", "how": "keyword; matched as 3"},
        {"name": "scale", "value": "None", "how": "default"},
    ],
    "inputs": [
        {
            "name": "q",
            "op": "aten.transpose.int",
            "shape": [1, 2, 16, 64],
            "dtype": "bfloat16",
            "code": "q: bf16[1, 2, 16, 64] = aten.transpose.int(view, 1, 2)",
        }
    ],
    "users": [],
}
DIFF = {
    "nodes": [58, 44],
    "disappeared": {"aten.reshape.default": 3, "aten.scaled_dot_product_attention.default": 1},
    "appeared": {"graphfuse.attention_fp8.default": 1},
    "fused_appeared": {"graphfuse.attention_fp8.default": 1},
}
GROUPS = {
    "attention_fp8_out": [
        {
            "node": "sdpa",
            "target": "aten.scaled_dot_product_attention",
            "reason": "the scale s has shape [1, 4096]; a static per-tensor scale has one element",
            "source": 'File "model.py", line 63, in forward: o = attn(q, k, v)',
        }
    ],
    "fp8_static_quant": [
        {
            "node": "div_1",
            "target": "aten.div.Tensor",
            "reason": "div_1 has another user (add_3) outside the match",
            "source": "",
        }
    ],
}
SETS = [
    {
        "name": "trtllm",
        "rules": [
            {
                "name": "attention_fp8_out",
                "doc": "Attention -> static FP8 output quant, fused into graphfuse::attention_fp8.",
                "location": "patterns/trtllm/_rules.py:263",
            },
            {"name": "q", "doc": "", "location": "my_rules.py:7"},
        ],
    },
    {"name": "mine", "rules": []},
]
CASES = [
    SimpleNamespace(
        name="fp8 out",
        counts={"attention_fp8_out": 2},
        nodes_before=110,
        nodes_after=84,
        agreement={"relative_l2_error": 0.00213},
        time_unfused_ms=12.5,
        time_fused_ms=5.0,
        speedup=2.5,
        region_before=["sdpa", "transpose", "div", "clamp", "to"],
        region_after=["attention_fp8"],
    )
]
_X = P.tensor("x", dtype=torch.float32)
_RECIP = P.op(aten.reciprocal, P.tensor("s"))
_SCALED = P.alt(
    "spelling",
    div=P.op(aten.div.Tensor, _X, P.tensor("s")),
    mul=P.op(aten.mul.Tensor, _X, _RECIP | P.op(aten.mul.Tensor, _RECIP, 1), commutative=True),
)
QUANT = P.op(
    aten.to.dtype,
    P.op(aten.clamp, P.maybe([aten.clone, aten.alias], _SCALED, name="copies"), -448, 448),
    torch.float8_e4m3fn,
)
RULE = {
    "rule": "my_quant",
    "rule_set": "mine",
    "location": "my_rules.py:14",
    "priority": 0,
    "doc": "(x / s).clamp(-448, 448).to(fp8) as graphfuse::fp8_static_quant.",
    "roots": ["aten.to.dtype"],
    "trees": _tree.rule_trees((QUANT,)),
    "check": {
        "name": "check_scale",
        "location": "my_rules.py:20",
        "source": ["def check_scale(m):", '    return m.single_element("s")'],
    },
    "rewrite": {"name": "quant", "location": "my_rules.py:24", "source": []},
}
CODE = [
    "x: f32[8, 64] = input",
    "s: f32[] = input",
    "div: f32[8, 64] = aten.div.Tensor(x, s)",
    "_assert_tensor_metadata_default = aten._assert_tensor_metadata.default(div, "
    "dtype=torch.float32, device='cpu', layout=torch.strided)",
    "to: f8e4m3fn[8, 64] = aten.to.dtype(div, torch.float8_e4m3fn)",
    "return (to,)",
]
HUNKS = [
    {
        "fused": ["fp8_static_quant_default (graphfuse.fp8_static_quant.default)"],
        "removed": [CODE[2], CODE[4]],
        "added": [
            "fp8_static_quant_default: f8e4m3fn[8, 64] = graphfuse.fp8_static_quant.default(x, s)"
        ],
        "changed": [["return (to,)", "return (fp8_static_quant_default,)"]],
    },
    {"fused": [], "removed": [CODE[3]], "added": [], "changed": []},
]
FIRED = [
    {
        "rule": "my_quant",
        "root": "to",
        "removed": ["to", "clamp", "div_1"],
        "where": "my_rules.py:27",
        "sweep": 1,
    },
    {
        "rule": "attention_fp8_out",
        "root": "to_17",
        "removed": [f"n_{i}" for i in range(14)],
        "where": "patterns/trtllm/_rules.py:305",
        "sweep": 2,
    },
]


def _row(text: str, value: str = "", state: str = "reached") -> dict[str, str]:
    return {"text": text, "value": value, "state": state}


EXPLAINED = {
    "node": "to_2",
    "code": "to_2: f8e4m3fn[8, 64] = aten.to.dtype(clamp_2, torch.float8_e4m3fn)",
    "source": 'File "quants_model.py", line 12, in forward: (x / s).clamp(-400, 400).to(F8)',
    "rule_set": "mine",
    "rules": [
        {
            "rule": "my_quant",
            "where": "my_rules.py:27",
            "priority": 0,
            "outcome": "structure",
            "reason": "argument 'min' of clamp_2 is -400; the pattern needs -448",
            "rows": [
                _row("aten.to.dtype", "to_2"),
                _row("  aten.clamp", "clamp_2"),
                _row(
                    "    maybe [aten.view, aten.reshape, aten._unsafe_view, aten.clone, "
                    "aten.alias]  name='layout'",
                    "through view_1, clone",
                ),
                _row("      aten.div.Tensor", "div_3"),
                _row("        P.tensor('x', dtype=torch.float32)", "x"),
                _row("        P.tensor('s')", "s"),
                _row("    -448", "-400", "stop"),
                _row("    448", "", "unreached"),
                _row("  torch.float8_e4m3fn", "", "unreached"),
            ],
        },
        {
            "rule": "scaled",
            "where": "my_rules.py:40",
            "priority": 10,
            "outcome": "check",
            "reason": "the scale s2 has shape [1, 64]; the rule needs a single element",
            "rows": [
                _row("aten.to.dtype", "to_2"),
                _row("  alt 'spelling'", "✓"),
                _row("    div: aten.div.Tensor", "div_3", "failed"),
                _row("    mul: aten.mul.Tensor  commutative …", "", "unreached"),
            ],
        },
        {
            "rule": "q",
            "where": "my_rules.py:50",
            "priority": 0,
            "outcome": "match",
            "reason": "matches: to_2, clamp_2, div_3",
            "rows": [_row("aten.to.dtype", "to_2")],
        },
    ],
    "elsewhere": [],
}
ELSEWHERE = {
    **EXPLAINED,
    "rules": [],
    "elsewhere": [
        {"rule": "my_quant", "roots": ["aten.to.dtype"], "uses_this_op": True},
        {"rule": "rms", "roots": ["aten.mul.Tensor"], "uses_this_op": False},
    ],
}
STATS = {
    "my_quant": {
        "candidates": 8,
        "match_s": 0.00051,
        "rejects": 3,
        "rewrite_s": 0.00178,
        "rewrites": 2,
    },
    "paged_decode_nvfp4_out": {
        "candidates": 0,
        "match_s": 0.0,
        "rejects": 0,
        "rewrite_s": 0.0,
        "rewrites": 0,
    },
    "attention_fp8_out": {
        "candidates": 4,
        "match_s": 0.0009,
        "rejects": 0,
        "rewrite_s": 0.00629,
        "rewrites": 1,
    },
}
OVERLAPS = [
    "my_quant lost to fp8_static_quant at to (same priority and root, earlier in the rule set)",
    "silu_mul_fp8 lost to rms_norm_fp8 at to_2 (priority 30 over 0)",
]


RENDERS = {
    "rule_stats": lambda c: _render.render_rule_stats(
        c, STATS, {"copy": 0.0007, "rewrite": 0.0082, "recompile": 0.0039}, 2
    ),
    "explain_node": lambda c: _render.render_explain_node(c, EXPLAINED),
    "explain_elsewhere": lambda c: _render.render_explain_node(c, ELSEWHERE),
    "overlaps": lambda c: _render.render_overlaps(c, OVERLAPS),
    "overlaps_none": lambda c: _render.render_overlaps(c, []),
    "fired": lambda c: _render.render_fired(c, FIRED, True),
    "fired_done": lambda c: _render.render_fired(c, FIRED[:1], False),
    "graph": lambda c: _render.render_graph(c, "model.pt2", CODE),
    "hunks": lambda c: _render.render_hunks(c, HUNKS),
    "hunks_none": lambda c: _render.render_hunks(c, []),
    "summary": lambda c: _render.render_summary(c, "model.pt2", SUMMARY, top=2),
    "node": lambda c: _render.render_node(c, NODE),
    "diff": lambda c: _render.render_diff(c, "a.pt2", "b.pt2", DIFF),
    "rule": lambda c: _render.render_rule(c, RULE),
    "rule_traced": lambda c: _render.render_rule(
        c,
        {
            **RULE,
            "doc": "",
            "trees": _tree.rule_trees((P.op(aten.gelu, _X, approximate="tanh"), _X)),
            "check": None,
            "rewrite": {"name": "the traced replacement (traced_rule)", "location": ""},
        },
    ),
    "counts": lambda c: _render.render_counts(
        c, "trtllm", {"attention_fp8_out": 2, "fp8_static_quant": 0}, False
    ),
    "counts_nothing": lambda c: _render.render_counts(c, "trtllm", {"attention_fp8_out": 0}, True),
    "verify": lambda c: _render.render_verify(
        c, [{"output": "0", "shape": "[2, 8]", "rel_l2": 0.00123, "max_abs": 0.0156}], True, 0.05
    ),
    "verify_bad": lambda c: _render.render_verify(
        c, [{"output": "0", "shape": "[2, 8]", "rel_l2": 0.31, "max_abs": 2.5}], False, 0.05
    ),
    "explain": lambda c: _render.render_explain(c, "trtllm", GROUPS),
    "explain_none": lambda c: _render.render_explain(c, "trtllm", {}),
    "patterns": lambda c: _render.render_patterns(c, SETS),
    "demo": lambda c: _render.render_demo(c, CASES),
}


GOLDEN = {
    "overlaps": """\

Overlaps: 2 match(es) lost to another
  my_quant lost to fp8_static_quant at to (same priority and root,
    earlier in the rule set)
  silu_mul_fp8 lost to rms_norm_fp8 at to_2 (priority 30 over 0)
""",
    "overlaps_none": "\n",  # nothing printed
    "rule_stats": """\

Time per rule (2 sweep(s))

 rule                     tried   match ms   rejects   rewrites   rewrite ms
 ───────────────────────────────────────────────────────────────────────────
 attention_fp8_out            4       0.90         0          1         6.29
 my_quant                     8       0.51         3          2         1.78
 paged_decode_nvfp4_out       0       0.00         0          0         0.00

phases: copy 0.7 ms, rewrite 8.2 ms, recompile 3.9 ms
""",
    "explain_node": """\
to_2: f8e4m3fn[8, 64] = aten.to.dtype(clamp_2, torch.float8_e4m3fn)
  File "quants_model.py", line 12, in forward: (x / s).clamp(-400, 400).to(F8)
Rule set mine: 3 rule(s) tried at to_2

my_quant  my_rules.py:27  (priority 0)
  stopped: argument 'min' of clamp_2 is -400; the pattern needs -448
  aten.to.dtype                                   to_2
    aten.clamp                                    clamp_2
      maybe [aten.view, aten.reshape, aten._unsafe_view, aten.clone,
          aten.alias]  name='layout'              through view_1, clone
        aten.div.Tensor                           div_3
          P.tensor('x', dtype=torch.float32)      x
          P.tensor('s')                           s
      -448                                        ✗ -400  stopped here
      448
    torch.float8_e4m3fn

scaled  my_rules.py:40  (priority 10)
  the pattern matches; the check refuses: the scale s2 has shape [1, 64]; the
    rule needs a single element
  aten.to.dtype                            to_2
    alt 'spelling'                         ✓
      div: aten.div.Tensor                 ✗ div_3
      mul: aten.mul.Tensor  commutative …

q  my_rules.py:50  (priority 0)
  matches here; the rewrite would remove to_2, clamp_2, div_3
  aten.to.dtype  to_2
""",
    "explain_elsewhere": """\
to_2: f8e4m3fn[8, 64] = aten.to.dtype(clamp_2, torch.float8_e4m3fn)
  File "quants_model.py", line 12, in forward: (x / s).clamp(-400, 400).to(F8)
Rule set mine: 0 rule(s) tried at to_2
No rule is rooted at this node's op (rules are tried at their root op):
  my_quant: rooted at aten.to.dtype (its pattern uses this op inside: explain a
    node that reads it)
  rms: rooted at aten.mul.Tensor
""",
    "fired": """\

Would fire: 2 match(es)
  my_quant at to  my_rules.py:27
    removes to, clamp, div_1
  attention_fp8_out at to_17 (sweep 2)  patterns/trtllm/_rules.py:305
    removes n_0, n_1, n_2, n_3, n_4, n_5, n_6, n_7, n_8, n_9, n_10, n_11,
      n_12, n_13
""",
    "fired_done": """\

Fired: 1 match(es)
  my_quant at to  my_rules.py:27
    removes to, clamp, div_1
""",
    "graph": """\
model.pt2 - 6 nodes, as graph code
x: f32[8, 64] = input
s: f32[] = input
div: f32[8, 64] = aten.div.Tensor(x, s)
_assert_tensor_metadata_default = aten._assert_tensor_metadata.default(div,
    dtype=torch.float32, device='cpu', layout=torch.strided)
to: f8e4m3fn[8, 64] = aten.to.dtype(div, torch.float8_e4m3fn)
return (to,)
""",
    "hunks": """\

@@ fp8_static_quant_default (graphfuse.fp8_static_quant.default)
- div: f32[8, 64] = aten.div.Tensor(x, s)
- to: f8e4m3fn[8, 64] = aten.to.dtype(div, torch.float8_e4m3fn)
+ fp8_static_quant_default: f8e4m3fn[8, 64]
      = graphfuse.fp8_static_quant.default(x, s)
- return (to,)
+ return (fp8_static_quant_default,)

@@ no fused op
- _assert_tensor_metadata_default = aten._assert_tensor_metadata.default(
      div, dtype=torch.float32, device='cpu', layout=torch.strided)
""",
    "hunks_none": """\

no node changed
""",
    "summary": """\
model.pt2 - 44 nodes
weights: 5 parameters, 2 buffers, 0 constants (96.2 KiB)
Inputs

 name   shape            dtype
 ────────────────────────────────
 x      [2, s0, 128]     bfloat16
 mask   [2, 1, s0, s0]   bool

Outputs

 name    shape          dtype
 ─────────────────────────────────────
 add_2   [2, s0, 128]   bfloat16
 pair    ([2], [])      float32, int64

Ops (3 kinds)

 op                                        count
 ───────────────────────────────────────────────
 aten.linear.default                           4
 graphfuse.attention_fp8.default (fused)       1
 ... 1 more kind(s)                            3

graphfuse ops: 1 call(s) of 1 kind(s)
""",
    "node": """\
attention_fp8: f8e4m3fn[1, 16, 2, 64] = graphfuse.attention_fp8.default(q,
    k, v, None, True, 0.125, 'bhsd', 'default', out_scale)
a graphfuse op: graphfuse.attention_fp8.default (fused)
  File "model.py", line 63, in forward: o = F.scaled_dot_product_attention(
Arguments

 name        value   note
 ─────────────────────────────────────────
 q           q
 attn_mask   None
 dim         -1      keyword; matched as 3
 scale       None    default

Reads
  q: bf16[1, 2, 16, 64] = aten.transpose.int(view, 1, 2)
Read by
  nothing
""",
    "diff": """\
a.pt2 -> b.pt2
nodes: 58 -> 44 (-14)
Disappeared from a.pt2

 op                                          count
 ─────────────────────────────────────────────────
 aten.reshape.default                           -3
 aten.scaled_dot_product_attention.default      -1

Appeared in b.pt2

 op                                        count
 ───────────────────────────────────────────────
 graphfuse.attention_fp8.default (fused)      +1

fused ops appeared: 1
""",
    "rule": """\
my_quant (rule set mine, priority 0)
defined at my_rules.py:14
(x / s).clamp(-448, 448).to(fp8) as graphfuse::fp8_static_quant.

Pattern, rooted at aten.to.dtype
  aten.to.dtype
    aten.clamp
      maybe [aten.clone, aten.alias]  name='copies'
        alt 'spelling'
          div: aten.div.Tensor
            P.tensor('x', dtype=torch.float32)
            P.tensor('s')
          mul: aten.mul.Tensor  commutative
            P.tensor('x', dtype=torch.float32)
            alt
              | aten.reciprocal  [1]
                P.tensor('s')
              | aten.mul.Tensor
                aten.reciprocal  [1] as above
                1
      -448
      448
    torch.float8_e4m3fn

Check: check_scale  my_rules.py:20
  def check_scale(m):
      return m.single_element("s")
Also checked: a name bound twice binds one value; no matched node but the
root(s) is used outside the match.

Rewrite: quant  my_rules.py:24
""",
    "rule_traced": """\
my_quant (rule set mine, priority 0)
defined at my_rules.py:14

Pattern, rooted at aten.to.dtype
  root 1 (the anchor):
    aten.gelu
      P.tensor('x', dtype=torch.float32)
      approximate='tanh'
  root 2 (found among the users of the nodes above):
    P.tensor('x', dtype=torch.float32)

Check: none
Also checked: a name bound twice binds one value; no matched node but the
root(s) is used outside the match.

Rewrite: the traced replacement (traced_rule)
""",
    "counts": """\
Rule set trtllm

 rule                rewrites
 ────────────────────────────
 attention_fp8_out          2
 fp8_static_quant           0

2 rewrite(s)
""",
    "counts_nothing": """\
Rule set trtllm (dry run)

 rule                would fire
 ──────────────────────────────
 attention_fp8_out            0

0 match(es) would fire; nothing was rewritten
""",
    "verify": """\
Verify (random inputs)

 output   shape    rel. L2 error   max abs diff
 ──────────────────────────────────────────────
 0        [2, 8]   0.00123         0.0156

outputs agree (relative L2 error <= 0.05)
""",
    "verify_bad": """\
Verify (random inputs)

 output   shape    rel. L2 error   max abs diff
 ──────────────────────────────────────────────
 0        [2, 8]   0.31            2.5

outputs DISAGREE (relative L2 error > 0.05)
""",
    "explain": """\
Rule set trtllm: 2 near miss(es)

attention_fp8_out (1)
  sdpa (aten.scaled_dot_product_attention)
    the scale s has shape [1, 4096]; a static per-tensor scale has one element
    File "model.py", line 63, in forward: o = attn(q, k, v)

fp8_static_quant (1)
  div_1 (aten.div.Tensor)
    div_1 has another user (add_3) outside the match
""",
    "explain_none": """\
Rule set trtllm: 0 near miss(es)
no near misses: every rule either fired or found no candidate
""",
    "patterns": """\
trtllm (2 rules)
  attention_fp8_out  patterns/trtllm/_rules.py:263
    Attention -> static FP8 output quant, fused into graphfuse::attention_fp8.
  q                  my_rules.py:7

mine (0 rules)
""",
    "demo": """\
fp8 out - attention_fp8_out=2
  nodes: 110 -> 84
  agreement with the unfused program: relative L2 error 0.00213
  time: 12.50 ms unfused, 5.00 ms fused (2.50x)
  before: sdpa -> transpose -> div -> clamp -> to
  after: attention_fp8
""",
}


def _render_text(fn) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=80, color_system=None, force_terminal=False, highlight=False)
    fn(console)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_golden(name: str) -> None:
    assert _render_text(RENDERS[name]) == GOLDEN[name]


def test_every_renderer_has_a_golden() -> None:
    public = {n for n in dir(_render) if n.startswith("render_")}
    # a golden named X or X_<case> covers render_X
    covered = {
        fn for fn in public for key in RENDERS if key == fn[7:] or key.startswith(fn[7:] + "_")
    }
    assert public <= covered, public - covered


def test_lines_fit_80_columns() -> None:
    for name, fn in RENDERS.items():
        for line in _render_text(fn).splitlines():
            assert len(line) <= 80, (name, line)


def test_tree_wraps_long_labels_at_separators() -> None:
    chain = P.maybe([aten.view, aten.reshape, aten._unsafe_view, aten.clone], _X, name="layout")
    lines = _tree.shown(_tree.rule_trees((P.op(aten.relu, chain),)), 40)
    assert lines == [
        "aten.relu",
        "  maybe [aten.view, aten.reshape,",
        "      aten._unsafe_view, aten.clone]",
        "      name='layout'",
        "    P.tensor('x', dtype=torch.float32)",
    ]
