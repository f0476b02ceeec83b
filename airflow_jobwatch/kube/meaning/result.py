"""A finished Job's result, read one way: by the trigger for its event and by the operator on resume.

A Job's result is what its task reports once the wait is over: how it ended (``outcome``, ``reason``,
``message``), each pod's classified phase, exit code and reason, the pods the cluster disrupted, and,
with ``do_xcom_push``, the base container's termination message of every succeeded pod (the XCom
value, as JSON text). :class:`JobResult` holds all of it; :meth:`JobResult.to_payload` gives the trigger
event's keys, :meth:`JobResult.xcom_value` the value the task returns.

Rules, each in one place:

* **Which pods carry a result.** A pod's termination message counts when :func:`classify_pod` (the
  project's one reading of a pod's state) classifies the pod as succeeded, whatever shape it came in
  (API JSON from the watch, or a client model from a LIST). A pod whose base container has exited 0
  while the pod is not yet classified succeeded (another container still runs, or the kubelet has not
  written the phase) carries none: its result is not final.
* **The freshest pods win, never fewer results.** Pods read after the end are newer than the event's
  copy; when they have fewer results (pods deleted by a TTL, a user or an earlier cleanup), the event's
  copy is kept.
* **Durable before cleanup.** Deleting the pods deletes the result they carry, so whoever deletes them
  first writes the result onto the Job (:data:`RESULT_ANNOTATION`, see :meth:`JobResult.to_annotation`).
  A second run of a wait (two triggerers, a restart before the event was saved) then reports what the
  first reported. A result larger than :data:`RESULT_ANNOTATION_LIMIT_BYTES` is not written, and its
  pods are then kept.
* **Only the cluster decides the outcome.** Anyone allowed to ``patch`` a Job can write its
  annotations; only the Job controller writes its ``status`` (the ``jobs/status`` subresource). So a
  stored result counts only (:meth:`JobResult.with_stored`) when it is signed (an HMAC-SHA256 under a
  key the caller holds and a user who may only patch Jobs does not, bound to the Job's uid), when its
  outcome agrees with the Job's own terminal condition, and then only for what the pods no longer show:
  the pods' exit codes and reasons, their XCom results, and the message that names them. How the wait
  ended (outcome, reason) is always the cluster's. A result that does not count is reported to the
  caller with the reason, and the cluster's view stands.

Knows Kubernetes, not Airflow: the JSON parsing of an XCom value is plain ``json``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from airflow_jobwatch.kube.meaning.job_states import JOB_FAILED_CONDITIONS, JOB_SUCCEEDED_CONDITIONS
from airflow_jobwatch.kube.meaning.objects import to_dict
from airflow_jobwatch.kube.meaning.state_words import true_condition
from airflow_jobwatch.kube.meaning.states import classify_pod

__all__ = [
    "EMPTY_XCOM_RESULT",
    "RESULT_ANNOTATION",
    "RESULT_ANNOTATION_LIMIT_BYTES",
    "TERMINATION_MESSAGE_LIMIT_BYTES",
    "JobResult",
    "PodOutcome",
    "XComResultError",
    "log_xcom_results",
    "parse_xcom_results",
    "pod_outcomes",
    "read_stored_result",
    "stored_result",
    "termination_messages",
    "without_result_annotation",
]

#: What a succeeded pod's empty termination message reads as (the base container wrote no result);
#: upstream's XCom sidecar reports an empty ``return.json`` with the same marker.
EMPTY_XCOM_RESULT = "__airflow_xcom_result_empty__"

#: The kubelet keeps at most this many bytes of a container's termination message (Kubernetes'
#: ``MaxContainerTerminationMessageLength``, pkg/kubelet/container).
TERMINATION_MESSAGE_LIMIT_BYTES = 4096

#: At most this many characters of an XCom result are copied into the task log.
XCOM_LOG_MAX_CHARS = 4096

#: The Job annotation that holds a finished Job's result once the pods it was read from may be deleted.
RESULT_ANNOTATION = "jobwatch.io/result"

#: The largest result written onto a Job. The API server refuses a Job whose annotations total more
#: than 256 KiB (apimachinery ``TotalAnnotationSizeLimitB``); half of that is left to the user's own
#: annotations. 128 KiB holds about 30 pods' full 4 KiB XCom results. A larger result is not written,
#: and the pods it was read from are kept.
RESULT_ANNOTATION_LIMIT_BYTES = 128 * 1024

#: Version of the annotation's JSON; a reader uses no other. Version 1 (earlier releases) was not signed:
#: it is never used, and its Job's result is read from the cluster.
_FORMAT = 2

#: What the signature (the annotation's ``mac`` key) is computed over, before the Job's uid and the
#: annotation's other keys: a MAC made for another purpose under the same key never verifies here.
_MAC_CONTEXT = b"airflow-jobwatch result annotation v2\0"

#: A source of the keys a stored result's signature may be made with, the signing key first (several
#: during a key rotation); called only when a Job carries a result.
Keys = Sequence[bytes] | Callable[[], Sequence[bytes]]


class XComResultError(ValueError):
    """A pod's XCom result cannot be read as JSON; the message says which pod and why."""


