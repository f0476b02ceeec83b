"""The RBAC manifests and Helm values users deploy (``deploy/``), read as files."""

from __future__ import annotations

from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
#: The components with a Role of their own, as named in deploy/rbac/ and in docs/deploying.md.
COMPONENTS = ("scheduler", "api-server", "triggerer", "worker")


def deploy_rbac(component: str) -> str:
    """``deploy/rbac/<component>.yaml``: applied with ``kubectl apply -n <namespace> -f``."""
    return (DEPLOY / "rbac" / f"{component}.yaml").read_text()


def helm_values() -> str:
    return (DEPLOY / "helm" / "values-jobwatch.yaml").read_text()
