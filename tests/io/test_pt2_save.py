"""save_program: atomic writes; a failed save leaves no temp file and the old OUT intact."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import graphfuse.io.pt2 as pt2
from graphfuse.io.pt2 import ProgramSaveError, load_program, save_program


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x))


@pytest.fixture(scope="module")
def program() -> tuple[torch.export.ExportedProgram, torch.nn.Module]:
    torch.manual_seed(1)
    net = _Net().eval()
    return torch.export.export(net, (torch.randn(3, 5),)), net


def test_round_trip(tmp_path: Path, program) -> None:
    ep, net = program
    out = tmp_path / "out.pt2"
    save_program(ep, out)
    assert os.listdir(tmp_path) == ["out.pt2"]
    x = torch.randn(3, 5)
    torch.testing.assert_close(load_program(out).module()(x), net(x), rtol=0, atol=0)
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


def test_overwrites_by_default(tmp_path: Path, program) -> None:
    out = tmp_path / "out.pt2"
    out.write_bytes(b"old")
    save_program(program[0], out)
    assert out.read_bytes()[:2] == b"PK"
    assert sorted(os.listdir(tmp_path)) == ["out.pt2"]


def test_refuses_existing_without_overwrite(tmp_path: Path, program) -> None:
    out = tmp_path / "out.pt2"
    out.write_bytes(b"old")
    with pytest.raises(ProgramSaveError, match="already exists"):
        save_program(program[0], out, overwrite=False)
    assert out.read_bytes() == b"old"


def test_refuses_directory(tmp_path: Path, program) -> None:
    (tmp_path / "d.pt2").mkdir()
    with pytest.raises(ProgramSaveError, match="is a directory"):
        save_program(program[0], tmp_path / "d.pt2")
    assert os.listdir(tmp_path / "d.pt2") == []


def test_missing_folder(tmp_path: Path, program) -> None:
    with pytest.raises(ProgramSaveError, match="does not exist"):
        save_program(program[0], tmp_path / "no" / "out.pt2")


def test_not_a_program(tmp_path: Path) -> None:
    with pytest.raises(ProgramSaveError, match="ExportedProgram, got Linear"):
        save_program(torch.nn.Linear(2, 2), tmp_path / "out.pt2")  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("exc", [RuntimeError("disk on fire\nline two"), KeyboardInterrupt()])
def test_failure_mid_write_leaves_old_out(
    tmp_path: Path, program, monkeypatch: pytest.MonkeyPatch, exc: BaseException
) -> None:
    out = tmp_path / "out.pt2"
    out.write_bytes(b"previous contents")
    before = out.stat().st_mtime_ns

    def half_save(ep, f, *args, **kwargs):
        f.write(b"PK\x03\x04 partial archive")
        raise exc

    monkeypatch.setattr(pt2.torch.export, "save", half_save)
    with (
        pytest.raises(type(exc))
        if isinstance(exc, KeyboardInterrupt)
        else pytest.raises(
            ProgramSaveError, match="cannot save the program \\(RuntimeError: disk on fire\\)$"
        )
    ):
        save_program(program[0], out)
    assert out.read_bytes() == b"previous contents"
    assert out.stat().st_mtime_ns == before
    assert os.listdir(tmp_path) == ["out.pt2"]  # the temp file is gone


def test_unwritable_folder(tmp_path: Path, program) -> None:
    if os.geteuid() == 0:
        pytest.skip("root can write into read-only folders")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(ProgramSaveError, match="cannot write in"):
            save_program(program[0], folder / "out.pt2")
    finally:
        folder.chmod(0o700)
