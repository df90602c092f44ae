"""Opening a crafted .pt2 never runs code from it (unless the user trusts the file).

Each attack is shown to be real: plain ``torch.export.load`` on the same file, in a
subprocess, creates the marker file. graphfuse refuses the file and the marker never appears,
both through the up-front check and through the load-time guard alone.
"""

from __future__ import annotations

import fractions
import io
import json
import logging
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import graphfuse.io.pt2 as pt2
from graphfuse.errors import UnsafeProgramError
from graphfuse.io.pt2 import load_program
from graphfuse.io.safety import unsafe_expression_reason


class _Evil:
    """Unpickling this opens (creates) ``target``: the stand-in for arbitrary code."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).reshape(-1)


def _rewrite(
    src: Path, dst: Path, replace: dict[str, bytes], add: dict[str, bytes] | None = None
) -> None:
    add = add or {}
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        root = zin.namelist()[0].split("/", 1)[0]
        for info in zin.infolist():
            rel = info.filename.split("/", 1)[1]
            zout.writestr(info.filename, replace.get(rel, zin.read(info)))
        for rel, data in add.items():
            zout.writestr(f"{root}/{rel}", data)


def _read(path: Path, rel: str) -> bytes:
    with zipfile.ZipFile(path) as z:
        return z.read(f"{z.namelist()[0].split('/', 1)[0]}/{rel}")


def _torch_save(obj: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    b = torch.export.Dim("b", min=2)
    ep = torch.export.export(_Net(), (torch.randn(4, 4),), dynamic_shapes=({0: b},))
    path = tmp_path_factory.mktemp("base") / "base.pt2"
    torch.export.save(ep, path)
    return path


def _evil_sample_inputs(base: Path, dst: Path, target: Path) -> None:
    payload = _torch_save(((torch.randn(4, 4),), {"x": _Evil(str(target))}))
    _rewrite(base, dst, {"data/sample_inputs/model.pt": payload})


def _evil_weight(base: Path, dst: Path, target: Path) -> None:
    cfg = json.loads(_read(base, "data/weights/model_weights_config.json"))
    entry = cfg["config"]["lin.bias"]
    entry["use_pickle"] = True
    _rewrite(
        base,
        dst,
        {
            "data/weights/model_weights_config.json": json.dumps(cfg).encode(),
            f"data/weights/{entry['path_name']}": _torch_save(_Evil(str(target))),
        },
    )


def _evil_opaque_constant(base: Path, dst: Path, target: Path) -> None:
    import pickle

    cfg = {"config": {"evil": {"path_name": "opaque_obj_0", "is_param": False}}}
    cfg["config"]["evil"].update(use_pickle=True, tensor_meta=None)
    _rewrite(
        base,
        dst,
        {"data/constants/model_constants_config.json": json.dumps(cfg).encode()},
        add={"data/constants/opaque_obj_0": pickle.dumps(_Evil(str(target)), protocol=4)},
    )


def _evil_expression(base: Path, dst: Path, target: Path) -> None:
    text = _read(base, "models/model.json").decode()
    doc = json.loads(text)
    found = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "expr_str" and isinstance(v, str) and "Symbol(" in v and not found:
                    found.append(v)
                    node[k] = f"__import__('builtins').open({str(target)!r}, 'w') and {v}"
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc)
    assert found, "the base program has no symbolic expression"
    _rewrite(base, dst, {"models/model.json": json.dumps(doc).encode()})


ATTACKS: dict[str, Callable[[Path, Path, Path], None]] = {
    "sample_inputs": _evil_sample_inputs,
    "pickled_weight": _evil_weight,
    "sympy_expression": _evil_expression,
}


@pytest.fixture(scope="module")
def torch_runs_payloads(tmp_path_factory: pytest.TempPathFactory, base: Path) -> dict[str, bool]:
    """For each attack: does plain torch.export.load create the marker? (one subprocess)"""
    folder = tmp_path_factory.mktemp("proof")
    files = {}
    for name, make in ATTACKS.items():
        make(base, folder / f"{name}.pt2", folder / f"{name}.PWNED")
        files[name] = str(folder / f"{name}.pt2")
    code = (
        "import sys, torch\n"
        "for f in sys.argv[1:]:\n"
        "    try:\n"
        "        torch.export.load(f)\n"
        "    except Exception:\n"
        "        pass\n"
    )
    subprocess.run([sys.executable, "-c", code, *files.values()], cwd=folder, capture_output=True)
    return {name: (folder / f"{name}.PWNED").exists() for name in ATTACKS}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_is_real_and_refused(
    tmp_path: Path, base: Path, attack: str, torch_runs_payloads: dict[str, bool]
) -> None:
    target = tmp_path / "PWNED"
    evil = tmp_path / "evil.pt2"
    ATTACKS[attack](base, evil, target)
    before = (evil.stat().st_mtime_ns, evil.read_bytes())

    with pytest.raises(UnsafeProgramError) as info:
        load_program(evil)
    msg = str(info.value)
    assert not target.exists(), "graphfuse ran code from the file"
    assert "\n" not in msg and str(evil) in msg and "refusing to load it" in msg, msg
    assert "trust=True (CLI: --trust)" in msg, msg
    assert (evil.stat().st_mtime_ns, evil.read_bytes()) == before
    assert torch_runs_payloads[attack], f"plain torch.export.load did not run the {attack} payload"


def test_message_names_member_and_global(tmp_path: Path, base: Path) -> None:
    evil = tmp_path / "evil.pt2"
    _evil_sample_inputs(base, evil, tmp_path / "PWNED")
    with pytest.raises(UnsafeProgramError) as info:
        load_program(evil)
    msg = str(info.value)
    assert "data/sample_inputs/model.pt needs unrestricted unpickling (global io.open)" in msg


@pytest.mark.parametrize("attack", [*sorted(ATTACKS), "opaque_constant"])
def test_guard_alone_blocks(
    tmp_path: Path, base: Path, attack: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the up-front check disabled, the load-time guard still runs no code."""
    target = tmp_path / "PWNED"
    evil = tmp_path / "evil.pt2"
    make = ATTACKS.get(attack, _evil_opaque_constant)
    make(base, evil, target)
    monkeypatch.setattr(pt2, "check_archive", lambda archive: None)
    with pytest.raises(UnsafeProgramError) as info:
        load_program(evil)
    assert not target.exists()
    assert "\n" not in str(info.value) and str(evil) in str(info.value)
    assert torch.load is not None and torch.load.__name__ == "load"  # guard restored


