"""The NVFP4 RMSNorm and act_and_mul launches' shapes from shapes only
(``graphfuse/triton/norm_act/launch.py``, host side): warps per RMSNorm row program and when
its programs loop over rows (more than four rows a program, no residual add; about 20 warps an
SM of programs, so they stay resident) or split a row over several programs (few rows); warps
per act_and_mul program; when the RMSNorm kernels load the weight with the row; which launches
are programmatic dependent launches."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from graphfuse.triton.norm_act import launch  # noqa: E402

SMS = 132


@pytest.mark.parametrize(
    "m, nb, residual, warps, programs",
    [
        (4096, 256, False, 4, 5 * SMS),  # hidden 4096: 5 looping programs of 4 warps an SM
        (4096, 256, True, 4, 4096),  # the residual add: a program a row
        (16384, 256, False, 4, 5 * SMS),
        (2048, 256, False, 4, 2048),  # three rows a program: a program a row
        (2641, 256, False, 4, 5 * SMS),  # just over four rows a program
        (2640, 256, False, 4, 2640),
        (16384, 512, False, 8, 2 * SMS),  # hidden 5120 / 8192: 2 programs of 8 warps an SM
        (16384, 1024, False, 16, SMS),  # hidden 16384: 1 program of 16 warps an SM
        (100, 256, False, 8, 100),  # a wave of rows: 8 warps, a program a row
        (1, 256, False, 8, 1),
    ],
)
def test_norm_nvfp4_launch(m: int, nb: int, residual: bool, warps: int, programs: int) -> None:
    w = launch._norm_nvfp4_warps(nb, m, SMS)
    assert w == warps
    assert launch._norm_nvfp4_row_programs(m, SMS, w, residual) == programs


@pytest.mark.parametrize(
    "programs, warps",
    [
        (14, 4),  # T = 1, intermediate 14336: 14 programs, a latency-bound launch
        (16 * 14, 4),  # T = 16
        (2 * SMS, 4),
        (2 * SMS + 1, 2),
        (128 * 14, 2),  # T = 128: a thread a whole block
    ],
)
def test_act_nvfp4_warps(programs: int, warps: int) -> None:
    assert launch._act_nvfp4_warps(programs, SMS) == warps


@pytest.mark.parametrize(
    "m, early", [(1, True), (2 * SMS, True), (2 * SMS + 1, False), (4096, False)]
)
def test_norm_early_weight(m: int, early: bool) -> None:
    assert launch._early(m, SMS) is early


@pytest.mark.parametrize(
    "m, nb, parts",
    [
        (1, 256, 4),  # hidden 4096, one row: 4 programs of 64 block columns (8 warps)
        (16, 256, 4),
        (33, 256, 4),  # 132 programs: one an SM
        (34, 256, 2),  # 136 at 4 a row would be more than the SMs
        (66, 256, 2),
        (67, 256, 1),
        (128, 256, 1),
        (5, 64, 2),  # hidden 1024 at 4 warps: 2 words a thread at 2 programs a row
        (3, 16, 1),  # hidden 256: too few words to split
    ],
)
def test_norm_nvfp4_parts(m: int, nb: int, parts: int) -> None:
    w = launch._norm_nvfp4_warps(nb, m, SMS)
    assert launch._norm_nvfp4_parts(m, nb, w, SMS) == parts


@pytest.mark.parametrize(
    "programs, loop, pdl",
    [
        (1, False, True),
        (8 * SMS, False, True),  # at most 8 programs an SM: a dependent launch
        (8 * SMS + 1, False, False),
        (5 * SMS, True, False),  # the looping launch: never
    ],
)
def test_dependent_launch_rule(
    monkeypatch: pytest.MonkeyPatch, programs: int, loop: bool, pdl: bool
) -> None:
    import torch

    monkeypatch.setattr(launch, "has_pdl", lambda device: True)
    monkeypatch.setattr(launch, "sm_count", lambda device: SMS)
    opts = launch._launch(torch.device("cuda"), programs, loop)
    assert opts["PDL"] is pdl
    assert opts.get("launch_pdl", False) is pdl
    assert opts["enable_fp_fusion"] is False
