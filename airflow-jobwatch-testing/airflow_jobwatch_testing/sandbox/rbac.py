"""RBAC: Roles, ClusterRoles and their bindings decide which user may do which verb on what.

Modelled on the RBAC authorizer (``plugin/pkg/auth/authorizer/rbac``):

* a request has attributes *user* (+ groups), *verb* (get, list, watch, create, update, patch,
  delete, deletecollection), *API group* (``""`` for pods, ``"batch"`` for jobs), *resource*,
  *subresource* (``pods/log``, ``pods/status``), *namespace* and *name*;
* a ``RoleBinding`` grants its role's rules in its own namespace; a ``ClusterRoleBinding`` grants a
  ClusterRole's rules everywhere (including cluster-scoped resources such as namespaces); a
  RoleBinding may reference a ClusterRole, whose rules then apply in the binding's namespace only;
* a rule matches when its ``verbs``, ``apiGroups`` and ``resources`` contain the request's (``*``
  matches all; ``resources`` are ``"pods"``, ``"pods/log"``, ``"*"`` or ``"*/log"``) and, if it
  lists ``resourceNames``, the request names one of them (so a rule with names never allows list,
  watch or create without a name);
* subjects are ``User``, ``Group`` or ``ServiceAccount`` (user
  ``system:serviceaccount:<namespace>:<name>``);
* for a GET/UPDATE of a ``namespaces`` object, the request's namespace is the object's name; for a
  list or watch with ``fieldSelector=metadata.name=X``, the name is ``X`` (both as in
  ``k8s.io/apiserver/pkg/endpoints/request/requestinfo.go``);
* members of ``system:masters`` (the admin token) are never refused;
* a ClusterRole with an ``aggregationRule`` holds the rules of every ClusterRole whose labels match
  one of its ``clusterRoleSelectors`` (what the clusterrole-aggregation controller writes into it);
* manifests are loaded as ``kubectl apply -n NAMESPACE`` applies them: a namespaced document without
  a namespace gets ``NAMESPACE`` (``default`` without one), one naming another is refused with
  kubectl's words, and a ``ServiceAccount`` subject without a namespace is the RoleBinding's own.

A refusal is the real server's 403 (``k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/
errors.go`` ``forbiddenMessage`` and ``k8s.io/apimachinery/pkg/api/errors`` ``NewForbidden``; shape
in ``tests/fixtures/real-apiserver/status-403-forbidden.json``)::

    pods is forbidden: User "system:serviceaccount:ns:sa" cannot list resource "pods" in API group ""
    in the namespace "x"
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .auth import Identity, service_account_user
from .errors import RESOURCE_GROUPS, ApiError

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
_ROLE_KINDS = ("Role", "ClusterRole")
_BINDING_KINDS = ("RoleBinding", "ClusterRoleBinding")


class ManifestError(ValueError):
    """An RBAC manifest the sandbox cannot load; the message names the document and the field."""


@dataclasses.dataclass(frozen=True)
class PolicyRule:
    verbs: tuple[str, ...]
    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    resource_names: tuple[str, ...] = ()

    def matches(self, verb: str, group: str, resource: str, name: str) -> bool:
        if "*" not in self.verbs and verb not in self.verbs:
            return False
        if "*" not in self.api_groups and group not in self.api_groups:
            return False
        if not any(_resource_matches(r, resource) for r in self.resources):
            return False
        return not self.resource_names or name in self.resource_names


def _resource_matches(rule: str, requested: str) -> bool:
    if rule in ("*", requested):
        return True
    main, _, sub = requested.partition("/")
    return bool(sub) and rule == f"*/{sub}"


@dataclasses.dataclass(frozen=True)
class Binding:
    namespace: str | None  # None: a ClusterRoleBinding (everywhere)
    role: tuple[str, str, str]  # (kind, namespace or "", name)
    users: frozenset[str]
    groups: frozenset[str]


@dataclasses.dataclass(frozen=True)
class Request:
    """The authorization attributes of one API request."""

    verb: str
    resource: str  # "pods", "jobs", "namespaces", "events"
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def group(self) -> str:
        return RESOURCE_GROUPS.get(self.resource, "")

    @property
    def full_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


class Rbac:
    """The roles and bindings of one sandbox, and the decisions made from them."""

    def __init__(self, *, enabled: bool = False) -> None:
        self.enabled = enabled
        self.roles: dict[tuple[str, str, str], list[PolicyRule]] = {}
        self.labels: dict[tuple[str, str, str], dict[str, str]] = {}
        # ClusterRoles with an aggregationRule: their label selectors (matchers of a labels dict).
        self.aggregations: dict[tuple[str, str, str], list[Any]] = {}
        self.bindings: list[Binding] = []
        self.refused = 0
        self._anon = 0

    # ---- loading ---------------------------------------------------------------------------------
    def load_manifests(
        self, manifests: str | Iterable[Mapping[str, Any]], *, namespace: str | None = None
    ) -> list[str]:
        """Load Role/ClusterRole/RoleBinding/ClusterRoleBinding documents (YAML text, possibly
        several ``---`` documents, or already parsed dicts; other kinds are ignored, e.g. a
        ServiceAccount in the same file), as ``kubectl apply -n namespace`` would. Returns
        ``kind/namespace/name`` of what was loaded."""
        loaded: list[str] = []
        for index, doc in enumerate(_documents(manifests)):
            kind = doc.get("kind")
            if kind in _ROLE_KINDS:
                loaded.append(self._load_role(doc, index, namespace))
            elif kind in _BINDING_KINDS:
                loaded.append(self._load_binding(doc, index, namespace))
        return loaded

    def _load_role(self, doc: Mapping[str, Any], index: int, namespace: str | None) -> str:
        kind = str(doc["kind"])
        meta = _meta(doc, index)
        ns = "" if kind == "ClusterRole" else _namespace_of(meta, index, kind, namespace)
        if kind == "ClusterRole" and isinstance(doc.get("aggregationRule"), Mapping):
            selectors = doc["aggregationRule"].get("clusterRoleSelectors") or []
            self.aggregations[(kind, "", str(meta["name"]))] = [_selector(s, index) for s in selectors]
        labels = meta.get("labels")
        self.labels[(kind, ns, str(meta["name"]))] = dict(labels) if isinstance(labels, Mapping) else {}
        rules: list[PolicyRule] = []
        for r, rule in enumerate(doc.get("rules") or []):
            where = f"document {index} ({kind} {meta['name']}) rules[{r}]"
            if not isinstance(rule, Mapping):
                raise ManifestError(f"{where}: expected a mapping, got {type(rule).__name__}")
            if rule.get("nonResourceURLs"):
                continue  # discovery and /healthz are allowed to every authenticated user anyway
            for field in ("verbs", "resources"):
                if not isinstance(rule.get(field), list) or not rule[field]:
                    raise ManifestError(f"{where}: {field} must be a non-empty list")
            if not isinstance(rule.get("apiGroups"), list):
                raise ManifestError(f'{where}: apiGroups must be a list (use [""] for the core group)')
            rules.append(
                PolicyRule(
                    verbs=tuple(str(v) for v in rule["verbs"]),
                    api_groups=tuple(str(g) for g in rule["apiGroups"]),
                    resources=tuple(str(x) for x in rule["resources"]),
                    resource_names=tuple(str(n) for n in rule.get("resourceNames") or ()),
                )
            )
        self.roles[(kind, ns, str(meta["name"]))] = rules
        return f"{kind}/{ns}/{meta['name']}" if ns else f"{kind}/{meta['name']}"

    def _load_binding(self, doc: Mapping[str, Any], index: int, namespace: str | None) -> str:
        kind = str(doc["kind"])
        meta = _meta(doc, index)
        ns = None if kind == "ClusterRoleBinding" else _namespace_of(meta, index, kind, namespace)
        ref = doc.get("roleRef")
        where = f"document {index} ({kind} {meta['name']})"
        if not isinstance(ref, Mapping) or ref.get("kind") not in _ROLE_KINDS or not ref.get("name"):
            raise ManifestError(f"{where}: roleRef must name a Role or ClusterRole (kind and name)")
        if ns is None and ref["kind"] == "Role":
            raise ManifestError(f"{where}: a ClusterRoleBinding can only reference a ClusterRole")
        role_ns = ns if ref["kind"] == "Role" else ""
        users: set[str] = set()
        groups: set[str] = set()
        for s, subject in enumerate(doc.get("subjects") or []):
            if not isinstance(subject, Mapping) or not subject.get("name"):
                raise ManifestError(f"{where} subjects[{s}]: expected kind and name")
            skind = subject.get("kind")
            if skind == "ServiceAccount":
                sa_ns = subject.get("namespace") or ns
                if not sa_ns:
                    raise ManifestError(f"{where} subjects[{s}]: a ServiceAccount subject needs a namespace")
                users.add(service_account_user(str(sa_ns), str(subject["name"])))
            elif skind == "User":
                users.add(str(subject["name"]))
            elif skind == "Group":
                groups.add(str(subject["name"]))
            else:
                raise ManifestError(
                    f"{where} subjects[{s}]: kind {skind!r} is not one of ServiceAccount, User, Group"
                )
        self.bindings.append(
            Binding(
                ns, (str(ref["kind"]), role_ns or "", str(ref["name"])), frozenset(users), frozenset(groups)
            )
        )
        return f"{kind}/{ns}/{meta['name']}" if ns else f"{kind}/{meta['name']}"

    def grant(
        self,
        subject: str,
        *,
        verbs: Sequence[str],
        resources: Sequence[str],
        namespace: str | None = None,
        resource_names: Sequence[str] = (),
        api_groups: Sequence[str] | None = None,
    ) -> None:
        """Allow ``subject`` (a user name, or ``group:<name>``) ``verbs`` on ``resources`` in
        ``namespace`` (None: everywhere). ``api_groups`` default to the resources' own groups."""
        for verb in verbs:
            if verb != "*" and verb not in VERBS:
                raise ValueError(f"unknown verb {verb!r}: expected one of {', '.join(VERBS)} or '*'")
        if isinstance(resources, str) or isinstance(verbs, str):
            raise ValueError("verbs and resources must be lists, e.g. verbs=['list'], resources=['pods']")
        groups = (
            tuple(api_groups)
            if api_groups is not None
            else tuple(sorted({RESOURCE_GROUPS.get(r.split("/")[0], "") for r in resources}))
        )
        self._anon += 1
        role_kind = "ClusterRole" if namespace is None else "Role"
        key = (role_kind, namespace or "", f"sandbox-grant-{self._anon}")
        self.roles[key] = [PolicyRule(tuple(verbs), groups, tuple(resources), tuple(resource_names))]
        users, group_names = (
            ({subject}, set()) if not subject.startswith("group:") else (set(), {subject[6:]})
        )
        self.bindings.append(Binding(namespace, key, frozenset(users), frozenset(group_names)))

    def clear(self) -> None:
        self.roles.clear()
        self.labels.clear()
        self.aggregations.clear()
        self.bindings.clear()

    def rules_of(self, role: tuple[str, str, str]) -> list[PolicyRule]:
        """A role's rules; for an aggregated ClusterRole, also those of the ClusterRoles it selects
        (read at each decision, as the controller keeps the aggregate up to date)."""
        rules = list(self.roles.get(role, ()))
        for match in self.aggregations.get(role, ()):
            for key, labels in self.labels.items():
                if key[0] == "ClusterRole" and key != role and match(labels):
                    rules.extend(self.roles.get(key, ()))
        return rules

    # ---- decisions -------------------------------------------------------------------------------
    def allows(self, identity: Identity, request: Request) -> bool:
        if not self.enabled or identity.is_admin:
            return True
        for binding in self.bindings:
            if identity.user not in binding.users and not binding.groups.intersection(identity.groups):
                continue
            if binding.namespace is not None and binding.namespace != request.namespace:
                continue
            for rule in self.rules_of(binding.role):
                if rule.matches(request.verb, request.group, request.full_resource, request.name):
                    return True
        return False

    def authorize(self, identity: Identity, request: Request) -> None:
        """Raise the real server's 403 if ``identity`` may not make ``request``."""
        if not self.allows(identity, request):
            self.refused += 1
            raise forbidden(identity.user, request)


