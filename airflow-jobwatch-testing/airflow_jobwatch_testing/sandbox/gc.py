"""Owner-reference garbage collection (what kube-controller-manager's garbage collector does)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any

from .errors import ApiError
from .store import Entry, clone


class GarbageCollector:
    """Owner-reference garbage collection (kube-controller-manager's garbage collector), in-process."""

    def __init__(self, sandbox: Any) -> None:
        self.sb = sandbox

    def _dependents(self, owner: dict[str, Any]) -> list[Entry]:
        uid = owner["metadata"]["uid"]
        ns = owner["metadata"].get("namespace")
        out = []
        for entry in self.sb.store.owned_by("pods", ns, uid):  # the store's owner index, not a scan
            out.append(entry)
        return out

    def has_dependents(self, owner: dict[str, Any]) -> bool:
        return bool(self._dependents(owner))

    def orphan_dependents(self, owner: dict[str, Any]) -> None:
        uid = owner["metadata"]["uid"]
        for entry in self._dependents(owner):
            new = clone(entry.obj)
            refs = [r for r in new["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                new["metadata"].pop("ownerReferences", None)
            self.sb.api.commit_update("pods", new, entry.obj)

    def delete_dependents(self, owner: dict[str, Any], *, foreground: bool) -> None:
        for entry in self._dependents(owner):
            meta = entry.obj["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            with contextlib.suppress(ApiError):
                self.sb.api.delete("pods", meta.get("namespace", ""), meta["name"], propagation="Background")

    def owner_removed(self, resource: str, obj: dict[str, Any]) -> None:
        """React to an object leaving the store: delete a removed owner's dependents (Background), and
        finish a Foreground deletion once its last dependent is gone."""
        loop = asyncio.get_running_loop()
        if resource == "jobs":
            loop.call_soon(functools.partial(self.delete_dependents, obj, foreground=False))
        elif resource == "pods":
            for ref in obj["metadata"].get("ownerReferences") or []:
                loop.call_soon(self._maybe_finish_foreground, obj["metadata"].get("namespace", ""), ref)
        elif resource == "namespaces":
            name = obj["metadata"]["name"]
            for kind in ("jobs", "pods", "events"):
                for entry in list(self.sb.store.iter(kind, name)):
                    loop.call_soon(self.sb.api.remove_now, kind, name, entry.obj["metadata"]["name"])

    def _maybe_finish_foreground(self, ns: str, ref: dict[str, Any]) -> None:
        if ref.get("kind") != "Job":
            return
        entry = self.sb.store.get("jobs", ns, ref.get("name", ""))
        if entry is None or entry.obj["metadata"].get("uid") != ref.get("uid"):
            return
        meta = entry.obj["metadata"]
        if "foregroundDeletion" not in (meta.get("finalizers") or []) or self.has_dependents(entry.obj):
            return
        new = clone(entry.obj)
        new["metadata"]["finalizers"] = [f for f in meta["finalizers"] if f != "foregroundDeletion"]
        if not new["metadata"]["finalizers"]:
            new["metadata"].pop("finalizers")
        self.sb.api.commit_update("jobs", new, entry.obj)


__all__ = ["GarbageCollector"]