def test_opaque_constant_refused_up_front(tmp_path: Path, base: Path) -> None:
    evil = tmp_path / "evil.pt2"
    _evil_opaque_constant(base, evil, tmp_path / "PWNED")
    with pytest.raises(UnsafeProgramError, match="opaque_obj_0 needs unrestricted unpickling"):
        load_program(evil)
    assert not (tmp_path / "PWNED").exists()


def test_aoti_member_refused(tmp_path: Path, base: Path) -> None:
    evil = tmp_path / "evil.pt2"
    _rewrite(base, evil, {}, add={"data/aotinductor/model/model.so": b"\x7fELF"})
    with pytest.raises(UnsafeProgramError, match="AOTInductor compiled code"):
        load_program(evil)


def test_trust_loads_benign_custom_object(tmp_path: Path, base: Path) -> None:
    """A sample input holding a (harmless) non-allowlisted object: refused, unless trusted."""
    benign = tmp_path / "benign.pt2"
    payload = _torch_save(((torch.randn(4, 4),), {"ratio": fractions.Fraction(1, 3)}))
    _rewrite(base, benign, {"data/sample_inputs/model.pt": payload})
    with pytest.raises(UnsafeProgramError, match="global fractions.Fraction"):
        load_program(benign)
    ep = load_program(benign, trust=True)
    assert ep.example_inputs[1]["ratio"] == fractions.Fraction(1, 3)
    assert any(n.target is torch.ops.aten.linear.default for n in ep.graph.nodes)


