"""Pure renderers: plain data in, text on a rich Console out (no loading, no side effects).

Every function takes the console first; tests render to ``Console(file=StringIO(),
width=80, color_system=None)`` and compare with golden text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ._graphinfo import is_fused
from ._tree import wrap

FUSED = "bold magenta"


def _shape(info: dict[str, Any]) -> str:
    if "shape" in info:
        return "[" + ", ".join(str(d) for d in info["shape"]) + "]"
    if "items" in info:
        return "(" + ", ".join(_shape(i) for i in info["items"]) + ")"
    return info.get("value", "")


def _dtype(info: dict[str, Any]) -> str:
    if "dtype" in info:
        return info["dtype"]
    if "items" in info:
        return ", ".join(_dtype(i) for i in info["items"])
    return info.get("type", "")


def _op(name: str) -> Text:
    return Text(f"{name} (fused)", style=FUSED) if is_fused(name) else Text(name)


def _table(
    title: str, *columns: str, right: Sequence[str] = (), no_wrap: Sequence[str] = ()
) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in columns:
        table.add_column(
            col,
            justify="right" if col in right else "left",
            overflow="fold",
            no_wrap=col in no_wrap or col in right,
        )
    return table


def _size(n: int) -> str:
    from ..io.archive import format_bytes

    return format_bytes(n)


def render_summary(console: Console, path: str, info: dict[str, Any], top: int = 25) -> None:
    """``graphfuse inspect FILE``: inputs, outputs, weights and the op histogram."""
    w = info["weights"]
    console.print(Text(path, style="bold"), f"- {info['nodes']} nodes")
    console.print(
        f"weights: {w['parameters']} parameters, {w['buffers']} buffers, "
        f"{w['constants']} constants ({_size(w['bytes'])})"
    )
    for title, rows in (("Inputs", info["inputs"]), ("Outputs", info["outputs"])):
        table = _table(title, "name", "shape", "dtype")
        for row in rows:
            table.add_row(row["name"], _shape(row), _dtype(row))
        console.print(table)
    ops = list(info["ops"].items())
    table = _table(f"Ops ({len(ops)} kinds)", "op", "count", right=("count",))
    for name, count in ops[:top]:
        table.add_row(_op(name), str(count))
    if len(ops) > top:
        rest = sum(c for _, c in ops[top:])
        table.add_row(Text(f"... {len(ops) - top} more kind(s)", style="dim"), str(rest))
    console.print(table)
    fused = info["fused_ops"]
    if fused:
        total = sum(fused.values())
        console.print(Text(f"graphfuse ops: {total} call(s) of {len(fused)} kind(s)", style=FUSED))
    else:
        console.print("graphfuse ops: none")


def _code(console: Console, line: str, prefix: str = "", style: str = "") -> None:
    """One line of graph code, cut at argument boundaries to the console's width."""
    call = line.find("(", line.find(" = ") + 1) if " = " in line else line.find("(")
    width = max(console.width - len(prefix) - 4, 20)
    pieces = wrap(line, width, call + 1)
    if len(pieces[0]) > width and " = " in pieces[0]:  # the name and type on a line of their own
        left, right = line.split(" = ", 1)
        pieces = [left] + wrap("= " + right, width, right.find("(") + 3)
    console.print(Text(prefix + pieces[0], style=style), overflow="ignore", crop=False)
    pad = " " * len(prefix) + "    "
    for piece in pieces[1:]:
        console.print(Text(pad + piece, style=style), overflow="ignore", crop=False)


def render_graph(console: Console, path: str, lines: list[str]) -> None:
    """``graphfuse inspect FILE --graph``: the graph as code, one node a line."""
    console.print(Text(path, style="bold"), f"- {len(lines)} nodes, as graph code")
    for line in lines:
        _code(console, line)


def render_node(console: Console, info: dict[str, Any]) -> None:
    """``graphfuse inspect FILE --node NAME``: the node as graph code, the model's source
    line, its arguments by schema name (literals too), what it reads and who reads it,
    each as graph code."""
    node = info["node"]
    _code(console, info["code"], style="bold")
    if is_fused(node["op"]):
        console.print(Text(f"a graphfuse op: {node['op']} (fused)", style=FUSED))
    if info["source"]:
        console.print(Padding(Text(info["source"], style="dim"), (0, 0, 0, 2)))
    if info["arguments"]:
        table = _table("Arguments", "name", "value", "note")
        for row in info["arguments"]:
            table.add_row(row["name"], row["value"], row["how"])
        console.print(table)
    for title, rows in (("Reads", info["inputs"]), ("Read by", info["users"])):
        console.print(Text(title, style="bold"))
        for row in rows:
            _code(console, row["code"], "  ")
        if not rows:
            console.print("  nothing")


