"""Property: every Pod the API server accepts is run by the kubelet to an end (Succeeded or Failed),
never left behind by a kubelet crash, and a null the body carried reaches the container as the Go
zero value the real server stores ("" for a string).

The pods are written with the shapes users write (env with and without values, downward-API
references, nulls inside lists, duplicate names, ports, mounts of emptyDir volumes, quantities,
tolerations) through the official client; what the server refuses (400/422) is not an accepted shape
and is skipped.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from airflow_jobwatch_testing.sandbox import SandboxThread

from .helpers import wait_for

ENV_NAMES = st.sampled_from(["A", "B", "with space"])
ENV_ENTRY = st.one_of(
    st.fixed_dictionaries(
        {"name": ENV_NAMES},
        optional={"value": st.one_of(st.none(), st.text(alphabet="ab -_$()", max_size=5))},
    ),
    st.fixed_dictionaries(
        {
            "name": ENV_NAMES,
            "valueFrom": st.fixed_dictionaries(
                {
                    "fieldRef": st.fixed_dictionaries(
                        {"fieldPath": st.sampled_from(["metadata.name", "spec.nodeName"])}
                    )
                }
            ),
        }
    ),
)
QUANTITY = st.sampled_from(["1", "500m", "1Gi", 0.5, 2, None])
CONTAINER_EXTRAS = st.fixed_dictionaries(
    {},
    optional={
        "env": st.one_of(st.none(), st.lists(st.one_of(st.none(), ENV_ENTRY), max_size=4)),
        "args": st.one_of(
            st.none(), st.lists(st.one_of(st.none(), st.text(alphabet="xy -", max_size=3)), max_size=3)
        ),
        "workingDir": st.one_of(st.none(), st.just("")),
        "ports": st.lists(
            st.fixed_dictionaries(
                {"containerPort": st.integers(1, 65535)},
                optional={"protocol": st.sampled_from([None, "", "TCP", "UDP"]), "name": st.none()},
            ),
            max_size=2,
        ),
        "resources": st.fixed_dictionaries(
            {}, optional={"limits": st.dictionaries(st.sampled_from(["cpu", "memory"]), QUANTITY)}
        ),
        "volumeMounts": st.just([{"name": "scratch", "mountPath": "/scratch", "readOnly": None}]),
        "imagePullPolicy": st.sampled_from([None, "", "IfNotPresent", "Never"]),
        "terminationMessagePath": st.sampled_from([None, "/dev/termination-log", "/work/end"]),
        "envFrom": st.none(),
    },
)
POD_EXTRAS = st.fixed_dictionaries(
    {},
    optional={
        "tolerations": st.lists(
            st.fixed_dictionaries(
                {"key": st.just("gpu"), "operator": st.just("Exists")},
                optional={"effect": st.sampled_from([None, "NoExecute"]), "tolerationSeconds": st.none()},
            ),
            max_size=2,
        ),
        "activeDeadlineSeconds": st.none(),
        "serviceAccountName": st.none(),
    },
)

_names = itertools.count()


@pytest.mark.sandbox(history_window=100_000)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extras=CONTAINER_EXTRAS, pod_extras=POD_EXTRAS)
@example(  # nulls where Go has strings: A is "", the second B hides the first and is ""
    extras={
        "env": [{"name": "A", "value": None}, {"name": "B", "value": "x"}, {"name": "B", "value": None}],
        "args": [None],
    },
    pod_extras={},
)
def test_every_accepted_pod_ends(
    sandbox: SandboxThread,
    kubeconfig: Path,
    caplog: pytest.LogCaptureFixture,
    extras: dict[str, Any],
    pod_extras: dict[str, Any],
) -> None:
    name = f"shape-{next(_names)}"
    # Prints each environment variable's value as NAME=[value], so nulls show as "[]", not "[None]".
    script = 'for v in A B; do eval "printf \'%s=[%s]\\n\' $v \\"\\${$v-unset}\\""; done'
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "containers": [
                {"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", script], **extras}
            ],
            **pod_extras,
        },
    }
    with kubernetes.config.new_client_from_config(config_file=str(kubeconfig)) as api_client:
        core = kubernetes.client.CoreV1Api(api_client)
        try:
            core.create_namespaced_pod("default", body)
        except kubernetes.client.ApiException as exc:
            assume(exc.status not in (400, 422))  # refused: not a shape the kubelet is ever given
            raise
        with caplog.at_level(logging.ERROR, logger="airflow_jobwatch_testing.sandbox"):

            def ended() -> str | None:
                crashed = [r.getMessage() for r in caplog.records if "crashed" in r.getMessage()]
                assert not crashed, crashed
                phase = core.read_namespaced_pod(name, "default").status.phase
                return phase if phase in ("Succeeded", "Failed") else None

            phase = wait_for(ended, timeout=60, what=f"pod {name} to end")
        assert phase == "Succeeded"
        logs = core.read_namespaced_pod_log(name, "default")
    # The last entry of a name wins, as in a real container; a null value is the empty string.
    for var in ("A", "B"):
        entries = [e for e in (extras.get("env") or []) if e and e.get("name") == var]
        if not entries:
            expected = "unset"
        elif "valueFrom" in entries[-1]:
            continue  # a downward-API value: the pod's name or node
        else:
            expected = entries[-1].get("value") or ""
        assert f"{var}=[{expected}]" in logs
