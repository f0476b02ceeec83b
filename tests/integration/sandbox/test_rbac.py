"""RBAC mode: per-user verb x resource x namespace rules, and the real server's 403 bodies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes_asyncio
import pytest

from airflow_jobwatch_testing.sandbox import SandboxProcess, SandboxThread
from airflow_jobwatch_testing.sandbox.incluster import InCluster
from airflow_jobwatch_testing.sandbox.rbac import ManifestError, RbacUsers, check_manifests

from .helpers import job_body, pod_body

pytestmark = pytest.mark.sandbox(kubelet=False, job_controller=False, namespaces=("default", "airflow"))

FIXTURES = Path(__file__).parents[2] / "fixtures" / "real-apiserver"
SA = "system:serviceaccount:airflow:scheduler"

ROLE_YAML = """
apiVersion: v1
kind: ServiceAccount
metadata: {name: scheduler, namespace: airflow}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-watcher, namespace: airflow}
rules:
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get", "list", "watch", "create"]
  - apiGroups: ["batch"]
    resources: ["jobs"]
    verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: scheduler-pod-watcher, namespace: airflow}
subjects:
  - kind: ServiceAccount
    name: scheduler
    namespace: airflow
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-watcher}
"""


def _core(kubeconfig: Path) -> tuple[Any, kubernetes.client.CoreV1Api]:
    api_client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    return api_client, kubernetes.client.CoreV1Api(api_client)


def _refusal(fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(kubernetes.client.ApiException) as info:
        fn(*args, **kwargs)
    assert info.value.status == 403
    return dict(json.loads(info.value.body))


def test_403_body_is_the_real_servers(rbac: RbacUsers) -> None:
    """Same bytes as the recorded real 403, up to the names (tests/fixtures/.../status-403-forbidden.json)."""
    recorded = json.loads((FIXTURES / "status-403-forbidden.json").read_text())["body"]
    api_client, core = _core(rbac.kubeconfig("system:serviceaccount:gluu:default"))
    try:
        body = _refusal(core.list_namespaced_pod, "gluu")
    finally:
        api_client.close()
    assert body == recorded
    assert list(body) == list(recorded)  # key order too (details before code)


def test_namespace_scoped_grant(rbac: RbacUsers, sandbox: SandboxThread) -> None:
    rbac.grant(SA, verbs=["list", "watch"], resources=["pods"], namespace="airflow")
    api_client, core = _core(rbac.kubeconfig(SA))
    try:
        assert core.list_namespaced_pod("airflow").items == []
        other = _refusal(core.list_namespaced_pod, "default")
        assert other["message"] == (
            f'pods is forbidden: User "{SA}" cannot list resource "pods" in API group "" in the namespace "default"'
        )
        everywhere = _refusal(core.list_pod_for_all_namespaces)
        assert everywhere["message"].endswith(
            'cannot list resource "pods" in API group "" at the cluster scope'
        )
        created = _refusal(core.create_namespaced_pod, "airflow", pod_body("p"))
        assert 'cannot create resource "pods"' in created["message"]
        with pytest.raises(kubernetes.client.ApiException) as watch_refused:
            for _ in kubernetes.watch.Watch().stream(core.list_namespaced_pod, "default", timeout_seconds=1):
                pass
        assert watch_refused.value.status == 403
        assert 'cannot watch resource "pods"' in json.loads(watch_refused.value.body)["message"]
    finally:
        api_client.close()
    assert sandbox.counters()["list pods"] >= 3  # refused requests are still requests


def test_subresource_log_and_named_object(rbac: RbacUsers, sandbox: SandboxThread) -> None:
    admin_client = kubernetes.config.new_client_from_config(
        config_file=sandbox.write_kubeconfig(rbac.dir / "admin-kubeconfig")
    )
    kubernetes.client.CoreV1Api(admin_client).create_namespaced_pod("airflow", pod_body("worker-1"))
    admin_client.close()
    rbac.grant(SA, verbs=["get"], resources=["pods"], namespace="airflow")
    api_client, core = _core(rbac.kubeconfig(SA))
    try:
        assert core.read_namespaced_pod("worker-1", "airflow").metadata.name == "worker-1"
        body = _refusal(core.read_namespaced_pod_log, "worker-1", "airflow")
        assert body["message"] == (
            f'pods "worker-1" is forbidden: User "{SA}" cannot get resource "pods/log" '
            'in API group "" in the namespace "airflow"'
        )
        assert body["details"] == {"name": "worker-1", "kind": "pods"}
        rbac.grant(SA, verbs=["get"], resources=["pods/log"], namespace="airflow")
        # Allowed now: what comes back is the kubelet's answer (none runs here), not a 403.
        with pytest.raises(kubernetes.client.ApiException) as info:
            core.read_namespaced_pod_log("worker-1", "airflow")
        assert info.value.status == 400
    finally:
        api_client.close()


def test_jobs_403_names_the_batch_group(rbac: RbacUsers) -> None:
    api_client = kubernetes.config.new_client_from_config(config_file=str(rbac.kubeconfig(SA)))
    try:
        batch = kubernetes.client.BatchV1Api(api_client)
        body = _refusal(batch.create_namespaced_job, "airflow", job_body("j", "true"))
    finally:
        api_client.close()
    assert body["message"] == (
        f'jobs.batch is forbidden: User "{SA}" cannot create resource "jobs" in API group "batch" '
        'in the namespace "airflow"'
    )
    assert body["details"] == {"group": "batch", "kind": "jobs"}
    assert body["reason"] == "Forbidden"


def test_manifests_role_and_rolebinding(rbac: RbacUsers) -> None:
    loaded = rbac.load(ROLE_YAML)
    assert loaded == ["Role/airflow/pod-watcher", "RoleBinding/airflow/scheduler-pod-watcher"]
    api_client, core = _core(rbac.kubeconfig(SA))
    try:
        core.create_namespaced_pod("airflow", pod_body("p1"))
        assert [p.metadata.name for p in core.list_namespaced_pod("airflow").items] == ["p1"]
        assert "cannot delete resource" in _refusal(core.delete_namespaced_pod, "p1", "airflow")["message"]
        assert "cannot list resource" in _refusal(core.list_namespaced_pod, "default")["message"]
        batch = kubernetes.client.BatchV1Api(api_client)
        assert "cannot list resource" in _refusal(batch.list_namespaced_job, "airflow")["message"]
    finally:
        api_client.close()
    # Another service account in the same namespace is not bound.
    other_client, other = _core(rbac.kubeconfig("system:serviceaccount:airflow:worker"))
    try:
        _refusal(other.list_namespaced_pod, "airflow")
    finally:
        other_client.close()


def test_cluster_role_binding_groups_and_resource_names(rbac: RbacUsers) -> None:
    rbac.load(
        [
            {
                "kind": "ClusterRole",
                "metadata": {"name": "ns-reader"},
                "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}],
            },
            {
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "all-sas-read-ns"},
                "subjects": [{"kind": "Group", "name": "system:serviceaccounts"}],
                "roleRef": {"kind": "ClusterRole", "name": "ns-reader"},
            },
            {
                "kind": "Role",
                "metadata": {"name": "one-pod", "namespace": "default"},
                "rules": [
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["only"]}
                ],
            },
            {
                "kind": "RoleBinding",
                "metadata": {"name": "one-pod", "namespace": "default"},
                "subjects": [{"kind": "User", "name": "dave"}],
                "roleRef": {"kind": "Role", "name": "one-pod"},
            },
        ]
    )
    api_client, core = _core(rbac.kubeconfig(SA))
    try:
        assert core.read_namespace("airflow").metadata.name == "airflow"  # via the group
    finally:
        api_client.close()
    dave_client, dave = _core(rbac.kubeconfig("dave"))
    try:
        with pytest.raises(kubernetes.client.ApiException) as info:
            dave.read_namespaced_pod("only", "default")
        assert info.value.status == 404  # allowed, and the pod does not exist
        assert _refusal(dave.read_namespaced_pod, "other", "default")["details"]["name"] == "other"
        _refusal(dave.read_namespace, "default")  # dave is not a service account
    finally:
        dave_client.close()


async def test_async_client_gets_403(rbac: RbacUsers) -> None:
    rbac.grant(SA, verbs=["list"], resources=["pods"], namespace="airflow")
    path = rbac.kubeconfig(SA)
    async with await kubernetes_asyncio.config.new_client_from_config(config_file=str(path)) as api_client:
        core = kubernetes_asyncio.client.CoreV1Api(api_client)
        assert (await core.list_namespaced_pod("airflow")).items == []
        with pytest.raises(kubernetes_asyncio.client.ApiException) as info:
            await core.list_namespaced_pod("default")
    assert info.value.status == 403
    assert json.loads(info.value.body)["reason"] == "Forbidden"


def test_in_cluster_service_account_under_rbac(in_cluster: InCluster, rbac: RbacUsers) -> None:
    rbac.grant(in_cluster.user, verbs=["list"], resources=["pods"], namespace="default")
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_incluster_config(client_configuration=configuration)
    with kubernetes.client.ApiClient(configuration) as api_client:
        core = kubernetes.client.CoreV1Api(api_client)
        assert core.list_namespaced_pod("default").items == []
        body = _refusal(core.create_namespaced_pod, "default", pod_body("x"))
    assert f'User "{in_cluster.user}" cannot create resource "pods"' in body["message"]


def test_admin_token_is_never_refused(rbac: RbacUsers, sandbox: SandboxThread, kubeconfig: Path) -> None:
    api_client, core = _core(kubeconfig)
    try:
        core.create_namespaced_pod("default", pod_body("by-admin"))
    finally:
        api_client.close()


def test_check_manifests_without_a_server() -> None:
    refused = check_manifests(
        ROLE_YAML,
        SA,
        [
            ("list", "pods", "airflow"),
            ("watch", "pods", "airflow"),
            ("get", "pods/log", "airflow"),
            ("delete", "pods", "airflow"),
            ("get", "jobs", "airflow"),
        ],
    )
    assert refused == [
        f'pods is forbidden: User "{SA}" cannot get resource "pods/log" in API group "" in the namespace "airflow"',
        f'pods is forbidden: User "{SA}" cannot delete resource "pods" in API group "" in the namespace "airflow"',
    ]


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ("kind: Role\nmetadata: {namespace: a}\nrules: []", "metadata.name is required"),
        (
            "kind: Role\nmetadata: {name: r}\nrules: [{resources: [pods], verbs: [get]}]",
            'apiGroups must be a list (use [""] for the core group)',
        ),
        (
            "kind: RoleBinding\nmetadata: {name: b}\nroleRef: {kind: Role}\nsubjects: []",
            "roleRef must name a Role or ClusterRole",
        ),
        (
            "kind: ClusterRoleBinding\nmetadata: {name: b}\nroleRef: {kind: Role, name: r}",
            "a ClusterRoleBinding can only reference a ClusterRole",
        ),
        ("kind: Role\nmetadata: {name: [", "not valid YAML"),
    ],
)
def test_bad_manifests_name_the_problem(manifest: str, message: str) -> None:
    with pytest.raises(
        ManifestError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")
    ):
        check_manifests(manifest, "u", [])


def test_cli_rbac_manifests(tmp_path: Path) -> None:
    manifest = tmp_path / "rbac.yaml"
    manifest.write_text(ROLE_YAML)
    with SandboxProcess(
        tmp_path / "kubeconfig", args=["--no-kubelet", "--rbac-manifests", str(manifest)]
    ) as sb:
        sb.admin.objects("pods")  # the admin API keeps working (admin token)
        token = sb.admin.fault("issue_token", user=SA, ttl=60)
        api_client, core = _core(Path(sb.write_kubeconfig(tmp_path / "sa-kubeconfig", token)))
        try:
            assert core.list_namespaced_pod("airflow").items == []
            _refusal(core.list_namespaced_pod, "default")
        finally:
            api_client.close()
        assert sb.admin.fault("tokens_seen", user=SA) == 1


# ---- manifests as kubectl applies them, and aggregated ClusterRoles ---------------------------------


def _may_list(rbac: RbacUsers, user: str, namespace: str, resource: str = "pods") -> bool:
    """Whether ``user`` may list ``resource`` (pods or jobs) in ``namespace``: True, or False on a 403."""
    api_client = kubernetes.config.new_client_from_config(config_file=str(rbac.kubeconfig(user)))
    try:
        if resource == "pods":
            kubernetes.client.CoreV1Api(api_client).list_namespaced_pod(namespace)
        else:
            kubernetes.client.BatchV1Api(api_client).list_namespaced_job(namespace)
    except kubernetes.client.ApiException as exc:
        assert exc.status == 403, exc
        return False
    finally:
        api_client.close()
    return True


NAMESPACELESS = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader}
rules: [{apiGroups: [""], resources: [pods], verbs: [list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: pod-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects:
  - kind: ServiceAccount
    name: scheduler
"""


