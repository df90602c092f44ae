"""Checks that opening a ``.pt2`` runs no code from it, and a guard that enforces it.

torch 2.13's ``torch.export.load`` can run code from a crafted archive in three ways:

* pickled parts (sample inputs, tensor-subclass weights/constants, opaque objects) are
  unpickled with an unrestricted unpickler: directly (``weights_only=False``) or as a
  fallback after the restricted load fails (pytorch/pytorch#153410);
* symbolic shape expressions in ``models/<name>.json`` go through ``sympy.sympify``, which
  evaluates its string as Python;
* AOTInductor members (``data/aotinductor/``) are shared libraries that ``load_pt2`` opens.

``check_archive`` finds each of these before anything is loaded (torch's own weights-only
unpickler decides for the pickles, so nothing outside its allowlist is ever called), and
``restricted_loading`` patches the load path so that it cannot fall back to unrestricted
unpickling or evaluate an unchecked expression while torch deserialises the program.
"""

from __future__ import annotations

import contextlib
import io
import json
import pickle
import pickletools
import re
import threading
import tokenize
import zipfile
from collections.abc import Iterator
from typing import Any

import torch

from ..errors import UnsafeProgramError
from .archive import Archive

TRUST_HINT = "Pass trust=True (CLI: --trust) only for files you trust"

_GUARD_LOCK = threading.RLock()
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# sympy names that torch's serializer writes (srepr form) plus its own sympy functions.
_SYMPY_CORE = frozenset(
    "Symbol Dummy Integer Rational Float Half One Zero NegativeOne Infinity NegativeInfinity "
    "oo zoo nan NaN ComplexInfinity Add Mul Pow Mod Max Min Abs floor ceiling sign sqrt exp "
    "log Eq Ne Lt Le Gt Ge Equality Unequality StrictLessThan LessThan StrictGreaterThan "
    "GreaterThan And Or Not Xor Piecewise ExprCondPair ITE true false True False S "
    "BooleanTrue BooleanFalse Tuple".split()
)


def _allowed_sympy_names() -> frozenset[str]:
    import sympy
    import torch.utils._sympy.functions as fns

    own = {n for n, v in vars(fns).items() if isinstance(v, type) and issubclass(v, sympy.Basic)}
    return _SYMPY_CORE | own


def unsafe_expression_reason(expr: str) -> str | None:
    """Why ``sympy.sympify(expr)`` could run code, or None if ``expr`` is plain sympy.

    Accepts only numbers, identifier-like string literals, keyword arguments, arithmetic and
    comparison operators, brackets, commas, and calls of allowlisted sympy names. No
    attribute access, subscripts, dunder names or other names.
    """
    allowed = _allowed_sympy_names()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(expr).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError) as e:
        return f"does not tokenize ({e.__class__.__name__})"
    ok_ops = {"(", ")", ",", "+", "-", "*", "/", "//", "%", "**", "=", "==", "!=", "<", "<="}
    ok_ops |= {">", ">=", "&", "|", "~"}
    for i, tok in enumerate(tokens):
        kind, text = tok.type, tok.string
        if kind in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER):
            continue
        if kind == tokenize.NUMBER:
            continue
        if kind == tokenize.STRING:
            inner = text[1:-1] if text[:1] in "'\"" and text[-1:] == text[:1] else None
            if inner is None or not _IDENT.match(inner):
                return f"has the string literal {text[:40]}"
            continue
        if kind == tokenize.OP:
            if text not in ok_ops:
                return f"uses the operator {text!r}"
            continue
        if kind == tokenize.NAME:
            nxt = tokens[i + 1].string if i + 1 < len(tokens) else ""
            if "__" in text:
                return f"uses the name {text}"
            if nxt == "=" or text in allowed or re.fullmatch(r"[a-z]+[0-9]+", text):
                continue
            return f"uses the name {text}"
        return f"has the token {text[:40]!r}"
    return None


def _walk_expr_strs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr_str" and isinstance(value, str):
                yield value
            else:
                yield from _walk_expr_strs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk_expr_strs(value)