def render_diff(console: Console, old: str, new: str, info: dict[str, Any]) -> None:
    """``graphfuse inspect NEW --diff OLD``: the ops that disappeared from OLD and those
    that appeared in NEW (fused ops marked)."""
    n_a, n_b = info["nodes"]
    console.print(Text(f"{old} -> {new}", style="bold"))
    console.print(f"nodes: {n_a} -> {n_b} ({n_b - n_a:+d})")
    for title, ops, sign in (
        (f"Disappeared from {old}", info["disappeared"], "-"),
        (f"Appeared in {new}", info["appeared"], "+"),
    ):
        table = _table(title, "op", "count", right=("count",))
        for name, count in ops.items():
            table.add_row(_op(name), f"{sign}{count}")
        if not ops:
            table.add_row("(none)", "")
        console.print(table)
    fused = info["fused_appeared"]
    if fused:
        console.print(Text(f"fused ops appeared: {sum(fused.values())}", style=FUSED))
    else:
        console.print("fused ops appeared: none")


def render_hunks(console: Console, hunks: list[dict[str, Any]]) -> None:
    """``inspect NEW --diff OLD --nodes``: per rewritten region, the nodes OLD had (-),
    those NEW has (+), and the nodes that now read the replacement."""
    for hunk in hunks:
        console.print()
        what = ", ".join(hunk["fused"]) or "no fused op"
        console.print(Text(f"@@ {what}", style=FUSED if hunk["fused"] else "bold"))
        for line in hunk["removed"]:
            _code(console, line, "- ", "red")
        for line in hunk["added"]:
            _code(console, line, "+ ", "green")
        for before, after in hunk["changed"]:
            _code(console, before, "- ", "red")
            _code(console, after, "+ ", "green")
    if not hunks:
        console.print()
        console.print("no node changed")


def render_counts(console: Console, rule_set: str, counts: dict[str, int], dry_run: bool) -> None:
    """The rules x rewrites table of ``graphfuse apply`` (x matches for a dry run)."""
    console.print(Text(f"Rule set {rule_set}" + (" (dry run)" if dry_run else ""), style="bold"))
    column = "would fire" if dry_run else "rewrites"
    table = _table("", "rule", column, right=(column,))
    for rule, n in counts.items():
        table.add_row(Text(rule, style="bold green") if n else Text(rule), str(n))
    console.print(table)
    total = sum(counts.values())
    if dry_run:
        console.print(f"{total} match(es) would fire; nothing was rewritten")
    else:
        console.print(
            f"{total} rewrite(s)" if total else "nothing matched (the program is unchanged)"
        )


def render_fired(console: Console, rows: list[dict[str, Any]], dry_run: bool) -> None:
    """Every match that fired (``apply -v``) or would fire (``apply --dry-run``): rule,
    root node, where the rule is defined, and the nodes it removes."""
    verb = "Would fire" if dry_run else "Fired"
    console.print()
    console.print(Text(f"{verb}: {len(rows)} match(es)", style="bold"))
    for row in rows:
        head = Text("  ")
        head.append(row["rule"], style="bold green")
        head.append(f" at {row['root']}")
        if row.get("sweep", 1) > 1:
            head.append(f" (sweep {row['sweep']})")
        head.append(f"  {row['where']}", style="dim")
        console.print(head)
        pieces = wrap("removes " + ", ".join(row["removed"]), max(console.width - 6, 20))
        for k, piece in enumerate(pieces):
            console.print(Text(("    " if k == 0 else "      ") + piece))


def render_overlaps(console: Console, overlaps: list[str]) -> None:
    """Matches that lost their nodes to another match, one sentence each (``apply``)."""
    if not overlaps:
        return
    console.print()
    console.print(Text(f"Overlaps: {len(overlaps)} match(es) lost to another", style="bold"))
    for line in overlaps:
        for k, piece in enumerate(wrap(line, max(console.width - 6, 20))):
            console.print(Text(("  " if k == 0 else "    ") + piece, style="yellow"))