class _StrictHandler(logging.Handler):
    """Formats every record it sees and lets a formatting error escape."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(self.format(record))

    def handleError(self, record: logging.LogRecord) -> None:
        raise


def test_trusted_load_logs_nothing_broken(tmp_path: Path, base: Path) -> None:
    """torch's weights-only fallback record (malformed) never reaches a handler."""
    benign = tmp_path / "benign.pt2"
    payload = _torch_save(((torch.randn(4, 4),), {"ratio": fractions.Fraction(1, 3)}))
    _rewrite(base, benign, {"data/sample_inputs/model.pt": payload})
    handler = _StrictHandler()
    serde = logging.getLogger("torch._export.serde.serialize")
    serde.addHandler(handler)
    try:
        ep = load_program(benign, trust=True)
    finally:
        serde.removeHandler(handler)
    assert ep.example_inputs[1]["ratio"] == fractions.Fraction(1, 3)
    assert not any("weights_only" in m for m in handler.messages)
    assert not serde.filters, "the filter is removed after the load"


def test_cli_trusted_inspect_prints_no_traceback(tmp_path: Path, base: Path) -> None:
    benign = tmp_path / "benign.pt2"
    payload = _torch_save(((torch.randn(4, 4),), {"ratio": fractions.Fraction(1, 3)}))
    _rewrite(base, benign, {"data/sample_inputs/model.pt": payload})
    res = subprocess.run(
        [sys.executable, "-m", "graphfuse", "inspect", "--trust", str(benign)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "Logging error" not in res.stderr, res.stderr


def test_safe_globals_registered_by_user_are_honoured(tmp_path: Path, base: Path) -> None:
    benign = tmp_path / "benign.pt2"
    payload = _torch_save(((torch.randn(4, 4),), {"ratio": fractions.Fraction(1, 3)}))
    _rewrite(base, benign, {"data/sample_inputs/model.pt": payload})
    with torch.serialization.safe_globals([fractions.Fraction]):
        ep = load_program(benign)
    assert ep.example_inputs[1]["ratio"] == fractions.Fraction(1, 3)


def test_real_expressions_pass(base: Path) -> None:
    text = _read(base, "models/model.json").decode()
    exprs = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                exprs.add(v) if k == "expr_str" else walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(json.loads(text))
    assert exprs
    for expr in exprs:
        assert unsafe_expression_reason(expr) is None, expr


@pytest.mark.parametrize(
    "expr",
    [
        "__import__('os').system('true')",
        "Symbol('s0').__class__",
        "Integer(1).func",
        "open('x', 'w')",
        "Symbol('a b')",
        "(lambda: 1)()",
        "[c for c in ()]",
        "Symbol('s0')[0]",
        "eval('1')",
    ],
)
def test_unsafe_expressions_rejected(expr: str) -> None:
    assert unsafe_expression_reason(expr) is not None


@pytest.mark.parametrize(
    "expr",
    [
        "Mul(Integer(2), Symbol('s77', positive=True, integer=True))",
        "FloorDiv(s0, 2) + Mod(s1, 16) - 1",
        "Max(1, s0) <= 4096",
        "Eq(Mod(s0, 16), 0)",
    ],
)
def test_plain_expressions_accepted(expr: str) -> None:
    assert unsafe_expression_reason(expr) is None


def test_graph_calling_a_non_operator_is_refused(base: Path) -> None:
    """torch's deserialiser resolves any ``torch.*`` name; graphfuse accepts operators only."""
    from graphfuse.io.safety import check_graph_targets

    ep = load_program(base)
    check_graph_targets(ep)  # a normal program passes
    node = next(n for n in ep.graph.nodes if n.op == "call_function")
    node.target = torch.load
    with pytest.raises(UnsafeProgramError, match=r"calls torch\.serialization\.load"):
        check_graph_targets(ep)
