"""Model-based test of the executor's per-key record (executors/record.py).

Random sequences of what the scheduler and the cluster do (queue a key, create its pod or fail to, see it
running, the pod ends, the key is queued again, revoked, adopted away, adopted, the scheduler restarts)
are applied both to :class:`TaskRecords` and to a small reference model. The rules checked after every
step:

- no end is reported for a pod that is not its key's current launch (the launch the database names);
- no key is in ``running`` (the records' keys) without a record, and every key holding a slot has one;
- a key never has two live pods that both count as current;
- every slot is freed exactly once;
- a pod a relaunch replaced and kept is let go exactly once, no later than its record, and deleted only
  if ``delete_worker_pods*`` say so or it could still start; one that could still start is stopped (its
  name kept) once the launch's next pod exists, and never kept beside that pod unstopped.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
from airflow.models.taskinstancekey import TaskInstanceKey
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from airflow_jobwatch.executors.pods import launch_pod_name
from airflow_jobwatch.executors.record import (
    LAUNCH,
    RESET,
    SUPERSEDED,
    UNRESOLVED,
    TaskRecords,
    adoption_verdict,
    launch_held,
    launch_verdict,
)

KEYS = ["a", "b", "c"]
_ids = itertools.count()


class RecordMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.records = TaskRecords()
        self.db_launch: dict[str, str] = {}  # key -> the launch the database names (last queue)
        self.live: dict[tuple[str, str], tuple[str, str]] = {}  # pods that exist: ref -> (key, launch id)
        self.running: set[str] = set()  # what the executor's ``running`` is: keys holding a slot
        self.taken = 0
        self.freed = 0
        self.reported: list[tuple[str, str]] = []  # (key, launch id) of every reported end
        self.in_line: dict[str, int] = {}  # key -> when its pod to create was put in line (launch order)
        # Pods a relaunch replaced and the records keep: ref -> (key, whether it could still start, whether
        # delete_worker_pods* delete it).
        self.kept: dict[tuple[str, str], tuple[str, bool, bool]] = {}

    # ---- helpers ------------------------------------------------------------------------------

    def _settle(self, key: str) -> None:
        if key in self.records:
            if key not in self.running:
                self.taken += 1
            self.running.add(key)
        elif key in self.running:
            self.running.discard(key)
            self.freed += 1

    def _new_ref(self) -> tuple[str, str]:
        return ("default", f"pod-{next(_ids)}")

    # ---- scheduler --------------------------------------------------------------------------

    @rule(key=st.sampled_from(KEYS), priority=st.integers(0, 2))
    def queue(self, key: str, priority: int) -> None:
        launch = f"L{next(_ids)}"
        self.db_launch[key] = launch
        workload = SimpleNamespace(ti=SimpleNamespace(priority_weight=priority))
        self.records.queue(key, workload=workload, launch_id=launch)
        self.in_line[key] = next(_ids)  # queued again: behind every launch already in line
        self._settle(key)

    @rule(key=st.sampled_from(KEYS))
    def revoke(self, key: str) -> None:
        self.records.end(key)
        self._settle(key)

    @rule()
    def restart_and_adopt(self) -> None:
        """The scheduler dies; a new one adopts every live pod, by the launch the database names."""
        self.records = TaskRecords()
        self.kept.clear()  # left in the cluster by the scheduler that died
        for key in list(self.running):
            self.running.discard(key)
            self.freed += 1
        for ref, (key, launch) in sorted(self.live.items()):
            current = self.db_launch.get(key) == launch and key not in self.records
            self.records.adopt(key, ref, launch, current=current)
            self._settle(key)

    # ---- cluster ----------------------------------------------------------------------------

    @rule(key=st.sampled_from(KEYS), lost_answer=st.booleans())
    def create_ok(self, key: str, lost_answer: bool) -> None:
        record = self.records.get(key)
        if record is None or record.create is None:
            return
        ref = self._new_ref()
        self.records.create_sent(key, ref)
        self.live[ref] = (key, record.launch_id)
        if not lost_answer:
            self.records.created(key, ref)

    @rule(key=st.sampled_from(KEYS))
    def create_failed(self, key: str) -> None:
        record = self.records.get(key)
        if record is None or record.create is None or record.create.ref is not None:
            return
        self.records.end(key)
        self._settle(key)
        self.reported.append((key, record.launch_id))

    @rule(key=st.sampled_from(KEYS))
    def seen_running(self, key: str) -> None:
        record = self.records.get(key)
        if record is not None and record.pod is not None:
            self.records.seen_running(key, record.pod)

    @precondition(lambda self: bool(self.live))
    @rule(
        data=st.data(),
        relaunch=st.booleans(),
        keep=st.sampled_from([None, False, True]),
        delete=st.booleans(),
    )
    def pod_ends(self, data: st.DataObject, relaunch: bool, keep: bool | None, delete: bool) -> None:
        ref = data.draw(st.sampled_from(sorted(self.live)))
        key, launch = self.live.pop(ref)
        if not self.records.is_current(key, ref):
            self.records.stale_ended(ref)
            return
        record = self.records.get(key)
        assert record is not None
        if record.create is not None:
            self.records.created(key, ref)  # the watch saw the pod before the create's answer
        assert launch == record.launch_id == self.db_launch[key], "an end reported for a launch not current"
        if relaunch and not record.seen_running:
            self.records.relaunch(
                key,
                ref,
                "evicted",
                backoff=None,  # type: ignore[arg-type]
                not_before=0.0,
                keep=keep,
                delete=delete,
            )
            if keep is not None:
                self.kept[ref] = (key, keep, delete)
            self.in_line[key] = next(_ids)
            return
        self.records.end(key, ref)
        self._settle(key)
        self.reported.append((key, launch))

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def adopted_away(self, data: st.DataObject) -> None:
        ref = data.draw(st.sampled_from(sorted(self.live)))
        key, _ = self.live[ref]
        if self.records.is_current(key, ref):
            self.records.end(key, ref)
            self._settle(key)
        else:
            self.records.stale_ended(ref)

    # ---- invariants -------------------------------------------------------------------------

    @invariant()
    def running_follows_the_records(self) -> None:
        assert self.records.keys() == self.running

    @invariant()
    def one_current_pod_per_key(self) -> None:
        for key in KEYS:
            current = [
                ref for ref, (k, _) in self.live.items() if k == key and self.records.is_current(key, ref)
            ]
            assert len(current) <= 1, current

    @invariant()
    def pending_is_every_record_with_a_pod_to_create(self) -> None:
        pending = self.records.pending()
        assert {id(r) for r in pending} == {id(r) for r in self.records if r.create is not None}
        assert len(pending) == len({id(r) for r in pending})
        assert self.records.pending_count() == len(pending)
        # Launch order: highest priority first, then in the order they were put in line.
        order = [(-r.priority, self.in_line[r.key]) for r in pending]
        assert order == sorted(order), order

    @invariant()
    def every_slot_freed_once(self) -> None:
        assert self.taken - self.freed == len(self.running)
        assert self.freed <= self.taken

    @invariant()
    def replaced_pods_stopped_then_let_go_once_and_no_later_than_their_record(self) -> None:
        for ref in self.records.stopping():
            assert ref in self.kept and self.kept[ref][1], f"{ref} stopped twice, or never could start"
            key, _, delete = self.kept[ref]
            record = self.records.get(key)
            assert record is not None and record.pod is not None, f"{ref} stopped before the next pod exists"
            self.kept[ref] = (key, False, delete)
        for ref in self.records.released():
            assert ref in self.kept, f"{ref} let go twice, or never kept"
            _, may_start, delete = self.kept.pop(ref)
            assert may_start or delete, f"{ref} deleted, though stopped and kept by delete_worker_pods*"
        for ref, (key, may_start, delete) in list(self.kept.items()):
            record = self.records.get(key)
            if record is None or all(pod.ref != ref for pod in record.replaced):
                # Let go without a delete: only a stopped pod that delete_worker_pods* keep.
                assert not may_start and not delete, f"{ref} outlived its record"
                del self.kept[ref]
                continue
            assert (ref, may_start, delete) in record.replaced, f"{ref} kept as {record.replaced}"
            assert not (may_start and record.pod is not None), f"{ref} could start, kept beside the next pod"


TestRecordModel = RecordMachine.TestCase
TestRecordModel.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)


@pytest.mark.parametrize("delete", [True, False])
def test_a_replaced_pod_that_could_start_is_stopped_when_the_next_pod_exists_and_let_go_with_the_record(
    delete: bool,
) -> None:
    """The orders the model above reaches only now and then, spelled out: a replaced pod that could still
    start is stopped (not let go) once the launch's next pod exists; every replaced pod keeps its name until
    the record ends, and is deleted then where ``delete_worker_pods*`` say so."""
    records = TaskRecords()
    records.queue("k", workload=SimpleNamespace(ti=SimpleNamespace(priority_weight=0)), launch_id="L")
    records.create_sent("k", ("default", "p0"))
    records.created("k", ("default", "p0"))
    records.relaunch("k", ("default", "p0"), "evicted", backoff=None, not_before=0.0, keep=False)  # type: ignore[arg-type]
    records.create_sent("k", ("default", "p1"))
    records.created("k", ("default", "p1"))
    records.relaunch(
        "k",
        ("default", "p1"),
        "ErrImagePull",
        backoff=None,  # type: ignore[arg-type]
        not_before=0.0,
        keep=True,
        delete=delete,
    )
    assert records.stopping() == [] and records.released() == []  # no next pod yet: both names stay taken
    records.create_sent("k", ("default", "p2"))
    records.created("k", ("default", "p2"))
    assert records.stopping() == [("default", "p1")]  # the one that could start: stopped, name kept
    assert records.released() == [] and records.keeps("k", ("default", "p1"))
    records.end("k", ("default", "p2"))
    assert records.released() == [("default", "p0")] + ([("default", "p1")] if delete else [])
    assert records.released() == [] and records.stopping() == []


def test_a_replaced_pod_that_could_start_is_deleted_if_its_record_ends_before_it_was_stopped() -> None:
    records = TaskRecords()
    records.queue("k", workload=SimpleNamespace(ti=SimpleNamespace(priority_weight=0)), launch_id="L")
    records.create_sent("k", ("default", "p0"))
    records.created("k", ("default", "p0"))
    records.relaunch(
        "k",
        ("default", "p0"),
        "ErrImagePull",
        backoff=None,  # type: ignore[arg-type]
        not_before=0.0,
        keep=True,
        delete=False,
    )
    records.end("k")  # revoked before its next pod exists
    assert records.stopping() == [] and records.released() == [("default", "p0")]


SCHEDULERS = ["A", "B"]
NAMESPACES = ["default", "other"]  # "other": a namespace that a task's pod_override names


class HandOverMachine(RuleBasedStateMachine):
    """Two schedulers, one database, one cluster, with the executor's decisions (record.py): either scheduler
    may take the other for dead at any step while it still runs (a stall), adoption lists may fail or miss a
    namespace, tasks defer and resume on the same try. Invariants:

    - never two live pods counted as current for one try;
    - never a reset while a pod of the current launch may exist;
    - never an end reported for a launch the database does not name;
    - never two live pods of one launch (its first pod: the relaunch window of docs/executor.md excepted).

    A create is two steps, its fenced check and its landing (any number of steps later, as for a scheduler
    that stalls between them), under the name fixed by the launch: a second create of a name is answered
    409. An adoption is two steps too, as Airflow runs it: its transaction locks the rows and lists the
    pods, then commits any number of steps later; the fence's read skips the locked rows meanwhile, and pods
    created after the list are not in it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.records = {s: TaskRecords() for s in SCHEDULERS}
        self.db: dict[str, SimpleNamespace] = {}  # task -> its task instance row
        self.pods: dict[tuple[str, str], tuple[str, int, str, str]] = {}  # ref -> (task, try, launch, label)
        self.started: dict[tuple[str, str], bool] = {}  # ref -> its worker started the task
        self.namespace: dict[str, str] = {}  # task -> the namespace its pods are created in
        self.unresolved: dict[str, dict[str, tuple[str, str | None]]] = {s: {} for s in SCHEDULERS}
        # Creates in flight: (sender, key, launch id, pod index, ref).
        self.sent: list[tuple[str, tuple[str, int], str, int, tuple[str, str]]] = []
        self.index: dict[tuple[str, str], int] = {}  # ref -> the pod's index in its launch
        # An adoption whose transaction is open: (gone, adopter, its rows, the pods its list returned).
        self.open_adoption: tuple[str, str, list[str], set[tuple[str, str]]] | None = None

    # ---- helpers ------------------------------------------------------------------------------

    def _queue(self, task: str, scheduler: str) -> None:
        row = self.db[task]
        row.state, row.queued_by_job_id, row.external_executor_id = "queued", scheduler, f"L{next(_ids)}"
        workload = SimpleNamespace(ti=SimpleNamespace(priority_weight=0))
        self.records[scheduler].queue((task, row.try_number), workload, row.external_executor_id)

    def _report(self, scheduler: str, key: tuple[str, int], ref: tuple[str, str], launch: str) -> None:
        row = self.db[key[0]]
        assert (row.try_number, row.external_executor_id) == (key[1], launch), (
            f"{scheduler} reported {ref} of launch {launch} (try {key[1]}); the database names "
            f"{row.external_executor_id} (try {row.try_number})"
        )
        self.records[scheduler].end(key, ref)

    def _adopt(
        self,
        task: str,
        gone: str,
        adopter: str,
        *,
        cluster_list: bool,
        failing: str | None,
        relabel_fails: bool,
        retry: bool = False,
    ) -> None:
        """``adopter`` adopts ``task``, queued by ``gone``, as adoption_matching.py does: it lists every worker pod
        (whatever scheduler's label it carries) across all namespaces, or in the configured namespace plus
        the task's own; ``failing``: a namespace whose list fails (the list across all namespaces then fails
        too); ``relabel_fails``: taking over the pods fails."""
        return self._adopt_listed(
            task,
            gone,
            adopter,
            set(self.pods),
            cluster_list=cluster_list,
            failing=failing,
            relabel_fails=relabel_fails,
            retry=retry,
        )

    def _adopt_listed(
        self,
        task: str,
        gone: str,
        adopter: str,
        pods: set[tuple[str, str]],
        *,
        cluster_list: bool,
        failing: str | None,
        relabel_fails: bool,
        retry: bool = False,
    ) -> None:
        """:meth:`_adopt` with the pods its list returned (``pods``: those that existed when it returned)."""
        row = self.db[task]
        listed = set(NAMESPACES) if cluster_list else {"default", self.namespace[task]}
        complete = failing is None or failing not in listed
        # What the lists that succeeded returned: nothing from a failed list (across all namespaces: nothing).
        listed = set() if cluster_list and not complete else listed - {failing}
        key = (task, row.try_number)
        mine = self.records[adopter]
        stale = mine.get(key)
        if stale is not None and stale.pod is None:
            mine.end(key)  # its own launch still to create, from before it was taken for dead: dropped
        found = sorted(
            ref
            for ref, (t, try_number, _, _) in self.pods.items()
            if ref in pods and t == task and ref[0] in listed and not mine.is_current((t, try_number), ref)
        )
        holds_it = (held := mine.get(key)) is not None and held.launch_id == row.external_executor_id
        current_pod = holds_it or any(self.pods[ref][2] == row.external_executor_id for ref in found)
        if complete and current_pod and not holds_it and relabel_fails:
            complete = False  # the current launch's pod could not be taken over: unknown
        verdict = adoption_verdict(complete=complete, current_pod=current_pod, state=row.state)
        if verdict == UNRESOLVED:
            row.queued_by_job_id = adopter  # not handed back: the scheduler records it as the adopter's
            self.unresolved[adopter][task] = (gone, row.external_executor_id)
            return
        self.unresolved[adopter].pop(task, None)
        if verdict == RESET:
            live = [r for r, p in self.pods.items() if p[:3] == (task, key[1], row.external_executor_id)]
            assert not live, f"reset of {task} while pods of its current launch exist: {live}"
            if not retry:  # a retried adoption can no longer hand it back: left to Airflow's timeouts
                row.state = row.queued_by_job_id = row.external_executor_id = None
            return
        if held is not None and not holds_it:
            mine.end(key)  # the database names another launch than the one held here
        for ref in found:  # relabelled: the scheduler whose label it carried sees it leave (adopted away)
            t, try_number, launch, label = self.pods[ref]
            self.pods[ref] = (t, try_number, launch, adopter)
            old = self.records[label]
            if old.is_current((t, try_number), ref):
                old.end((t, try_number), ref)
            else:
                old.stale_ended(ref)
            current = (t, try_number) == key and launch == row.external_executor_id and not holds_it
            if current and (t, try_number) in mine:
                current = False  # one current pod per key: the newest of its launch (adoption_matching)
            mine.adopt((t, try_number), ref, launch, current=current)
        row.queued_by_job_id = adopter
        if verdict == LAUNCH:
            workload = SimpleNamespace(ti=SimpleNamespace(priority_weight=0))
            mine.queue(key, workload, row.external_executor_id)

    # ---- the scheduler and the worker --------------------------------------------------------

    @rule(task=st.sampled_from(KEYS), scheduler=st.sampled_from(SCHEDULERS), ns=st.sampled_from(NAMESPACES))
    def schedule(self, task: str, scheduler: str, ns: str) -> None:
        """A task with no state (new, or reset) is queued by ``scheduler``, on a new try after a reset."""
        row = self.db.get(task)
        if row is None:
            row = self.db[task] = SimpleNamespace(
                state=None, try_number=0, queued_by_job_id=None, external_executor_id=None
            )
            self.namespace[task] = ns
        if row.state is not None:
            return
        row.try_number += 1
        self._queue(task, scheduler)

    @rule(task=st.sampled_from(KEYS), scheduler=st.sampled_from(SCHEDULERS))
    def resume(self, task: str, scheduler: str) -> None:
        """A deferred task's trigger fired: queued again on the same try, under a new launch."""
        row = self.db.get(task)
        if row is not None and row.state == "deferred":
            self._queue(task, scheduler)

    @precondition(lambda self: bool(self.pods))
    @rule(data=st.data())
    def worker_starts(self, data: st.DataObject) -> None:
        """The pod's worker asks the execution API to run its task: only a QUEUED task on its try runs."""
        ref = data.draw(st.sampled_from(sorted(self.pods)))
        task, try_number, _, _ = self.pods[ref]
        row = self.db[task]
        if row.state == "queued" and row.try_number == try_number and ref not in self.started:
            row.state = "running"
            self.started[ref] = True

    @rule(task=st.sampled_from(KEYS))
    def defer(self, task: str) -> None:
        row = self.db.get(task)
        if row is not None and row.state == "running":
            row.state = "deferred"

    # ---- each scheduler's executor -----------------------------------------------------------

    @rule(scheduler=st.sampled_from(SCHEDULERS), task=st.sampled_from(KEYS))
    def send(self, scheduler: str, task: str) -> None:
        """The fenced check, then the create is sent: it lands in :meth:`land`, any number of steps later."""
        row = self.db.get(task)
        locked = self.open_adoption is not None and task in self.open_adoption[2]
        for record in self.records[scheduler]:
            if record.key[0] != task or record.create is None or record.create.ref is not None:
                continue
            if locked:
                continue  # FOR SHARE SKIP LOCKED: the row is being adopted; decided next heartbeat
            held = launch_held(
                row,
                try_number=record.key[1],
                scheduler_job_id=scheduler,
                launch_id=record.launch_id,
                pre_assigned=True,
            )
            if held is not True:
                self.records[scheduler].end(record.key)  # dropped (RAN: failed; no pod either way)
                continue
            name = launch_pod_name(
                TaskInstanceKey("dag", task, "run", record.key[1], -1), record.launch_id, record.pod_index
            )
            ref = (self.namespace[task], name)
            self.records[scheduler].create_sent(record.key, ref)
            self.sent.append((scheduler, record.key, record.launch_id, record.pod_index, ref))

    @precondition(lambda self: bool(self.sent))
    @rule(data=st.data())
    def land(self, data: st.DataObject) -> None:
        """A create sent reaches the API server. A name already taken is answered 409, read as launching.py
        does: this launch's live pod counts as created, taken over only while the database names the sender."""
        scheduler, key, launch_id, pod_index, ref = self.sent.pop(
            data.draw(st.integers(0, len(self.sent) - 1))
        )
        records = self.records[scheduler]
        record = records.get(key)
        if ref not in self.pods:
            self.pods[ref] = (key[0], key[1], launch_id, scheduler)
            self.index[ref] = pod_index
            if record is not None and record.create is not None and record.create.ref == ref:
                records.created(key, ref)
            return  # else its launch left this scheduler meanwhile: a pod nobody counts as current
        if record is None or record.create is None or record.create.ref != ref:
            return
        task, try_number, launch, label = self.pods[ref]
        assert (task, try_number, launch) == (key[0], key[1], record.launch_id)  # a name is one launch's
        row = self.db[task]
        if label != scheduler and not (
            row.queued_by_job_id == scheduler
            and row.external_executor_id == launch
            and row.try_number == key[1]
        ):
            records.create_not_sent(ref)
            records.end(key)  # not_held: dropped, the pod left to the scheduler that holds the launch
            return
        if label != scheduler:
            self.pods[ref] = (task, try_number, launch, scheduler)
            old = self.records[label]
            if old.is_current(key, ref):
                old.end(key, ref)  # adopted away
            else:
                old.stale_ended(ref)
        records.created(key, ref)

    @precondition(lambda self: bool(self.pods))
    @rule(data=st.data())
    def pod_ends(self, data: st.DataObject) -> None:
        """A pod ends; the scheduler whose label it carries reads the database for it, as results.py does."""
        ref = data.draw(st.sampled_from(sorted(self.pods)))
        task, try_number, launch, label = self.pods.pop(ref)
        started = self.started.pop(ref, False)
        row = self.db[task]
        if started and row.state in ("running", "queued") and row.try_number == try_number:
            row.state = "success"  # the worker recorded its own end
        records = self.records[label]
        key = (task, try_number)
        if not records.is_current(key, ref):
            records.stale_ended(ref)
            return
        verdict = launch_verdict(row, try_number=try_number, launch_id=launch, pre_assigned=True)
        if verdict == SUPERSEDED:
            records.end(key, ref)  # cleaned up, not reported
            return
        if verdict is True and not started:
            records.relaunch(key, ref, "evicted", backoff=None, not_before=0.0)  # type: ignore[arg-type]
            return
        self._report(label, key, ref, launch)

    @rule(
        gone=st.sampled_from(SCHEDULERS),
        cluster_list=st.booleans(),
        failing=st.sampled_from([None, *NAMESPACES]),
        relabel_fails=st.booleans(),
    )
    def take_for_dead(self, gone: str, cluster_list: bool, failing: str | None, relabel_fails: bool) -> None:
        """The other scheduler takes ``gone`` for dead (it may only be stalled) and adopts its tasks."""
        adopter = next(s for s in SCHEDULERS if s != gone)
        for task, row in sorted(self.db.items()):
            if row.queued_by_job_id == gone and row.state in ("queued", "running"):
                self._adopt(
                    task,
                    gone,
                    adopter,
                    cluster_list=cluster_list,
                    failing=failing,
                    relabel_fails=relabel_fails,
                )

    @precondition(lambda self: self.open_adoption is None)
    @rule(gone=st.sampled_from(SCHEDULERS))
    def adoption_begins(self, gone: str) -> None:
        """The other scheduler's adoption transaction locks ``gone``'s rows and lists every pod."""
        adopter = next(s for s in SCHEDULERS if s != gone)
        rows = [
            t
            for t, r in sorted(self.db.items())
            if r.queued_by_job_id == gone and r.state in ("queued", "running")
        ]
        self.open_adoption = (gone, adopter, rows, set(self.pods))

    @precondition(lambda self: self.open_adoption is not None)
    @rule()
    def adoption_commits(self) -> None:
        """It matches what its list returned (pods created since are not in it) and commits."""
        assert self.open_adoption is not None
        gone, adopter, rows, listed = self.open_adoption
        self.open_adoption = None
        for task in rows:
            row = self.db[task]
            if row.queued_by_job_id == gone and row.state in ("queued", "running"):
                self._adopt_listed(
                    task, gone, adopter, listed, cluster_list=True, failing=None, relabel_fails=False
                )

    @rule(
        scheduler=st.sampled_from(SCHEDULERS),
        cluster_list=st.booleans(),
        failing=st.sampled_from([None, *NAMESPACES]),
        relabel_fails=st.booleans(),
    )
    def retry_unresolved(
        self, scheduler: str, cluster_list: bool, failing: str | None, relabel_fails: bool
    ) -> None:
        """An unresolved adoption is retried: the row is read again first, and dropped if no longer held."""
        for task, (gone, launch) in sorted(self.unresolved[scheduler].items()):
            row = self.db[task]
            if not (
                row.queued_by_job_id == scheduler
                and row.external_executor_id == launch
                and row.state in ("queued", "running")
            ):
                del self.unresolved[scheduler][task]
                continue
            self._adopt(
                task,
                gone,
                scheduler,
                cluster_list=cluster_list,
                failing=failing,
                relabel_fails=relabel_fails,
                retry=True,
            )

    # ---- invariants -------------------------------------------------------------------------

    @invariant()
    def never_two_current_pods_for_one_try(self) -> None:
        counted: dict[tuple[str, int], list[tuple[str, tuple[str, str]]]] = {}
        for ref, (task, try_number, _, label) in self.pods.items():
            # A scheduler's watcher sees the pods of its label only: a create of its own still in flight
            # names a pod that another scheduler's create made (the 409 has not come back yet), which it
            # counts only once it has taken the pod over.
            for s in SCHEDULERS:
                if label == s and self.records[s].is_current((task, try_number), ref):
                    counted.setdefault((task, try_number), []).append((s, ref))
        assert all(len(refs) <= 1 for refs in counted.values()), counted

    @invariant()
    def never_two_live_pods_of_one_launch(self) -> None:
        by_launch: dict[tuple[str, int, str], list[tuple[str, str]]] = {}
        for ref, (task, try_number, launch, _) in self.pods.items():
            by_launch.setdefault((task, try_number, launch), []).append(ref)
        # A launch's first pod and its relaunches are excepted: a relaunch whose failed pod is gone meets an
        # adopter that builds the first pod's name (the remaining window that docs/executor.md states).
        twice = {
            k: refs
            for k, refs in by_launch.items()
            if len(refs) > 1 and not any(self.index.get(r) for r in refs)
        }
        assert not twice, twice