def _globals_in_pickle(data: bytes) -> list[str]:
    """The globals a pickle names (GLOBAL, INST, STACK_GLOBAL), read without executing it."""
    found: list[str] = []
    strings: list[str] = []
    memo: dict[int, str] = {}
    try:
        for op, arg, _pos in pickletools.genops(data):
            name = op.name
            if name in ("GLOBAL", "INST"):
                found.append(str(arg).replace(" ", ".", 1))
            elif name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
                strings.append(str(arg))
            elif name in ("BINPUT", "LONG_BINPUT", "PUT") and strings:
                memo[int(arg)] = strings[-1]
            elif name == "MEMOIZE" and strings:
                memo[len(memo)] = strings[-1]
            elif name in ("BINGET", "LONG_BINGET", "GET") and int(arg) in memo:
                strings.append(memo[int(arg)])
            elif name == "STACK_GLOBAL" and len(strings) >= 2:
                found.append(f"{strings[-2]}.{strings[-1]}")
    except Exception:  # a malformed pickle: report what was read so far
        pass
    return found


def _disallowed_globals(pickle_bytes: bytes) -> list[str]:
    from torch import _weights_only_unpickler as wou

    allowed = set(wou._get_allowed_globals()) | set(wou._get_user_allowed_globals())
    return [g for g in _globals_in_pickle(pickle_bytes) if g not in allowed]


