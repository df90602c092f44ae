"""load_program: every way a .pt2 can be bad gives one line, and good files round-trip."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch

from graphfuse.errors import ProgramLoadError
from graphfuse.io.pt2 import load_program


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("b", torch.randn(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).relu() + self.b


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    torch.manual_seed(0)
    net = _Net().eval()
    path = tmp_path_factory.mktemp("good") / "good.pt2"
    torch.export.save(torch.export.export(net, (torch.randn(2, 4),)), path)
    return path, net


# Written to a folder and imported only by subprocesses, so the test process lacks them.
_OPS_MOD = """
import torch

@torch.library.custom_op("gftestlib::scale2", mutates_args=())
def scale2(x: torch.Tensor) -> torch.Tensor:
    return x * 2

@scale2.register_fake
def _(x):
    return torch.empty_like(x)
"""
_TREE_MOD = """
import dataclasses
import torch

@dataclasses.dataclass
class GfTestOut:
    a: torch.Tensor
    b: torch.Tensor

torch.export.register_dataclass(GfTestOut, serialized_type_name="gf_test_tree.GfTestOut")
"""
_MAKE = """
import sys, torch
import gf_test_ops, gf_test_tree

class A(torch.nn.Module):
    def forward(self, x):
        return torch.ops.gftestlib.scale2(x) + 1

class B(torch.nn.Module):
    def forward(self, x):
        return gf_test_tree.GfTestOut(x + 1, x * 2)

x = torch.randn(3)
torch.export.save(torch.export.export(A(), (x,)), sys.argv[1])
torch.export.save(torch.export.export(B(), (x,)), sys.argv[2])
"""


@pytest.fixture(scope="module")
def needs_imports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(op.pt2, tree.pt2, module folder) made in a process that registered the op/type."""
    folder = tmp_path_factory.mktemp("needs")
    (folder / "gf_test_ops.py").write_text(_OPS_MOD)
    (folder / "gf_test_tree.py").write_text(_TREE_MOD)
    (folder / "make.py").write_text(_MAKE)
    op, tree = folder / "op.pt2", folder / "tree.pt2"
    env = {**os.environ, "PYTHONPATH": str(folder)}
    subprocess.run(
        [sys.executable, str(folder / "make.py"), str(op), str(tree)],
        check=True,
        env=env,
        cwd=folder,
        capture_output=True,
    )
    return op, tree, folder


def _snapshot(path: Path) -> tuple[float, bytes, list[str]] | None:
    if not path.exists() or path.is_dir():
        return None
    return path.stat().st_mtime_ns, path.read_bytes(), sorted(os.listdir(path.parent))


def _fails(path: Path, *needles: str, **kwargs) -> str:
    """load_program(path) raises one line containing the path and every needle."""
    before = _snapshot(path)
    with pytest.raises(ProgramLoadError) as info:
        load_program(path, **kwargs)
    msg = str(info.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    assert str(path) in msg, msg
    for needle in needles:
        assert needle in msg, msg
    assert _snapshot(path) == before  # untouched, nothing written next to it
    return msg


def test_good_file_round_trip(good: tuple[Path, torch.nn.Module]) -> None:
    path, net = good
    before = _snapshot(path)
    ep = load_program(path)
    assert isinstance(ep, torch.export.ExportedProgram)
    x = torch.randn(2, 4)
    torch.testing.assert_close(ep.module()(x), net(x), rtol=0, atol=0)
    assert _snapshot(path) == before


def test_missing_file(tmp_path: Path) -> None:
    _fails(tmp_path / "nope.pt2", "no such file")


def test_directory(tmp_path: Path) -> None:
    (tmp_path / "d.pt2").mkdir()
    _fails(tmp_path / "d.pt2", "is a directory")


@pytest.mark.parametrize("content", [b"", b"hello, not a zip\n" * 10, b"\x80\x04K\x01."])
def test_not_a_zip(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.pt2"
    path.write_bytes(content)
    _fails(path, "not a zip archive")


@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.6, 0.9, 0.99])
def test_truncated(tmp_path: Path, good: tuple[Path, torch.nn.Module], fraction: float) -> None:
    data = good[0].read_bytes()
    path = tmp_path / "cut.pt2"
    path.write_bytes(data[: int(len(data) * fraction)])
    _fails(path, "truncated or corrupted zip archive")


