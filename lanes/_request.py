"""A job request, and the strict parser of the wire ``job.start`` payload.

Contract: ``job.start {kind, root, argv, cwd?, env?, timeoutMilliseconds?,
supersede?, report?}``. Parsing is all-or-nothing and starts nothing: the first problem found raises
``CoreError("invalid_request")`` whose message names the field and whose ``details`` is
``{"field": <wire name>}`` (bad input gets a clear, stable code and starts nothing).

Strategy: the wire parser checks JSON types and wire names; :class:`JobRequest` itself checks
the same rules for Python callers and raises ``TypeError``/``ValueError`` (docs/architecture.md:
misuse of the Python API never raises a protocol error). Both share the per-field checks of
:mod:`protocol` (``argv_item_problem``, ``env_item_problem``, ``path_problem``), which return a
message instead of raising, so each layer picks its own exception.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from protocol import (
    MAX_MILLISECONDS,
    CoreError,
    argv_item_problem,
    echo,
    env_item_problem,
    invalid_field,
    json_type,
    path_problem,
)

from ._policy import JobKind, normalize_root

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

__all__ = ("MAX_LANE_NAME_CHARS", "JobRequest", "parse_job_start")

#: The longest lane name (:attr:`JobRequest.lane`), in characters.
MAX_LANE_NAME_CHARS = 256

_KINDS = ", ".join(kind.value for kind in JobKind)
_KIND_VALUES = frozenset(kind.value for kind in JobKind)
_WIRE_FIELDS = frozenset(
    {"kind", "root", "argv", "cwd", "env", "timeoutMilliseconds", "supersede", "report"}
)


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What a job runs and on which lane; immutable once built.

    Args:
        kind: The job kind (a :class:`JobKind` or its wire string).
        root: The project root; stored normalized (see :func:`normalize_root`), it names the
            lane.
        argv: The program and its arguments (no shell); non-empty, strings without NUL or
            lone surrogates (they reach the OS).
        cwd: The working directory, relative to ``root`` unless absolute, or None for the
            root (the supervisor's runner resolves it so; ``job.start`` checks it exists).
        env: Variables to set (a string) or remove (None) on top of the inherited environment,
            or None for no change.
        timeout_ms: The job's deadline in milliseconds, counted from the moment the job starts
            running (time spent waiting in the lane does not count), or None for no deadline.
        supersede: Cancel the lane's running job (it ends ``superseded``).
        report: Give the job a report channel (``job.progress`` / ``job.record``; the
            supervisor's runner opens it on the descriptor ``SUPERVISOR_REPORT_FD`` names).
        lane: The name of the lane the job runs on, or None for its project's own lane
            (the IDE's one lane per root). Jobs of one name share a lane whatever their
            root: one runs at a time, and lanes run side by side (a Python-API field: the
            wire ``job.start`` has no ``lane`` yet). At most :data:`MAX_LANE_NAME_CHARS`
            printable characters.

    Raises:
        TypeError: A field has the wrong type.
        ValueError: A field has a bad value (empty argv, NUL or a lone surrogate, unknown
            kind, a timeout <= 0 or above :data:`protocol.MAX_MILLISECONDS`).
    """

    kind: JobKind
    root: str
    argv: tuple[str, ...]
    cwd: str | None = None
    env: Mapping[str, str | None] | None = None
    timeout_ms: int | None = None
    supersede: bool = False
    report: bool = False
    lane: str | None = None

    @property
    def lane_key(self) -> str:
        """What names the job's lane: its root (absolute), or ``lane:<name>`` for a named
        lane, so the two never meet."""
        return self.root if self.lane is None else f"lane:{self.lane}"

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", JobKind(self.kind))
        if not isinstance(self.root, str):
            raise TypeError("root must be a string")
        if (problem := path_problem(self.root, "root")) is not None:
            raise ValueError(problem)
        object.__setattr__(self, "root", normalize_root(self.root))
        if isinstance(self.argv, str | bytes):
            raise TypeError("argv must be a sequence of strings, not a single string")
        argv: tuple[object, ...] = tuple(self.argv)
        if not argv:
            raise ValueError("argv must not be empty")
        for index, item in enumerate(argv):
            if (problem := argv_item_problem(index, item, "argv")) is not None:
                raise (ValueError if isinstance(item, str) else TypeError)(problem)
        object.__setattr__(self, "argv", argv)
        if self.cwd is not None:
            if not isinstance(self.cwd, str):
                raise TypeError("cwd must be a string or None")
            if (problem := path_problem(self.cwd, "cwd")) is not None:
                raise ValueError(problem)
        if self.env is not None:
            env: object = self.env  # checked at run time too: Python callers are not typed
            if not isinstance(env, Mapping):
                raise TypeError("env must be a mapping of str to str or None")
            for key, value in self.env.items():
                if (problem := env_item_problem(key, value, "env")) is not None:
                    raise ValueError(problem)
            object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        if self.timeout_ms is not None:
            if isinstance(self.timeout_ms, bool) or not isinstance(self.timeout_ms, int):
                raise TypeError("timeout_ms must be an int (milliseconds) or None")
            if not 0 < self.timeout_ms <= MAX_MILLISECONDS:
                raise ValueError(f"timeout_ms must be positive and at most {MAX_MILLISECONDS}")
        if not isinstance(self.supersede, bool):
            raise TypeError("supersede must be a bool")
        if not isinstance(self.report, bool):
            raise TypeError("report must be a bool")
        if self.lane is not None:
            if not isinstance(self.lane, str):
                raise TypeError("lane must be a string or None")
            if (
                not self.lane.strip()
                or len(self.lane) > MAX_LANE_NAME_CHARS
                or not self.lane.isprintable()
            ):
                raise ValueError(
                    f"lane must be a name of 1 to {MAX_LANE_NAME_CHARS} printable characters"
                )


