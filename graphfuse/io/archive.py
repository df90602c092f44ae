"""Validation of a ``.pt2`` file as a zip archive holding an exported program.

Everything here reads the file as bytes with :mod:`zipfile`; nothing is unpickled or
deserialised. ``open_archive`` turns every way a file can fail to be an exported program
into a one-line :class:`~graphfuse.errors.ProgramLoadError` naming the path.
"""

from __future__ import annotations

import json
import os
import stat
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import ProgramLoadError

DEFAULT_MAX_BYTES = 64 * 2**30
_CHUNK = 16 * 2**20
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


def format_bytes(n: int) -> str:
    """``n`` bytes as a short human-readable size (``1.5 GiB``)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


@dataclass
class Archive:
    """A validated ``.pt2`` archive: its path, root folder, and members (relative to root).

    Attributes:
        path: the file, as given.
        root: the archive's top folder (torch names it after the file).
        members: member names with the root removed.
        models: names of the programs inside (``models/<name>.json``).
    """

    path: str
    root: str
    members: list[str]
    models: list[str] = field(default_factory=list)

    def read(self, member: str) -> bytes:
        """The bytes of ``member`` (a name relative to the root)."""
        with zipfile.ZipFile(self.path) as z:
            return z.read(f"{self.root}/{member}")

    def _config(self, member: str) -> dict:
        try:
            doc = json.loads(self.read(member))
            config = doc["config"]
            if not isinstance(config, dict):
                raise TypeError("'config' is not an object")
            return config
        except (ValueError, KeyError, TypeError) as e:
            raise ProgramLoadError(f"{self.path}: {member} is malformed ({e})") from None

    def pickled_parts(self) -> Iterator[tuple[str, bool]]:
        """The members torch 2.13 unpickles when it loads the programs.

        Yields:
            ``(member, is_torch_save)``: ``is_torch_save`` is True for ``torch.save`` payloads
            (a zip with ``data.pkl``), False for a plain pickle (opaque objects). TorchScript
            custom objects (``custom_obj_*``) are not yielded: torch reads them with its C++
            TorchScript unpickler, which resolves no Python globals.
        """
        names = set(self.members)
        for model in self.models:
            yield f"data/sample_inputs/{model}.pt", True
            for folder, kind in (("weights", "weights"), ("constants", "constants")):
                legacy = f"data/{folder}/{model}.pt"
                if legacy in names:
                    yield legacy, True
                    continue
                config_member = f"data/{folder}/{model}_{kind}_config.json"
                for entry in self._config(config_member).values():
                    if not isinstance(entry, dict) or not isinstance(entry.get("path_name"), str):
                        raise ProgramLoadError(f"{self.path}: {config_member} is malformed")
                    name = entry["path_name"]
                    if name.startswith("opaque_obj_"):
                        yield f"data/{folder}/{name}", False
                    elif entry.get("use_pickle") and not name.startswith("custom_obj_"):
                        yield f"data/{folder}/{name}", True


def _check_path(path: str, max_bytes: int) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ProgramLoadError(f"{path}: no such file") from None
    except OSError as e:
        raise ProgramLoadError(f"{path}: cannot open ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ProgramLoadError(f"{path}: is a directory, not a .pt2 file")
    if not stat.S_ISREG(st.st_mode):
        raise ProgramLoadError(f"{path}: is not a regular file")
    if st.st_size > max_bytes:
        raise ProgramLoadError(
            f"{path}: file is {format_bytes(st.st_size)} ({st.st_size} bytes), larger than the "
            f"limit of {format_bytes(max_bytes)} ({max_bytes} bytes; raise max_bytes to load it)"
        )
    if not os.access(path, os.R_OK):
        raise ProgramLoadError(f"{path}: cannot open (permission denied)")


def _open_zip(path: str) -> zipfile.ZipFile:
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 22))
        tail = f.read(22)
    if head in _ZIP_MAGIC and not (len(tail) == 22 and tail[:4] == b"PK\x05\x06"):
        # The end record must close the file: a cut file can still hold the end record of a
        # nested zip (torch.save payloads are zips), which zipfile would happily open.
        raise ProgramLoadError(
            f"{path}: truncated or corrupted zip archive (no end-of-central-directory record "
            "at the end of the file); re-save or re-copy the file"
        )
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile as e:
        if head in _ZIP_MAGIC:
            raise ProgramLoadError(
                f"{path}: truncated or corrupted zip archive ({e}); re-save or re-copy the file"
            ) from None
        raise ProgramLoadError(
            f"{path}: not a zip archive, so not a .pt2 file (torch.export.save writes a zip)"
        ) from None
    except (OSError, ValueError, EOFError) as e:
        raise ProgramLoadError(f"{path}: corrupted zip archive ({e})") from None


def _check_members(path: str, z: zipfile.ZipFile, max_bytes: int) -> None:
    infos = z.infolist()
    names = [i.filename for i in infos]
    if infos and min(i.header_offset for i in infos) != 0:
        raise ProgramLoadError(
            f"{path}: truncated or corrupted zip archive (the central directory does not "
            "describe the start of the file)"
        )
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ProgramLoadError(f"{path}: corrupted zip archive (member {dup} appears twice)")
    total = sum(i.file_size for i in infos)
    if total > max_bytes:
        raise ProgramLoadError(
            f"{path}: members unpack to {format_bytes(total)}, larger than the limit of "
            f"{format_bytes(max_bytes)} (raise max_bytes to load it)"
        )
    for info in infos:
        try:
            with z.open(info) as member:
                while member.read(_CHUNK):
                    pass
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
            msg = str(e).replace(f"'{info.filename}'", "").strip() or type(e).__name__
            raise ProgramLoadError(
                f"{path}: truncated or corrupted zip archive (member {info.filename}: {msg})"
            ) from None


def open_archive(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Archive:
    """Check that ``path`` is a readable, intact ``.pt2`` holding an exported program.

    Reads the whole file once (every member's CRC is checked); unpickles nothing.

    Args:
        path: the ``.pt2`` file.
        max_bytes: refuse files (or archives that unpack to) more than this many bytes.

    Returns:
        The archive's layout.

    Raises:
        ProgramLoadError: missing, a directory, too large, not a zip, truncated or corrupted,
            or a zip that does not hold an exported program.
    """
    _check_path(path, max_bytes)
    with _open_zip(path) as z:
        _check_members(path, z, max_bytes)
        names = z.namelist()
    roots = {n.split("/", 1)[0] for n in names}
    root = names[0].split("/", 1)[0] if names else ""
    if len(roots) != 1 or any("/" not in n for n in names):
        if "serialized_exported_program.json" in names:
            raise ProgramLoadError(
                f"{path}: uses the pre-2.7 .pt2 layout, which graphfuse does not read; "
                "re-export the model with torch>=2.7"
            )
        raise ProgramLoadError(
            f"{path}: a zip archive but not an exported program (no single root folder with "
            "models/model.json; was it written by torch.export.save?)"
        )
    members = [n.split("/", 1)[1] for n in names]
    archive = Archive(path, root, members)
    if "archive_format" not in members or "models/model.json" not in members:
        raise ProgramLoadError(
            f"{path}: a zip archive but not an exported program (no models/model.json inside; "
            "was it written by torch.export.save?)"
        )
    from torch.export.pt2_archive import constants

    fmt = archive.read("archive_format").decode(errors="replace")
    if fmt != constants.ARCHIVE_FORMAT_VALUE:
        raise ProgramLoadError(f"{path}: archive_format is {fmt[:20]!r}, expected 'pt2'")
    version = (
        archive.read("archive_version").decode(errors="replace")
        if "archive_version" in members
        else "<missing>"
    )
    if version != constants.ARCHIVE_VERSION_VALUE:
        raise ProgramLoadError(
            f"{path}: archive version {version[:20]!r}, but this torch reads version "
            f"{constants.ARCHIVE_VERSION_VALUE!r}"
        )
    archive.models = sorted(
        m[len("models/") : -len(".json")]
        for m in members
        if m.startswith("models/") and m.endswith(".json")
    )
    for model in archive.models:
        for need in (
            f"data/sample_inputs/{model}.pt",
            f"data/weights/{model}_weights_config.json",
            f"data/constants/{model}_constants_config.json",
        ):
            legacy = need.rsplit("/", 1)[0] + f"/{model}.pt"
            if need not in members and legacy not in members:
                raise ProgramLoadError(f"{path}: incomplete exported program ({need} is missing)")
    return archive