def forbidden(user: str, request: Request) -> ApiError:
    """The 403 a real server answers (see the module docstring for where the shape comes from)."""
    where = f'in the namespace "{request.namespace}"' if request.namespace else "at the cluster scope"
    reason = (
        f'User "{user}" cannot {request.verb} resource "{request.full_resource}" '
        f'in API group "{request.group}" {where}'
    )
    group = request.group
    qualified = f"{request.resource}.{group}" if group else request.resource
    if request.name:
        message = f'{qualified} "{request.name}" is forbidden: {reason}'
    else:
        message = f"{qualified} is forbidden: {reason}"
    details: dict[str, Any] = {}
    if request.name:
        details["name"] = request.name
    if group:
        details["group"] = group
    details["kind"] = request.resource
    return ApiError(403, message, reason="Forbidden", details=details)


def check_manifests(
    manifests: str | Iterable[Mapping[str, Any]],
    user: str,
    requests: Iterable[tuple[str, str, str] | Request],
    *,
    groups: Sequence[str] | None = None,
) -> list[str]:
    """What ``user`` may NOT do under ``manifests``: the 403 messages of the refused ``requests``
    (``(verb, resource_or_subresource, namespace)`` like ``("get", "pods/log", "airflow")``, or
    :class:`Request`). An empty list means everything is allowed. For testing docs' manifests."""
    from .auth import default_groups

    rbac = Rbac(enabled=True)
    rbac.load_manifests(manifests)
    identity = Identity(user, tuple(groups) if groups is not None else default_groups(user))
    refused: list[str] = []
    for item in requests:
        request = item if isinstance(item, Request) else _request(*item)
        if not rbac.allows(identity, request):
            refused.append(forbidden(user, request).message)
    return refused


