"""connections.py: Kubernetes connection extras and [kubernetes_executor] options -> ClusterConfig.

Table-driven: each row is a connection's extras as users store them (including the old
``extra__kubernetes__`` prefix and string booleans from the UI) and what they must mean. No kubeconfig
is read here: building the configuration never touches a file.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_jobwatch.connections import (
    cluster_config_from_executor_conf,
    cluster_config_from_extras,
)
from airflow_jobwatch.kube.cluster.client import ClusterConfig, ClusterConfigError, TcpKeepalive


@pytest.fixture(autouse=True)
def _not_in_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.mark.parametrize(
    ("extras", "expected"),
    [
        ({"in_cluster": True}, {"in_cluster": True}),
        ({"extra__kubernetes__in_cluster": "True"}, {"in_cluster": True}),
        ({"in_cluster": "false"}, {"in_cluster": False, "config_file": None}),
        (
            {"kube_config_path": "/etc/k/config", "cluster_context": "prod"},
            {"config_file": "/etc/k/config", "cluster_context": "prod"},
        ),
        ({"kube_config": "apiVersion: v1"}, {"kube_config": "apiVersion: v1", "config_file": None}),
        ({"kube_config": {"apiVersion": "v1"}}, {"kube_config": '{"apiVersion": "v1"}'}),
        ({"disable_verify_ssl": True}, {"verify_ssl": False}),
        ({"disable_verify_ssl": "False"}, {"verify_ssl": True}),
        ({"disable_tcp_keepalive": True}, {"tcp_keepalive": None}),
        ({}, {"tcp_keepalive": TcpKeepalive(), "in_cluster": False, "config_file": None}),
        ({"in_cluster": "", "kube_config_path": ""}, {"in_cluster": False, "config_file": None}),
    ],
)
def test_extras(extras: dict[str, Any], expected: dict[str, Any]) -> None:
    cfg = cluster_config_from_extras(extras, conn_id="k8s")
    for name, value in expected.items():
        assert getattr(cfg, name) == value, name
    assert cfg.source == "connection 'k8s'"


def test_arguments_win_over_extras() -> None:
    cfg = cluster_config_from_extras(
        {"kube_config_path": "/from/extra", "cluster_context": "a"},
        conn_id="k8s",
        config_file="/arg",
        cluster_context="b",
    )
    assert (cfg.config_file, cfg.cluster_context) == ("/arg", "b")


@pytest.mark.parametrize(
    ("extras", "match"),
    [
        ({"in_cluster": True, "kube_config": "x"}, "in_cluster and kube_config are both set"),
        ({"kube_config_path": "/a", "kube_config": "x"}, "kube_config_path and kube_config"),
        ({"in_cluster": "maybe"}, "extra 'in_cluster' is 'maybe'; expected true or false"),
        ({"kube_config": 3}, "expected a kubeconfig as YAML or JSON text"),
    ],
)
def test_bad_extras_name_the_connection(extras: dict[str, Any], match: str) -> None:
    with pytest.raises(ClusterConfigError, match=match) as info:
        cluster_config_from_extras(extras, conn_id="k8s")
    assert "connection 'k8s'" in str(info.value)


def test_no_extras_in_a_pod_means_in_cluster(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("t")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("JOBWATCH_SERVICE_ACCOUNT_DIR", str(tmp_path))
    assert cluster_config_from_extras({}, conn_id="kubernetes_default").in_cluster is True
    # ... but not for a trigger without a connection (it named nothing: the default kubeconfig)
    assert cluster_config_from_extras({}, conn_id=None).in_cluster is False


def test_inline_kubeconfig_is_never_shown() -> None:
    cfg = ClusterConfig(kube_config="token: sk-SECRET-0123456789")
    assert "sk-SECRET" not in repr(cfg)
    with pytest.raises(ClusterConfigError) as info:
        cfg.identity()
    assert "sk-SECRET" not in str(info.value)


def test_executor_conf(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {
        "IN_CLUSTER": "False",
        "CONFIG_FILE": "/k",
        "CLUSTER_CONTEXT": "c",
        "VERIFY_SSL": "False",
        "SSL_CA_CERT": "/ca.pem",
        "ENABLE_TCP_KEEPALIVE": "True",
        "TCP_KEEP_IDLE": "11",
        "TCP_KEEP_INTVL": "12",
        "TCP_KEEP_CNT": "13",
        "KUBE_CLIENT_REQUEST_ARGS": '{"_request_timeout": [5, 60]}',
        "API_CLIENT_RETRY_CONFIGURATION": '{"total": 4}',
    }.items():
        monkeypatch.setenv(f"AIRFLOW__KUBERNETES_EXECUTOR__{k}", v)
    cfg = cluster_config_from_executor_conf()
    assert (cfg.in_cluster, cfg.config_file, cfg.cluster_context) == (False, "/k", "c")
    assert (cfg.verify_ssl, cfg.ssl_ca_cert) == (False, "/ca.pem")
    assert cfg.tcp_keepalive == TcpKeepalive(11, 12, 13)
    assert cfg.request_timeout == (5.0, 60.0)
    assert cfg.retries == {"total": 4}
    monkeypatch.setenv("AIRFLOW__KUBERNETES_EXECUTOR__ENABLE_TCP_KEEPALIVE", "False")
    assert cluster_config_from_executor_conf().tcp_keepalive is None


@pytest.mark.parametrize(
    ("option", "value", "match"),
    [
        ("API_CLIENT_RETRY_CONFIGURATION", "[1]", "api_client_retry_configuration is a JSON list"),
        ("KUBE_CLIENT_REQUEST_ARGS", '{"_request_timeout": "soon"}', "_request_timeout is 'soon'"),
    ],
)
def test_bad_executor_options_name_the_option(
    monkeypatch: pytest.MonkeyPatch, option: str, value: str, match: str
) -> None:
    monkeypatch.setenv(f"AIRFLOW__KUBERNETES_EXECUTOR__{option}", value)
    with pytest.raises(ClusterConfigError, match=match):
        cluster_config_from_executor_conf()
