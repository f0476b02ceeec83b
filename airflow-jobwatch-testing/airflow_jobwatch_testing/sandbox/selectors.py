"""Label and field selectors, parsed with the grammar and the error messages of apimachinery.

Label selectors: comma-separated requirements ``key``, ``!key``, ``key=v``, ``key==v``, ``key!=v``,
``key in (a,b)``, ``key notin (a,b)``. Field selectors: ``field=v``, ``field==v``, ``field!=v`` on the
fields the real server indexes for that resource (anything else is a 400 "field label not supported").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ApiError, bad_request

# Fields each resource can be selected on (the real server's field label conversion funcs).
SUPPORTED_FIELDS: dict[str, frozenset[str]] = {
    "pods": frozenset(
        {
            "metadata.name",
            "metadata.namespace",
            "status.phase",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    "jobs": frozenset({"metadata.name", "metadata.namespace", "status.successful"}),
    "namespaces": frozenset({"metadata.name", "status.phase"}),
    "events": frozenset(
        {
            "metadata.name",
            "metadata.namespace",
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
}

_TOKEN = re.compile(r"\s*(!=|==|=|!|\(|\)|,|[^\s!=(),]+)")


@dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    op: str  # "exists", "!exists", "in", "notin", "=", "!="
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        # "!=" and "notin" match objects that lack the key, like the real server.
        return not present or labels[self.key] not in self.values


LabelMatcher = Callable[[Mapping[str, str]], bool]


def _always(_labels: Mapping[str, str]) -> bool:
    return True


def parse_label_selector(text: str | None) -> LabelMatcher:
    """Parse a label selector; raise a 400 ``ApiError`` worded like apimachinery's parser."""
    if not text or not text.strip():
        return _always
    tokens = [t for t in _TOKEN.findall(text)]
    pos = 0
    reqs: list[_Requirement] = []

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def fail(found: str | None, expected: str) -> ApiError:
        what = f"found '{found}'" if found is not None else "found ''"
        return bad_request(f"unable to parse requirement: {what} expected: {expected}")

    while True:
        tok = peek()
        if tok is None:
            raise fail(None, "identifier")
        if tok == "!":
            pos += 1
            key = peek()
            if key is None or key in ("!", "(", ")", ",", "=", "==", "!="):
                raise fail(key, "identifier after '!'")
            pos += 1
            reqs.append(_Requirement(key, "!exists"))
        else:
            if tok in ("(", ")", ",", "=", "==", "!="):
                raise fail(tok, "identifier")
            key = tok
            pos += 1
            op = peek()
            if op is None or op == ",":
                reqs.append(_Requirement(key, "exists"))
            elif op in ("=", "==", "!="):
                pos += 1
                value = peek()
                if value is None or value == ",":
                    value_str = ""
                elif value in ("(", ")", "!", "=", "==", "!="):
                    raise fail(value, "identifier")
                else:
                    value_str = value
                    pos += 1
                reqs.append(_Requirement(key, "!=" if op == "!=" else "=", (value_str,)))
            elif op in ("in", "notin"):
                pos += 1
                if peek() != "(":
                    raise fail(peek(), "'('")
                pos += 1
                values: list[str] = []
                while True:
                    v = peek()
                    if v is None:
                        raise fail(None, "')'")
                    if v == ")":
                        pos += 1
                        break
                    if v == ",":
                        pos += 1
                        continue
                    if v in ("(", "!", "=", "==", "!="):
                        raise fail(v, "',' or ')'")
                    values.append(v)
                    pos += 1
                reqs.append(_Requirement(key, op, tuple(values)))
            else:
                raise fail(op, "'=', '!=', '==', 'in', notin'")
        tok = peek()
        if tok is None:
            break
        if tok != ",":
            raise fail(tok, "','")
        pos += 1

    frozen = tuple(reqs)

    def match(labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in frozen)

    return match


FieldMatcher = Callable[[Mapping[str, Any]], bool]


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string value of a dotted field of an object, "" when absent (as the real server indexes it)."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def _always_fields(_obj: Mapping[str, Any]) -> bool:
    return True


def parse_field_selector(text: str | None, resource: str) -> tuple[FieldMatcher, dict[str, str]]:
    """Parse a field selector for ``resource``.

    Returns the matcher and the ``field -> value`` equality terms (used to skip work, e.g. a
    ``metadata.name=x`` selector is answered with one dict lookup).
    """
    if not text or not text.strip():
        return _always_fields, {}
    supported = SUPPORTED_FIELDS.get(resource, frozenset({"metadata.name", "metadata.namespace"}))
    terms: list[tuple[str, bool, str]] = []
    equals: dict[str, str] = {}
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        for op in ("!=", "==", "="):
            if op in part:
                field, value = part.split(op, 1)
                negate = op == "!="
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field = field.strip()
        if field not in supported:
            raise bad_request(f"field label not supported: {field}")
        terms.append((field, negate, value.strip()))
        if not negate:
            equals[field] = value.strip()
    frozen = tuple(terms)

    def match(obj: Mapping[str, Any]) -> bool:
        for field, negate, value in frozen:
            if (field_value(obj, field) == value) == negate:
                return False
        return True

    return match, equals


__all__ = ["ApiError", "SUPPORTED_FIELDS", "field_value", "parse_field_selector", "parse_label_selector"]
