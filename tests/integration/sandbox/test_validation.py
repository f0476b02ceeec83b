"""422 Invalid like the real server (names, labels, annotations, pod specs), and Job label defaulting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from airflow_jobwatch_testing.sandbox import SandboxThread

from .helpers import job_body, pod_body

pytestmark = pytest.mark.sandbox(kubelet=False, job_controller=False)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "real-apiserver"

LABEL_KEY_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def _recorded(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / name).read_text())["body"])


def _invalid(fn: Any, *args: Any) -> dict[str, Any]:
    with pytest.raises(kubernetes.client.ApiException) as info:
        fn(*args)
    assert info.value.status == 422
    body = dict(json.loads(info.value.body))
    assert body["reason"] == "Invalid"
    return body


def test_invalid_name_is_the_recorded_status(core: kubernetes.client.CoreV1Api) -> None:
    assert _invalid(core.create_namespaced_pod, "default", pod_body("Bad_Name")) == _recorded(
        "status-422-invalid-name.json"
    )


def test_job_without_containers_is_the_recorded_status(sandbox: SandboxThread, kubeconfig: Path) -> None:
    body = job_body("nocont-7bf5", "true")
    body["spec"]["template"]["spec"]["containers"] = []
    with kubernetes.config.new_client_from_config(config_file=str(kubeconfig)) as api_client:
        got = _invalid(kubernetes.client.BatchV1Api(api_client).create_namespaced_job, "default", body)
    assert got == _recorded("status-422-job-without-containers.json")


def test_bad_label_key_and_value_in_one_status(core: kubernetes.client.CoreV1Api) -> None:
    body = pod_body("p", labels={"bad key": "ok", "good": "-bad value-"})
    got = _invalid(core.create_namespaced_pod, "default", body)
    assert got["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": f'Invalid value: "bad key": {LABEL_KEY_MSG}',
            "field": "metadata.labels",
        },
        {
            "reason": "FieldValueInvalid",
            "message": f'Invalid value: "-bad value-": {LABEL_VALUE_MSG}',
            "field": "metadata.labels",
        },
    ]
    assert got["message"] == (
        f'Pod "p" is invalid: [metadata.labels: Invalid value: "bad key": {LABEL_KEY_MSG}, '
        f'metadata.labels: Invalid value: "-bad value-": {LABEL_VALUE_MSG}]'
    )


def test_label_value_too_long_and_prefixed_keys(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("ok", labels={"example.com/team": "a" * 63}))
    got = _invalid(core.create_namespaced_pod, "default", pod_body("long", labels={"x": "a" * 64}))
    assert (
        got["details"]["causes"][0]["message"]
        == f'Invalid value: "{"a" * 64}": must be no more than 63 bytes'
    )
    got = _invalid(core.create_namespaced_pod, "default", pod_body("pfx", labels={"Not_DNS/x": "1"}))
    assert got["details"]["causes"][0]["message"].startswith(
        'Invalid value: "Not_DNS/x": prefix part a lowercase RFC 1123 subdomain must consist of'
    )


def test_annotation_keys(core: kubernetes.client.CoreV1Api) -> None:
    ok = pod_body("ann-ok")
    ok["metadata"]["annotations"] = {"Example.COM/Mixed-Case": "any value at all: spaces, /, ü"}
    core.create_namespaced_pod("default", ok)  # case does not matter for annotation keys
    bad = pod_body("ann-bad")
    bad["metadata"]["annotations"] = {"a/b/c": "x"}
    got = _invalid(core.create_namespaced_pod, "default", bad)
    assert got["details"]["causes"][0]["field"] == "metadata.annotations"
    assert "a qualified name must consist of" in got["details"]["causes"][0]["message"]
    huge = pod_body("ann-huge")
    huge["metadata"]["annotations"] = {"big": "x" * (256 * 1024)}
    got = _invalid(core.create_namespaced_pod, "default", huge)
    assert got["details"]["causes"] == [
        {
            "reason": "FieldValueTooLong",
            "message": "Too long: may not be more than 262144 bytes",
            "field": "metadata.annotations",
        }
    ]


def test_pod_spec_problems(core: kubernetes.client.CoreV1Api) -> None:
    no_containers = pod_body("nc")
    del no_containers["spec"]["containers"]
    got = _invalid(core.create_namespaced_pod, "default", no_containers)
    assert got["message"] == 'Pod "nc" is invalid: spec.containers: Required value'
    bad_container = pod_body("bc")
    bad_container["spec"]["containers"][0]["name"] = "Main"
    got = _invalid(core.create_namespaced_pod, "default", bad_container)
    assert got["details"]["causes"][0]["field"] == "spec.containers[0].name"
    assert "a lowercase RFC 1123 label must consist of" in got["details"]["causes"][0]["message"]


def test_labels_are_validated_on_patch(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("pp"))
    with pytest.raises(kubernetes.client.ApiException) as info:
        core.patch_namespaced_pod("pp", "default", {"metadata": {"labels": {"bad key": "v"}}})
    assert info.value.status == 422
    assert core.read_namespaced_pod("pp", "default").metadata.labels in (None, {})


def test_namespace_names_are_dns1123_labels(core: kubernetes.client.CoreV1Api) -> None:
    got = _invalid(core.create_namespace, {"metadata": {"name": "a.b"}})
    assert "a lowercase RFC 1123 label must consist of" in got["details"]["causes"][0]["message"]


# ---- Job labels -----------------------------------------------------------------------------------
def _create_job(kubeconfig: Path, body: dict[str, Any]) -> Any:
    with kubernetes.config.new_client_from_config(config_file=str(kubeconfig)) as api_client:
        return kubernetes.client.BatchV1Api(api_client).create_namespaced_job("default", body)


def test_job_labels_default_from_the_template_when_empty(kubeconfig: Path) -> None:
    body = job_body("nolabels", "true")
    body["spec"]["template"]["metadata"] = {"labels": {"app": "x"}}
    job = _create_job(kubeconfig, body)
    uid = job.metadata.uid
    template = job.spec.template.metadata.labels
    assert template == {
        "app": "x",
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "nolabels",
        "controller-uid": uid,
        "job-name": "nolabels",
    }
    assert job.metadata.labels == template


def test_job_labels_given_by_the_user_are_kept_as_they_are(kubeconfig: Path) -> None:
    body = job_body("withlabels", "true")
    body["metadata"]["labels"] = {"team": "data"}
    job = _create_job(kubeconfig, body)
    assert job.metadata.labels == {"team": "data"}  # no controller-uid / job-name added
    assert job.spec.template.metadata.labels["job-name"] == "withlabels"


def test_job_name_over_63_bytes_fails_on_the_template_label(kubeconfig: Path) -> None:
    name = "j" * 64
    with kubernetes.config.new_client_from_config(config_file=str(kubeconfig)) as api_client:
        got = _invalid(
            kubernetes.client.BatchV1Api(api_client).create_namespaced_job, "default", job_body(name, "true")
        )
    # As real servers answer (e.g. zammad/zammad-helm#457, v1.3x wording):
    assert got["message"] == (
        f'Job.batch "{name}" is invalid: spec.template.labels: Invalid value: "{name}": must be no more than 63 bytes'
    )
