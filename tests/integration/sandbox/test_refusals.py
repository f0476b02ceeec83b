"""The sandbox refuses the Job and Pod bodies a real kube-apiserver refuses, with its words.

Every record of ``tests/fixtures/real-apiserver/invalid-bodies.json`` (a real kube-apiserver v1.36.2's
answers) is replayed through the official client: same status code, reason, message and causes. The
other cases are mistakes the recordings do not cover; their expected words follow the decoder
(``sigs.k8s.io/json``, a fork of ``encoding/json``: ``Go struct field <Struct>.<json path> of type
<Go type>``, where an inline struct adds its Go field name) and ``pkg/apis/core/validation``.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from airflow_jobwatch_testing.sandbox import SandboxThread

pytestmark = pytest.mark.sandbox(kubelet=False, job_controller=False)

RECORDS = json.loads(
    (Path(__file__).parents[2] / "fixtures" / "real-apiserver" / "invalid-bodies.json").read_text()
)["records"]


def _named(record: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The recorded body with the name the real server answered about (``NAME`` in the recording)."""
    body = copy.deepcopy(record["request"]["body"])
    message = record["response"].get("message", "")
    name = message.split('"')[1] if record["response"]["code"] == 422 else "rec-ok"
    body["metadata"]["name"] = name
    return body, name


def _answer(api_client: kubernetes.client.ApiClient, kind: str, body: dict[str, Any]) -> tuple[int, Any]:
    """(status, Status body or created object) of a POST through the official client."""
    try:
        if kind == "Job":
            created = kubernetes.client.BatchV1Api(api_client).create_namespaced_job("default", body)
        else:
            created = kubernetes.client.CoreV1Api(api_client).create_namespaced_pod("default", body)
    except kubernetes.client.ApiException as exc:
        return exc.status, json.loads(exc.body)
    return 201, created


@pytest.fixture
def api_client(sandbox: SandboxThread, kubeconfig: Path) -> Any:
    with kubernetes.config.new_client_from_config(config_file=str(kubeconfig)) as client:
        yield client


@pytest.mark.parametrize("record", RECORDS, ids=[f"{r['kind']}: {r['case']}" for r in RECORDS])
def test_recorded_answers(api_client: kubernetes.client.ApiClient, record: dict[str, Any]) -> None:
    body, _name = _named(record)
    expected = record["response"]
    status, got = _answer(api_client, record["kind"], body)
    assert status == expected["code"]
    if status == 201:
        return
    assert (got["reason"], got["message"]) == (expected["reason"], expected["message"])
    causes = [(c["reason"], c["field"], c["message"]) for c in (got.get("details") or {}).get("causes", [])]
    assert causes == [(c["reason"], c["field"], c["message"]) for c in expected["causes"]]


def _job(**container: Any) -> dict[str, Any]:
    pod_spec = container.pop("pod_spec", {})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": container.pop("metadata", {"name": "wrong"}),
        "spec": {
            **container.pop("job_spec", {}),
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "base", "image": "busybox", "command": ["true"], **container}],
                    **pod_spec,
                }
            },
        },
    }


JOB_400 = 'Job in version "v1" cannot be handled as a Job: json: cannot unmarshal '
WRONG_TYPES = [
    (
        _job(pod_spec={"tolerations": ["gpu"]}),
        "string into Go struct field PodSpec.spec.template.spec.tolerations of type v1.Toleration",
    ),
    (
        _job(pod_spec={"nodeSelector": {"disk": True}}),
        "bool into Go struct field PodSpec.spec.template.spec.nodeSelector of type string",
    ),
    (
        _job(metadata={"name": "wrong", "labels": {"n": 5}}),
        "number into Go struct field ObjectMeta.metadata.labels of type string",
    ),
    (
        _job(metadata={"name": "wrong", "annotations": {"a": ["x"]}}),
        "array into Go struct field ObjectMeta.metadata.annotations of type string",
    ),
    (
        _job(args="--fast"),
        "string into Go struct field Container.spec.template.spec.containers.args of type []string",
    ),
    (
        _job(ports=[{"containerPort": "8080"}]),
        "string into Go struct field ContainerPort.spec.template.spec.containers.ports.containerPort of type int32",
    ),
    (
        _job(envFrom={"configMapRef": {"name": "cfg"}}),
        "object into Go struct field Container.spec.template.spec.containers.envFrom of type []v1.EnvFromSource",
    ),
    (
        _job(resources="1Gi"),
        "string into Go struct field Container.spec.template.spec.containers.resources of type v1.ResourceRequirements",
    ),
    (
        _job(pod_spec={"volumes": [{"name": "d", "emptyDir": []}]}),
        "array into Go struct field Volume.spec.template.spec.volumes.VolumeSource.emptyDir of type v1.EmptyDirVolumeSource",
    ),
    (
        _job(volumeMounts=[{"name": "d", "mountPath": "/d", "readOnly": "yes"}]),
        "string into Go struct field VolumeMount.spec.template.spec.containers.volumeMounts.readOnly of type bool",
    ),
    (
        _job(env=[{"name": "A", "valueFrom": {"configMapKeyRef": {"name": 5, "key": "k"}}}]),
        "number into Go struct field ConfigMapKeySelector.spec.template.spec.containers.env.valueFrom."
        "configMapKeyRef.LocalObjectReference.name of type string",
    ),
    (
        _job(job_spec={"backoffLimit": 1.5}),
        "number 1.5 into Go struct field JobSpec.spec.backoffLimit of type int32",
    ),
    (
        _job(pod_spec={"tolerations": [{"key": "gpu", "tolerationSeconds": "60"}]}),
        "string into Go struct field Toleration.spec.template.spec.tolerations.tolerationSeconds of type int64",
    ),
    # Go keeps the first type error in document order: env comes before command in this container.
    (
        _job(
            pod_spec={
                "containers": [{"name": "base", "image": "busybox", "env": ["A=1"], "command": "echo hi"}]
            }
        ),
        "string into Go struct field Container.spec.template.spec.containers.env of type v1.EnvVar",
    ),
]


