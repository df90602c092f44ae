"""Finding rule sets: bundled ones by name (``graphfuse.patterns``) or a user's ``.py``."""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import sys
import traceback

from ..errors import PatternLoadError
from .rule import RuleSet


def bundled_names() -> list[str]:
    """Names of the rule sets shipped in ``graphfuse.patterns``."""
    patterns = importlib.import_module("graphfuse.patterns")
    return sorted(
        m.name for m in pkgutil.iter_modules(patterns.__path__) if not m.name.startswith("_")
    )


def _rule_set_in(module: object, origin: str) -> RuleSet:
    rules = getattr(module, "RULES", None)
    if isinstance(rules, RuleSet):
        return rules
    found = [v for v in vars(module).values() if isinstance(v, RuleSet)]
    if len(found) == 1:
        return found[0]
    raise PatternLoadError(
        f"{origin} defines {len(found)} RuleSet values and no RULES; "
        "name the one to use RULES = RuleSet(...)"
    )


def _load_file(path: str) -> RuleSet:
    if not os.path.isfile(path):
        raise PatternLoadError(f"rule file {path} does not exist or is not a file")
    name = "graphfuse_user_rules_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PatternLoadError(f"rule file {path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(os.path.abspath(path))
    added = folder not in sys.path  # a rule file may import modules next to it
    try:
        sys.modules[name] = module
        if added:
            sys.path.insert(0, folder)
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise PatternLoadError(
            f"rule file {path} has a syntax error at line {exc.lineno}: {exc.msg}"
        ) from None
    except Exception as exc:
        sys.modules.pop(name, None)
        tb = traceback.extract_tb(exc.__traceback__)
        line = next((f.lineno for f in reversed(tb) if f.filename == path), None)
        at = f" (line {line})" if line else ""
        msg = str(exc).splitlines()[0] if str(exc) else ""
        raise PatternLoadError(
            f"rule file {path} raised {type(exc).__name__} at import{at}: {msg}"
        ) from None
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
    return _rule_set_in(module, f"rule file {path}")


def load_patterns(name_or_path: str | RuleSet) -> RuleSet:
    """A rule set: a bundled one by name (``"trtllm"``) or a user's rule file.

    A rule file is Python code that runs when loaded; it must define ``RULES`` (a
    :class:`RuleSet`) or exactly one RuleSet value.

    Example::

        rules = graphfuse.load_patterns("trtllm") + graphfuse.load_patterns("my_rules.py")
    """
    if isinstance(name_or_path, RuleSet):
        return name_or_path
    if not isinstance(name_or_path, str) or not name_or_path:
        raise PatternLoadError(f"a rule set is a name or a .py path, not {name_or_path!r}")
    if name_or_path.endswith(".py") or os.sep in name_or_path:
        return _load_file(name_or_path)
    names = bundled_names()
    if name_or_path not in names:
        raise PatternLoadError(
            f"unknown rule set {name_or_path!r}; bundled: {', '.join(names) or 'none'} "
            "(or give a path to a .py rule file)"
        )
    module = importlib.import_module(f"graphfuse.patterns.{name_or_path}")
    return _rule_set_in(module, f"graphfuse.patterns.{name_or_path}")