class RbacUsers:
    """Users with their own tokens and kubeconfigs, for tests of a sandbox with RBAC on (what the
    ``rbac`` fixture returns). ``sandbox`` is a :class:`~.thread.SandboxThread`.

    ``rbac.kubeconfig("system:serviceaccount:airflow:scheduler")`` -> a kubeconfig for a new token of
    that user; ``rbac.grant(user, verbs=[...], resources=[...], namespace=...)``;
    ``rbac.load(yaml_text)``.
    """

    def __init__(self, sandbox: Any, directory: Any) -> None:
        self.sandbox = sandbox
        self.dir = directory
        self._count = 0

    def token(self, user: str, *, ttl: float | None = None, groups: Sequence[str] | None = None) -> str:
        return str(self.sandbox.issue_token(user, groups=groups, ttl=ttl))

    def kubeconfig(
        self,
        user: str,
        *,
        ttl: float | None = None,
        groups: Sequence[str] | None = None,
        namespace: str = "default",
    ) -> Any:
        """Path of a new kubeconfig (mode 0600) whose token is ``user``'s, valid ``ttl`` seconds."""
        self._count += 1
        safe = "".join(c if c.isalnum() else "-" for c in user)
        path = self.dir / f"kubeconfig-{self._count}-{safe}"
        self.sandbox.write_kubeconfig(
            path, token=self.token(user, ttl=ttl, groups=groups), namespace=namespace
        )
        return path

    def grant(self, subject: str, **rule: Any) -> None:
        self.sandbox.grant(subject, **rule)

    def load(self, manifests: str | list[dict[str, Any]], *, namespace: str | None = None) -> list[str]:
        """Load manifests as ``kubectl apply -n namespace -f`` would."""
        return list(self.sandbox.load_rbac_manifests(manifests, namespace=namespace))


