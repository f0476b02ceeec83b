"""``disruption_retries``: the Job spec half (a ``podFailurePolicy`` rule); the trigger bounds the count.

Kubernetes' own answer to "a preempted pod should not cost a retry" is a Job ``podFailurePolicy`` rule
``Ignore`` on the pod condition ``DisruptionTarget`` (batch/v1, GA in 1.31): the Job controller then
replaces a disrupted pod without counting it against ``backoffLimit``. Alone, that rule has no bound:
a Job on a spot pool being reclaimed over and over would wait forever. ``JobTrigger`` counts the
disruptions it sees and ends the wait past ``disruption_retries`` (see ``triggers/notes.py``).
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import models as k8s

__all__ = ["DISRUPTION_RULE", "add_disruption_rule"]

#: The rule added in front of the Job's own ``podFailurePolicy`` rules (the first matching rule wins,
#: so a user's ``FailJob`` on exit code 137 does not catch a preempted pod first).
DISRUPTION_RULE = k8s.V1PodFailurePolicyRule(
    action="Ignore",
    on_pod_conditions=[k8s.V1PodFailurePolicyOnPodConditionsPattern(type="DisruptionTarget", status="True")],
)


def _is_disruption_rule(rule: Any) -> bool:
    if rule is None or getattr(rule, "action", None) != "Ignore":
        return False
    patterns = getattr(rule, "on_pod_conditions", None) or []
    return any(getattr(p, "type", None) == "DisruptionTarget" for p in patterns)


def add_disruption_rule(job: k8s.V1Job) -> k8s.V1Job:
    """Give ``job`` the ``Ignore``-on-``DisruptionTarget`` rule, and the ``restartPolicy: Never`` every
    ``podFailurePolicy`` requires (the API server refuses the Job otherwise).

    :raises ValueError: the pod template asks for another restartPolicy (naming it and what to do).
    """
    pod_spec = job.spec.template.spec
    policy = pod_spec.restart_policy
    if policy not in (None, "Never"):
        raise ValueError(
            f"disruption_retries needs the Job's pods to use restartPolicy 'Never' (a podFailurePolicy "
            f"requires it), but the pod template sets restartPolicy {policy!r}; remove it or set 'Never', "
            "or leave disruption_retries unset"
        )
    pod_spec.restart_policy = "Never"
    existing = job.spec.pod_failure_policy
    rules = list(existing.rules or []) if existing is not None else []
    if not any(_is_disruption_rule(rule) for rule in rules):
        rules.insert(0, DISRUPTION_RULE)
    job.spec.pod_failure_policy = k8s.V1PodFailurePolicy(rules=rules)
    return job
