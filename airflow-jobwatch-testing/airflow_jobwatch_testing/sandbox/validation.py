"""Validation messages of the real API server (``k8s.io/apimachinery/pkg/util/validation``).

Each check returns the error strings the real validators produce, to be turned into 422 ``Invalid``
Status causes (``reason``, ``field``, ``message``). The wording follows the Go source: ``RegexError``
lists its examples as ``'a', or 'b', ...`` (two spaces before "or", as the real messages have) and
``MaxLenError`` says ``must be no more than N bytes`` (v1.34+; older servers said "characters").
Recorded examples: ``tests/fixtures/real-apiserver/status-422-*.json``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

Cause = tuple[str, str, str]  # (reason, field, message)

DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*"
QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT = "(" + QUALIFIED_NAME_FMT + ")?"
_DNS1123_LABEL = re.compile(f"^{DNS1123_LABEL_FMT}$")
_DNS1123_SUBDOMAIN = re.compile(f"^{DNS1123_SUBDOMAIN_FMT}$")
_QUALIFIED_NAME = re.compile(f"^{QUALIFIED_NAME_FMT}$")
_LABEL_VALUE = re.compile(f"^{LABEL_VALUE_FMT}$")
DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
# apimachinery/pkg/api/validation.TotalAnnotationSizeLimitB
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """``validation.RegexError``, byte for byte."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    out = msg + " (e.g. "
    for i, example in enumerate(examples):
        if i > 0:
            out += " or "
        out += f"'{example}', "
    return out + f"regex used for validation is '{fmt}')"


def max_len_error(length: int) -> str:
    return f"must be no more than {length} bytes"


def dns1123_label_errors(value: str) -> list[str]:
    errs = []
    if len(value.encode()) > DNS1123_LABEL_MAX:
        errs.append(max_len_error(DNS1123_LABEL_MAX))
    if not _DNS1123_LABEL.match(value):
        errs.append(
            regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                "and must start and end with an alphanumeric character",
                DNS1123_LABEL_FMT,
                "my-name",
                "123-abc",
            )
        )
    return errs


def dns1123_subdomain_errors(value: str) -> list[str]:
    errs = []
    if len(value.encode()) > DNS1123_SUBDOMAIN_MAX:
        errs.append(max_len_error(DNS1123_SUBDOMAIN_MAX))
    if not _DNS1123_SUBDOMAIN.match(value):
        errs.append(
            regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                "'.', and must start and end with an alphanumeric character",
                DNS1123_SUBDOMAIN_FMT,
                "example.com",
            )
        )
    return errs


_QUALIFIED_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)


