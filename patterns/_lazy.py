"""A rule-set package's ``RULES``, built when first read and again once a quantization
library has registered the op of a quant spelling (optimum-quanto's ``quantize_symmetric``
exists only after ``import optimum.quanto``), so the order of imports does not matter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graphfuse import Rule, RuleSet

from ._quant import quanto_quantize_symmetric


def lazy_rules(module: str, name: str, build: Callable[[], list[Rule]], doc: str) -> Callable:
    """The module ``__getattr__`` that serves ``RULES`` = ``RuleSet(name, build())``."""
    built: dict[bool, RuleSet] = {}

    def __getattr__(attr: str) -> Any:
        if attr != "RULES":
            raise AttributeError(f"module {module!r} has no attribute {attr!r}")
        key = quanto_quantize_symmetric() is not None
        if key not in built:
            built[key] = RuleSet(name, build(), doc=doc.splitlines()[0])
        return built[key]

    return __getattr__
