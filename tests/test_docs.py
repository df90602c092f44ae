"""Every markdown file that the repository's text cites ships with the repository.

A citation is a file name ending in ``.md``, with or without folders, anywhere in a text
file of the repository (code comments, docstrings, docs, config). It resolves when the file
exists relative to the repository root, to the citing file's folder, or to ``docs/``. URLs
are not citations.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".py", ".md", ".toml", ".cfg", ".txt", ".sh", ".cpp", ".h"}
SKIP_DIRS = {"build", "dist", "__pycache__", "node_modules"}

URL = re.compile(r"\w+://\S+")
MD_REF = re.compile(r"(?<![\w./-])([\w./-]*\w\.md)(?!\w)")


def repo_files() -> list[str]:
    """The repository's files, relative and posix: tracked ones and new ones git does not
    ignore (``git ls-files``), else, without git, every file of the tree outside build
    folders."""
    cmd = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    try:
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
        files = [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.SubprocessError):
        files = []
    if not files:
        for folder, dirs, names in os.walk(ROOT):
            dirs[:] = [
                d
                for d in dirs
                if not d.startswith(".") and d not in SKIP_DIRS and not d.endswith(".egg-info")
            ]
            rel = Path(folder).relative_to(ROOT)
            files += [(rel / n).as_posix() for n in names]
    return [f for f in files if (ROOT / f).is_file()]


def broken_refs(text: str, citing: str, known: set[str]) -> list[str]:
    """The ``.md`` citations in ``text`` (of the file ``citing``) that resolve to no file."""
    folder = os.path.dirname(citing)
    broken = []
    for ref in MD_REF.findall(URL.sub(" ", text)):
        candidates = (os.path.normpath(os.path.join(b, ref)) for b in ("", folder, "docs"))
        if not any(Path(c).as_posix() in known for c in candidates):
            broken.append(ref)
    return broken


def test_cited_markdown_files_exist() -> None:
    files = repo_files()
    known = set(files)
    problems = []
    for path in files:
        if Path(path).suffix not in TEXT_SUFFIXES:
            continue
        text = (ROOT / path).read_text(encoding="utf-8", errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            problems += [f"{path}:{n}: {ref}" for ref in broken_refs(line, path, known)]
    assert not problems, "citations of markdown files not in the repository:\n" + "\n".join(
        problems
    )


def test_readme_links_to_docs_resolve() -> None:
    known = set(repo_files())
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    cited = set(MD_REF.findall(text))
    assert {"docs/numerics.md", "docs/benchmarks.md"} <= cited
    assert not broken_refs(text, "README.md", known)


def test_a_missing_citation_is_caught() -> None:
    known = {"README.md", "docs/numerics.md", "docs/gpu.md"}
    missing = "NUMERICS" + ".md"  # spelled apart so this file does not cite it
    text = (
        f"see {missing}, docs/numerics.md (`gpu.md`), ../README.md, [x](numerics.md#fast-mode), "
        "*.md and https://example.com/x.md"
    )
    assert broken_refs(text, "docs/attention.md", known) == [missing]
    assert broken_refs(f"({missing})", "graphfuse/ops/quant_ref.py", known) == [missing]