class _Log(Protocol):
    def info(self, msg: Any, /, *args: Any, **kwargs: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class PodOutcome:
    """One pod of a finished Job, as the event's ``pods`` list has it.

    :param phase: the classified phase (``pending``, ``running``, ``succeeded``, ``failed``), not the raw
        ``status.phase``.
    """

    name: str | None
    phase: str
    exit_code: int | None
    reason: str | None

    @classmethod
    def of(cls, pod: Mapping[str, Any] | Any) -> PodOutcome:
        obj = to_dict(pod)
        state = classify_pod(obj)
        name = (obj.get("metadata") or {}).get("name")
        return cls(str(name) if name is not None else None, state.phase, state.exit_code, state.reason)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "phase": self.phase, "exit_code": self.exit_code, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PodOutcome:
        name, code, reason = data.get("name"), data.get("exit_code"), data.get("reason")
        return cls(
            str(name) if name is not None else None,
            str(data.get("phase") or ""),
            code if isinstance(code, int) and not isinstance(code, bool) else None,
            str(reason) if reason is not None else None,
        )


def _sorted(pods: Iterable[Mapping[str, Any] | Any]) -> list[dict[str, Any]]:
    """Oldest first (creation time, then name), as every list of a Job's pods is reported."""

    def key(pod: dict[str, Any]) -> tuple[str, str]:
        meta = pod.get("metadata") or {}
        return (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))

    return sorted((to_dict(p) for p in pods), key=key)


def pod_outcomes(pods: Iterable[Mapping[str, Any] | Any]) -> tuple[PodOutcome, ...]:
    """Each pod's outcome, oldest first; API JSON or client models."""
    return tuple(PodOutcome.of(p) for p in _sorted(pods))


def termination_messages(pods: Iterable[Mapping[str, Any] | Any], base_container: str) -> tuple[str, ...]:
    """The base container's termination message of every pod classified succeeded, oldest first
    (:data:`EMPTY_XCOM_RESULT` when it wrote none)."""
    results: list[str] = []
    for pod in _sorted(pods):
        if classify_pod(pod).phase != "succeeded":
            continue
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if isinstance(cs, Mapping) and cs.get("name") == base_container:
                terminated = (cs.get("state") or {}).get("terminated") or {}
                results.append(str(terminated.get("message") or "") or EMPTY_XCOM_RESULT)
    return tuple(results)


