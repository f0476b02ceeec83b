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
            "name": "events",
            "singularName": "event",
            "namespaced": True,
            "kind": "Event",
            "verbs": _VERBS,
            "shortNames": ["ev"],
        },
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
        {
            "name": "pods/eviction",
            "singularName": "",
            "namespaced": True,
            "group": "policy",
            "version": "v1",
            "kind": "Eviction",
            "verbs": ["create"],
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


def _openapi_group(path_prefix: str, group: str, kinds: dict[str, str]) -> dict[str, Any]:
    """A minimal OpenAPI v3 document: one PATCH operation per kind, declaring ``fieldValidation``.

    kubectl (1.27+) reads it to decide whether the server validates fields itself
    (``?fieldValidation=Strict``); when it does, kubectl needs no schemas, so none are served.
    """
    paths: dict[str, Any] = {}
    for plural, kind in kinds.items():
        paths[f"{path_prefix}/namespaces/{{namespace}}/{plural}/{{name}}"] = {
            "patch": {
                "x-kubernetes-group-version-kind": {"group": group, "kind": kind, "version": "v1"},
                "parameters": [
                    {
                        "name": "fieldValidation",
                        "in": "query",
                        "schema": {"type": "string", "uniqueItems": True},
                    },
                    {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
                ],
                "responses": {"200": {"description": "OK"}},
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
        "paths": paths,
    }


OPENAPI_V3_INDEX: dict[str, Any] = {
    "paths": {
        "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=sandbox-core-v1"},
        "apis/batch/v1": {"serverRelativeURL": "/openapi/v3/apis/batch/v1?hash=sandbox-batch-v1"},
    }
}
OPENAPI_V3: dict[str, dict[str, Any]] = {
    "/openapi/v3/api/v1": _openapi_group("/api/v1", "", {"pods": "Pod"}),
    "/openapi/v3/apis/batch/v1": _openapi_group("/apis/batch/v1", "batch", {"jobs": "Job"}),
}
