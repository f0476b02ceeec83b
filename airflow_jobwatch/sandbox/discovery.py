"""Discovery documents for the resources the sandbox serves (shapes from real-apiserver/discovery.json).

Only the plain (non-aggregated) documents are served: kubectl asks for aggregated discovery with an
``Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,...`` header that also
accepts ``application/json``, and falls back to these when the answer is a plain document.
"""

from __future__ import annotations

from typing import Any

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_SUB_VERBS = ["get", "patch", "update"]

VERSION: dict[str, Any] = {
    "major": "1",
    "minor": "36",
    "emulationMajor": "1",
    "emulationMinor": "36",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "35",
    "gitVersion": "v1.36.2-sandbox",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "1970-01-01T00:00:00Z",
    "goVersion": "go1.27.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def api_versions(host_port: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host_port}],
    }


CORE_V1: dict[str, Any] = {
    "kind": "APIResourceList",
    "groupVersion": "v1",
    "resources": [
        {
            "name": "namespaces",
            "singularName": "namespace",
            "namespaced": False,
            "kind": "Namespace",
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            "shortNames": ["ns"],
        },
        {
            "name": "namespaces/status",
            "singularName": "",
            "namespaced": False,
            "kind": "Namespace",
            "verbs": _SUB_VERBS,
        },
        {
            "name": "pods",
            "singularName": "pod",
            "namespaced": True,
            "kind": "Pod",
            "verbs": _VERBS,
            "shortNames": ["po"],
            "categories": ["all"],
        },
        {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
        {"name": "pods/status", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": _SUB_VERBS},
    ],
}

APIS: dict[str, Any] = {
    "kind": "APIGroupList",
    "apiVersion": "v1",
    "groups": [
        {
            "name": "batch",
            "versions": [{"groupVersion": "batch/v1", "version": "v1"}],
            "preferredVersion": {"groupVersion": "batch/v1", "version": "v1"},
        }
    ],
}

BATCH: dict[str, Any] = {
    "kind": "APIGroup",
    "apiVersion": "v1",
    "name": "batch",
    "versions": [{"groupVersion": "batch/v1", "version": "v1"}],
    "preferredVersion": {"groupVersion": "batch/v1", "version": "v1"},
}

BATCH_V1: dict[str, Any] = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": "batch/v1",
    "resources": [
        {
            "name": "jobs",
            "singularName": "job",
            "namespaced": True,
            "kind": "Job",
            "verbs": _VERBS,
            "categories": ["all"],
        },
        {"name": "jobs/status", "singularName": "", "namespaced": True, "kind": "Job", "verbs": _SUB_VERBS},
    ],
}
