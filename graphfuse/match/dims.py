"""Named symbolic dimensions: sizes as sympy expressions, equality and constraints.

Sizes come from ``meta["val"].shape``: plain ints for static exports, ``SymInt`` for
dynamic ones. Constraints such as ``"D % 16 == 0"`` or ``"Hq % Hkv == 0"`` are evaluated
with sympy over the bound sizes; a constraint that cannot be decided (it depends on a
free symbol) does not hold.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import sympy
import torch


def size_expr(size: Any) -> sympy.Expr:
    """``size`` (int or SymInt) as a sympy expression."""
    if isinstance(size, torch.SymInt):
        return size.node.expr
    return sympy.Integer(int(size))


def same_size(a: Any, b: Any) -> bool:
    """True when two sizes are provably equal (also for symbolic sizes)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return sympy.simplify(size_expr(a) - size_expr(b)) == 0


def show_size(size: Any) -> str:
    """A size as users read it: ``72``, ``s0``, ``2*s1``."""
    return str(size_expr(size))


_RELATION = re.compile(r"(==|!=|<=|>=|<|>)")


@lru_cache(maxsize=256)
def _parse(expr: str) -> tuple[str, str, str]:
    parts = _RELATION.split(expr)
    if len(parts) != 3:
        raise ValueError(f"a dim constraint needs one comparison, got {expr!r}")
    return parts[0].strip(), parts[1], parts[2].strip()


_OPS = {
    "==": sympy.Eq,
    "!=": sympy.Ne,
    "<": sympy.Lt,
    "<=": sympy.Le,
    ">": sympy.Gt,
    ">=": sympy.Ge,
}


def holds(expr: str, dims: dict[str, Any]) -> bool | None:
    """Evaluate ``expr`` (e.g. ``"D % 16 == 0"``) over ``dims``.

    Returns True or False when decided, None when it depends on a free symbol.
    """
    lhs, rel, rhs = _parse(expr)
    local = {k: size_expr(v) for k, v in dims.items()}
    left = sympy.sympify(lhs, locals=local)
    right = sympy.sympify(rhs, locals=local)
    result = _OPS[rel](left, right)
    if result is sympy.true:
        return True
    if result is sympy.false:
        return False
    return None
