"""Every subcommand end to end: ``python -m graphfuse ...`` in a subprocess at COLUMNS=80."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from graphfuse.demo import DemoDecoder, demo_inputs
from graphfuse.io.pt2 import load_program

_OPS_MOD = """
import torch

@torch.library.custom_op("gfclilib::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2

@twice.register_fake
def _(x):
    return torch.empty_like(x)
"""
_MAKE_OP = """
import sys, torch
import gf_cli_ops

class A(torch.nn.Module):
    def forward(self, x):
        return torch.ops.gfclilib.twice(x) + 1

torch.export.save(torch.export.export(A(), (torch.randn(3),)), sys.argv[1])
"""


class _Plain(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cli")
    torch.manual_seed(0)
    model = DemoDecoder(1, 128, 2, 1, "fp8").to(torch.bfloat16).eval()
    ep = torch.export.export(model, demo_inputs(1, 16, 128, 64, torch.bfloat16))
    torch.export.save(ep, d / "attn.pt2")
    torch.export.save(torch.export.export(_Plain(), (torch.randn(4),)), d / "plain.pt2")
    (d / "gf_cli_ops.py").write_text(_OPS_MOD)
    (d / "make_op.py").write_text(_MAKE_OP)
    env = {**os.environ, "PYTHONPATH": str(d)}
    subprocess.run(
        [sys.executable, str(d / "make_op.py"), str(d / "op.pt2")], env=env, check=True, cwd=d
    )
    (d / "notzip.pt2").write_text("not a zip\n")
    (d / "folder.pt2").mkdir()
    data = (d / "attn.pt2").read_bytes()
    (d / "cut.pt2").write_bytes(data[: len(data) // 2])
    (d / "syntax_rules.py").write_text("RULES = (\n")
    (d / "raising_rules.py").write_text("import graphfuse\nraise RuntimeError('no rules here')\n")
    (d / "my_rules.py").write_text("import graphfuse\nRULES = graphfuse.load_patterns('trtllm')\n")
    # a program whose sample inputs would run code when unpickled unrestricted
    buf = io.BytesIO()
    torch.save(((torch.randn(4),), {"x": _Opens(str(d / "PWNED"))}), buf)
    with zipfile.ZipFile(d / "plain.pt2") as zin, zipfile.ZipFile(d / "evil.pt2", "w") as zout:
        for info in zin.infolist():
            evil = info.filename.endswith("data/sample_inputs/model.pt")
            zout.writestr(info.filename, buf.getvalue() if evil else zin.read(info))
    return {p.name: p for p in d.iterdir()} | {"dir": d}


class _Opens:
    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


def gf(*args: object, cwd: Path | None = None, pythonpath: Path | None = None):
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}
    env.pop("GRAPHFUSE_DEBUG", None)
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [sys.executable, "-m", "graphfuse", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )


def _error(res: subprocess.CompletedProcess, *needles: str, code: int = 1) -> str:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("graphfuse: error: "), res.stderr
    assert "Traceback" not in res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_patterns(files) -> None:
    res = gf("patterns")
    assert res.returncode == 0, res.stderr
    assert "trtllm (" in res.stdout and "attention_fp8_out" in res.stdout
    assert "patterns/trtllm/" in res.stdout
    assert max(len(ln) for ln in res.stdout.splitlines()) <= 80
    # each rule's whole first sentence, though its docstring wraps mid-sentence
    assert "when the norm's input is a residual add)." in res.stdout


def test_patterns_json_with_user_file(files) -> None:
    res = gf("patterns", "--json", "-p", "trtllm", "-p", files["my_rules.py"])
    assert res.returncode == 0, res.stderr
    sets = json.loads(res.stdout)
    assert [s["name"] for s in sets] == ["trtllm", "trtllm"]
    rule = sets[0]["rules"][0]
    assert set(rule) == {"name", "doc", "location"} and ":" in rule["location"]


def test_inspect(files) -> None:
    res = gf("inspect", files["attn.pt2"])
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "Inputs" in out and "[1, 16, 128]" in out and "bfloat16" in out
    assert "aten.scaled_dot_product_attention.default" in out and "graphfuse ops: none" in out


def test_inspect_json(files) -> None:
    res = gf("inspect", files["attn.pt2"], "--json")
    info = json.loads(res.stdout)
    assert [i["name"] for i in info["inputs"]] == ["x", "cos", "sin", "mask"]
    assert info["ops"]["aten.scaled_dot_product_attention.default"] == 1


def test_apply_verify_report_then_inspect(files, tmp_path: Path) -> None:
    src = files["attn.pt2"]
    before = (src.stat().st_mtime_ns, src.read_bytes())
    out, report = tmp_path / "fused.pt2", tmp_path / "report.json"
    res = gf("apply", src, "-o", out, "--json", report, "--verify")
    assert res.returncode == 0, res.stderr
    assert "attention_fp8_out" in res.stdout and "outputs agree" in res.stdout
    assert (src.stat().st_mtime_ns, src.read_bytes()) == before
    doc = json.loads(report.read_text())
    assert doc["counts"]["attention_fp8_out"] == 1 and isinstance(doc["near_misses"], list)
    fused = load_program(out)
    names = [n.name for n in fused.graph.nodes if str(n.target).startswith("graphfuse.")]
    assert names

    diff = gf("inspect", out, "--diff", src, "--nodes")
    assert diff.returncode == 0, diff.stderr
    gone = diff.stdout.split("Disappeared from ")[1].split("\nAppeared in ")[0]
    assert "aten.scaled_dot_product_attention.default" in gone
    assert "(fused)" in diff.stdout and "fused ops appeared: 1" in diff.stdout
    (hunk,) = diff.stdout.split("\n@@ ")[1:]
    assert hunk.startswith(names[0]) and "\n- scaled_dot_product_attention: " in hunk

    node = gf("inspect", out, "--node", names[0])
    assert node.returncode == 0, node.stderr
    assert names[0] in node.stdout and "Reads" in node.stdout and "Read by" in node.stdout
    _error(gf("inspect", out, "--node", "no_such_node"), "no node named 'no_such_node'")


def test_apply_nothing_matched(files, tmp_path: Path) -> None:
    res = gf("apply", files["plain.pt2"], "-o", tmp_path / "o.pt2")
    assert res.returncode == 0, res.stderr
    assert "nothing matched" in res.stdout and (tmp_path / "o.pt2").is_file()


def test_explain(files) -> None:
    res = gf("explain", files["attn.pt2"])
    assert res.returncode == 0, res.stderr
    assert "near miss" in res.stdout


def test_import_option_loads_custom_op(files, tmp_path: Path) -> None:
    d = files["dir"]
    res = gf("inspect", files["op.pt2"], "--import", "gf_cli_ops", pythonpath=d)
    assert res.returncode == 0, res.stderr
    assert "gfclilib.twice.default" in res.stdout


@pytest.mark.parametrize(
    "name, needles",
    [
        ("missing.pt2", ["no such file"]),
        ("folder.pt2", ["is a directory"]),
        ("notzip.pt2", ["not a zip archive"]),
        ("cut.pt2", ["truncated or corrupted"]),
        ("op.pt2", ["needs the op gfclilib::twice", "--import"]),
        ("evil.pt2", ["needs unrestricted unpickling", "--trust"]),
    ],
)
def test_bad_inputs(files, tmp_path: Path, name: str, needles: list[str]) -> None:
    src = files["dir"] / name
    out = tmp_path / "out.pt2"
    _error(gf("apply", src, "-o", out), str(src), *needles)
    assert not out.exists() and os.listdir(tmp_path) == []
    assert not (files["dir"] / "PWNED").exists()


@pytest.mark.parametrize(
    "rules, needles",
    [
        ("no_such_set", ["unknown rule set 'no_such_set'"]),
        ("syntax_rules.py", ["syntax error"]),
        ("raising_rules.py", ["RuntimeError", "no rules here"]),
    ],
)
def test_bad_rule_sets(files, tmp_path: Path, rules: str, needles: list[str]) -> None:
    arg = files["dir"] / rules if rules.endswith(".py") else rules
    out = tmp_path / "out.pt2"
    _error(gf("apply", files["plain.pt2"], "-o", out, "-p", arg), *needles)
    assert not out.exists()


def test_refuses_to_overwrite_input(files) -> None:
    src = files["plain.pt2"]
    before = (src.stat().st_mtime_ns, src.read_bytes())
    _error(gf("apply", src, "-o", src), "never overwrites its input")
    assert (src.stat().st_mtime_ns, src.read_bytes()) == before


def test_out_is_a_directory(files, tmp_path: Path) -> None:
    _error(gf("apply", files["plain.pt2"], "-o", tmp_path), "is a directory")


def test_usage_error_exits_2(files) -> None:
    _error(gf("apply", files["plain.pt2"]), "-o", code=2)
    _error(gf("frobnicate"), "invalid choice", code=2)


@pytest.mark.parametrize("which", ["report", "output"])
def test_apply_checks_every_output_folder_first(files, tmp_path: Path, which: str) -> None:
    """A missing folder for OUT or the report fails at once, one line, and writes nothing."""
    out, report = tmp_path / "fused.pt2", tmp_path / "r.json"
    if which == "report":
        report = tmp_path / "nodir" / "r.json"
    else:
        out = tmp_path / "nodir" / "fused.pt2"
    res = gf("apply", files["attn.pt2"], "-o", out, "--json", report)
    _error(res, "does not exist", "nodir")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_import_by_path_and_rule_file_neighbours(files, tmp_path: Path) -> None:
    """``--import ./mod.py`` imports a file; ``--import mod`` finds it in the current folder;
    a rule file imports a module that sits next to it."""
    (tmp_path / "side_mod.py").write_text("MARK = 1\n")
    (tmp_path / "near_rules.py").write_text(
        "import graphfuse, side_mod\nRULES = graphfuse.load_patterns('trtllm')\n"
    )
    for how in ("./side_mod.py", "side_mod"):
        res = gf("inspect", files["attn.pt2"], "--import", how, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
    res = gf("explain", files["attn.pt2"], "-p", tmp_path / "near_rules.py")
    assert res.returncode == 0, res.stderr
    _error(gf("inspect", files["attn.pt2"], "--import", "./no_such.py", cwd=tmp_path), "no_such")