def _invalid(field: str, message: str) -> CoreError:
    return invalid_field(field, f"job.start: {message}")


def _optional(payload: JSONObject, field: str) -> JSONValue:
    # null and absence mean the same for optional fields: JSON clients often send null.
    return payload.get(field)


def parse_job_start(payload: JSONObject) -> JobRequest:
    """Validate a wire ``job.start`` payload strictly and build the request; start nothing.

    Args:
        payload: ``{kind, root, argv, cwd?, env?, timeoutMilliseconds?, supersede?,
            report?}``; an
            optional field given as null counts as absent.

    Returns:
        The request, with ``root`` normalized.

    Raises:
        CoreError: ``invalid_request`` (details ``{"field": name}``) for a payload that is not
            an object, an unknown field, a missing or wrong-typed field, an unknown kind, an
            empty root/cwd, an empty argv, a non-string argument or an argument with NUL or a
            lone surrogate, an env that is not an object of string to string-or-null (names
            and values for the OS), a timeout that is not an integer of milliseconds from 1
            to :data:`protocol.MAX_MILLISECONDS`, or a supersede or report that is not a
            boolean.
    """
    if not isinstance(payload, dict):
        raise _invalid("payload", f"the payload must be an object, not {json_type(payload)}")
    unknown = sorted(set(payload) - _WIRE_FIELDS)
    if unknown:
        known = ", ".join(sorted(_WIRE_FIELDS))
        raise _invalid(unknown[0], f"unknown field {echo(unknown[0])} (known: {known})")

    kind = payload.get("kind")
    if not isinstance(kind, str):
        raise _invalid("kind", f"kind is required and must be a string ({_KINDS})")
    if kind not in _KIND_VALUES:
        raise _invalid("kind", f"unknown kind {echo(kind)}; expected one of {_KINDS}")

    root = payload.get("root")
    if not isinstance(root, str):
        raise _invalid("root", "root is required and must be a string")
    if (problem := path_problem(root, "root")) is not None:
        raise _invalid("root", problem)
    if not os.path.isabs(root):
        # A client's relative path would silently resolve against the supervisor's own
        # working directory: refuse it, as lsp.startServer and terminal.create do.
        raise _invalid("root", "root must be an absolute path")

    argv = payload.get("argv")
    if not isinstance(argv, list):
        raise _invalid("argv", "argv is required and must be an array of strings")
    if not argv:
        raise _invalid("argv", "argv must not be empty")
    for index, item in enumerate(argv):
        if (problem := argv_item_problem(index, item, "argv")) is not None:
            raise _invalid("argv", problem)

    cwd = _optional(payload, "cwd")
    if cwd is not None:
        if not isinstance(cwd, str):
            raise _invalid("cwd", f"cwd must be a string, not {json_type(cwd)}")
        if (problem := path_problem(cwd, "cwd")) is not None:
            raise _invalid("cwd", problem)

    env = _optional(payload, "env")
    env_map: dict[str, str | None] | None = None
    if env is not None:
        if not isinstance(env, dict):
            raise _invalid("env", f"env must be an object, not {json_type(env)}")
        env_map = {}
        for key, value in env.items():
            if (problem := env_item_problem(key, value, "env")) is not None:
                raise _invalid("env", problem)
            assert value is None or isinstance(value, str)  # checked just above
            env_map[key] = value

    timeout = _optional(payload, "timeoutMilliseconds")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int):
            raise _invalid(
                "timeoutMilliseconds",
                f"timeoutMilliseconds must be an integer, not {json_type(timeout)}",
            )
        if timeout <= 0:
            raise _invalid("timeoutMilliseconds", "timeoutMilliseconds must be positive")
        if timeout > MAX_MILLISECONDS:
            raise _invalid(
                "timeoutMilliseconds", f"timeoutMilliseconds must be at most {MAX_MILLISECONDS}"
            )

    supersede = _optional(payload, "supersede")
    if supersede is not None and not isinstance(supersede, bool):
        raise _invalid("supersede", f"supersede must be a boolean, not {json_type(supersede)}")

    report = _optional(payload, "report")
    if report is not None and not isinstance(report, bool):
        raise _invalid("report", f"report must be a boolean, not {json_type(report)}")

    return JobRequest(
        kind=JobKind(kind),
        root=root,
        argv=tuple(item for item in argv if isinstance(item, str)),
        cwd=cwd,
        env=env_map,
        timeout_ms=timeout,
        supersede=bool(supersede),
        report=bool(report),
    )
