"""Every markdown file that the repository's text cites ships with the repository.

A citation is a file name ending in ``.md``, with or without folders, anywhere in a text
file of the repository (code comments, docstrings, docs, config). It resolves when the file
exists relative to the repository root, to the citing file's folder, or to ``docs/``. URLs
are not citations. A citation followed by a quoted title (``docs/gpu.md, "Measured"``) names
a part of that file: a heading or a bold lead-in that starts with the title.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".py", ".md", ".toml", ".cfg", ".txt", ".sh", ".cpp", ".h"}
SKIP_DIRS = {"build", "dist", "__pycache__", "node_modules"}

URL = re.compile(r"\w+://\S+")
MD_REF = re.compile(r"(?<![\w./-])([\w./-]*\w\.md)(?!\w)")
# a citation and the title after it, in text whose line breaks (and the comment or quote
# markers that start the next line) are one space
SECTION_REF = re.compile(r"(?<![\w./-])([\w./-]*\w\.md)`?,? \"([^\"]{3,160})\"")
LINE_BREAK = re.compile(r"\n[ \t]*(?:#+ |> |// |\* )?[ \t]*")
HEADING = re.compile(r"^#+ +(.+)$", re.M)
BOLD = re.compile(r"\*\*(.+?)\*\*")


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


def resolve(ref: str, citing: str, known: set[str]) -> str | None:
    """The repository path that the citation ``ref`` in the file ``citing`` names, or None."""
    folder = os.path.dirname(citing)
    for base in ("", folder, "docs"):
        path = Path(os.path.normpath(os.path.join(base, ref))).as_posix()
        if path in known:
            return path
    return None


def broken_refs(text: str, citing: str, known: set[str]) -> list[str]:
    """The ``.md`` citations in ``text`` (of the file ``citing``) that resolve to no file."""
    return [ref for ref in MD_REF.findall(URL.sub(" ", text)) if not resolve(ref, citing, known)]


def titles(markdown: str) -> list[str]:
    """The headings and bold lead-ins of a markdown text, each on one line."""
    text = LINE_BREAK.sub(" ", markdown)
    return HEADING.findall(markdown) + BOLD.findall(text)


def broken_sections(text: str, citing: str, known: set[str], read) -> list[str]:
    """The citations in ``text`` followed by a quoted title that starts no heading or bold
    lead-in of the cited file (``read(path)`` gives a file's text); unresolved files are
    ``broken_refs``' to report."""
    broken = []
    for ref, title in SECTION_REF.findall(LINE_BREAK.sub(" ", URL.sub(" ", text))):
        path = resolve(ref, citing, known)
        if path is not None and not any(t.startswith(title) for t in titles(read(path))):
            broken.append(f'{ref}, "{title}"')
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


def test_cited_sections_exist() -> None:
    files = repo_files()
    known = set(files)

    @functools.cache
    def read(path: str) -> str:
        return (ROOT / path).read_text(encoding="utf-8", errors="replace")

    problems = []
    for path in files:
        if Path(path).suffix in TEXT_SUFFIXES:
            problems += [f"{path}: {c}" for c in broken_sections(read(path), path, known, read)]
    assert not problems, "citations of sections that their file lacks:\n" + "\n".join(problems)


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


def test_a_missing_section_is_caught() -> None:
    gpu, other = "docs/gpu" + ".md", "docs/other" + ".md"  # spelled apart: not citations here
    docs = {gpu: "# GPU\n\n## Measured (H200)\n\n- **Looping\n  launch** (a date): text\n"}
    text = (
        f'see {gpu}, "Measured", {gpu[5:]} "Looping launch", {gpu}, "Gone",\n'
        f'# {gpu}, "Looping\n# launch", // {gpu}, "Measured\n// (H200)" and {other}, "Any"'
    )
    found = broken_sections(text, "graphfuse/x.py", set(docs), docs.__getitem__)
    assert found == [f'{gpu}, "Gone"']