@dataclass(frozen=True, slots=True)
class JobResult:
    """How a Job's wait ended and what its pods left behind.

    :param outcome: ``success``, ``failed``, ``deleted``, ``timeout`` or ``error``.
    :param reason: a short word (``Complete``, ``BackoffLimitExceeded``, ...).
    :param message: the sentence for the task log (names the failing container's exit code).
    :param uid: the Job's uid, when known.
    :param pods: every pod of the Job, oldest first.
    :param xcom_result: with ``do_xcom_push``, one termination message per succeeded pod; else None.
    :param disruptions: the pods the cluster disrupted during the wait, oldest first.
    """

    outcome: str
    reason: str | None
    message: str
    uid: str | None = None
    pods: tuple[PodOutcome, ...] = ()
    xcom_result: tuple[str, ...] | None = None
    disruptions: tuple[Mapping[str, Any], ...] = field(default=())

    @classmethod
    def read(
        cls,
        *,
        outcome: str,
        reason: str | None,
        message: str,
        uid: str | None,
        pods: Iterable[Mapping[str, Any] | Any],
        base_container: str,
        do_xcom_push: bool,
        disruptions: Iterable[Mapping[str, Any]] = (),
        job: Mapping[str, Any] | Any | None = None,
        keys: Keys = (),
        rejected: Callable[[str], None] | None = None,
    ) -> JobResult:
        """The result of a decided wait, from ``pods``; completed by the Job's :data:`RESULT_ANNOTATION`
        where it counts (see :meth:`with_stored`: the pods it was read from may be gone).

        :param keys: the keys a stored result may be signed with (see :data:`Keys`).
        :param rejected: called with the reason when ``job`` carries a result that does not count.
        """
        listed = list(pods)
        result = cls(
            outcome=outcome,
            reason=reason,
            message=message,
            uid=uid,
            pods=pod_outcomes(listed),
            xcom_result=termination_messages(listed, base_container) if do_xcom_push else None,
            disruptions=tuple(dict(d) for d in disruptions),
        )
        return result if job is None else result.with_stored(job, keys, rejected=rejected)

    def with_stored(
        self, job: Mapping[str, Any] | Any, keys: Keys, *, rejected: Callable[[str], None] | None = None
    ) -> JobResult:
        """This result (read from the cluster) completed by the result stored on ``job``, where it counts:
        signed under one of ``keys`` for this Job's uid, and saying what the Job's own terminal condition
        says (``Complete`` / ``SuccessCriteriaMet``: success; ``Failed`` / ``FailureTarget``: failed), which
        this result must say too. It then adds only what the pods no longer show: when fewer pods are
        left than it lists, its pods (exit codes, reasons) and its message, which names them; when fewer
        XCom results are left, its XCom results. How the wait ended stays this result's. A result that
        does not count is passed to ``rejected`` with the reason, and this result is returned as it is.
        """
        obj = to_dict(job)
        if not isinstance(((obj.get("metadata") or {}).get("annotations") or {}).get(RESULT_ANNOTATION), str):
            return self
        stored, why = read_stored_result(obj, keys() if callable(keys) else keys)
        if stored is not None:
            why = self._disagreement(stored, obj)
        if stored is None or why is not None:
            if rejected is not None and why is not None:
                rejected(why)
            return self
        pods = self.pods
        message = self.message
        if len(self.pods) < len(stored.pods):  # pods were deleted: the stored copy names them all
            fresh = {p.name: p for p in self.pods}
            pods = tuple(fresh.pop(p.name, p) for p in stored.pods)
            pods += tuple(fresh.values())
            if stored.reason == self.reason:
                message = stored.message
        xcom_result = self.xcom_result
        if xcom_result is not None and len(xcom_result) < len(stored.xcom_result or ()):
            xcom_result = stored.xcom_result
        return replace(
            self,
            pods=pods,
            message=message,
            xcom_result=xcom_result,
            disruptions=self.disruptions or stored.disruptions,
        )

    def _disagreement(self, stored: JobResult, job: Mapping[str, Any]) -> str | None:
        """Why ``stored`` (signed, for this Job) does not count here, or None when it does."""
        status = job.get("status")
        ended = None
        if isinstance(status, Mapping):
            if true_condition(status, JOB_FAILED_CONDITIONS) is not None:
                ended = "failed"
            elif true_condition(status, JOB_SUCCEEDED_CONDITIONS) is not None:
                ended = "success"
        if ended is None:
            return "the Job's own status shows no end (no Complete or Failed condition)"
        if stored.outcome != ended:
            return f"it says {stored.outcome!r} while the Job's own status says {ended!r}"
        if self.outcome != ended:
            return f"the wait ended {self.outcome!r} while the Job's own status says {ended!r}"
        return None

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> JobResult:
        """The result a trigger event carries (ours, or upstream's, which has only some of the keys)."""
        raw = payload.get("xcom_result")
        outcome = payload.get("outcome") or payload.get("status") or ""
        return cls(
            outcome=str(outcome),
            reason=payload.get("reason"),
            message=str(payload.get("message") or ""),
            uid=payload.get("uid"),
            pods=tuple(PodOutcome.from_dict(p) for p in payload.get("pods") or [] if isinstance(p, Mapping)),
            xcom_result=tuple(str(m) for m in raw) if isinstance(raw, list) else None,
            disruptions=tuple(dict(d) for d in payload.get("disruptions") or [] if isinstance(d, Mapping)),
        )

    def with_fresh_pods(self, pods: Sequence[Mapping[str, Any] | Any], base_container: str) -> JobResult:
        """This result with the pods as read now, when they are at least as complete: the pods' outcomes
        when any pod is left, and their termination messages when there are at least as many."""
        if not pods:
            return self
        fresh = termination_messages(pods, base_container)
        keep_event_results = len(fresh) < len(self.xcom_result or ())
        return replace(
            self,
            pods=pod_outcomes(pods),
            xcom_result=self.xcom_result if keep_event_results else fresh,
        )

    @property
    def pod_names(self) -> list[str]:
        return [str(p.name) for p in self.pods]

    def to_payload(self) -> dict[str, Any]:
        """The trigger event's result keys (every key but ``name``, ``namespace``, ``job`` and
        ``pod_namespace``)."""
        return {
            "status": "success" if self.outcome == "success" else "error",
            "message": self.message,
            "pod_names": self.pod_names,
            "xcom_result": list(self.xcom_result) if self.xcom_result is not None else None,
            "outcome": self.outcome,
            "reason": self.reason,
            "uid": self.uid,
            "pods": [p.as_dict() for p in self.pods],
            "disruptions": [dict(d) for d in self.disruptions],
        }

    def xcom_value(self, *, xcom_path: str, unwrap_single: bool, log: _Log | None = None) -> Any:
        """The value the task returns: each succeeded pod's JSON, one value when ``unwrap_single`` and
        there is one pod, else a list; logs what it reads when given a ``log``.

        :raises XComResultError: a message that is not JSON, naming the pod and the 4 KiB limit when hit.
        """
        results = list(self.xcom_result or ())
        # each result came from a succeeded pod, in the same order; an event of another shape (upstream's)
        # lists every pod
        succeeded = [str(p.name) for p in self.pods if p.phase == "succeeded"]
        return parse_xcom_results(
            results,
            succeeded if len(succeeded) == len(results) else self.pod_names,
            xcom_path=xcom_path,
            unwrap_single=unwrap_single,
            log=log,
        )

    def to_annotation(self, key: bytes) -> str | None:
        """The result as :data:`RESULT_ANNOTATION`'s value, signed with ``key`` for this result's Job
        uid, or None when it is larger than :data:`RESULT_ANNOTATION_LIMIT_BYTES` (its pods must then be
        kept)."""
        body = json.loads(_canonical({"format": _FORMAT, **self.to_payload()}))
        body["mac"] = _mac(key, str(self.uid or ""), body)
        text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
        if len(text.encode("utf-8", "surrogatepass")) > RESULT_ANNOTATION_LIMIT_BYTES:
            return None
        return text


