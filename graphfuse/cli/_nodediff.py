"""``inspect NEW --diff OLD --nodes``: the nodes that changed, grouped into one hunk per
rewritten region (plain data; the renderer draws it).

Nodes are compared by name and by their line of graph code: a node of OLD whose line is
not in NEW was removed, a node of NEW whose line is not in OLD was added, and a name in
both with different lines is a node that now reads something else (a user of a replaced
root). Removed and added nodes that read each other form one region; a region in OLD
and one in NEW are the same hunk when a changed node reads, at one argument position,
a removed node in OLD and an added node in NEW (the replaced root and its replacement).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch.utils import _pytree as pytree

from ._graphinfo import code_line, is_fused, target_name


class _Sets:
    """Union-find over node keys (``("old", name)`` / ``("new", name)``)."""

    def __init__(self) -> None:
        self.parent: dict[tuple[str, str], tuple[str, str]] = {}

    def find(self, k: tuple[str, str]) -> tuple[str, str]:
        self.parent.setdefault(k, k)
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def union(self, a: tuple[str, str], b: tuple[str, str]) -> None:
        self.parent[self.find(a)] = self.find(b)


def _inputs(node: fx.Node) -> list[Any]:
    """The node's arguments flattened, in order (positions compare across graphs)."""
    return pytree.tree_leaves((node.args, dict(sorted(node.kwargs.items()))))


def node_diff(old: torch.export.ExportedProgram, new: torch.export.ExportedProgram) -> list:
    """One hunk per changed region, in NEW's graph order: ``{"fused": [names of graphfuse
    ops added], "removed": [OLD lines], "added": [NEW lines], "changed": [[OLD line, NEW
    line]]}``."""
    old_nodes = {n.name: n for n in old.graph.nodes}
    new_nodes = {n.name: n for n in new.graph.nodes}
    old_lines = {name: code_line(n) for name, n in old_nodes.items()}
    new_lines = {name: code_line(n) for name, n in new_nodes.items()}
    removed = [m for m in old_nodes if m not in new_lines]
    added = [m for m in new_nodes if m not in old_lines]
    changed = [m for m in new_nodes if m in old_lines and old_lines[m] != new_lines[m]]
    sets = _Sets()
    for side, names, nodes in (("old", removed, old_nodes), ("new", added, new_nodes)):
        keep = set(names)
        for name in names:
            sets.find((side, name))
            for arg in nodes[name].all_input_nodes:
                if arg.name in keep:
                    sets.union((side, name), (side, arg.name))
    gone, made = set(removed), set(added)
    for name in changed:
        before, after = _inputs(old_nodes[name]), _inputs(new_nodes[name])
        pairs = zip(before, after) if len(before) == len(after) else []
        for a, b in pairs:
            if isinstance(a, fx.Node) and isinstance(b, fx.Node):
                if a.name in gone and b.name in made:
                    sets.union(("old", a.name), ("new", b.name))
    hunks: dict[tuple[str, str], dict[str, Any]] = {}

    def hunk(key: tuple[str, str]) -> dict[str, Any]:
        return hunks.setdefault(
            sets.find(key), {"fused": [], "removed": [], "added": [], "changed": []}
        )

    for name in added:  # NEW's order first, so hunks follow the new graph
        h = hunk(("new", name))
        h["added"].append(new_lines[name])
        if is_fused(target_name(new_nodes[name])):
            h["fused"].append(f"{name} ({target_name(new_nodes[name])})")
    for name in removed:
        hunk(("old", name))["removed"].append(old_lines[name])
    for name in changed:
        owners = {
            sets.find(("new", a.name)) for a in new_nodes[name].all_input_nodes if a.name in made
        }
        owners |= {
            sets.find(("old", a.name)) for a in old_nodes[name].all_input_nodes if a.name in gone
        }
        for owner in sorted(owners) or [("changed", name)]:
            hunks.setdefault(owner, {"fused": [], "removed": [], "added": [], "changed": []})
            hunks[owner]["changed"].append([old_lines[name], new_lines[name]])
    return list(hunks.values())
