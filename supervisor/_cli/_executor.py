"""Where ``supervisor run`` runs its lanes: here, or on a Ray cluster (``--ray``).

The runner talks to an executor only through :class:`JobExecutor`: it opens one set of
lanes, submits (setting ``trusted`` per job) and cancels jobs on them, waits for them to go
idle, and asks for the processes left behind. :class:`LocalExecutor` is the local job lanes with
:class:`~supervisor._core._jobs.ProcessJobRunner`; the Ray executor
(:mod:`supervisor._ray`) is imported only when a cluster is given.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from lanes import JobRequest
    from protocol import JSONObject

    from .._ray._executor import RayCluster

__all__ = ("JobExecutor", "LocalExecutor", "RunLanes", "open_executor")


class RunLanes(Protocol):
    """What the runner uses of :class:`lanes.Lanes` (same meaning, same events)."""

    #: Whether the next jobs are submitted to a trusted workspace (settable).
    trusted: bool

    def start_job(self, request: JobRequest) -> str:
        """Queue a job on its lane; return its id."""

    def cancel_job(self, job_id: str) -> bool:
        """Cancel a queued or running job; False when there is nothing to cancel."""

    async def wait_idle(self) -> None:
        """Wait until every job submitted so far has sent its ``job.finished``."""


class JobExecutor(Protocol):
    """Runs the lanes of one ``supervisor run``."""

    def node_of(self, root: str) -> str | None:
        """The node the lane of ``root`` runs on, or None for this machine."""

    def open_lanes(
        self, *, on_event: Callable[[str, JSONObject], None]
    ) -> AbstractAsyncContextManager[RunLanes]:
        """Lanes for the block; leaving it cancels every job and waits for its end."""

    async def leftover_processes(self, settle_ms: int) -> list[tuple[int, str]]:
        """``(pid, command line)`` of live processes the lanes started, after a settle time
        of at most ``settle_ms`` milliseconds."""


class LocalExecutor:
    """The lanes on this machine: :func:`lanes.open_lanes` with a process runner.

    Args:
        max_output_bytes: Output forwarded per job and stream (the lanes' cap), in bytes.
        max_running: The most jobs that run at once over every lane, or None.
    """

    def __init__(self, *, max_output_bytes: int, max_running: int | None = None) -> None:
        from .._core._jobs import ProcessJobRunner

        self._runner = ProcessJobRunner()
        self._max_output_bytes = max_output_bytes
        self._max_running = max_running

    def node_of(self, root: str) -> str | None:
        return None

    def open_lanes(
        self, *, on_event: Callable[[str, JSONObject], None]
    ) -> AbstractAsyncContextManager[RunLanes]:
        from lanes import open_lanes

        return open_lanes(
            self._runner,
            on_event=on_event,
            max_output_bytes=self._max_output_bytes,
            max_running=self._max_running,
        )

    async def leftover_processes(self, settle_ms: int) -> list[tuple[int, str]]:
        from ._run import _leftover_processes

        return await _leftover_processes(settle_ms)


@asynccontextmanager
async def open_executor(
    cluster: RayCluster | None, *, max_output_bytes: int, max_running: int | None = None
) -> AsyncIterator[JobExecutor]:
    """The local executor, or (``cluster`` given) the Ray executor with its node agents.

    ``max_output_bytes`` is the lanes' output cap per job and stream, in bytes (applied on
    each node); ``max_running`` the most jobs at once (local lanes only: the caller refuses
    it with a cluster).

    **Cancellation:** the Ray executor stops its agents shielded (bounded) on the way out.
    """
    if cluster is None:
        yield LocalExecutor(max_output_bytes=max_output_bytes, max_running=max_running)
        return
    from .._ray._executor import open_ray_executor

    async with open_ray_executor(cluster, max_output_bytes=max_output_bytes) as executor:
        yield executor
