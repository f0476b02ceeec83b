"""Properties of the watch engine that must hold whatever happens: random operations and faults (hypothesis),
and a bounded request rate against a server that answers 410 to every watch."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from informer_helpers import FAST, NS, Pods, api_client_for, consistent, eventually, running_informer

from airflow_jobwatch.kube.engine.backoff import Backoff
from airflow_jobwatch.kube.engine.informer import InformerConfig
from airflow_jobwatch_testing.sandbox import SandboxThread

# A minute of 410s at the production backoff (0.8 s doubling to 30 s), with time scaled by 1/10 so the test
# takes 6 s: the analytic bound on the number of LISTs is the same as for the real minute.
TIME_SCALE = 0.1
pytestmark = pytest.mark.usefixtures("each_store_form")

PRODUCTION = InformerConfig()
SCALED = InformerConfig(
    watch_timeout_seconds=5,
    stall_timeout_seconds=2,
    connect_timeout_seconds=1,
    backoff_initial_seconds=PRODUCTION.backoff_initial_seconds * TIME_SCALE,
    backoff_max_seconds=PRODUCTION.backoff_max_seconds * TIME_SCALE,
    backoff_reset_after_seconds=PRODUCTION.backoff_reset_after_seconds * TIME_SCALE,
)
OBSERVE_SECONDS = 60 * TIME_SCALE


async def test_permanent_410_makes_a_bounded_number_of_lists(sb, api):
    """apache/airflow #21087: a server that forgot everything answers 410 to every watch. The engine must
    relist (that is the only way forward) but never faster than its backoff allows - not in a tight loop."""
    bound = Backoff(
        initial_seconds=SCALED.backoff_initial_seconds,
        max_seconds=SCALED.backoff_max_seconds,
        reset_after_seconds=SCALED.backoff_reset_after_seconds,
    ).max_attempts_within(OBSERVE_SECONDS)
    assert bound == 10  # the same bound as for a real minute at production settings (see test_backoff)
    await Pods(api).create("p")
    sb.set_watch_expired(True)
    sb.reset_counters()
    loop = asyncio.get_running_loop()
    async with running_informer(api, config=SCALED) as (informer, rec):
        started = loop.time()
        # observe the engine for the whole window (this is a rate measurement, so the wait is the point)
        await eventually(lambda: loop.time() - started >= OBSERVE_SECONDS, within=OBSERVE_SECONDS + 5)
    counters = sb.counters()
    lists, watches = counters.get("list pods", 0), counters.get("watch pods", 0)
    assert 4 <= lists <= bound, f"{lists} LISTs in {OBSERVE_SECONDS} s of permanent 410 (bound {bound})"
    assert watches <= lists  # one watch attempt per list, no retry of the same stale resourceVersion
    assert informer.health.relists == lists - 1
    assert rec.types() == {rec.events[0][0]: 1}  # one ADDED; relists of an unchanged pod emit nothing


# --------------------------------------------------------------------------------------------------------
# Random operations and faults

FAULTS = st.tuples(
    st.just("fault"),
    st.sampled_from(
        [
            # the engine only meets most faults when it reconnects, so connections are cut often
            "drop_watches",
            "drop_watches",
            "drop_watches",
            "stall_on",
            "stall_off",
            "expired_on",
            "expired_off",
            "errors_on",
            "errors_off",
            "window_1",
            "window_big",
            "outage_start",
            "outage_end",
        ]
    ),
)
CHANGES = st.one_of(
    st.tuples(st.just("create")),
    st.tuples(st.just("phase"), st.integers(0, 30), st.sampled_from(["Running", "Succeeded", "Failed"])),
    st.tuples(st.just("delete"), st.integers(0, 30)),
    st.tuples(st.just("force_delete"), st.integers(0, 30)),
)
# Rounds of (a fault, then up to 4 changes made under it): every example combines several faults with changes.
ROUNDS = st.lists(st.tuples(FAULTS, st.lists(CHANGES, max_size=4)), min_size=2, max_size=6).map(
    lambda rounds: [op for fault, changes in rounds for op in (fault, *changes)]
)

# A shorter stall timeout than FAST: examples with a stall are then resolved within half a second.
PROPERTY_CONFIG = InformerConfig(**{**FAST.__dict__, "stall_timeout_seconds": 0.5})


def apply_fault(sandbox: SandboxThread, fault: str, state: dict[str, Any]) -> None:
    if fault == "drop_watches":
        sandbox.drop_watches()
    elif fault in ("stall_on", "stall_off"):
        sandbox.stall_watches(fault == "stall_on")
    elif fault in ("expired_on", "expired_off"):
        sandbox.set_watch_expired(fault == "expired_on")
    elif fault == "errors_on":
        sandbox.set_error_rate(0.4, status=503, verbs={"list", "watch"})
    elif fault == "errors_off":
        sandbox.set_error_rate(0.0)
    elif fault == "window_1":
        sandbox.set_history_window(1)
    elif fault == "window_big":
        sandbox.set_history_window(10000)
    elif fault == "outage_start" and not state["outage"]:
        sandbox.start_outage()
        state["outage"] = True
    elif fault == "outage_end" and state["outage"]:
        sandbox.end_outage()
        state["outage"] = False


def heal(sandbox: SandboxThread, state: dict[str, Any], *, everything: bool) -> None:
    """End the faults under which no client can converge (outage, silent streams). The others (410 on every
    watch, a history of one change, 40% errors) stay on at the end of an example: the engine must reach the
    server's state through them, by relisting with backoff. ``everything`` resets all before an example."""
    if state["outage"]:
        sandbox.end_outage()
        state["outage"] = False
    sandbox.stall_watches(False)
    if everything:
        sandbox.set_watch_expired(False)
        sandbox.set_error_rate(0.0)
        sandbox.set_history_window(10000)