@pytest.mark.parametrize(
    "body,error", WRONG_TYPES, ids=[e.split(" of type")[0].rsplit(".", 1)[-1] for _b, e in WRONG_TYPES]
)
def test_a_value_of_the_wrong_type_is_a_400(
    api_client: kubernetes.client.ApiClient, body: dict[str, Any], error: str
) -> None:
    status, got = _answer(api_client, "Job", body)
    assert (status, got["reason"], got["message"]) == (400, "BadRequest", JOB_400 + error)
    assert "details" not in got  # NewBadRequest carries no causes


def test_a_bad_quantity_stops_the_decoder_ahead_of_an_earlier_type_error(
    api_client: kubernetes.client.ApiClient,
) -> None:
    # resource.Quantity's UnmarshalJSON error is returned at once; a type error is only saved.
    body = _job(env=["A=1"], resources={"limits": {"memory": "1Gb"}})
    status, got = _answer(api_client, "Job", body)
    assert status == 400
    assert got["message"].endswith(
        "cannot be handled as a Job: quantities must match the regular expression "
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )


PREFIX = "spec.template.spec."
FIELD_ERRORS = [
    (
        _job(env=[{"name": "A=B", "value": "1"}]),
        (
            "FieldValueInvalid",
            PREFIX + "containers[0].env[0].name",
            "Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
        ),
    ),
    (
        _job(envFrom=[{"prefix": "P_"}]),
        (
            "FieldValueInvalid",
            PREFIX + "containers[0].envFrom",
            'Invalid value: "": must specify one of: `configMapRef` or `secretRef`',
        ),
    ),
    (
        _job(env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}]),
        ("FieldValueRequired", PREFIX + "containers[0].env[0].valueFrom.secretKeyRef.key", "Required value"),
    ),
    (
        _job(ports=[{"containerPort": 70000}]),
        (
            "FieldValueInvalid",
            PREFIX + "containers[0].ports[0].containerPort",
            "Invalid value: 70000: must be between 1 and 65535, inclusive",
        ),
    ),
    (
        _job(ports=[{"containerPort": 80, "protocol": "HTTP"}]),
        (
            "FieldValueNotSupported",
            PREFIX + "containers[0].ports[0].protocol",
            'Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"',
        ),
    ),
    (
        _job(pod_spec={"volumes": [{"name": "data"}]}),
        ("FieldValueRequired", PREFIX + "volumes[0]", "Required value: must specify a volume type"),
    ),
    (
        _job(pod_spec={"volumes": [{"name": "Data", "emptyDir": {}}]}),
        (
            "FieldValueInvalid",
            PREFIX + "volumes[0].name",
            "Invalid value: \"Data\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
            "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
            "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        ),
    ),
    (
        _job(pod_spec={"tolerations": [{"key": "gpu", "operator": "Maybe"}]}),
        (
            "FieldValueNotSupported",
            PREFIX + "tolerations[0].operator",
            'Unsupported value: "Maybe": supported values: "Equal", "Exists"',
        ),
    ),
    (
        _job(pod_spec={"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoRun"}]}),
        (
            "FieldValueNotSupported",
            PREFIX + "tolerations[0].effect",
            'Unsupported value: "NoRun": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"',
        ),
    ),
    (
        _job(pod_spec={"nodeSelector": {"pool": "big pool"}}),
        (
            "FieldValueInvalid",
            PREFIX + "nodeSelector",
            'Invalid value: "big pool": a valid label must be an empty string or consist of alphanumeric characters, '
            "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  "
            "or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
        ),
    ),
]