def render_rule_stats(
    console: Console, stats: dict[str, dict[str, Any]], timings: dict[str, float], sweeps: int
) -> None:
    """``apply -v``: per rule, candidates tried, time matching them, rejects (a full
    structure its check, an escape or its rewrite refused), rewrites and time rewriting;
    costliest first; then the run's phases (seconds in ``timings``, shown in ms)."""
    console.print()
    console.print(Text(f"Time per rule ({sweeps} sweep(s))", style="bold"))
    table = _table(
        "",
        "rule",
        "tried",
        "match ms",
        "rejects",
        "rewrites",
        "rewrite ms",
        right=("tried", "match ms", "rejects", "rewrites", "rewrite ms"),
        no_wrap=("rule",),
    )
    order = sorted(stats.items(), key=lambda kv: -(kv[1]["match_s"] + kv[1]["rewrite_s"]))
    for name, s in order:
        table.add_row(
            name,
            str(s["candidates"]),
            f"{s['match_s'] * 1e3:.2f}",
            str(s["rejects"]),
            str(s["rewrites"]),
            f"{s['rewrite_s'] * 1e3:.2f}",
        )
    console.print(table)
    if timings:
        phases = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in timings.items())
        console.print(f"phases: {phases}")


def render_verify(console: Console, rows: list[dict[str, Any]], ok: bool, tol: float) -> None:
    """``apply --verify``: per output, the error of the rewritten program vs the input one."""
    table = _table("Verify (random inputs)", "output", "shape", "rel. L2 error", "max abs diff")
    for row in rows:
        table.add_row(row["output"], row["shape"], f"{row['rel_l2']:.3g}", f"{row['max_abs']:.3g}")
    console.print(table)
    verdict = (
        f"agree (relative L2 error <= {tol:g})" if ok else f"DISAGREE (relative L2 error > {tol:g})"
    )
    console.print(Text(f"outputs {verdict}", style="green" if ok else "red"))


def render_explain(
    console: Console, rule_set: str, groups: dict[str, list[dict[str, str]]]
) -> None:
    """``graphfuse explain``: near misses grouped by rule, with the user's source line."""
    total = sum(len(v) for v in groups.values())
    console.print(Text(f"Rule set {rule_set}: {total} near miss(es)", style="bold"))
    for rule, misses in groups.items():
        console.print()
        console.print(Text(f"{rule} ({len(misses)})", style="bold"))
        for miss in misses:
            head = f"{miss['node']} ({miss['target']})" if miss.get("target") else miss["node"]
            console.print(Padding(Text(head, style="cyan"), (0, 0, 0, 2)))
            console.print(Padding(Text(miss["reason"]), (0, 0, 0, 4)))
            if miss.get("source"):
                console.print(Padding(Text(miss["source"], style="dim"), (0, 0, 0, 4)))
    if not total:
        console.print("no near misses: every rule either fired or found no candidate")


_OUTCOME = {
    "match": "matches here; the rewrite would remove {reason}",
    "check": "the pattern matches; the check refuses: {reason}",
    "escape": "the pattern matches, but {reason}",
    "structure": "stopped: {reason}",
    "none": "{reason}",
}
_ROW_STYLE = {"stop": "bold red", "failed": "red", "unreached": "dim", "reached": ""}


def render_explain_node(console: Console, info: dict[str, Any]) -> None:
    """``graphfuse explain FILE --node NAME``: per rule tried there, the outcome and the
    pattern tree with what each place matched and where matching stopped (✗)."""
    _code(console, info["code"], style="bold")
    if info["source"]:
        console.print(Padding(Text(info["source"], style="dim"), (0, 0, 0, 2)))
    n = len(info["rules"])
    console.print(f"Rule set {info['rule_set']}: {n} rule(s) tried at {info['node']}")
    for rule in info["rules"]:
        console.print()
        head = Text(rule["rule"], style="bold green")
        head.append(f"  {rule['where']}  (priority {rule['priority']})", style="dim")
        console.print(head)
        reason = rule["reason"].removeprefix("matches: ")
        text = _OUTCOME[rule["outcome"]].format(reason=reason)
        _prose(console, text, "  ", "bold")
        _rows(console, rule["rows"])
    if not n:
        console.print("No rule is rooted at this node's op (rules are tried at their root op):")
        for row in info["elsewhere"]:
            line = f"{row['rule']}: rooted at {', '.join(row['roots'])}"
            if row["uses_this_op"]:
                line += " (its pattern uses this op inside: explain a node that reads it)"
            _prose(console, line, "  ")