def qualified_name_errors(value: str) -> list[str]:
    """``validation.IsQualifiedName``: an optional DNS-1123 subdomain prefix and ``/``, then a name."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + e for e in dns1123_subdomain_errors(prefix))
    else:
        return [
            "a qualified name "
            + regex_error(_QUALIFIED_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name.encode()) > QUALIFIED_NAME_MAX:
        errs.append("name part " + max_len_error(QUALIFIED_NAME_MAX))
    if not _QUALIFIED_NAME.match(name):
        errs.append(
            "name part " + regex_error(_QUALIFIED_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def label_value_errors(value: str) -> list[str]:
    errs = []
    if len(value.encode()) > LABEL_VALUE_MAX:
        errs.append(max_len_error(LABEL_VALUE_MAX))
    if not _LABEL_VALUE.match(value):
        errs.append(
            regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
                "or '.', and must start and end with an alphanumeric character",
                LABEL_VALUE_FMT,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return errs


def _invalid(field: str, value: Any, msg: str) -> Cause:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    return ("FieldValueInvalid", field, f"Invalid value: {shown}: {msg}")


def labels_causes(labels: Any, field: str) -> list[Cause]:
    """``ValidateLabels``: each key a qualified name, each value a label value (keys sorted here;
    Go's map order is random)."""
    if labels is None:
        return []
    if not isinstance(labels, Mapping):
        return [_invalid(field, labels, "must be a map of string keys to string values")]
    causes: list[Cause] = []
    for key in sorted(labels, key=str):
        value = labels[key]
        causes.extend(_invalid(field, key, m) for m in qualified_name_errors(str(key)))
        if not isinstance(value, str):
            causes.append(_invalid(field, value, "label values must be strings"))
            continue
        causes.extend(_invalid(field, value, m) for m in label_value_errors(value))
    return causes


def annotations_causes(annotations: Any, field: str) -> list[Cause]:
    """``ValidateAnnotations``: keys are qualified names (case-insensitive); 256 KiB in total."""
    if annotations is None:
        return []
    if not isinstance(annotations, Mapping):
        return [_invalid(field, annotations, "must be a map of string keys to string values")]
    causes: list[Cause] = []
    total = 0
    for key in sorted(annotations, key=str):
        causes.extend(_invalid(field, key, m) for m in qualified_name_errors(str(key).lower()))
        value = annotations[key]
        if not isinstance(value, str):
            causes.append(_invalid(field, value, "annotation values must be strings"))
            continue
        total += len(str(key).encode()) + len(value.encode())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        causes.append(
            (
                "FieldValueTooLong",
                field,
                f"Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes",
            )
        )
    return causes


def name_causes(resource: str, name: Any) -> list[Cause]:
    """``metadata.name``: a DNS-1123 label for namespaces, a subdomain for the others."""
    if not isinstance(name, str):
        return [_invalid("metadata.name", name, "must be a string")]
    errs = dns1123_label_errors(name) if resource == "namespaces" else dns1123_subdomain_errors(name)
    return [_invalid("metadata.name", name, m) for m in errs]


def object_meta_causes(meta: Mapping[str, Any], field: str = "metadata") -> list[Cause]:
    return labels_causes(meta.get("labels"), f"{field}.labels") + annotations_causes(
        meta.get("annotations"), f"{field}.annotations"
    )


def container_name_causes(name: Any, field: str) -> list[Cause]:
    if not isinstance(name, str):
        return [_invalid(field, name, "must be a string")]
    return [_invalid(field, name, m) for m in dns1123_label_errors(name)]


def _required(field: str, detail: str = "") -> Cause:
    return ("FieldValueRequired", field, f"Required value: {detail}" if detail else "Required value")


def _not_supported(field: str, value: Any, supported: tuple[str, ...]) -> Cause:
    listed = ", ".join(f'"{v}"' for v in supported)
    return ("FieldValueNotSupported", field, f'Unsupported value: "{value}": supported values: {listed}')


def _str(value: Any) -> str:
    """A decoded Go string: JSON null (or an absent field) is the empty string."""
    return value if isinstance(value, str) else ""


def _items(value: Any) -> list[dict[str, Any]]:
    """A decoded Go slice of structs: null is empty, a null element is a zero struct."""
    return [v if isinstance(v, dict) else {} for v in value] if isinstance(value, list) else []


# validation.IsRelaxedEnvVarName (RelaxedEnvironmentVariableValidation, on by default since v1.32)
_ENV_NAME_MSG = (
    "a valid environment variable name must consist only of printable ASCII characters other than '='"
)
_PROTOCOLS = ("SCTP", "TCP", "UDP")
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
_TOLERATION_OPERATORS = ("Equal", "Exists")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# core.VolumeSource members: a volume needs exactly one (validateVolumeSource).
VOLUME_SOURCES = frozenset(
    "hostPath emptyDir gcePersistentDisk awsElasticBlockStore gitRepo secret nfs iscsi glusterfs "
    "persistentVolumeClaim rbd flexVolume cinder cephfs flocker downwardAPI fc azureFile configMap "
    "vsphereVolume quobyte azureDisk photonPersistentDisk projected portworxVolume scaleIO storageos csi "
    "ephemeral image".split()
)


def _env_name_causes(name: str, field: str) -> list[Cause]:
    if any(ord(ch) > 126 or ord(ch) < 32 or ch == "=" for ch in name):
        return [_invalid(field, name, _ENV_NAME_MSG)]
    return []


def _ref_name_causes(ref: dict[str, Any], field: str, *, key: bool) -> list[Cause]:
    """``validateConfigMapKeySelector`` / ``validateSecretKeySelector`` / the envFrom sources."""
    name = _str(ref.get("name"))
    causes = [_required(f"{field}.name")] if not name else []
    causes.extend(
        _invalid(f"{field}.name", name, m) for m in (dns1123_subdomain_errors(name) if name else [])
    )
    if key and not _str(ref.get("key")):
        causes.append(_required(f"{field}.key"))
    return causes


def env_causes(env: Any, field: str) -> list[Cause]:
    """``ValidateEnv``: every entry named, ``valueFrom`` with one source and no ``value`` beside it.
    Two entries with one name are accepted (the server warns; the later one wins in the container)."""
    causes: list[Cause] = []
    for i, item in enumerate(_items(env)):
        path = f"{field}[{i}]"
        name = _str(item.get("name"))
        causes.extend([_required(f"{path}.name")] if not name else _env_name_causes(name, f"{path}.name"))
        source = item.get("valueFrom")
        if not isinstance(source, dict):
            continue
        present = [
            k
            for k in ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "fileKeyRef")
            if source.get(k) is not None
        ]
        for k in ("configMapKeyRef", "secretKeyRef"):
            if isinstance(source.get(k), dict):
                causes.extend(_ref_name_causes(source[k], f"{path}.valueFrom.{k}", key=True))
        if isinstance(source.get("fieldRef"), dict) and not _str(source["fieldRef"].get("fieldPath")):
            causes.append(_required(f"{path}.valueFrom.fieldRef.fieldPath"))
        if not present:
            causes.append(
                _invalid(
                    f"{path}.valueFrom",
                    "",
                    "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
                )
            )
        elif _str(item.get("value")):
            causes.append(_invalid(f"{path}.valueFrom", "", "may not be specified when `value` is not empty"))
        elif len(present) > 1:
            causes.append(
                _invalid(f"{path}.valueFrom", "", "may not have more than one field specified at a time")
            )
    return causes


