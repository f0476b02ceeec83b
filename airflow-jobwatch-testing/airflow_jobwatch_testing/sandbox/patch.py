"""The three patch types ``kubectl patch`` and the client libraries send.

* JSON merge patch (RFC 7386): ``null`` deletes, dicts merge, lists are replaced.
* Strategic merge patch: like merge patch, but the lists Kubernetes declares with a patch merge key
  (containers by ``name``, conditions by ``type`` ...) merge element by element; ``$patch: delete``
  removes an element, ``$patch: replace`` replaces a map or list, ``$setElementOrder`` is ignored
  (order follows the original), and primitive lists with ``merge`` strategy (``finalizers``) union.
* JSON patch (RFC 6902): add, remove, replace, move, copy, test.
"""

from __future__ import annotations

from typing import Any

from .store import clone

# Patch merge keys of the list fields the sandbox's resources carry (from the Kubernetes API
# types' ``patchMergeKey`` tags). Any list not named here is replaced, as for unknown fields.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "volumes": "name",
    "imagePullSecrets": "name",
    "conditions": "type",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "podIPs": "ip",
    "hostIPs": "ip",
    "readinessGates": "conditionType",
    "resourceClaims": "name",
}
# Primitive lists with ``patchStrategy: merge`` (union of values).
MERGE_PRIMITIVE_LISTS = frozenset({"finalizers"})


class PatchError(ValueError):
    """A patch that cannot be applied; the API answers 422/400 with this message."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; returns a new value, ``target`` is not modified."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge patch for the fields of pods, jobs and namespaces; returns a new value."""
    if not isinstance(patch, dict):
        return clone(patch)
    if patch.get("$patch") == "replace":
        return {k: clone(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field_name = key.split("/", 1)[1]
            if isinstance(result.get(field_name), list) and isinstance(value, list):
                result[field_name] = [v for v in result[field_name] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS and isinstance(result.get(key), list):
            result[key] = _merge_keyed_list(result[key], value, MERGE_KEYS[key])
        elif isinstance(value, list) and key in MERGE_PRIMITIVE_LISTS and isinstance(result.get(key), list):
            merged = list(result[key])
            merged.extend(v for v in value if v not in merged)
            result[key] = merged
        elif isinstance(value, dict):
            merged_value = strategic_merge_patch(result.get(key), value)
            if merged_value is None:
                result.pop(key, None)
            else:
                result[key] = merged_value
        else:
            result[key] = clone(value)
    return result


def _merge_keyed_list(original: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [clone(p) for p in patch if not (isinstance(p, dict) and p.get("$patch") == "replace")]
    result = [clone(o) for o in original]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchError(f"map: {item!r} does not contain declared merge key: {merge_key}")
        idx = next(
            (i for i, o in enumerate(result) if isinstance(o, dict) and o.get(merge_key) == item[merge_key]),
            None,
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                result.pop(idx)
            continue
        if idx is None:
            result.append({k: clone(v) for k, v in item.items() if k != "$patch"})
        else:
            result[idx] = strategic_merge_patch(result[idx], item)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}: must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _container(doc: Any, parts: list[str], path: str) -> Any:
    cur = doc
    for part in parts:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise PatchError(f"doc is missing path: {path!r}")
    return cur


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch; returns a new value."""
    if not isinstance(ops, list):
        raise PatchError("json patch must be a list of operations")
    doc = clone(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid JSON patch operation {op!r}: needs 'op' and 'path'")
        kind = op["op"]
        parts = _pointer(op["path"])
        if kind in ("move", "copy"):
            from_parts = _pointer(op.get("from", ""))
            value = clone(_container(doc, from_parts, op.get("from", "")))
            if kind == "move":
                doc = _remove(doc, from_parts, op.get("from", ""))
            doc = _add(doc, parts, value, op["path"])
        elif kind == "add":
            doc = _add(doc, parts, clone(op.get("value")), op["path"])
        elif kind == "remove":
            doc = _remove(doc, parts, op["path"])
        elif kind == "replace":
            doc = _remove(doc, parts, op["path"])
            doc = _add(doc, parts, clone(op.get("value")), op["path"])
        elif kind == "test":
            if _container(doc, parts, op["path"]) != op.get("value"):
                raise PatchError(f"testing value {op['path']} failed")
        else:
            raise PatchError(f"unexpected kind of JSON patch operation {kind!r}")
    return doc


def _add(doc: Any, parts: list[str], value: Any, path: str) -> Any:
    if not parts:
        return value
    parent = _container(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise PatchError(f"add operation does not apply: index {last} out of range for {path!r}")
    else:
        raise PatchError(f"add operation does not apply: doc is missing path: {path!r}")
    return doc


def _remove(doc: Any, parts: list[str], path: str) -> Any:
    if not parts:
        return None
    parent = _container(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        parent.pop(int(last))
    else:
        raise PatchError(f"remove operation does not apply: doc is missing path: {path!r}")
    return doc
