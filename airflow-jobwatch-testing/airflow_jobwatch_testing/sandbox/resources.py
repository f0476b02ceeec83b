"""What the real API server does to an object on create: defaults, generated fields, validation.

Defaults follow the "201 create pod" and job-success.json recordings, so a client that reads an
object back sees the same fields a real cluster returns.
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any

from .errors import ApiError, invalid
from .store import now_rfc3339
from .validation import (
    Cause,
    annotations_causes,
    container_causes,
    labels_causes,
    name_causes,
    object_meta_causes,
    tolerations_causes,
    volumes_causes,
)

# generateName suffix alphabet of apiserver's SimpleNameGenerator (no vowels, no confusable chars).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

DEFAULT_TOLERATIONS = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
]


def random_suffix(n: int = 5) -> str:
    return "".join(secrets.choice(_NAME_ALPHABET) for _ in range(n))


def _image_pull_policy(image: str) -> str:
    # The real defaulting: ":latest" or no tag -> Always, otherwise IfNotPresent.
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    if ":" not in last or last.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _default(obj: dict[str, Any], key: str, value: Any) -> None:
    if obj.get(key) in (None, ""):
        obj[key] = value


def default_pod_spec(spec: dict[str, Any], *, template: bool = False) -> None:
    """Fill the fields the real server defaults on a pod spec (fewer inside a Job's template)."""
    # SetDefaults_*: a field left empty ("" or absent) gets its default, as Go's zero value would.
    for c in spec.get("containers") or []:
        if isinstance(c, dict):
            c.setdefault("resources", {})
            _default(c, "terminationMessagePath", "/dev/termination-log")
            _default(c, "terminationMessagePolicy", "File")
            _default(c, "imagePullPolicy", _image_pull_policy(str(c.get("image", ""))))
            for port in c.get("ports") or []:
                if isinstance(port, dict):
                    _default(port, "protocol", "TCP")
    _default(spec, "restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    if not template:
        spec.setdefault("tolerations", [dict(t) for t in DEFAULT_TOLERATIONS])
        spec.setdefault("priority", 0)
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")


def init_metadata(resource: str, obj: dict[str, Any], namespace: str | None) -> None:
    """Name (from generateName), uid, creationTimestamp, generation; the caller validates afterwards."""
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise ApiError(400, "metadata must be an object")
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = f"{meta['generateName']}{random_suffix()}"
    if namespace is not None:
        meta["namespace"] = namespace
    meta["uid"] = str(uuid.uuid4())
    meta["resourceVersion"] = ""  # placeholder keeping the real key order; the store stamps it
    meta.pop("deletionTimestamp", None)
    meta.pop("deletionGracePeriodSeconds", None)
    meta["generation"] = 1
    meta["creationTimestamp"] = now_rfc3339()
    # Keep the key order the real server returns (name, generateName, namespace, uid, ...).
    order = ["name", "generateName", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp"]
    ordered = {k: meta[k] for k in order if k in meta}
    ordered.update({k: v for k, v in meta.items() if k not in ordered})
    obj["metadata"] = ordered


def _kind(resource: str) -> str:
    return {"pods": "Pod", "jobs": "Job.batch", "namespaces": "Namespace", "events": "Event"}[resource]


def _require_name(resource: str, name: Any) -> None:
    if not name:
        kind = _kind(resource)
        raise ApiError(
            422,
            f'{kind} "" is invalid: metadata.name: Required value: name or generateName is required',
            reason="Invalid",
            details={
                "kind": kind.split(".")[0],
                "causes": [
                    {
                        "reason": "FieldValueRequired",
                        "message": "Required value: name or generateName is required",
                        "field": "metadata.name",
                    }
                ],
            },
        )


def validate_name(resource: str, name: Any) -> None:
    """422 for a missing name or one that is not DNS-1123 (label for namespaces, subdomain otherwise)."""
    _require_name(resource, name)
    causes = name_causes(resource, name)
    if causes:
        raise invalid(resource, str(name), causes)


def _meta_causes(resource: str, meta: dict[str, Any]) -> list[Cause]:
    """``ValidateObjectMeta`` on create: the name (present; the caller checked), labels, annotations."""
    return name_causes(resource, meta.get("name")) + object_meta_causes(meta)


def _pod_spec_causes(spec: Any, prefix: str, *, job: bool) -> list[Cause]:
    """``ValidatePodSpec`` in its order (volumes, containers, init containers, restart policy, node
    selector, tolerations), for the fields users write; then the Job's own rule on the restart policy."""
    if not isinstance(spec, dict):
        return [("FieldValueRequired", f"{prefix}containers", "Required value")]
    causes, volumes = volumes_causes(spec.get("volumes"), f"{prefix}volumes")
    containers = spec.get("containers")
    if not containers:
        causes.append(("FieldValueRequired", f"{prefix}containers", "Required value"))
    for kind in ("containers", "initContainers"):
        seen: set[str] = set()
        for i, c in enumerate(spec.get(kind) or []):
            path = f"{prefix}{kind}[{i}]"
            c = c if isinstance(c, dict) else {}
            causes.extend(container_causes(c, path, volumes))
            cname = c.get("name")
            if cname and cname in seen:
                causes.append(("FieldValueDuplicate", f"{path}.name", f'Duplicate value: "{cname}"'))
            seen.add(cname or "")
    policy = spec.get("restartPolicy") or "Always"  # defaulted before validation
    if policy not in ("Always", "Never", "OnFailure"):
        causes.append(
            (
                "FieldValueNotSupported",
                f"{prefix}restartPolicy",
                f'Unsupported value: "{policy}": supported values: "Always", "OnFailure", "Never"',
            )
        )
    causes.extend(labels_causes(spec.get("nodeSelector"), f"{prefix}nodeSelector"))
    causes.extend(tolerations_causes(spec.get("tolerations"), f"{prefix}tolerations"))
    if job and policy not in ("Never", "OnFailure"):
        # pkg/apis/batch/validation (recorded in invalid-bodies.json, "restartPolicy Always").
        causes.append(
            (
                "FieldValueRequired",
                f"{prefix}restartPolicy",
                'Required value: valid values: "OnFailure", "Never"',
            )
        )
    return causes


def prepare_pod(pod: dict[str, Any]) -> None:
    """Validate and default a pod being created (metadata already initialized): every problem of
    the name, labels, annotations and spec in one 422, as ``ValidatePodCreate`` reports them."""
    meta = pod["metadata"]
    name = meta.get("name")
    _require_name("pods", name)
    spec = pod.get("spec")
    causes = _meta_causes("pods", meta) + _pod_spec_causes(spec, "spec.", job=False)
    if causes:
        raise invalid("pods", str(name), causes)
    assert isinstance(spec, dict)  # _pod_spec_causes reported it otherwise
    default_pod_spec(spec)
    pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}


def prepare_job(job: dict[str, Any]) -> None:
    """Validate and default a Job being created, like the real batch/v1 strategy."""
    meta = job["metadata"]
    name = meta.get("name")
    _require_name("jobs", name)
    name_problems = _meta_causes("jobs", meta)
    spec = job.get("spec")
    if not isinstance(spec, dict):
        raise invalid(
            "jobs",
            name,
            name_problems + [("FieldValueRequired", "spec.template.spec.containers", "Required value")],
        )
    template = spec.get("template")
    if not isinstance(template, dict):
        template = spec["template"] = {}
    pod_spec = template.get("spec")
    raw_tmeta = template.get("metadata")
    tmeta_in: dict[str, Any] = raw_tmeta if isinstance(raw_tmeta, dict) else {}
    causes = (
        name_problems
        + _pod_spec_causes(pod_spec, "spec.template.spec.", job=True)
        + annotations_causes(tmeta_in.get("annotations"), "spec.template.annotations")
    )
    if causes:
        raise invalid("jobs", name, causes)
    assert isinstance(pod_spec, dict)  # _pod_spec_causes reported it otherwise
    if spec.get("podFailurePolicy") is not None and pod_spec.get("restartPolicy") != "Never":
        # pkg/apis/batch/validation: a pod failure policy needs pods that fail for good.
        raise invalid(
            "jobs",
            name,
            [
                (
                    "FieldValueNotSupported",
                    "spec.template.spec.restartPolicy",
                    f'Unsupported value: "{pod_spec.get("restartPolicy")}": supported values: "Never"',
                )
            ],
        )
    policy = spec.get("podFailurePolicy")
    if isinstance(policy, dict):
        # pkg/apis/batch/v1 defaults: an onPodConditions pattern without a status matches status "True",
        # and the stored Job says so (clients such as kubernetes_asyncio's models require the field).
        for rule in policy.get("rules") or []:
            for pattern in (rule.get("onPodConditions") or []) if isinstance(rule, dict) else []:
                if isinstance(pattern, dict):
                    pattern.setdefault("status", "True")
    for key in (
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
    ):
        value = spec.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise invalid(
                "jobs",
                name,
                [
                    (
                        "FieldValueInvalid",
                        f"spec.{key}",
                        f"Invalid value: {value}: must be greater than or equal to 0",
                    )
                ],
            )
    uid = meta["uid"]
    job_labels = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    }
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    # Keep the recorded key order: parallelism, completions, backoffLimit, selector, manualSelector, template...
    spec.setdefault("backoffLimit", 6)
    ordered: dict[str, Any] = {}
    for key in ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit"):
        if key in spec:
            ordered[key] = spec[key]
    ordered["selector"] = spec.get("selector") or {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    ordered["manualSelector"] = bool(spec.get("manualSelector", False))
    tmeta = template.setdefault("metadata", {})
    tlabels = tmeta.setdefault("labels", {})
    for k, v in job_labels.items():
        tlabels.setdefault(k, v)
    # The template's labels are validated once the controller's are in (a Job name over 63 bytes
    # fails here: job-name is a label value), at the real server's field path.
    template_causes = labels_causes(tlabels, "spec.template.labels")
    if template_causes:
        raise invalid("jobs", name, template_causes)
    # SetDefaults_Job: a Job's own labels default to its template's, and only when it has none.
    if not meta.get("labels"):
        meta["labels"] = dict(tlabels)
    default_pod_spec(pod_spec, template=True)
    ordered["template"] = template
    for key, value in spec.items():
        if key not in ordered:
            ordered[key] = value
    ordered.setdefault("completionMode", "NonIndexed")
    ordered.setdefault("suspend", False)
    ordered.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    job["spec"] = ordered
    job["status"] = {}


def prepare_namespace(ns: dict[str, Any]) -> None:
    name = ns["metadata"].get("name")
    _require_name("namespaces", name)
    causes = _meta_causes("namespaces", ns["metadata"])
    if causes:
        raise invalid("namespaces", str(name), causes)
    ns["metadata"].pop("namespace", None)
    labels = ns["metadata"].setdefault("labels", {})
    labels.setdefault("kubernetes.io/metadata.name", name)
    ns["spec"] = {"finalizers": ["kubernetes"]}
    ns["status"] = {"phase": "Active"}


def prepare_event(event: dict[str, Any]) -> None:
    """Events are stored as given (the kubelet and the Job controller write them, so can clients)."""
    validate_name("events", event["metadata"].get("name"))
    event.pop("status", None)


PREPARE = {"pods": prepare_pod, "jobs": prepare_job, "namespaces": prepare_namespace, "events": prepare_event}
