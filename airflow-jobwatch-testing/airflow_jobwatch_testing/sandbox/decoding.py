"""400 BadRequest for a body that does not decode into its Go type, worded as kube-apiserver words it.

The real server decodes a Job or Pod body into the typed Go struct (``k8s.io/api``) with
``sigs.k8s.io/json`` before any validation; a value of the wrong JSON type never reaches the 422
validators. The answer is ``<Kind> in version "v1" cannot be handled as a <Kind>: <decode error>``
(``apiserver/pkg/endpoints/handlers/create.go``, ``transformDecodeError``). The decode error follows
``encoding/json`` as that library forks it (``internal/golang/encoding/json/decode.go``):

* ``json: cannot unmarshal <string|number|bool|array|object> into Go struct field
  <Struct>.<path> of type <Go type>``, where ``<Struct>`` is the innermost struct whose field was being
  decoded, ``<path>`` the JSON names from the root joined by dots (no list indexes, no map keys; an
  embedded ``json:",inline"`` struct adds its Go field name, e.g. ``VolumeSource``), and the Go type is
  the target after pointers are followed (``v1.EnvVar``, ``[]string``, ``int32``).
* A number into an integer field that does not fit (``1.5``, ``99999999999`` for int32) says
  ``number 1.5``; a number into a string says only ``number``. ``null`` fits anything.
* The first such error in document order is the one reported, but decoding goes on; an error from a
  type's own ``UnmarshalJSON`` (a ``resource.Quantity``, an ``intstr.IntOrString``) stops decoding at
  once and wins.

Recorded examples: ``tests/fixtures/real-apiserver/invalid-bodies.json`` (env given as strings,
``command`` as a string, bad quantities). Only the types users write in a Job or Pod are described
here; an unknown field is skipped as the real decoder skips it (it drops it with a warning).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .errors import bad_request

# ---- the Go types, as far as users write them -------------------------------------------------------


@dataclass(frozen=True)
class Scalar:
    """A Go string, bool or integer type; ``go`` is how ``reflect.Type.String()`` prints it."""

    go: str
    kind: str  # "string", "bool", "int32", "int64"


@dataclass(frozen=True)
class Slice:
    elem: Any

    @property
    def go(self) -> str:
        return "[]" + str(self.elem.go)


@dataclass(frozen=True)
class Map:
    elem: Any
    named: str = ""  # a named map type such as v1.ResourceList

    @property
    def go(self) -> str:
        return self.named or "map[string]" + str(self.elem.go)


@dataclass(frozen=True)
class Struct:
    """A Go struct: JSON name -> (type, Go names of the inline structs the field sits in)."""

    name: str  # unqualified, as the error's "Go struct field <name>." prints it
    package: str = "v1"
    fields: dict[str, tuple[Any, tuple[str, ...]]] = field(default_factory=dict)

    @property
    def go(self) -> str:
        return f"{self.package}.{self.name}"


class Quantity:
    """``resource.Quantity``: its ``UnmarshalJSON`` parses the text and fails the whole decode."""

    go = "resource.Quantity"


class IntOrString:
    """``intstr.IntOrString``: a string, or an int32 decoded by a fresh ``json.Unmarshal``."""

    go = "intstr.IntOrString"


class Anything:
    """A field whose type this table does not describe; any JSON is let through."""

    go = "interface {}"


STRING = Scalar("string", "string")
BOOL = Scalar("bool", "bool")
INT32 = Scalar("int32", "int32")
INT64 = Scalar("int64", "int64")
STRINGS = Slice(STRING)
STRING_MAP = Map(STRING)
ANY = Anything()
QUANTITY = Quantity()
INT_OR_STRING = IntOrString()


def _named(go: str) -> Scalar:
    return Scalar(go, "string")


def _struct(struct_name: str, /, **fields: Any) -> Struct:
    """A struct of package ``v1`` (core, batch and meta are all ``v1``) with ``json_name=type`` fields."""
    return Struct(struct_name, "v1", {k: (v, ()) for k, v in fields.items()})


def _inline(inline: str, **fields: Any) -> dict[str, tuple[Any, tuple[str, ...]]]:
    return {k: (v, (inline,)) for k, v in fields.items()}


def _with(struct: Struct, extra: dict[str, tuple[Any, tuple[str, ...]]]) -> Struct:
    return Struct(struct.name, struct.package, {**struct.fields, **extra})


def _all(typ: Any, *names: str) -> dict[str, Any]:
    """Several fields of one type."""
    return dict.fromkeys(names, typ)


_LOCAL_REF = {"name": STRING}
_IDENTITY = {"name": STRING, "uid": _named("types.UID")}
OWNER_REFERENCE = _struct(
    "OwnerReference", apiVersion=STRING, kind=STRING, controller=BOOL, blockOwnerDeletion=BOOL, **_IDENTITY
)
OBJECT_META = _struct(
    "ObjectMeta",
    **_IDENTITY,
    **_all(STRING, "generateName", "namespace", "resourceVersion"),
    **_all(STRING_MAP, "labels", "annotations"),
    generation=INT64,
    ownerReferences=Slice(OWNER_REFERENCE),
    finalizers=STRINGS,
)
OBJECT_FIELD_SELECTOR = _struct("ObjectFieldSelector", apiVersion=STRING, fieldPath=STRING)
RESOURCE_FIELD_SELECTOR = _struct(
    "ResourceFieldSelector", containerName=STRING, resource=STRING, divisor=QUANTITY
)
KEY_SELECTOR_FIELDS = {"key": STRING, "optional": BOOL}
CONFIG_MAP_KEY_SELECTOR = _with(
    _struct("ConfigMapKeySelector", **KEY_SELECTOR_FIELDS), _inline("LocalObjectReference", **_LOCAL_REF)
)
SECRET_KEY_SELECTOR = _with(
    _struct("SecretKeySelector", **KEY_SELECTOR_FIELDS), _inline("LocalObjectReference", **_LOCAL_REF)
)
ENV_VAR_SOURCE = _struct(
    "EnvVarSource",
    fieldRef=OBJECT_FIELD_SELECTOR,
    resourceFieldRef=RESOURCE_FIELD_SELECTOR,
    configMapKeyRef=CONFIG_MAP_KEY_SELECTOR,
    secretKeyRef=SECRET_KEY_SELECTOR,
)
ENV_VAR = _struct("EnvVar", name=STRING, value=STRING, valueFrom=ENV_VAR_SOURCE)
ENV_FROM_SOURCE = _struct(
    "EnvFromSource",
    prefix=STRING,
    configMapRef=_with(
        _struct("ConfigMapEnvSource", optional=BOOL), _inline("LocalObjectReference", **_LOCAL_REF)
    ),
    secretRef=_with(_struct("SecretEnvSource", optional=BOOL), _inline("LocalObjectReference", **_LOCAL_REF)),
)
CONTAINER_PORT = _struct(
    "ContainerPort",
    name=STRING,
    hostPort=INT32,
    containerPort=INT32,
    protocol=_named("v1.Protocol"),
    hostIP=STRING,
)
RESOURCE_LIST = Map(QUANTITY, named="v1.ResourceList")
RESOURCE_REQUIREMENTS = _struct(
    "ResourceRequirements",
    limits=RESOURCE_LIST,
    requests=RESOURCE_LIST,
    claims=Slice(_struct("ResourceClaim", name=STRING, request=STRING)),
)
VOLUME_MOUNT = _struct(
    "VolumeMount",
    name=STRING,
    readOnly=BOOL,
    recursiveReadOnly=_named("v1.RecursiveReadOnlyMode"),
    mountPath=STRING,
    subPath=STRING,
    mountPropagation=_named("v1.MountPropagationMode"),
    subPathExpr=STRING,
)
EXEC_ACTION = _struct("ExecAction", command=STRINGS)
HTTP_GET_ACTION = _struct(
    "HTTPGetAction", path=STRING, port=INT_OR_STRING, host=STRING, scheme=_named("v1.URIScheme")
)
TCP_SOCKET_ACTION = _struct("TCPSocketAction", port=INT_OR_STRING, host=STRING)
PROBE = _with(
    _struct(
        "Probe",
        initialDelaySeconds=INT32,
        timeoutSeconds=INT32,
        periodSeconds=INT32,
        successThreshold=INT32,
        failureThreshold=INT32,
        terminationGracePeriodSeconds=INT64,
    ),
    _inline("ProbeHandler", exec=EXEC_ACTION, httpGet=HTTP_GET_ACTION, tcpSocket=TCP_SOCKET_ACTION),
)
CONTAINER = _struct(
    "Container",
    **_all(STRING, "name", "image", "workingDir", "terminationMessagePath"),
    **_all(STRINGS, "command", "args"),
    **_all(PROBE, "livenessProbe", "readinessProbe", "startupProbe"),
    **_all(BOOL, "stdin", "stdinOnce", "tty"),
    ports=Slice(CONTAINER_PORT),
    envFrom=Slice(ENV_FROM_SOURCE),
    env=Slice(ENV_VAR),
    resources=RESOURCE_REQUIREMENTS,
    restartPolicy=_named("v1.ContainerRestartPolicy"),
    volumeMounts=Slice(VOLUME_MOUNT),
    terminationMessagePolicy=_named("v1.TerminationMessagePolicy"),
    imagePullPolicy=_named("v1.PullPolicy"),
)
KEY_TO_PATH = _struct("KeyToPath", key=STRING, path=STRING, mode=INT32)
VOLUME = _with(
    _struct("Volume", name=STRING),
    _inline(
        "VolumeSource",
        hostPath=_struct("HostPathVolumeSource", path=STRING, type=_named("v1.HostPathType")),
        emptyDir=_struct("EmptyDirVolumeSource", medium=_named("v1.StorageMedium"), sizeLimit=QUANTITY),
        secret=_struct(
            "SecretVolumeSource",
            secretName=STRING,
            items=Slice(KEY_TO_PATH),
            defaultMode=INT32,
            optional=BOOL,
        ),
        persistentVolumeClaim=_struct("PersistentVolumeClaimVolumeSource", claimName=STRING, readOnly=BOOL),
        configMap=_with(
            _struct("ConfigMapVolumeSource", items=Slice(KEY_TO_PATH), defaultMode=INT32, optional=BOOL),
            _inline("LocalObjectReference", **_LOCAL_REF),
        ),
    ),
)
TOLERATION = _struct(
    "Toleration",
    key=STRING,
    operator=_named("v1.TolerationOperator"),
    value=STRING,
    effect=_named("v1.TaintEffect"),
    tolerationSeconds=INT64,
)
POD_SPEC = _struct(
    "PodSpec",
    volumes=Slice(VOLUME),
    initContainers=Slice(CONTAINER),
    containers=Slice(CONTAINER),
    restartPolicy=_named("v1.RestartPolicy"),
    terminationGracePeriodSeconds=INT64,
    activeDeadlineSeconds=INT64,
    dnsPolicy=_named("v1.DNSPolicy"),
    nodeSelector=STRING_MAP,
    serviceAccountName=STRING,
    serviceAccount=STRING,
    automountServiceAccountToken=BOOL,
    nodeName=STRING,
    hostNetwork=BOOL,
    hostPID=BOOL,
    hostIPC=BOOL,
    shareProcessNamespace=BOOL,
    imagePullSecrets=Slice(_struct("LocalObjectReference", **_LOCAL_REF)),
    hostname=STRING,
    subdomain=STRING,
    schedulerName=STRING,
    tolerations=Slice(TOLERATION),
    priorityClassName=STRING,
    priority=INT32,
    enableServiceLinks=BOOL,
    preemptionPolicy=_named("v1.PreemptionPolicy"),
)
POD_TEMPLATE_SPEC = _struct("PodTemplateSpec", metadata=OBJECT_META, spec=POD_SPEC)
JOB_SPEC = _struct(
    "JobSpec",
    parallelism=INT32,
    completions=INT32,
    activeDeadlineSeconds=INT64,
    backoffLimit=INT32,
    backoffLimitPerIndex=INT32,
    maxFailedIndexes=INT32,
    manualSelector=BOOL,
    template=POD_TEMPLATE_SPEC,
    ttlSecondsAfterFinished=INT32,
    completionMode=_named("v1.CompletionMode"),
    suspend=BOOL,
    podReplacementPolicy=_named("v1.PodReplacementPolicy"),
    managedBy=STRING,
)
TYPES: dict[str, Struct] = {
    "pods": _struct("Pod", metadata=OBJECT_META, spec=POD_SPEC),
    "jobs": _struct("Job", metadata=OBJECT_META, spec=JOB_SPEC),
}
_KINDS = {"pods": "Pod", "jobs": "Job"}

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


# ---- resource.ParseQuantity ---------------------------------------------------------------------

ERR_FORMAT_WRONG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
ERR_SUFFIX = "unable to parse quantity's suffix"
_QUANTITY = re.compile(r"[+-]?([0-9]*)(\.[0-9]*)?([eEinumkKMGTP]*)([-+]?[0-9]*)")
_SUFFIXES = {"", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}
_EXPONENT = re.compile(r"[eE][-+]?[0-9]+")


def quantity_error(text: str) -> str | None:
    """The error ``resource.ParseQuantity`` returns for ``text`` (None when it parses): the shape is
    checked first (``ErrFormatWrong``), then the suffix (``ErrSuffix``)."""
    if not text:
        return ERR_FORMAT_WRONG
    m = _QUANTITY.fullmatch(text)
    if m is None:
        return ERR_FORMAT_WRONG
    letters, digits = m.group(3), m.group(4)
    if digits and not letters and m.group(4)[0] in "+-":
        return ERR_SUFFIX  # a sign with no exponent letter before it
    suffix = letters + digits
    if suffix in _SUFFIXES or _EXPONENT.fullmatch(suffix):
        return None
    return ERR_SUFFIX


# ---- the walk -----------------------------------------------------------------------------------


class _Stop(Exception):
    """An ``UnmarshalJSON`` error: Go returns it at once, ahead of any saved type error."""


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _number_text(value: int | float) -> str:
    return repr(value)


class _Decoder:
    def __init__(self) -> None:
        self.saved: str | None = None

    def _type_error(self, value: str, go: str, struct: str, path: list[str]) -> None:
        if self.saved is not None:
            return
        if path:
            self.saved = (
                f"json: cannot unmarshal {value} into Go struct field {struct}.{'.'.join(path)} of type {go}"
            )
        else:
            self.saved = f"json: cannot unmarshal {value} into Go value of type {go}"

    def value(self, value: Any, typ: Any, struct: str, path: list[str]) -> None:
        if value is None or isinstance(typ, Anything):
            return
        if isinstance(typ, Quantity):
            text = (
                value
                if isinstance(value, str)
                else _number_text(value)
                if _json_kind(value) == "number"
                else ""
            )
            err = quantity_error(text.strip()) if text else ERR_FORMAT_WRONG
            if err:
                raise _Stop(err)
            return
        if isinstance(typ, IntOrString):
            if isinstance(value, str):
                return
            kind = _json_kind(value)
            if kind == "number" and isinstance(value, int) and _fits(value, "int32"):
                return
            shown = f"number {_number_text(value)}" if kind == "number" else kind
            raise _Stop(f"json: cannot unmarshal {shown} into Go value of type int32")
        if isinstance(typ, Scalar):
            self._scalar(value, typ, struct, path)
        elif isinstance(typ, Slice):
            if not isinstance(value, list):
                self._type_error(_json_kind(value), typ.go, struct, path)
                return
            for item in value:
                self.value(item, typ.elem, struct, path)
        elif isinstance(typ, Map):
            if not isinstance(value, dict):
                self._type_error(_json_kind(value), typ.go, struct, path)
                return
            for item in value.values():
                self.value(item, typ.elem, struct, path)
        elif isinstance(typ, Struct):
            if not isinstance(value, dict):
                self._type_error(_json_kind(value), typ.go, struct, path)
                return
            for key, item in value.items():
                known = typ.fields.get(key)
                if known is not None:
                    sub, inline = known
                    self.value(item, sub, typ.name, [*path, *inline, key])

    def _scalar(self, value: Any, typ: Scalar, struct: str, path: list[str]) -> None:
        kind = _json_kind(value)
        if typ.kind == "string":
            if kind != "string":
                self._type_error(kind, typ.go, struct, path)
        elif typ.kind == "bool":
            if kind != "bool":
                self._type_error(kind, typ.go, struct, path)
        elif kind != "number":
            self._type_error(kind, typ.go, struct, path)
        elif not isinstance(value, int) or not _fits(value, typ.kind):
            self._type_error(f"number {_number_text(value)}", typ.go, struct, path)


def _fits(value: int, kind: str) -> bool:
    low, high = _INT_RANGES[kind]
    return low <= value <= high


def decode_error(resource: str, body: dict[str, Any]) -> str | None:
    """The decode error the real server reports for ``body`` as a ``resource``, or None."""
    typ = TYPES.get(resource)
    if typ is None:
        return None
    decoder = _Decoder()
    try:
        decoder.value(body, typ, "", [])
    except _Stop as stop:
        return str(stop)
    return decoder.saved


def _zero(typ: Any) -> Any:
    """The JSON of a Go zero value, as the server writes it back."""
    if isinstance(typ, Scalar):
        return {"string": "", "bool": False}.get(typ.kind, 0)
    if isinstance(typ, (Struct, Map)):
        return {}
    if isinstance(typ, Quantity):
        return "0"
    return 0 if isinstance(typ, IntOrString) else None


def without_nulls(value: Any, typ: Any) -> Any:
    """``value`` as the server stores it after decoding: a null field is left out (it decoded to
    nothing), a null inside a list or a map is the zero value of its type (``command: ["a", null]``
    runs ``a ""``). Fields this table does not describe are kept as sent."""
    if isinstance(typ, Slice) and isinstance(value, list):
        return [_zero(typ.elem) if v is None else without_nulls(v, typ.elem) for v in value]
    if isinstance(typ, Map) and isinstance(value, dict):
        return {k: _zero(typ.elem) if v is None else without_nulls(v, typ.elem) for k, v in value.items()}
    if isinstance(typ, Struct) and isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            known = typ.fields.get(key)
            if known is None:
                out[key] = item
            elif item is not None:
                out[key] = without_nulls(item, known[0])
        return out
    return value


def decoded(resource: str, body: dict[str, Any], *, strict: bool = False) -> dict[str, Any]:
    """``body`` as the server holds it once decoded; the real server's 400 when it does not decode
    into the resource's Go type, or (``strict``: ``?fieldValidation=Strict``, what kubectl sends by
    default) when a container has a field its type has not. Other resources are returned as they are."""
    typ = TYPES.get(resource)
    if typ is None:
        return body
    err = decode_error(resource, body)
    if err is None and strict:
        unknown = unknown_field_warnings(resource, body)
        err = f"strict decoding error: {', '.join(unknown)}" if unknown else None
    if err is not None:
        kind = _KINDS[resource]
        raise bad_request(f'{kind} in version "v1" cannot be handled as a {kind}: {err}')
    out = dict(without_nulls(body, typ))
    for container, _path, key in _unknown_container_fields(resource, out):
        del container[key]
    return out


# Every field of core/v1 Container (k8s.io/api v0.36). A key of a container outside this set is not
# decoded: the real server drops it and answers with a warning (fieldValidation=Warn, the default),
# so a misspelt "commands" creates a Job whose container has no command.
CONTAINER_FIELDS = frozenset(
    "name image command args workingDir ports envFrom env resources resizePolicy restartPolicy "
    "restartPolicyRules volumeMounts volumeDevices livenessProbe readinessProbe startupProbe lifecycle "
    "terminationMessagePath terminationMessagePolicy imagePullPolicy securityContext stdin stdinOnce tty".split()
)


def _unknown_container_fields(resource: str, body: Any) -> list[tuple[dict[str, Any], str, str]]:
    """(container, its field path, key) of each key a container of ``body`` has that its type has not."""
    spec = body.get("spec") if isinstance(body, dict) else None
    prefix = "spec."
    if resource == "jobs":
        template = spec.get("template") if isinstance(spec, dict) else None
        spec = template.get("spec") if isinstance(template, dict) else None
        prefix = "spec.template.spec."
    found: list[tuple[dict[str, Any], str, str]] = []
    for kind in ("initContainers", "containers"):
        containers = spec.get(kind) if isinstance(spec, dict) else None
        for i, c in enumerate(containers if isinstance(containers, list) else []):
            if isinstance(c, dict):
                path = f"{prefix}{kind}[{i}]"
                found.extend((c, path, key) for key in c if key not in CONTAINER_FIELDS)
    return found


def unknown_field_warnings(resource: str, body: Any) -> list[str]:
    """The warnings the real decoder gives for the container fields it drops, in document order."""
    return [f'unknown field "{path}.{key}"' for _c, path, key in _unknown_container_fields(resource, body)]


__all__ = ["decode_error", "decoded", "quantity_error", "unknown_field_warnings", "without_nulls"]
