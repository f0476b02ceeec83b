"""CREATE, UPDATE, PATCH, DELETE and DELETECOLLECTION with the real server's rules (optimistic
concurrency, status subresource, immutable fields, graceful deletion, propagation, finalizers)."""

from __future__ import annotations

import contextlib
import json
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .decoding import decoded
from .errors import ApiError, already_exists, bad_request, conflict, invalid, not_found
from .patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from .resources import PREPARE, init_metadata
from .responses import _json_response
from .selectors import parse_field_selector, parse_label_selector
from .store import API_VERSIONS, LIST_KINDS, Entry, clone, now_rfc3339
from .validation import object_meta_causes

if TYPE_CHECKING:
    from .store import Store


class WritesMixin:
    """The write half of :class:`~.server.ApiServer` (it provides ``sb``, ``store`` and ``_get``)."""

    sb: Any
    store: Store

    if TYPE_CHECKING:

        def _get(self, resource: str, ns: str, name: str) -> Entry: ...

    # ---- request bodies of DELETE and DELETECOLLECTION ---------------------------------------------
    async def _delete_request(
        self, request: web.BaseRequest, resource: str, ns: str | None, name: str | None
    ) -> web.Response:
        """DELETE of one object: DeleteOptions from the body and the query, then :meth:`delete`."""
        query = request.query
        options: dict[str, Any] = {}
        raw = await request.read()
        if raw.strip():
            try:
                options = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise bad_request(f"couldn't decode DeleteOptions: {exc}") from None
        grace = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        policy = query.get("propagationPolicy", options.get("propagationPolicy"))
        if options.get("orphanDependents") is True and policy is None:
            policy = "Orphan"
        preconditions = options.get("preconditions") or {}
        result = self.delete(
            resource,
            ns or "",
            name or "",
            grace=int(grace) if grace is not None else None,
            propagation=policy,
            preconditions=preconditions,
        )
        return _json_response(result)

    def _delete_collection(self, resource: str, ns: str | None, query: Any) -> web.Response:
        """DELETECOLLECTION: delete every selected object, answer with the list of what was deleted."""
        label_match = parse_label_selector(query.get("labelSelector"))
        field_match, _eq = parse_field_selector(query.get("fieldSelector"), resource)
        deleted: list[bytes] = []
        for entry in list(self.store.iter(resource, ns)):
            if label_match(entry.obj["metadata"].get("labels") or {}) and field_match(entry.obj):
                meta = entry.obj["metadata"]
                with contextlib.suppress(ApiError):
                    self.delete(resource, meta.get("namespace", ""), meta["name"])
                    deleted.append(entry.item)
        # Like the real server: the list of what was deleted, as it was.
        api_version, _kind = API_VERSIONS[resource]
        return _json_response(
            b'{"kind":"'
            + LIST_KINDS[resource].encode()
            + b'","apiVersion":"'
            + api_version.encode()
            + b'","metadata":{"resourceVersion":"'
            + str(self.store.rv).encode()
            + b'"},"items":['
            + b",".join(deleted)
            + b"]}"
        )

    # ---- create / update / patch -----------------------------------------------------------------
    def create(self, resource: str, ns: str | None, body: Any, *, field_validation: str = "Warn") -> Entry:
        """CREATE; ``field_validation`` is the request's ``fieldValidation`` (``Strict`` refuses an
        unknown container field, ``Warn`` and ``Ignore`` drop it)."""
        if not isinstance(body, dict):
            raise bad_request("the object provided is unrecognized or invalid JSON: expected an object")
        api_version, kind = API_VERSIONS[resource]
        if body.get("kind") not in (None, kind) or body.get("apiVersion") not in (None, api_version):
            raise bad_request(
                f"the object provided is a {body.get('apiVersion')}/{body.get('kind')}: "
                f"expected {api_version}/{kind} on this path"
            )
        # A 400 before validation, as the real decoder answers.
        obj = clone(decoded(resource, body, strict=field_validation == "Strict"))
        obj.pop("kind", None)
        obj.pop("apiVersion", None)
        body_ns = (obj.get("metadata") or {}).get("namespace")
        if ns is not None and body_ns not in (None, "", ns):
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        if ns is not None and self.store.get("namespaces", "", ns) is None:
            raise not_found("namespaces", ns)
        init_metadata(resource, obj, ns)
        PREPARE[resource](obj)
        meta = obj["metadata"]
        if self.store.get(resource, meta.get("namespace", ""), meta["name"]) is not None:
            raise already_exists(resource, meta["name"])
        self.sb.admit_create(resource, obj)  # admission plugins and webhooks (quota, Kueue)
        return self.store.commit(resource, "ADDED", obj)

    def update(
        self, resource: str, ns: str, name: str, body: Any, *, subresource: str | None = None
    ) -> Entry:
        if not isinstance(body, dict):
            raise bad_request("the object provided is unrecognized or invalid JSON: expected an object")
        entry = self._get(resource, ns, name)
        meta_in = body.get("metadata") or {}
        if meta_in.get("name") not in (None, name):
            raise bad_request(
                f"the name of the object ({meta_in.get('name')}) does not match the name on the URL ({name})"
            )
        body = decoded(resource, body)
        rv = meta_in.get("resourceVersion")
        if rv not in (None, "") and rv != entry.obj["metadata"]["resourceVersion"]:
            raise conflict(resource, name)
        new = clone(body)
        new.pop("kind", None)
        new.pop("apiVersion", None)
        return self._replace(resource, entry, new, subresource=subresource)

    def patch(
        self,
        resource: str,
        ns: str,
        name: str,
        body: Any,
        content_type: str,
        *,
        subresource: str | None = None,
    ) -> Entry:
        entry = self._get(resource, ns, name)
        api_version, kind = API_VERSIONS[resource]
        current = clone(entry.obj)
        current["kind"] = kind
        current["apiVersion"] = api_version
        try:
            if content_type == "application/merge-patch+json":
                new = merge_patch(current, body)
            elif content_type == "application/strategic-merge-patch+json":
                new = strategic_merge_patch(current, body)
            elif content_type == "application/json-patch+json":
                new = json_patch(current, body)
            else:
                raise ApiError(
                    415,
                    "the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, "
                    "application/strategic-merge-patch+json",
                    reason="UnsupportedMediaType",
                )
        except PatchError as exc:
            raise ApiError(422, str(exc), reason="Invalid") from None
        if not isinstance(new, dict):
            raise ApiError(422, "the patch did not produce an object", reason="Invalid")
        rv = (new.get("metadata") or {}).get("resourceVersion")
        if rv not in (None, "") and rv != entry.obj["metadata"]["resourceVersion"]:
            raise conflict(resource, name)
        new.pop("kind", None)
        new.pop("apiVersion", None)
        return self._replace(resource, entry, new, subresource=subresource)

    def _replace(self, resource: str, entry: Entry, new: dict[str, Any], *, subresource: str | None) -> Entry:
        """Apply a full new object over ``entry`` with the real server's rules: status only through
        the ``status`` subresource, spec/metadata never through it, immutable identity fields."""
        old = entry.obj
        if subresource == "status":
            merged = clone(old)
            merged["status"] = new.get("status", {})
        else:
            merged = new
            if "status" in old:  # events have no status
                merged["status"] = clone(old["status"])
            else:
                merged.pop("status", None)
            meta = merged.setdefault("metadata", {})
            if not isinstance(meta, dict):
                raise bad_request("metadata must be an object")
            old_meta = old["metadata"]
            for key in (
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generateName",
            ):
                if key in old_meta:
                    meta[key] = old_meta[key]
                else:
                    meta.pop(key, None)
            if not isinstance(merged.get("spec"), dict) and "spec" in old:
                merged["spec"] = clone(old["spec"])
            if merged.get("spec") != old.get("spec"):
                self._validate_spec_update(resource, old, merged)
                meta["generation"] = old_meta.get("generation", 1) + 1
            if meta.get("labels") == {}:
                meta.pop("labels")
            if meta.get("labels") != old_meta.get("labels") or meta.get("annotations") != old_meta.get(
                "annotations"
            ):
                causes = object_meta_causes(meta)
                if causes:
                    raise invalid(resource, old_meta["name"], causes)
        return self.commit_update(resource, merged, old)

    def _validate_spec_update(self, resource: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        name = old["metadata"]["name"]
        if resource == "pods":
            _check_deadline_update(name, old["spec"].get("activeDeadlineSeconds"), new["spec"])
            # Only a few pod spec fields are mutable (image, activeDeadlineSeconds, tolerations additions).
            o, n = clone(old["spec"]), clone(new["spec"])
            for spec in (o, n):
                spec.pop("activeDeadlineSeconds", None)
                spec.pop("tolerations", None)
                for c in spec.get("containers") or []:
                    if isinstance(c, dict):
                        c.pop("image", None)
            if o != n:
                raise invalid(
                    "pods",
                    name,
                    [
                        (
                            "FieldValueForbidden",
                            "spec",
                            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
                        )
                    ],
                )
        elif resource == "jobs":
            if new["spec"].get("template") != old["spec"].get("template") and not old["spec"].get("suspend"):
                raise invalid(
                    "jobs",
                    name,
                    [("FieldValueInvalid", "spec.template", "Invalid value: field is immutable")],
                )

    def commit_deleted(self, resource: str, obj: dict[str, Any], old: dict[str, Any]) -> Entry:
        """Remove an object (one DELETED revision) and let the garbage collector react."""
        entry = self.store.commit(resource, "DELETED", obj, old)
        self.sb.gc.owner_removed(resource, obj)
        return entry

    def commit_update(self, resource: str, new: dict[str, Any], old: dict[str, Any]) -> Entry:
        """Store an updated object; an object being deleted whose last finalizer went away is removed."""
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            if (
                resource != "pods"
                or meta.get("deletionGracePeriodSeconds", 0) == 0
                or not new.get("spec", {}).get("nodeName")
            ):
                return self.commit_deleted(resource, new, old)
        return self.store.commit(resource, "MODIFIED", new, old)

    # ---- delete ----------------------------------------------------------------------------------
    def delete(
        self,
        resource: str,
        ns: str,
        name: str,
        *,
        grace: int | None = None,
        propagation: str | None = None,
        preconditions: dict[str, Any] | None = None,
    ) -> Any:
        """DELETE with the real server's semantics; returns the answer body (bytes or a dict).

        * Pods bound to a node and not yet terminal are deleted gracefully: ``deletionTimestamp`` is set
          and the kubelet stops the containers, then deletes the pod with grace 0. Unbound or finished
          pods, and ``gracePeriodSeconds=0``, go at once.
        * ``propagationPolicy``: ``Foreground`` keeps the owner (with the ``foregroundDeletion``
          finalizer) until its dependents are gone; ``Background`` removes the owner now and its
          dependents afterwards; ``Orphan`` removes only the owner-references. Jobs default to
          ``Orphan`` when no policy is given (batch/v1's historical default, which is why
          kubectl always sends ``Background``).
        * Finalizers keep an object (with ``deletionTimestamp``) until they are all removed.
        """
        entry = self._get(resource, ns, name)
        old = entry.obj
        if preconditions:
            if preconditions.get("uid") not in (None, old["metadata"]["uid"]):
                raise conflict(resource, name)
            if preconditions.get("resourceVersion") not in (None, old["metadata"]["resourceVersion"]):
                raise conflict(resource, name)
        if propagation not in (None, "Foreground", "Background", "Orphan"):
            raise bad_request(
                f'unsupported propagationPolicy "{propagation}": expected Foreground, Background or Orphan'
            )
        obj = clone(old)
        meta = obj["metadata"]
        if propagation is None:
            propagation = "Orphan" if resource == "jobs" else "Background"
        if resource == "pods":
            default_grace = obj.get("spec", {}).get("terminationGracePeriodSeconds", 30)
            effective = default_grace if grace is None else grace
            if not obj.get("spec", {}).get("nodeName") or obj.get("status", {}).get("phase") in (
                "Succeeded",
                "Failed",
            ):
                effective = 0
        else:
            effective = 0
        finalizers = list(meta.get("finalizers") or [])
        if (
            propagation == "Foreground"
            and "foregroundDeletion" not in finalizers
            and self.sb.gc.has_dependents(obj)
        ):
            finalizers.append("foregroundDeletion")
        if propagation == "Orphan":
            self.sb.gc.orphan_dependents(obj)

        if meta.get("deletionTimestamp"):
            # Already being deleted: a shorter grace period (e.g. a force delete) takes effect.
            current = meta.get("deletionGracePeriodSeconds", 0)
            if resource == "pods" and effective < current:
                meta["deletionGracePeriodSeconds"] = effective
                meta["deletionTimestamp"] = now_rfc3339(time.time() + effective)
                if effective == 0 and not finalizers:
                    return self.commit_deleted(resource, obj, old).full
                return self.store.commit(resource, "MODIFIED", obj, old).full
            return entry.full

        if effective > 0 or finalizers:
            meta["deletionTimestamp"] = now_rfc3339(time.time() + effective)
            meta["deletionGracePeriodSeconds"] = effective
            if finalizers:
                meta["finalizers"] = finalizers
            meta["generation"] = meta.get("generation", 1) + 1
            updated = self.store.commit(resource, "MODIFIED", obj, old)
            if "foregroundDeletion" in finalizers:
                self.sb.gc.delete_dependents(obj, foreground=True)
            return updated.full
        deleted = self.commit_deleted(resource, obj, old)
        if resource == "pods":
            return deleted.full
        group = "batch" if resource == "jobs" else ""
        details: dict[str, Any] = {"name": name}
        if group:
            details["group"] = group
        details["kind"] = resource
        details["uid"] = meta["uid"]
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def remove_now(self, resource: str, ns: str, name: str) -> bool:
        """Remove an object at once, ignoring grace and finalizers (node loss / force deletion)."""
        entry = self.store.get(resource, ns, name)
        if entry is None:
            return False
        obj = clone(entry.obj)
        self.commit_deleted(resource, obj, entry.obj)
        return True


def _check_deadline_update(name: str, old: Any, new_spec: dict[str, Any]) -> None:
    """A pod's ``activeDeadlineSeconds`` may be set where unset, or lowered; never raised nor removed, so
    that a deadline once set bounds the pod for good (ValidatePodUpdate, pkg/apis/core/validation)."""
    new = new_spec.get("activeDeadlineSeconds")
    field = "spec.activeDeadlineSeconds"
    if new is None:
        if old is not None:
            detail = 'Invalid value: "null": must not update from a positive integer to nil value'
            raise invalid("pods", name, [("FieldValueInvalid", field, detail)])
        return
    if isinstance(new, int) and not 0 <= new <= 2**31 - 1:
        detail = f"Invalid value: {new}: must be between 0 and 2147483647, inclusive"
        raise invalid("pods", name, [("FieldValueInvalid", field, detail)])
    if isinstance(old, int) and isinstance(new, int) and new > old:
        detail = f"Invalid value: {new}: must be less than or equal to previous value"
        raise invalid("pods", name, [("FieldValueInvalid", field, detail)])
