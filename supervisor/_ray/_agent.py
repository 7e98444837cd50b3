"""The node agent: job lanes of an embedded Core on one Ray node, driven from the runner.

Contract (README "Job lanes on a Ray cluster"): one agent per node the run uses, a Ray actor
pinned to that node. It runs two Cores (:func:`~supervisor._core._core.open_core`, trusted and
untrusted, as ``supervisor run`` opens two lanes) on a Trio thread of its own, so the lanes'
policy, deadlines, cancel, supersede, output caps and tree ends are the local ones, on the
node. The runner sends it ordered command batches (:meth:`NodeAgent.commands`) and pulls
its job events with :meth:`NodeAgent.events`: every event has a sequence number, the agent
keeps what was not acknowledged and the runner skips what it already has, so events
arrive in order and exactly once even when a pull is repeated.

Why the agent ends nothing itself on its death: its Cores started every tree, so the
watchdog of the agent's process (``_process._watchdog``) ends them when that process dies,
however it dies; the runner then reports the agent's unfinished jobs ``failed``.

This module imports no Ray: the runner wraps :class:`NodeAgent` with ``ray.remote`` (so it
can be tested, and type-checked, without Ray).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import trio

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from lanes import Lanes
    from protocol import JSONObject

    from .._core._core import Core
    from .._core._service import ServiceContext

__all__ = ("MAX_EVENTS_PER_PULL", "Command", "Event", "NodeAgent")

#: The most events one :meth:`NodeAgent.events` returns (a bound on one reply's size:
#: ``job.output`` events carry at most 64 KiB each).
MAX_EVENTS_PER_PULL: Final = 256

#: ``("start", trusted, job_id, JobRequest fields)``, ``("cancel", trusted, job_id)``,
#: ``("close", trusted)``: what :meth:`NodeAgent.commands` applies, in order.
Command = tuple[Any, ...]
#: ``(seq, trusted, method, params)``: one lanes event, ``jobId`` the runner's id.
Event = tuple[int, bool, str, "JSONObject"]


class NodeAgent:
    """Hosts the lanes of one node. Built by Ray on that node (``ray.remote(NodeAgent)``).

    Thread-safe: Ray calls its methods from several threads (a pull waits while commands
    arrive). Every method returns plain data that Ray can carry.

    Args:
        name: How the runner names this node in reports (``host/node-id``).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Condition()
        self._log: list[Event] = []
        self._seq = 0
        self._token: trio.lowlevel.TrioToken | None = None
        self._cores: dict[bool, Core] = {}
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        # The runner's job ids: core job id -> runner id, per trust; and the reverse.
        self._to_runner: dict[tuple[bool, str], str] = {}
        self._to_core: dict[tuple[bool, str], str] = {}
        self._submitting: str | None = None
        self._submitted_finished = False
        self._thread = threading.Thread(target=self._run, name="supervisor-node-agent", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise RuntimeError(f"the node agent on {name} could not start") from self._error

    # -- what the runner calls -------------------------------------------------------------

    def describe(self) -> JSONObject:
        """``{name, host, pid}``: where this agent runs (the pid owns the node's trees)."""
        import os

        return {"name": self.name, "host": socket.gethostname(), "pid": os.getpid()}

    def commands(self, batch: list[Command]) -> list[bool]:
        """Apply ``batch`` in order; one result per command (``cancel``: was it cancelled).

        Raises:
            RuntimeError: The agent is stopping (its lanes are closed).
        """
        token = self._token
        if token is None:
            raise RuntimeError(f"the node agent on {self.name} is stopping")
        results: list[bool] = trio.from_thread.run_sync(self._apply, batch, trio_token=token)
        return results

    def events(self, after: int, wait_s: float) -> list[Event]:
        """Events with a sequence number above ``after``, waiting up to ``wait_s`` for one.

        ``after`` acknowledges every event up to it: those are dropped (the log holds only
        what the runner has not confirmed, so a repeated pull loses nothing).
        """
        deadline = time.monotonic() + wait_s
        with self._lock:
            if self._log and self._log[0][0] <= after:
                self._log = [e for e in self._log if e[0] > after]
            while not self._log:
                left = deadline - time.monotonic()
                if left <= 0 or self._token is None:
                    return []
                self._lock.wait(left)
            return self._log[:MAX_EVENTS_PER_PULL]

    def leftovers(self, settle_s: float) -> list[tuple[int, str]]:
        """``(pid, command line)`` of live processes this agent's Cores started.

        Waits up to ``settle_s`` for killed processes to be reaped (the runner's sweep,
        done on this node).
        """
        from .._cli._run import _marked_processes

        deadline = time.monotonic() + settle_s
        while True:
            found = _marked_processes()
            if not found or time.monotonic() >= deadline:
                return found
            time.sleep(0.05)

    def shutdown(self) -> None:
        """Close both Cores (every job ends ``cancelled``, every tree ends), stop the thread."""
        token = self._token
        if token is not None and self._stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._stop.set, trio_token=token)
        self._thread.join()

    # -- the Trio side ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:
            self._error = exc
        finally:
            self._token = None
            self._ready.set()
            with self._lock:
                self._lock.notify_all()

    async def _main(self) -> None:
        from .._core._core import open_core

        self._stop = trio.Event()
        async with contextlib.AsyncExitStack() as stack:
            for trusted in (True, False):
                self._cores[trusted] = await stack.enter_async_context(
                    open_core(trusted=trusted, services=(self._job_service(trusted),))
                )
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()

    def _job_service(self, trusted: bool) -> Any:
        """A Core service factory: the lanes with this agent's lossless event log.

        The Core's own event queue drops the oldest events when full (a client that does
        not drain must not grow it); here the runner drains continuously and each job's
        output is capped by the lanes, so the log is bounded by lanes x output cap.
        """
        from lanes import open_lanes

        from .._core._builtins import JobService
        from .._core._jobs import ProcessJobRunner
        from .._session._events import EventQueue

        agent = self

        @asynccontextmanager
        async def open_node_job_service(context: ServiceContext) -> AsyncIterator[JobService]:
            def on_event(method: str, params: JSONObject) -> None:
                agent._record(trusted, method, params)

            async with open_lanes(
                ProcessJobRunner(), on_event=on_event, trusted=context.trusted
            ) as lanes:
                # Its queue stays empty: the runner reads the agent's log instead.
                yield JobService(lanes, EventQueue(1))

        return open_node_job_service

    def _lanes(self, trusted: bool) -> Lanes:
        return self._cores[trusted].lanes

    def _apply(self, batch: list[Command]) -> list[bool]:
        from lanes import JobRequest

        results: list[bool] = []
        for command in batch:
            kind, trusted = command[0], bool(command[1])
            if kind == "start":
                job_id: str = command[2]
                request = JobRequest(**command[3])
                # A job can finish inside start_job (denied): its events name it meanwhile.
                self._submitting = job_id
                self._submitted_finished = False
                try:
                    core_id = self._lanes(trusted).start_job(request)
                finally:
                    self._submitting = None
                if not self._submitted_finished:
                    self._to_runner[(trusted, core_id)] = job_id
                    self._to_core[(trusted, job_id)] = core_id
                results.append(True)
            elif kind == "cancel":
                core_id_or_none = self._to_core.get((trusted, command[2]))
                results.append(
                    core_id_or_none is not None and self._lanes(trusted).cancel_job(core_id_or_none)
                )
            else:
                for (t, _), core_id in list(self._to_core.items()):
                    if t == trusted:
                        self._lanes(trusted).cancel_job(core_id)
                results.append(True)
        return results

    def _record(self, trusted: bool, method: str, params: JSONObject) -> None:
        core_id = str(params.get("jobId"))
        runner_id = self._to_runner.get((trusted, core_id))
        if runner_id is None:
            # The job being submitted (start_job maps it once it returns).
            assert self._submitting is not None, (method, params)
            runner_id = self._submitting
            if method == "job.finished":
                self._submitted_finished = True
        elif method == "job.finished":
            del self._to_runner[(trusted, core_id)]
            self._to_core.pop((trusted, runner_id), None)
        with self._lock:
            self._seq += 1
            self._log.append((self._seq, trusted, method, {**params, "jobId": runner_id}))
            self._lock.notify_all()
