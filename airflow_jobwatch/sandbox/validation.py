"""Validation messages of the real API server (``k8s.io/apimachinery/pkg/util/validation``).

Each check returns the error strings the real validators produce, to be turned into 422 ``Invalid``
Status causes (``reason``, ``field``, ``message``). The wording follows the Go source: ``RegexError``
lists its examples as ``'a', or 'b', ...`` (two spaces before "or", as the real messages have) and
``MaxLenError`` says ``must be no more than N bytes`` (v1.34+; older servers said "characters").
Recorded examples: ``tests/fixtures/real-apiserver/status-422-*.json``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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


__all__ = [
    "Cause",
    "annotations_causes",
    "container_name_causes",
    "labels_causes",
    "name_causes",
    "object_meta_causes",
    "qualified_name_errors",
    "regex_error",
]