def _prose(console: Console, text: str, indent: str, style: str = "") -> None:
    """A sentence wrapped at spaces, later lines indented two more."""
    import textwrap

    lines = textwrap.wrap(
        text,
        console.width,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    for line in lines:
        console.print(Text(line, style=style), overflow="ignore", crop=False)


def _rows(console: Console, rows: list[dict[str, Any]]) -> None:
    """Explained tree rows: the pattern text, then what it met in a column (a long text
    wrapped under itself, the value after its last piece)."""
    col = min(max((len(r["text"]) for r in rows), default=0) + 2, 48) + 2
    for row in rows:
        style = _ROW_STYLE[row["state"]]
        value = row["value"]
        if row["state"] in ("stop", "failed"):
            value = "✗ " + value + ("  stopped here" if row["state"] == "stop" else "")
        text = "  " + row["text"]
        if len(text) + 2 + len(value) <= console.width or len(text) < col:
            pieces = [text]
        else:
            depth = len(text) - len(text.lstrip())
            cut = wrap(text.lstrip(), max(console.width - depth - 4, 20))
            pieces = [" " * depth + cut[0]] + [" " * (depth + 4) + p for p in cut[1:]]
        for piece in pieces[:-1]:
            console.print(Text(piece, style=style), overflow="ignore", crop=False)
        last = pieces[-1]
        if value and len(last) >= col and len(last) + 2 + len(value) > console.width:
            console.print(Text(last, style=style), overflow="ignore", crop=False)
            last = ""  # the value on a line of its own, in the column
        line = Text(last.ljust(col) if len(last) < col else last + "  ", style=style)
        if value:
            line.append(value, style=style or "cyan")
        console.print(line, overflow="ignore", crop=False)


def render_patterns(console: Console, sets: list[dict[str, Any]]) -> None:
    """``graphfuse patterns``: rule sets, their rules, one-line docs and where each is defined."""
    for k, rs in enumerate(sets):
        if k:
            console.print()
        console.print(Text(f"{rs['name']} ({len(rs['rules'])} rules)", style="bold"))
        width = max((len(r["name"]) for r in rs["rules"]), default=0)
        for rule in rs["rules"]:
            line = Text("  ")
            line.append(rule["name"].ljust(width), style="bold green")
            line.append(f"  {rule['location']}", style="dim")
            console.print(line)
            if rule["doc"]:
                console.print(Padding(Text(rule["doc"]), (0, 0, 0, 4)))


def render_rule(console: Console, info: dict[str, Any]) -> None:
    """``graphfuse patterns --show RULE``: where the rule is defined, its pattern as a
    tree, its check (with source) and its rewrite."""
    from . import _tree

    console.print(
        Text(info["rule"], style="bold green"),
        f"(rule set {info['rule_set']}, priority {info['priority']})",
    )
    console.print(f"defined at {info['location']}")
    if info["doc"]:
        console.print(Text(info["doc"]))
    console.print()
    trees = info["trees"]
    console.print(Text(f"Pattern, rooted at {', '.join(info['roots'])}", style="bold"))
    for i, tree in enumerate(trees):
        if len(trees) > 1:
            where = "the anchor" if i == 0 else "found among the users of the nodes above"
            console.print(f"  root {i + 1} ({where}):")
        for line in _tree.shown([tree], console.width, indent=2 + 2 * (len(trees) > 1)):
            console.print(Text(line), overflow="ignore", crop=False)
    console.print()
    check = info["check"]
    if check is None:
        console.print(Text("Check: none", style="bold"))
    else:
        head = Text("Check: ", style="bold")
        head.append(check["name"] + (f"  {check['location']}" if check["location"] else ""))
        console.print(head)
        _print_source(console, check["source"])
    console.print(
        Text(
            "Also checked: a name bound twice binds one value; no matched node but the "
            "root(s) is used outside the match.",
            style="dim",
        )
    )
    console.print()
    rewrite = info["rewrite"]
    head = Text("Rewrite: ", style="bold")
    head.append(rewrite["name"] + (f"  {rewrite['location']}" if rewrite["location"] else ""))
    console.print(head)


def _print_source(console: Console, lines: list[str], limit: int = 40) -> None:
    for line in lines[:limit]:
        console.print(Text("  " + line, style="dim"), overflow="ignore", crop=False)
    if len(lines) > limit:
        console.print(Text(f"  ... {len(lines) - limit} more line(s)", style="dim"))


def render_demo(console: Console, cases: list[Any]) -> None:
    """``graphfuse demo``: per case, what fired, node counts, agreement and speed."""
    for k, case in enumerate(cases):
        if k:
            console.print()
        fired = ", ".join(f"{r}={n}" for r, n in case.counts.items()) or "nothing fired"
        console.print(Text(case.name, style="bold"), f"- {fired}")
        console.print(f"  nodes: {case.nodes_before} -> {case.nodes_after}")
        rel = case.agreement.get("relative_l2_error", float("nan"))
        console.print(f"  agreement with the unfused program: relative L2 error {rel:.3g}")
        console.print(
            f"  time: {case.time_unfused_ms:.2f} ms unfused, {case.time_fused_ms:.2f} ms fused "
            f"({case.speedup:.2f}x)"
        )
        for label, region in (("before", case.region_before), ("after", case.region_after)):
            if region:
                console.print(Padding(Text(f"{label}: " + " -> ".join(region)), (0, 0, 0, 2)))