@pytest.mark.parametrize(
    "body,cause", FIELD_ERRORS, ids=[c[1].removeprefix(PREFIX) for _b, c in FIELD_ERRORS]
)
def test_a_field_error_is_a_422_naming_the_field(
    api_client: kubernetes.client.ApiClient, body: dict[str, Any], cause: tuple[str, str, str]
) -> None:
    status, got = _answer(api_client, "Job", body)
    assert (status, got["reason"]) == (422, "Invalid")
    assert [(c["reason"], c["field"], c["message"]) for c in got["details"]["causes"]] == [cause]
    assert got["message"] == f'Job.batch "wrong" is invalid: {cause[1]}: {cause[2]}'


def test_duplicate_env_names_are_accepted_with_a_warning(api_client: kubernetes.client.ApiClient) -> None:
    # pkg/api/pod/warnings.go: a later entry hides an earlier one of the same name; not an error.
    body = _job(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}])
    _data, status, headers = kubernetes.client.BatchV1Api(api_client).create_namespaced_job_with_http_info(
        "default", body
    )
    assert status == 201
    assert headers["Warning"] == (
        '299 - "spec.template.spec.containers[0].env[1]: hides previous definition of \\"A\\", '
        'which may be dropped when using apply"'
    )


KUBECTL = shutil.which("kubectl")


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (shutil.which('kubectl') is None)")
@pytest.mark.sandbox(tls=True, kubelet=False, job_controller=False)
@pytest.mark.parametrize("case", ["env entries as strings", "env entry without a name"])
def test_kubectl_prints_the_recorded_refusal(kubeconfig: Path, tmp_path: Path, case: str) -> None:
    record = next(r for r in RECORDS if r["case"] == case and r["kind"] == "Job")
    body, _name = _named(record)
    manifest = tmp_path / "job.json"
    manifest.write_text(json.dumps(body))
    assert KUBECTL is not None
    result = subprocess.run(
        [KUBECTL, "create", "-f", str(manifest)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        check=False,
    )
    assert result.returncode == 1
    expected = record["response"]
    if expected["code"] == 422:  # kubectl words an Invalid Status as 'The Job "name" is invalid: ...'
        assert result.stderr.strip() == f"The {expected['message'].replace('Job.batch', 'Job', 1)}"
    else:
        assert f"Error from server ({expected['reason']}): error when creating" in result.stderr
        assert expected["message"] in result.stderr


def test_an_unknown_container_field_is_dropped_with_a_warning(
    api_client: kubernetes.client.ApiClient,
) -> None:
    # Recorded: a misspelt "commands" is 201 on a real server (invalid-bodies.json); the decoder drops
    # the field and, with fieldValidation Warn (the default), says so in a Warning header.
    record = next(r for r in RECORDS if r["case"] == "unknown field in the container")
    body, _name = _named(record)
    batch = kubernetes.client.BatchV1Api(api_client)
    _data, status, headers = batch.create_namespaced_job_with_http_info("default", body)
    assert status == 201
    assert headers["Warning"] == '299 - "unknown field \\"spec.template.spec.containers[0].commands\\""'
    raw = batch.read_namespaced_job("rec-ok", "default", _preload_content=False)  # the JSON as served
    container = json.loads(raw.data)["spec"]["template"]["spec"]["containers"][0]
    assert "commands" not in container and container["command"] == ["true"]


def test_strict_field_validation_refuses_an_unknown_container_field(
    api_client: kubernetes.client.ApiClient,
) -> None:
    # fieldValidation=Strict (kubectl's default): the decoder's strict error is a 400, worded as
    # "<Kind> in version ... cannot be handled as a <Kind>: strict decoding error: unknown field ...".
    record = next(r for r in RECORDS if r["case"] == "unknown field in the container")
    body, _name = _named(record)
    with pytest.raises(kubernetes.client.ApiException) as info:
        kubernetes.client.BatchV1Api(api_client).create_namespaced_job(
            "default", body, field_validation="Strict"
        )
    assert info.value.status == 400
    assert json.loads(info.value.body)["message"] == (
        'Job in version "v1" cannot be handled as a Job: strict decoding error: '
        'unknown field "spec.template.spec.containers[0].commands"'
    )
