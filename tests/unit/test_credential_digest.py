"""ClusterConfig.credential_digest(): same credential source -> same digest; any credential field that
differs -> another digest; the names (identity()) alone never decide; nothing of the input shows."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_jobwatch.kube.cluster.client import ClusterConfig

TOKEN = "s3cr3t-token-0123456789"


def kubeconfig(user: dict[str, Any], *, server: str = "https://10.0.0.1:6443") -> dict[str, Any]:
    """Every variant uses the same cluster, context and user names, as EKS update-kubeconfig does."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "eks", "cluster": {"server": server}}],
        "users": [{"name": "eks", "user": user}],
        "contexts": [{"name": "eks", "context": {"cluster": "eks", "user": "eks"}}],
        "current-context": "eks",
    }


EXEC = {
    "exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": "aws",
        "args": ["eks", "get-token", "--cluster-name", "c", "--role-arn", "arn:aws:iam::1:role/a"],
        "env": [{"name": "AWS_PROFILE", "value": "team-a"}],
    }
}


def _exec_variant(path: list[Any], value: Any) -> dict[str, Any]:
    user = copy.deepcopy(EXEC)
    target: Any = user
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return user


VARIANTS: dict[str, dict[str, Any]] = {
    "token": {"token": TOKEN},
    "other token": {"token": TOKEN + "x"},
    "client cert": {"client-certificate-data": "Y2VydC1h", "client-key-data": "a2V5LWE="},
    "other client key": {"client-certificate-data": "Y2VydC1h", "client-key-data": "a2V5LWI="},
    "exec": EXEC,
    "exec other role": _exec_variant(["exec", "args", 5], "arn:aws:iam::1:role/b"),
    "exec other env": _exec_variant(["exec", "env", 0, "value"], "team-b"),
    "exec other command": _exec_variant(["exec", "command"], "aws2"),
    "auth-provider": {"auth-provider": {"name": "oidc", "config": {"id-token": TOKEN}}},
    "basic": {"username": "u", "password": TOKEN},
}


def _inline(user: dict[str, Any]) -> ClusterConfig:
    return ClusterConfig(kube_config=yaml.safe_dump(kubeconfig(user)))


def test_every_credential_variant_has_its_own_digest_under_the_same_names() -> None:
    configs = {name: _inline(user) for name, user in VARIANTS.items()}
    assert len({cfg.identity() for cfg in configs.values()}) == 1  # the names alone cannot tell them apart
    digests = {name: cfg.credential_digest() for name, cfg in configs.items()}
    assert len(set(digests.values())) == len(VARIANTS), digests
    again = {name: _inline(user).credential_digest() for name, user in VARIANTS.items()}
    assert again == digests  # stable within the process
    for name, cfg in configs.items():  # what a trigger names its watch with: one kubeconfig parse
        assert cfg.identity_and_credential_digest() == (cfg.identity(), digests[name])


def test_files_paths_and_contexts(tmp_path: Path) -> None:
    text = yaml.safe_dump(kubeconfig({"token": TOKEN}))
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text(text)
    b.write_text(text)
    same = ClusterConfig(config_file=str(a)).credential_digest()
    assert ClusterConfig(config_file=str(a), cluster_context="eks").credential_digest() == same
    assert ClusterConfig(config_file=str(b)).credential_digest() != same  # another file: another source
    a.write_text(yaml.safe_dump(kubeconfig({"token": TOKEN + "2"})))
    assert ClusterConfig(config_file=str(a)).credential_digest() != same  # the file now holds another token
    assert (
        ClusterConfig(config_file=str(a), verify_ssl=False).credential_digest()
        != ClusterConfig(config_file=str(a)).credential_digest()
    )


def test_in_cluster_is_keyed_by_its_token_file(tmp_path: Path) -> None:
    one = ClusterConfig(in_cluster=True, service_account_dir=str(tmp_path / "sa1")).credential_digest()
    two = ClusterConfig(in_cluster=True, service_account_dir=str(tmp_path / "sa2")).credential_digest()
    assert one != two
    assert (
        one == ClusterConfig(in_cluster=True, service_account_dir=str(tmp_path / "sa1")).credential_digest()
    )


@pytest.mark.parametrize("name", ["token", "basic", "auth-provider"])
def test_the_digest_shows_nothing_of_its_input(name: str) -> None:
    digest = _inline(VARIANTS[name]).credential_digest()
    assert len(digest) == 64 and TOKEN not in digest
    # keyed: not the plain SHA-256 of the token, so it cannot be matched offline against guesses
    assert digest != hashlib.sha256(TOKEN.encode()).hexdigest()