async def run_scenario(sandbox: SandboxThread, tmp_path: Path, ops: list[tuple[Any, ...]]) -> None:
    run = uuid.uuid4().hex[:8]  # this example's pods only: the sandbox is shared by the examples
    state: dict[str, Any] = {"outage": False}  # the previous example ended any outage (finally below)
    heal(sandbox, state, everything=True)
    counter = itertools.count()
    live: list[str] = []
    async with api_client_for(sandbox, tmp_path) as client:
        pods = Pods(client)
        for _ in range(3):
            name = f"p-{run}-{next(counter)}"
            await pods.create(name, run=run)
            live.append(name)
        async with running_informer(
            client, config=PROPERTY_CONFIG, label_selector=f"run={run}", sync_timeout=20
        ) as (informer, rec):
            try:
                for op in ops:
                    kind = op[0]
                    if kind == "fault":
                        apply_fault(sandbox, op[1], state)
                    elif kind == "force_delete":
                        if live:
                            sandbox.force_delete_pod(NS, live.pop(op[1] % len(live)))
                    elif state["outage"]:
                        continue  # the API is unreachable for the test's own client too
                    elif kind == "create":
                        name = f"p-{run}-{next(counter)}"
                        await pods.create(name, run=run)
                        live.append(name)
                    elif kind == "phase" and live:
                        await pods.set_phase(live[op[1] % len(live)], op[2])
                    elif kind == "delete" and live:
                        await pods.delete(live.pop(op[1] % len(live)))
                    await asyncio.sleep(0.03)  # let the engine interleave with the changes
            finally:
                heal(sandbox, state, everything=False)
            await consistent(informer, rec, sandbox, within=20, run=run)


@settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=ROUNDS)
def test_random_changes_and_faults_keep_the_invariants(sb, tmp_path, ops):
    """Whatever sequence of creates, status changes, deletes, force-deletes and faults, once the faults are
    healed the store equals the server and every final state / deletion reached the subscriber exactly once."""
    asyncio.run(run_scenario(sb, tmp_path, ops))


@pytest.mark.parametrize(
    "ops",
    [
        # regressions worth keeping as fixed examples
        [("fault", "stall_on"), ("delete", 0), ("fault", "window_1"), ("create",), ("fault", "stall_off")],
        [("fault", "outage_start"), ("force_delete", 1), ("fault", "outage_end"), ("phase", 0, "Succeeded")],
        [
            ("fault", "expired_on"),
            ("fault", "drop_watches"),
            ("delete", 2),
            ("create",),
            ("phase", 0, "Failed"),
        ],
    ],
)
def test_fixed_fault_sequences(sb, tmp_path, ops):
    asyncio.run(run_scenario(sb, tmp_path, ops))