def _canonical(data: Mapping[str, Any]) -> str:
    """``data`` as JSON in one spelling (sorted keys, no spaces), what a signature is computed over: the
    reader parses the annotation and spells what it read the same way."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _mac(key: bytes, uid: str, body: Mapping[str, Any]) -> str:
    """The signature of ``body`` (without its ``mac``) for the Job ``uid``: HMAC-SHA256, base64url."""
    unsigned = {k: v for k, v in body.items() if k != "mac"}
    message = _MAC_CONTEXT + uid.encode() + b"\0" + _canonical(unsigned).encode("utf-8", "surrogatepass")
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


#: At most this many characters of a value read from an unverified annotation are quoted in a reason.
_QUOTED_MAX_CHARS = 80


def _quoted(value: Any) -> str:
    """``repr(value)``, cut: a reason quotes what anyone who may patch the Job wrote (up to the API
    server's 256 KiB of annotations), and the reason is written into the task log."""
    text = repr(value)
    return (
        text if len(text) <= _QUOTED_MAX_CHARS else f"{text[:_QUOTED_MAX_CHARS]}... ({len(text)} characters)"
    )


def stored_result(job: Mapping[str, Any] | Any, keys: Sequence[bytes]) -> JobResult | None:
    """The result signed onto ``job`` under one of ``keys``, or None (see :func:`read_stored_result`)."""
    return read_stored_result(job, keys)[0]


def read_stored_result(
    job: Mapping[str, Any] | Any, keys: Sequence[bytes]
) -> tuple[JobResult | None, str | None]:
    """The result written onto ``job`` (API JSON, a client model or its ``to_dict()``) and verified:
    ``(result, None)``; ``(None, why)`` when it carries one that is not used (not JSON, another format
    or an unsigned one, another Job's uid, a signature that none of ``keys`` verifies, or no key at all);
    ``(None, None)`` when it carries none. Whether it agrees with the Job's status is
    :meth:`JobResult.with_stored`'s check."""
    obj = to_dict(job)
    meta = obj.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(RESULT_ANNOTATION)
    if not isinstance(text, str):
        return None, None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None, "it is not JSON"
    if not isinstance(data, dict):
        return None, "it is not a JSON object"
    if data.get("format") != _FORMAT:
        return (
            None,
            f"it is not in the signed format this release writes (format {_quoted(data.get('format'))})",
        )
    uid = meta.get("uid")
    if not uid or data.get("uid") != uid:
        # copied onto another Job (a manifest re-applied), or written by hand: not this Job's result
        return None, f"it names another Job (uid {_quoted(data.get('uid'))})"
    mac = data.get("mac")
    if not isinstance(mac, str):
        return None, "it carries no signature"
    if not keys:
        return None, "there is no key here to check its signature with"
    # Compared as bytes: hmac.compare_digest raises TypeError on a str with a non-ASCII character, and
    # anyone who may patch the Job writes this one; a signature we made is ASCII (base64url).
    given = mac.encode("utf-8", "surrogatepass")
    if not any(hmac.compare_digest(given, _mac(key, str(uid), data).encode()) for key in keys):
        return None, (
            "its signature does not verify: it was not written by this deployment's Airflow (or was "
            "changed since), or its key has since been retired"
        )
    return JobResult.from_payload(data), None


def without_result_annotation(job: dict[str, Any] | None) -> dict[str, Any] | None:
    """``job`` (API JSON or ``to_dict()`` shape) without :data:`RESULT_ANNOTATION`, as a copy when it
    had one: the event's and the ``job`` XCom's Job is the one the first run saw, before the result
    was written onto it."""
    if not job:
        return job
    meta = job.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict) or RESULT_ANNOTATION not in annotations:
        return job
    assert isinstance(meta, dict)
    rest = {k: v for k, v in annotations.items() if k != RESULT_ANNOTATION}
    stripped = {k: v for k, v in meta.items() if k != "annotations"}
    if rest:  # the server leaves an empty map out
        stripped["annotations"] = rest
    return {**job, "metadata": stripped}