TestHandOverModel = HandOverMachine.TestCase
TestHandOverModel.settings = settings(max_examples=400, stateful_step_count=25, deadline=None)


class _Pick:
    """``data`` for a rule that draws: the values given, in order."""

    def __init__(self, *values: int) -> None:
        self.values = list(values)

    def draw(self, strategy: object) -> int:
        return self.values.pop(0)


def test_a_create_that_lands_after_the_adopters_list_meets_the_adopters_create_under_one_name() -> None:
    """The interleaving of the issue, step by step (the random search above reaches it rarely): A's check
    passes before B's adoption begins, B's list returns without A's pod, B launches the task and its create
    and A's both land. One pod, B's; with a name per build instead of per launch there were two."""
    machine = HandOverMachine()
    machine.schedule("a", "A", "default")
    machine.send("A", "a")
    machine.adoption_begins("A")
    machine.adoption_commits()
    machine.send("B", "a")
    machine.land(_Pick(0))
    machine.land(_Pick(0))
    machine.never_two_live_pods_of_one_launch()
    machine.never_two_current_pods_for_one_try()
    ((_, _, _, label),) = machine.pods.values()
    assert label == "B" and ("a", 1) in machine.records["B"] and ("a", 1) not in machine.records["A"]


def test_a_check_while_the_adoption_is_open_creates_nothing_and_drops_the_launch_after_its_commit() -> None:
    machine = HandOverMachine()
    machine.schedule("a", "A", "default")
    machine.adoption_begins("A")
    machine.send("A", "a")  # the row is locked: skipped, neither sent nor dropped
    assert not machine.sent and ("a", 1) in machine.records["A"]
    machine.adoption_commits()
    machine.send("A", "a")  # the committed row names B: dropped
    assert ("a", 1) not in machine.records["A"] and not machine.sent