def env_from_causes(env_from: Any, field: str) -> list[Cause]:
    """``ValidateEnvFrom``: one of ``configMapRef`` / ``secretRef`` per entry, each naming its object."""
    causes: list[Cause] = []
    for i, item in enumerate(_items(env_from)):
        path = f"{field}[{i}]"
        prefix = _str(item.get("prefix"))
        if prefix:
            causes.extend(_env_name_causes(prefix, f"{path}.prefix"))
        present = [k for k in ("configMapRef", "secretRef") if isinstance(item.get(k), dict)]
        for k in present:
            causes.extend(_ref_name_causes(item[k], f"{path}.{k}", key=False))
        if not present:
            causes.append(_invalid(field, "", "must specify one of: `configMapRef` or `secretRef`"))
        elif len(present) > 1:
            causes.append(_invalid(field, "", "may not have more than one field specified at a time"))
    return causes


def _port_name_errors(name: str) -> list[str]:
    """``validation.IsValidPortName`` (an IANA service name)."""
    errs = []
    if len(name) > 15:
        errs.append(max_len_error(15))
    if not re.fullmatch(r"[-a-z0-9]+", name):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    elif not re.search(r"[a-z]", name):
        errs.append("must contain at least one letter (a-z)")
    if "--" in name:
        errs.append("must not contain consecutive hyphens")
    if name.startswith("-") or name.endswith("-"):
        errs.append("must not begin or end with a hyphen")
    return errs


_PORT_RANGE = "must be between 1 and 65535, inclusive"