def _data_offset(path: Path, member_suffix: str) -> int:
    """Offset in the file of the first data byte of the member ending with member_suffix."""
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith(member_suffix))
    raw = path.read_bytes()
    name_len = int.from_bytes(raw[info.header_offset + 26 : info.header_offset + 28], "little")
    extra_len = int.from_bytes(raw[info.header_offset + 28 : info.header_offset + 30], "little")
    return info.header_offset + 30 + name_len + extra_len


@pytest.mark.parametrize("member", ["models/model.json", "data/weights/weight_0"])
def test_corrupted_byte(tmp_path: Path, good: tuple[Path, torch.nn.Module], member: str) -> None:
    data = bytearray(good[0].read_bytes())
    data[_data_offset(good[0], member) + 5] ^= 0x5A
    path = tmp_path / "bad.pt2"
    path.write_bytes(bytes(data))
    _fails(path, "corrupted", member)


def test_corrupted_central_directory(tmp_path: Path, good: tuple[Path, torch.nn.Module]) -> None:
    data = bytearray(good[0].read_bytes())
    cd = data.rfind(b"PK\x01\x02")  # last central directory entry
    data[cd : cd + 4] = b"XXXX"
    path = tmp_path / "bad.pt2"
    path.write_bytes(bytes(data))
    _fails(path, "corrupted")


def test_zip_that_is_not_a_program(tmp_path: Path) -> None:
    path = tmp_path / "other.pt2"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("readme.txt", "hello")
        z.writestr("data/x.bin", b"\0" * 10)
    _fails(path, "not an exported program")


def test_zip_with_root_but_no_model(tmp_path: Path) -> None:
    path = tmp_path / "other.pt2"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/archive_format", "pt2")
        z.writestr("pkg/archive_version", "0")
    _fails(path, "not an exported program", "models/model.json")


def test_incomplete_program(tmp_path: Path, good: tuple[Path, torch.nn.Module]) -> None:
    path = tmp_path / "partial.pt2"
    with zipfile.ZipFile(good[0]) as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            if not info.filename.endswith("data/sample_inputs/model.pt"):
                zout.writestr(info.filename, zin.read(info))
    _fails(path, "incomplete exported program", "sample_inputs")


def test_oversized(good: tuple[Path, torch.nn.Module]) -> None:
    size = good[0].stat().st_size
    msg = _fails(good[0], "larger than the limit", str(size), max_bytes=1000)
    assert "1000 bytes" in msg
    assert isinstance(load_program(good[0], max_bytes=size), torch.export.ExportedProgram)
    assert isinstance(load_program(good[0], max_bytes=None), torch.export.ExportedProgram)


def test_unregistered_op(needs_imports: tuple[Path, Path, Path]) -> None:
    msg = _fails(needs_imports[0], "needs the op gftestlib::scale2", "--import")
    assert "not registered" in msg


def test_unregistered_pytree_type(needs_imports: tuple[Path, Path, Path]) -> None:
    _fails(
        needs_imports[1],
        "needs the pytree type gf_test_tree.GfTestOut: pass --import gf_test_tree "
        "(or import it first)",
    )


def test_imports_make_them_load(needs_imports: tuple[Path, Path, Path]) -> None:
    op, tree, folder = needs_imports
    code = textwrap.dedent(
        f"""
        import torch
        from graphfuse.io.pt2 import load_program
        x = torch.randn(3)
        ep = load_program({str(op)!r}, imports=["gf_test_ops"])
        torch.testing.assert_close(ep.module()(x), x * 2 + 1)
        out = load_program({str(tree)!r}, imports=["gf_test_tree"]).module()(x)
        assert type(out).__name__ == "GfTestOut", type(out)
        torch.testing.assert_close(out.b, x * 2)
        print("OK")
        """
    )
    env = {**os.environ, "PYTHONPATH": str(folder)}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr[-2000:]


def test_import_failures(tmp_path: Path, good: tuple[Path, torch.nn.Module]) -> None:
    with pytest.raises(ProgramLoadError, match="cannot import module 'gf_no_such_module'"):
        load_program(good[0], imports=["gf_no_such_module"])
    (tmp_path / "gf_raises_at_import.py").write_text("raise ValueError('boom\\nsecond')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(ProgramLoadError) as info:
            load_program(good[0], imports=["gf_raises_at_import"])
    finally:
        sys.path.remove(str(tmp_path))
    msg = str(info.value)
    assert "gf_raises_at_import" in msg and "ValueError: boom" in msg and "\n" not in msg
