"""Every ``>>>`` example in the package's docstrings runs and shows what it says."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil

import pytest

import graphfuse


def _modules_with_examples() -> list[str]:
    """Modules with examples, but those needing an optional package that is not installed
    (Triton for ``graphfuse.triton``). The native extensions are not imported: which one
    loads is the package's choice (``tests/ops/test_native_variants.py``)."""
    names = []
    for info in pkgutil.walk_packages(graphfuse.__path__, "graphfuse.", onerror=lambda name: None):
        spec = importlib.util.find_spec(info.name)
        if spec is None or not (spec.origin or "").endswith(".py"):
            continue
        try:
            mod = importlib.import_module(info.name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.split(".")[0] != "graphfuse":
                continue
            raise
        if any(t.examples for t in doctest.DocTestFinder().find(mod)):
            names.append(info.name)
    return names


@pytest.mark.parametrize("name", _modules_with_examples())
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(
        importlib.import_module(name), optionflags=doctest.ELLIPSIS, verbose=False
    )
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