def test_manifests_without_a_namespace_go_where_kubectl_apply_n_puts_them(rbac: RbacUsers) -> None:
    """``kubectl apply -n airflow -f``: the Role and RoleBinding land in airflow, and the ServiceAccount
    subject without a namespace is the RoleBinding's own (``appliesToUser`` in
    pkg/registry/rbac/validation/rule.go defaults a ServiceAccount's namespace to the binding's)."""
    assert rbac.load(NAMESPACELESS, namespace="airflow") == [
        "Role/airflow/pod-reader",
        "RoleBinding/airflow/pod-reader",
    ]
    assert _may_list(rbac, SA, "airflow") and not _may_list(rbac, SA, "default")
    # The same account name in another namespace is another user.
    assert not _may_list(rbac, "system:serviceaccount:default:scheduler", "airflow")


def test_a_manifest_naming_another_namespace_is_refused_as_kubectl_refuses_it(rbac: RbacUsers) -> None:
    with pytest.raises(ManifestError) as info:
        rbac.load(ROLE_YAML, namespace="default")
    assert (
        'the namespace from the provided object "airflow" does not match the namespace "default". '
        "You must pass '--namespace=airflow' to perform this operation."
    ) in str(info.value)


AGGREGATED = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: jobwatch-aggregate}
aggregationRule:
  clusterRoleSelectors:
    - matchLabels: {jobwatch.example/aggregate-to-reader: "true"}
rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: jobwatch-pods
  labels: {jobwatch.example/aggregate-to-reader: "true"}
rules: [{apiGroups: [""], resources: [pods], verbs: [list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: jobwatch-jobs-not-selected
  labels: {jobwatch.example/aggregate-to-reader: "false"}
rules: [{apiGroups: [batch], resources: [jobs], verbs: [list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader, namespace: airflow}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: jobwatch-aggregate}
subjects:
  - {kind: ServiceAccount, name: scheduler, namespace: airflow}
"""


def test_an_aggregated_cluster_role_holds_the_rules_of_the_roles_it_selects(rbac: RbacUsers) -> None:
    rbac.load(AGGREGATED)
    assert _may_list(rbac, SA, "airflow")
    assert not _may_list(rbac, SA, "airflow", "jobs")  # its ClusterRole's label does not match
