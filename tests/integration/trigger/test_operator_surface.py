"""KubernetesJobOperator's surface is upstream's: every upstream argument is named in our ``__init__``
with upstream's default (so IDEs and ``help()`` show them, and a new upstream argument fails here), and
an upstream argument that is set but has no effect here is named in one warning when the DAG is parsed
and again when the task runs."""

from __future__ import annotations

import inspect

import pytest
import structlog.testing
from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator as UpstreamJobOperator
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator as UpstreamPodOperator

from airflow_jobwatch.compat import PARITY_PROVIDER_VERSION, cncf_kubernetes_version
from airflow_jobwatch.operators.job import KubernetesJobOperator

from .test_job_operator import _rendered, make_context, make_operator

pytestmark = pytest.mark.timeout(120)

#: Arguments of ours, added after upstream's (docs/migration.md).
OURS = {"fatal_waiting_reasons", "api_failure_tolerance", "xcom_path", "disruption_retries"}


def _parameters(cls: type) -> list[inspect.Parameter]:
    return [
        p
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]


def _upstream() -> dict[str, inspect.Parameter]:
    """Upstream's Job operator's arguments, then those of KubernetesPodOperator it passes on (the Job
    operator's own win: ``deferrable``)."""
    merged: dict[str, inspect.Parameter] = {}
    for cls in (UpstreamJobOperator, UpstreamPodOperator):
        for p in _parameters(cls):
            merged.setdefault(p.name, p)
    return merged


@pytest.mark.skipif(
    cncf_kubernetes_version() < PARITY_PROVIDER_VERSION,
    reason="the signature is upstream's 10.25 (Airflow 3.3's); older providers lack some of its arguments",
)
def test_init_names_every_upstream_argument_with_upstream_default() -> None:
    upstream = _upstream()
    ours = {p.name: p for p in _parameters(KubernetesJobOperator)}
    missing = sorted(set(upstream) - set(ours))
    assert not missing, f"upstream arguments not named in KubernetesJobOperator.__init__: {missing}"
    different = {
        name: (ours[name].default, p.default)
        for name, p in upstream.items()
        if ours[name].default != p.default
    }
    assert not different, f"defaults that differ from upstream's (ours, upstream's): {different}"
    extra = set(ours) - set(upstream)
    assert extra <= OURS, f"arguments that are neither upstream's nor known as ours: {sorted(extra - OURS)}"
    # upstream's first, in upstream's order; ours after them
    order = list(ours)
    assert order[: len(upstream)] == list(upstream)


@pytest.mark.skipif(
    cncf_kubernetes_version() < PARITY_PROVIDER_VERSION,
    reason="the signature is upstream's 10.25 (Airflow 3.3's); older providers lack some of its arguments",
)
def test_every_upstream_argument_is_documented() -> None:
    doc = KubernetesJobOperator.__doc__ or ""
    undocumented = [name for name in _upstream() if f":param {name}:" not in doc]
    assert not undocumented, undocumented


def test_arguments_an_older_provider_lacks_are_dropped_at_their_default_and_refused_when_set() -> None:
    from airflow_jobwatch.compat import upstream_arguments

    arguments = {"image": "busybox", "newer_than_any_provider": None}
    assert upstream_arguments(_Newer, arguments) == {"image": "busybox"}
    assert upstream_arguments(_Newer, {**arguments, "image": None}) == {}  # the provider's own default
    with pytest.raises(TypeError, match="newer_than_any_provider need a newer apache-airflow-providers-cncf"):
        upstream_arguments(_Newer, {**arguments, "newer_than_any_provider": True})


class _Newer:
    def __init__(self, image: str | None = None, newer_than_any_provider: bool | None = None) -> None: ...


def test_help_shows_the_arguments_not_kwargs_alone() -> None:
    text = str(inspect.signature(KubernetesJobOperator.__init__))
    for name in ("image", "cmds", "backoff_limit", "job_template_file", "on_kill_action", "xcom_path"):
        assert f"{name}:" in text


def test_unhonoured_arguments_set_are_named_in_one_warning_at_execute(sandbox, kubeconfig) -> None:
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", "echo ok"],
        wait_until_job_complete=True,
        deferrable=False,
        parallelism=1,
        startup_timeout_seconds=5,
        skip_on_exit_code=3,
        log_formatter=lambda container, line: line,
        discover_pods_retry_number=3,  # upstream's default: not "set"
    )
    with structlog.testing.capture_logs() as entries:
        op.execute(make_context())
    warnings = [e for e in entries if e.get("log_level") == "warning"]
    named = [e for e in warnings if "have no effect" in str(e.get("event"))]
    assert len(named) == 1, _rendered(warnings)
    text = _rendered(named)
    for name in ("startup_timeout_seconds", "skip_on_exit_code", "log_formatter"):
        assert name in text
    assert "discover_pods_retry_number" not in text
    assert "no polling for pod start" not in text  # startup_check_interval_seconds kept its default
    assert "no wait for pod start" in text  # the reason is given


def test_no_warning_when_nothing_unhonoured_is_set(sandbox, kubeconfig) -> None:
    op = make_operator(
        kubeconfig, cmds=["true"], wait_until_job_complete=True, deferrable=False, parallelism=1
    )
    with structlog.testing.capture_logs() as entries:
        op.execute(make_context())
    assert not [e for e in entries if "have no effect" in str(e.get("event"))]


def test_unhonoured_arguments_warn_when_the_dag_is_parsed(sandbox, kubeconfig) -> None:
    """The operator is built when the DAG file is parsed: the DAG author sees the warning there, before
    any task runs, and it points at the docs, not at a file of this repository."""
    with structlog.testing.capture_logs() as entries:
        make_operator(kubeconfig, cmds=["true"], startup_timeout_seconds=5)
    named = [
        e for e in entries if e.get("log_level") == "warning" and "have no effect" in str(e.get("event"))
    ]
    assert len(named) == 1, _rendered(entries)
    text = _rendered(named)
    assert "startup_timeout_seconds" in text and "migration guide" in text
    assert ".md" not in text and "docs/" not in text