def ports_causes(ports: Any, field: str) -> list[Cause]:
    """``validateContainerPorts`` (``protocol`` defaults to TCP before validation)."""
    causes: list[Cause] = []
    names: set[str] = set()
    for i, port in enumerate(_items(ports)):
        path = f"{field}[{i}]"
        name = _str(port.get("name"))
        if name:
            errs = _port_name_errors(name)
            if errs:
                causes.extend(_invalid(f"{path}.name", name, m) for m in errs)
            elif name in names:
                causes.append(("FieldValueDuplicate", f"{path}.name", f'Duplicate value: "{name}"'))
            names.add(name)
        number = port.get("containerPort") or 0
        if not number:
            causes.append(_required(f"{path}.containerPort"))
        elif not 1 <= number <= 65535:
            causes.append(_invalid(f"{path}.containerPort", number, _PORT_RANGE))
        host = port.get("hostPort") or 0
        if host and not 1 <= host <= 65535:
            causes.append(_invalid(f"{path}.hostPort", host, _PORT_RANGE))
        protocol = port.get("protocol")
        if protocol and protocol not in _PROTOCOLS:  # an empty protocol is defaulted to TCP first
            causes.append(_not_supported(f"{path}.protocol", protocol, _PROTOCOLS))
    return causes


def volume_mounts_causes(mounts: Any, field: str, volumes: set[str]) -> list[Cause]:
    """``ValidateVolumeMounts``: each mount names a declared volume, at a unique, given path."""
    causes: list[Cause] = []
    paths: set[str] = set()
    for i, mount in enumerate(_items(mounts)):
        path = f"{field}[{i}]"
        name = _str(mount.get("name"))
        if not name:
            causes.append(_required(f"{path}.name"))
        if name not in volumes:
            causes.append(("FieldValueNotFound", f"{path}.name", f'Not found: "{name}"'))
        mount_path = _str(mount.get("mountPath"))
        if not mount_path:
            causes.append(_required(f"{path}.mountPath"))
        if mount_path in paths:
            causes.append(_invalid(f"{path}.mountPath", mount_path, "must be unique"))
        paths.add(mount_path)
    return causes


def volumes_causes(volumes: Any, field: str) -> tuple[list[Cause], set[str]]:
    """``ValidateVolumes``: one source per volume, a DNS-1123 label name used once; also the names
    declared, for the mounts."""
    causes: list[Cause] = []
    names: set[str] = set()
    for i, volume in enumerate(_items(volumes)):
        path = f"{field}[{i}]"
        sources = [k for k in volume if k in VOLUME_SOURCES and volume[k] is not None]
        if not sources:
            causes.append(_required(path, "must specify a volume type"))
        for key, required in (
            ("secret", "secretName"),
            ("configMap", "name"),
            ("persistentVolumeClaim", "claimName"),
        ):
            if isinstance(volume.get(key), dict) and not _str(volume[key].get(required)):
                causes.append(_required(f"{path}.{key}.{required}"))
        name = _str(volume.get("name"))
        if not name:
            causes.append(_required(f"{path}.name"))
        else:
            causes.extend(_invalid(f"{path}.name", name, m) for m in dns1123_label_errors(name))
        if name in names:
            causes.append(("FieldValueDuplicate", f"{path}.name", f'Duplicate value: "{name}"'))
        names.add(name)
    return causes, names


