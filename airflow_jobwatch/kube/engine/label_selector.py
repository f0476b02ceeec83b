"""Label selectors (``app=x,tier in (a,b),!canary``) matched on the client side."""

from __future__ import annotations

from collections.abc import Callable


def selector_matcher(selector: str | None) -> Callable[[dict[str, str]], bool] | None:
    """A predicate for the equality- and set-based label selector syntax, or None when ``selector`` uses
    something this does not understand (then the caller does not filter). Used only to decide whether an
    object confirmed by a GET still belongs to this informer; the server does the real filtering."""
    # (operator, key, values): "in", "notin", "exists", "!exists"
    requirements: list[tuple[str, str, frozenset[str]]] = []
    parts, depth, current = [], 0, ""
    for ch in selector or "":  # split on commas outside parentheses
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if selector:
        parts.append(current)
    for raw in parts:
        part = raw.strip()
        if " notin " in part or " in " in part:
            op = "notin" if " notin " in part else "in"
            key, _, rest = part.partition(f" {op} ")
            rest = rest.strip()
            if not (rest.startswith("(") and rest.endswith(")")):
                return None
            requirements.append((op, key.strip(), frozenset(v.strip() for v in rest[1:-1].split(","))))
        elif "!=" in part:
            key, _, value = part.partition("!=")
            requirements.append(("notin", key.strip(), frozenset({value.strip()})))
        elif "=" in part:
            key, _, value = part.replace("==", "=").partition("=")
            requirements.append(("in", key.strip(), frozenset({value.strip()})))
        elif part.startswith("!"):
            requirements.append(("!exists", part[1:].strip(), frozenset()))
        elif part and all(c.isalnum() or c in "-_./" for c in part):
            requirements.append(("exists", part, frozenset()))
        else:
            return None

    def matches(labels: dict[str, str]) -> bool:
        for op, key, values in requirements:
            value = labels.get(key)
            if op == "in" and value not in values:
                return False
            if op == "notin" and value in values:
                return False
            if op == "exists" and key not in labels:
                return False
            if op == "!exists" and key in labels:
                return False
        return True

    return matches
