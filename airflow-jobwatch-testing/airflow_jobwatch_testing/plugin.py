"""The pytest plugin of the testing distribution: the ``jobwatch_sandbox`` fixture and its marker.

pytest loads it through the distribution's ``pytest11`` entry point, which has the module's name, so that
``-p airflow_jobwatch_testing.plugin`` or ``pytest_plugins = ["airflow_jobwatch_testing.plugin"]`` load it
only once. It imports nothing of Airflow, and the sandbox only when the fixture starts one: a test session
that does not use the fixture pays only for this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_jobwatch_testing import DEFAULT_CONN_ID, RunningSandbox, kubernetes_sandbox

#: The ``jobwatch_sandbox`` marker's own options; every other one is an option of the sandbox.
_FIXTURE_OPTIONS = ("conn_id", "namespace")
#: Spellings users reach for, and the option they mean.
_OTHER_SPELLINGS = {
    "kubernetes_conn_id": "conn_id",
    "connection_id": "conn_id",
    "conn": "conn_id",
    "ns": "namespace",
}


def _fixture_options(kwargs: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """``(conn_id, namespace, sandbox options)`` from the marker's keyword options; an option that is
    neither the fixture's nor the sandbox's is refused with the spelling that is."""
    import difflib
    import inspect

    from airflow_jobwatch_testing.sandbox import Sandbox

    sandbox_options = [n for n in inspect.signature(Sandbox.__init__).parameters if n != "self"]
    known = [*_FIXTURE_OPTIONS, *sandbox_options]
    for name in kwargs:
        if name in known:
            continue
        right = _OTHER_SPELLINGS.get(name) or next(iter(difflib.get_close_matches(name, known, 1)), None)
        hint = f"; did you mean {right}=?" if right else ""
        raise ValueError(
            f"@pytest.mark.jobwatch_sandbox: unknown option {name}={kwargs[name]!r}{hint} "
            f"The options are conn_id= and namespace= (the Airflow connection), and the sandbox's: "
            f"{', '.join(sandbox_options)}"
        )
    options = dict(kwargs)
    conn_id = options.pop("conn_id", DEFAULT_CONN_ID)
    namespace = options.pop("namespace", "default")
    for name, value in (("conn_id", conn_id), ("namespace", namespace)):
        if not isinstance(value, str) or not value:
            raise ValueError(
                f"@pytest.mark.jobwatch_sandbox: {name} must be a non-empty string, got {value!r}"
            )
    # The connection's namespace exists in the sandbox, beside any the sandbox option names.
    namespaces = options.get("namespaces", ("default",))
    if isinstance(namespaces, str):
        raise ValueError(
            f"@pytest.mark.jobwatch_sandbox: namespaces must be a list of names, got the string "
            f"{namespaces!r}; for the connection's namespace, write namespace={namespaces!r}"
        )
    options["namespaces"] = (*dict.fromkeys([*namespaces, namespace]),)
    return conn_id, namespace, options


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "jobwatch_sandbox(**options): options of the `jobwatch_sandbox` fixture: conn_id=... and "
        "namespace=... (the Airflow connection; the namespace is created in the sandbox), and the "
        "sandbox's own (history_window, bookmark_interval, pod_start_delay, ...)",
    )


@pytest.fixture
def jobwatch_sandbox(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningSandbox]:
    """A running Kubernetes sandbox for one test, and everything that finds a cluster pointed at it
    for the test's duration (:attr:`RunningSandbox.env`): the Airflow ``kubernetes`` connection
    ``kubernetes_default`` (namespace ``default``), ``[kubernetes_executor] config_file`` and
    ``KUBECONFIG``, so that operators, hooks and :func:`run_dag` use it.

    Options: ``@pytest.mark.jobwatch_sandbox(conn_id="my_k8s", namespace="ns", history_window=1)``.
    """
    kwargs: dict[str, Any] = {}
    marker = request.node.get_closest_marker("jobwatch_sandbox")
    if marker is not None:
        if marker.args:
            raise pytest.UsageError(
                "@pytest.mark.jobwatch_sandbox takes keyword options only, e.g. namespace='team-a'"
            )
        kwargs.update(marker.kwargs)
    try:
        conn_id, namespace, options = _fixture_options(kwargs)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    directory = tmp_path_factory.mktemp("jobwatch-sandbox")
    with kubernetes_sandbox(directory / "kubeconfig", **options) as sb:
        sb = dataclasses.replace(sb, conn_id=conn_id, namespace=namespace)
        with pytest.MonkeyPatch.context() as mp:
            for name, value in sb.env.items():
                mp.setenv(name, value)
            yield sb