def _request(verb: str, resource: str, namespace: str, name: str = "") -> Request:
    main, _, sub = resource.partition("/")
    if verb not in VERBS:
        raise ValueError(f"unknown verb {verb!r}: expected one of {', '.join(VERBS)}")
    return Request(verb, main, sub, namespace, name)


def _namespace_of(meta: Mapping[str, Any], index: int, kind: str, namespace: str | None) -> str:
    """The namespace ``kubectl apply -n namespace`` puts a namespaced document in."""
    own = meta.get("namespace")
    if own and namespace and own != namespace:
        raise ManifestError(
            f'document {index} ({kind} {meta["name"]}): the namespace from the provided object "{own}" does '
            f"not match the namespace \"{namespace}\". You must pass '--namespace={own}' to perform this "
            "operation."
        )
    return str(own or namespace or "default")


def _selector(selector: Any, index: int) -> Any:
    """A matcher of a labels dict for a ``metav1.LabelSelector`` (``matchLabels`` and
    ``matchExpressions``); an empty selector matches everything, as in Kubernetes."""
    from .selectors import parse_label_selector

    if not isinstance(selector, Mapping):
        raise ManifestError(
            f"document {index}: aggregationRule.clusterRoleSelectors entries must be mappings"
        )
    parts = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), ",".join(expr.get("values") or [])
        parts.append(
            {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": str(key)}.get(
                op, f"!{key}"
            )
        )
    return parse_label_selector(",".join(parts))


def _meta(doc: Mapping[str, Any], index: int) -> Mapping[str, Any]:
    meta = doc.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise ManifestError(f"document {index} ({doc.get('kind')}): metadata.name is required")
    return meta


def _documents(manifests: str | Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    if isinstance(manifests, str):
        import yaml  # only needed for YAML text; the sandbox itself is aiohttp + stdlib

        try:
            docs = [d for d in yaml.safe_load_all(manifests) if d is not None]
        except yaml.YAMLError as exc:
            raise ManifestError(f"RBAC manifests are not valid YAML: {exc}") from None
    else:
        docs = list(manifests)
    flat: list[Any] = []
    for doc in docs:
        if isinstance(doc, Mapping) and doc.get("kind") == "List":
            flat.extend(doc.get("items") or [])
        else:
            flat.append(doc)
    docs = flat
    for index, doc in enumerate(docs):
        if not isinstance(doc, Mapping):
            raise ManifestError(f"document {index} is a {type(doc).__name__}, expected a mapping")
    return docs


__all__ = ["ManifestError", "PolicyRule", "Rbac", "RbacUsers", "Request", "check_manifests", "forbidden"]
