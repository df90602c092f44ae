"""Opening and writing ``torch.export`` programs (``.pt2``) safely.

``load_program`` validates the file (``graphfuse.io.archive``), refuses archives that would run code
when loaded unless the caller trusts them (``graphfuse.io.safety``), and turns torch's errors into
one line that says what to do (which module to ``--import`` for a missing op or pytree
type). ``save_program`` writes atomically.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import sys
import tempfile
from collections.abc import Sequence

import torch

from ..errors import GraphfuseError, ProgramLoadError, ProgramSaveError, UnsafeProgramError
from .archive import DEFAULT_MAX_BYTES, open_archive
from .safety import TRUST_HINT, check_archive, check_graph_targets, restricted_loading

__all__ = ["DEFAULT_MAX_BYTES", "ProgramSaveError", "load_program", "save_program"]


_PYTREE = re.compile(r"Deserializing (\S+?) in pytree is not registered")
_OP = re.compile(r"failed to resolve (torch\.ops\.[\w.]+) to an operator")


def _one_line(text: str, limit: int = 200) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(text))
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def _explain_load_failure(path: str, exc: BaseException) -> GraphfuseError:
    """Map an exception raised while torch deserialises ``path`` to one clear line."""
    for e in _chain(exc):
        if isinstance(e, UnsafeProgramError):
            return UnsafeProgramError(f"{path}: {e}. {TRUST_HINT}")
        if isinstance(e, GraphfuseError):
            return type(e)(f"{path}: {e}")
        text = str(e)
        if m := _PYTREE.search(text):
            type_name = m.group(1)
            module = type_name.rsplit(".", 1)[0] if "." in type_name else None
            hint = (
                f"pass --import {module} (or import it first)"
                if module
                else ("pass --import MODULE for the module that registers it (or import it first)")
            )
            return ProgramLoadError(f"{path}: needs the pytree type {type_name}: {hint}")
        if m := _OP.search(text):
            parts = m.group(1).split(".")  # torch.ops.<ns>.<op>[.<overload>]
            op = f"{parts[2]}::{'.'.join(parts[3:])}" if len(parts) > 3 else m.group(1)
            return ProgramLoadError(
                f"{path}: needs the op {op}, which is not registered: pass --import MODULE "
                f"naming the module that defines the {parts[2]}:: ops (or import it first)"
            )
        if type(e).__name__ == "UnpicklingError":
            return UnsafeProgramError(
                f"{path}: a pickled part needs unrestricted unpickling ({_one_line(text)}); "
                f"refusing to load it. {TRUST_HINT}"
            )
    detail = _one_line(str(exc)) or "no message"
    return ProgramLoadError(
        f"{path}: cannot load the exported program ({type(exc).__name__}: {detail})"
    )


@contextlib.contextmanager
def _on_path(folder: str):
    """``folder`` first on ``sys.path`` within the block (unless it is there already)."""
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)


def _import_one(name: str) -> None:
    """Import a module by name (the current folder searched too) or a ``.py`` file by path."""
    if name.endswith(".py") or os.sep in name:
        path = os.path.abspath(name)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no file {name}")
        module_name = os.path.splitext(os.path.basename(path))[0]
        with _on_path(os.path.dirname(path)):
            importlib.import_module(module_name)
        return
    with _on_path(os.getcwd()):
        importlib.import_module(name)


def _import_all(imports: Sequence[str]) -> None:
    for name in imports:
        try:
            _import_one(name)
        except (Exception, SystemExit) as e:  # a user module may raise anything at import
            raise ProgramLoadError(
                f"cannot import module {name!r} (given with --import): "
                f"{type(e).__name__}: {_one_line(str(e)) or 'no message'}"
            ) from None


def _drop_weights_only_fallback(record: logging.LogRecord) -> bool:
    """False for torch's "Fallback to weights_only=False" record, which a trusted load expects.

    torch logs it with one format argument too few, so formatting it raises inside logging
    (a ``--- Logging error ---`` traceback, or an exception under pytest's log capture). The
    record is dropped before any handler formats it; ``record.msg`` is read, never formatted.
    """
    return not str(record.msg).startswith("Fallback to weights_only=False")


@contextlib.contextmanager
def _quiet_trusted_fallback():
    """Within the block, torch's serde logger drops its weights-only fallback record."""
    logger = logging.getLogger("torch._export.serde.serialize")
    logger.addFilter(_drop_weights_only_fallback)
    try:
        yield
    finally:
        logger.removeFilter(_drop_weights_only_fallback)


def load_program(
    path: str | os.PathLike[str],
    *,
    trust: bool = False,
    imports: Sequence[str] = (),
    max_bytes: int | None = DEFAULT_MAX_BYTES,
) -> torch.export.ExportedProgram:
    """Load the exported program saved in a ``.pt2`` file, without running code from it.

    Args:
        path: the ``.pt2`` file (written by ``torch.export.save``).
        trust: load as ``torch.export.load`` does, including parts that need unrestricted
            unpickling and AOTInductor code. Only for files you trust.
        imports: modules imported first (they register custom ops / pytree types the
            program needs).
        max_bytes: refuse larger files (``None``: no limit). Default 64 GiB.

    Returns:
        The program saved as ``"model"`` in the archive.

    Raises:
        ProgramLoadError: a one-line message naming the path and the problem.
        UnsafeProgramError: loading would run code from the file and ``trust`` is False.

    Example::

        ep = load_program("model.pt2", imports=["transformers.modeling_outputs"])
    """
    path = os.fspath(path)
    _import_all(imports)
    archive = open_archive(path, sys.maxsize if max_bytes is None else max_bytes)
    if not trust:
        check_archive(archive)
    try:
        if trust:
            from torch.export.pt2_archive._package import load_pt2

            with _quiet_trusted_fallback():
                programs = load_pt2(path).exported_programs
        else:
            from torch.export.pt2_archive import _package

            with restricted_loading():
                reader = _package.PT2ArchiveReader(path)
                programs = _package._load_exported_programs(reader, reader.get_file_names(), None)
    except Exception as e:  # torch raises many types; all become one line
        raise _explain_load_failure(path, e) from None
    if "model" not in programs:
        raise ProgramLoadError(f"{path}: holds no program named 'model'")
    if not trust:
        for program in programs.values():
            try:
                check_graph_targets(program)
            except UnsafeProgramError as e:
                raise UnsafeProgramError(f"{path}: {e}. {TRUST_HINT}") from None
    return programs["model"]


def save_program(
    program: torch.export.ExportedProgram,
    path: str | os.PathLike[str],
    *,
    overwrite: bool = True,
) -> None:
    """Write ``program`` to ``path`` atomically (``torch.export.save`` format).

    The archive is written to a temporary file in the same folder and renamed over ``path``;
    on any failure the temporary file is removed and an existing ``path`` is unchanged.

    Args:
        program: the exported program.
        path: destination ``.pt2`` file.
        overwrite: replace an existing file (False: refuse).

    Raises:
        ProgramSaveError: ``path`` is a directory, exists and ``overwrite`` is False, its
            folder is missing or not writable, or torch failed to serialise the program.

    Example::

        save_program(graphfuse.apply(ep).program, "fused.pt2")
    """
    path = os.fspath(path)
    if not isinstance(program, torch.export.ExportedProgram):
        raise ProgramSaveError(
            f"{path}: can only save a torch.export.ExportedProgram, got {type(program).__name__}"
        )
    if os.path.isdir(path):
        raise ProgramSaveError(f"{path}: is a directory; give a file name for the program")
    if os.path.lexists(path) and not overwrite:
        raise ProgramSaveError(f"{path}: already exists (not overwriting it)")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ProgramSaveError(f"{path}: folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(
            dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp.pt2"
        )
    except OSError as e:
        raise ProgramSaveError(f"{path}: cannot write in {folder} ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            torch.export.save(program, f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, Exception):
            raise ProgramSaveError(
                f"{path}: cannot save the program ({type(e).__name__}: "
                f"{_one_line(str(e)) or 'no message'})"
            ) from None
        raise