def _data_pkl(payload: bytes) -> bytes | None:
    """The ``data.pkl`` of a ``torch.save`` zip payload, or None if it is not one."""
    try:
        with zipfile.ZipFile(io.BytesIO(payload)) as z:
            names = [n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            return z.read(names[0]) if names else None
    except (zipfile.BadZipFile, OSError, EOFError):
        return None


def _restricted_failure(member: str, payload: bytes, *, torch_save: bool) -> str | None:
    """Load ``payload`` with torch's weights-only unpickler; why it failed, or None."""
    try:
        if torch_save:
            torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")
        else:
            from torch import _weights_only_unpickler as wou

            wou.Unpickler(io.BytesIO(payload), encoding="utf-8").load()
    except Exception as e:  # any failure means torch would need unrestricted unpickling
        pkl = (_data_pkl(payload) if torch_save else payload) or payload
        bad = _disallowed_globals(pkl)
        if bad:
            return f"global {bad[0]}"
        first = (str(e).strip().splitlines() or [""])[0][:160]
        return f"{type(e).__name__}: {first}" if first else type(e).__name__
    return None


def check_archive(archive: Archive) -> None:
    """Refuse an archive that would run code when torch loads it.

    Args:
        archive: the validated archive (see ``archive.open_archive``).

    Raises:
        UnsafeProgramError: an AOTInductor member, a pickled part that torch's weights-only
            unpickler rejects, or a symbolic expression that is not plain sympy.
    """
    path = archive.path
    aoti = [m for m in archive.members if m.startswith("data/aotinductor/")]
    if aoti:
        raise UnsafeProgramError(
            f"{path}: {aoti[0]} is AOTInductor compiled code, which torch loads and runs; "
            f"refusing to load it. {TRUST_HINT}"
        )
    for member, torch_save in archive.pickled_parts():
        why = _restricted_failure(member, archive.read(member), torch_save=torch_save)
        if why is not None:
            raise UnsafeProgramError(
                f"{path}: {member} needs unrestricted unpickling ({why}); "
                f"refusing to load it. {TRUST_HINT}"
            )
    for model in archive.models:
        member = f"models/{model}.json"
        try:
            doc = json.loads(archive.read(member))
        except ValueError as e:
            raise UnsafeProgramError(f"{path}: {member} is not valid JSON ({e})") from None
        for expr in _walk_expr_strs(doc):
            why = unsafe_expression_reason(expr)
            if why is not None:
                raise UnsafeProgramError(
                    f"{path}: {member} has a symbolic expression that sympy would evaluate as "
                    f"Python ({why}): {expr[:60]!r}; refusing to load it. {TRUST_HINT}"
                )


class _RestrictedPickleModule:
    """Stands in for ``pickle`` inside torch's archive loader: loads are weights-only."""

    def __getattr__(self, name: str) -> Any:
        return getattr(pickle, name)

    @staticmethod
    def loads(data: bytes, **_: Any) -> Any:
        from torch import _weights_only_unpickler as wou

        try:
            return wou.Unpickler(io.BytesIO(data), encoding="utf-8").load()
        except Exception:
            bad = _disallowed_globals(data)
            what = f"global {bad[0]}" if bad else "a weights-only load failed"
            raise UnsafeProgramError(
                f"a pickled object needs unrestricted unpickling ({what}); refusing to load it"
            ) from None


@contextlib.contextmanager
def restricted_loading() -> Iterator[None]:
    """Within this block torch's ``.pt2`` loader can only unpickle weights-only.

    ``torch.load`` is forced to ``weights_only=True`` (so the fallback of
    ``deserialize_torch_artifact`` and the ``weights_only=False`` loads of
    ``pt2_archive._package`` fail instead of running code), the archive loader's ``pickle``
    is the weights-only unpickler, and every symbolic expression string is checked before
    sympy sees it. Calls are serialised by a lock, since ``torch.load`` is patched globally.
    """
    from torch._export.serde import serialize as serde
    from torch.export.pt2_archive import _package

    real_load = torch.load
    real_parse = serde.GraphModuleDeserializer._parse_sym_expr

    def weights_only_load(
        f: Any, map_location: Any = None, pickle_module: Any = None, **kwargs: Any
    ) -> Any:
        kwargs.pop("weights_only", None)
        try:
            return real_load(f, map_location, weights_only=True, **kwargs)
        except pickle.UnpicklingError:
            payload = f.getvalue() if isinstance(f, io.BytesIO) else b""
            bad = _disallowed_globals(_data_pkl(payload) or payload)
            what = f"global {bad[0]}" if bad else "a weights-only load failed"
            raise UnsafeProgramError(
                f"a pickled part needs unrestricted unpickling ({what}); refusing to load it"
            ) from None

    def checked_parse(self: Any, expr_str: Any, hint: Any = None) -> Any:
        if isinstance(expr_str, str):
            why = unsafe_expression_reason(expr_str)
            if why is not None:
                raise UnsafeProgramError(
                    f"symbolic expression {expr_str[:60]!r} {why}; refusing to evaluate it"
                )
        return real_parse(self, expr_str, hint)

    with _GUARD_LOCK:
        torch.load = weights_only_load  # type: ignore[assignment]
        _package.pickle = _RestrictedPickleModule()  # type: ignore[assignment]
        serde.GraphModuleDeserializer._parse_sym_expr = checked_parse  # type: ignore[method-assign]
        try:
            yield
        finally:
            torch.load = real_load  # type: ignore[assignment]
            _package.pickle = pickle  # type: ignore[assignment]
            serde.GraphModuleDeserializer._parse_sym_expr = real_parse  # type: ignore[method-assign]


def _is_operator_target(target: Any) -> bool:
    from torch._ops import HigherOrderOperator, OpOverload, OpOverloadPacket

    if isinstance(target, (OpOverload, OpOverloadPacket, HigherOrderOperator)):
        return True
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", "") or ""
    if module in ("_operator", "operator", "math"):
        return True
    return module.startswith("torch") and name.startswith(("sym_", "_sym_"))


def check_graph_targets(program: torch.export.ExportedProgram) -> None:
    """Refuse a program whose graph calls Python functions that are not operators.

    torch's deserialiser resolves a node target such as ``"torch.load"`` by attribute lookup
    under ``torch``, so a crafted graph could call any torch function when it runs. Only
    operator overloads, higher-order operators, ``operator``/``math`` functions and torch's
    ``sym_*`` helpers are accepted.

    Raises:
        UnsafeProgramError: names the node and its target.
    """
    for module in program.graph_module.modules():
        graph = getattr(module, "graph", None)
        if not isinstance(graph, torch.fx.Graph):
            continue
        for node in graph.nodes:
            if node.op == "call_function" and not _is_operator_target(node.target):
                target = getattr(node.target, "__qualname__", None) or repr(node.target)
                owner = getattr(node.target, "__module__", "") or ""
                raise UnsafeProgramError(
                    f"graph node {node.name} calls {owner + '.' if owner else ''}{target}, "
                    "which is not an operator; refusing to load it"
                )