def tolerations_causes(tolerations: Any, field: str) -> list[Cause]:
    """``ValidateTolerations``: a qualified key, an operator the key allows, a known effect."""
    causes: list[Cause] = []
    for i, tol in enumerate(_items(tolerations)):
        path = f"{field}[{i}]"
        key, operator, effect = _str(tol.get("key")), _str(tol.get("operator")), _str(tol.get("effect"))
        causes.extend(_invalid(f"{path}.key", key, m) for m in (qualified_name_errors(key) if key else []))
        if not key and operator != "Exists":
            causes.append(
                _invalid(
                    f"{path}.operator",
                    operator,
                    'operator must be Exists when `key` is empty, which means "match all values and all keys"',
                )
            )
        if tol.get("tolerationSeconds") is not None and effect != "NoExecute":
            causes.append(
                _invalid(
                    f"{path}.effect", effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"
                )
            )
        if operator in ("Equal", ""):
            errs = label_value_errors(_str(tol.get("value")))
            if errs:
                causes.append(_invalid(f"{path}.operator", _str(tol.get("value")), ";".join(errs)))
        elif operator != "Exists":
            causes.append(_not_supported(f"{path}.operator", operator, _TOLERATION_OPERATORS))
        if effect and effect not in _TAINT_EFFECTS:
            causes.append(_not_supported(f"{path}.effect", effect, _TAINT_EFFECTS))
    return causes


def container_causes(c: dict[str, Any], field: str, volumes: set[str]) -> list[Cause]:
    """``validateContainerCommon`` for the fields users write: name, image, pull policy, ports, env,
    envFrom, volume mounts (``imagePullPolicy`` is defaulted from the image before this runs)."""
    name = c.get("name")
    causes = [_required(f"{field}.name")] if not name else container_name_causes(name, f"{field}.name")
    if not c.get("image"):
        causes.append(_required(f"{field}.image"))
    policy = c.get("imagePullPolicy")
    if policy and policy not in _PULL_POLICIES:
        causes.append(_not_supported(f"{field}.imagePullPolicy", policy, _PULL_POLICIES))
    return (
        causes
        + ports_causes(c.get("ports"), f"{field}.ports")
        + env_causes(c.get("env"), f"{field}.env")
        + env_from_causes(c.get("envFrom"), f"{field}.envFrom")
        + volume_mounts_causes(c.get("volumeMounts"), f"{field}.volumeMounts", volumes)
    )


def warning_header(resource: str, obj: Mapping[str, Any], decoding: Sequence[str] = ()) -> dict[str, str]:
    """The ``Warning`` header of a created Pod or Job (``299 - "text"``, quotes escaped, several
    warnings comma-separated as RFC 7234 allows): the ``decoding`` warnings (fields dropped), then the
    pod spec's; empty when there is nothing to warn about."""
    spec = obj.get("spec")
    if resource == "jobs" and isinstance(spec, dict):
        template = spec.get("template")
        found = pod_spec_warnings(
            template.get("spec") if isinstance(template, dict) else None, "spec.template.spec."
        )
    elif resource == "pods":
        found = pod_spec_warnings(spec, "spec.")
    else:
        found = []
    found = [*decoding, *found]
    if not found:
        return {}
    quoted = (w.replace("\\", "\\\\").replace('"', '\\"') for w in found)
    return {"Warning": ", ".join(f'299 - "{w}"' for w in quoted)}


def pod_spec_warnings(spec: Any, field: str) -> list[str]:
    """``warningsForPodSpecAndMeta``, the part about env: a later entry with the name of an earlier one
    hides it unless its value refers to it as ``$(NAME)``."""
    warnings: list[str] = []
    if not isinstance(spec, dict):
        return warnings
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(_items(spec.get(kind))):
            seen: set[str] = set()
            for j, item in enumerate(_items(c.get("env"))):
                name, value = _str(item.get("name")), _str(item.get("value"))
                if name not in seen:
                    seen.add(name)
                    continue
                ref = f"$({name})"
                if item.get("valueFrom") is not None or value == ref or ref not in value:
                    warnings.append(
                        f'{field}{kind}[{i}].env[{j}]: hides previous definition of "{name}", '
                        "which may be dropped when using apply"
                    )
    return warnings


__all__ = [
    "Cause",
    "annotations_causes",
    "container_causes",
    "container_name_causes",
    "labels_causes",
    "name_causes",
    "object_meta_causes",
    "pod_spec_warnings",
    "warning_header",
    "qualified_name_errors",
    "regex_error",
    "tolerations_causes",
    "volumes_causes",
]