def _log_xcom_result(text: str, log: _Log) -> None:
    """The task-log line of one pod's XCom result, as the worker writes it; a large result is not
    copied whole into the task log."""
    shown = (
        text
        if len(text) <= XCOM_LOG_MAX_CHARS
        else f"{text[:XCOM_LOG_MAX_CHARS]}... ({len(text)} characters)"
    )
    log.info("xcom result: \n%s", shown)


def log_xcom_results(raw: Iterable[Any], log: _Log) -> None:
    """The task-log lines :func:`parse_xcom_results` writes for ``raw``, without parsing it again: the
    caller that already holds the parsed value does not hold it twice to write them."""
    for text in raw:
        if isinstance(text, str) and text.rstrip() == EMPTY_XCOM_RESULT:
            log.info("xcom result file is empty.")
        elif isinstance(text, str) and text.strip():
            _log_xcom_result(text, log)


def parse_xcom_results(
    raw: list[Any],
    pod_names: list[str],
    *,
    xcom_path: str,
    unwrap_single: bool,
    log: _Log | None = None,
) -> Any:
    """The return value from the pods' termination messages (one per succeeded pod), as the operator
    returns it; logs what it reads when given a ``log``.

    :raises XComResultError: a message that is not JSON, naming the pod and the 4 KiB limit when hit.
    """
    results: list[Any] = []
    for index, text in enumerate(raw):
        if isinstance(text, str) and text.rstrip() == EMPTY_XCOM_RESULT:
            if log is not None:
                log.info("xcom result file is empty.")
            results.append(None)
            continue
        if not isinstance(text, str) or not text.strip():
            results.append(None)
            continue
        if log is not None:
            _log_xcom_result(text, log)
        try:
            results.append(json.loads(text))
        except (ValueError, RecursionError):  # RecursionError: deeply nested arrays cut by the kubelet
            pod = pod_names[index] if index < len(pod_names) else "?"
            size = len(text.encode())
            if size >= TERMINATION_MESSAGE_LIMIT_BYTES:
                raise XComResultError(
                    f"The XCom result of pod {pod} does not fit: it travels as the base container's "
                    f"termination message ({xcom_path}), which the kubelet cuts to "
                    f"{TERMINATION_MESSAGE_LIMIT_BYTES} bytes, and what arrived ({size} bytes) is not "
                    f"JSON any more. Return less than {TERMINATION_MESSAGE_LIMIT_BYTES} bytes of JSON, or "
                    f"write the data elsewhere (object storage, a volume) and return its location. On a "
                    f"cluster with native sidecars (Kubernetes 1.29 or later) the result is read from the "
                    f"XCom sidecar's log instead, whatever its size."
                ) from None
            raise XComResultError(f"Pod {pod} wrote {xcom_path} but it is not JSON: {text[:200]!r}") from None
    if unwrap_single and len(results) == 1:
        return results[0]
    return results
