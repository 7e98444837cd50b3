"""The node agent: job lanes on one Ray node, driven from the runner.

Contract (README "Job lanes on a Ray cluster"): one agent per node the run uses, a Ray actor
pinned to that node. It runs the lanes ``supervisor run`` runs locally
(:func:`lanes.open_lanes` with :class:`~supervisor._core._jobs.ProcessJobRunner`) on a Trio
thread of its own, so the lanes' policy, deadlines, cancel, supersede, output caps and tree
ends are the local ones, on the node (each job is submitted trusted or not, as
``supervisor run`` does on its one set of lanes). The runner sends it ordered command
batches (:meth:`NodeAgent.commands`) and pulls its job events with
:meth:`NodeAgent.events`: every event has a sequence number, the agent keeps what was not
acknowledged and the runner skips what it already has, so events arrive in order and
exactly once even when a pull is repeated.

Why the agent ends nothing itself on its death: its lanes started every tree, so the
watchdog of the agent's process (``_process._watchdog``) ends them when that process dies,
however it dies; the runner then reports the agent's unfinished jobs ``failed``.

This module imports no Ray: the runner wraps :class:`NodeAgent` with ``ray.remote`` (so it
can be tested, and type-checked, without Ray).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Final

import trio

if TYPE_CHECKING:
    from lanes import Lanes
    from protocol import JSONObject


__all__ = ("MAX_EVENTS_PER_PULL", "Command", "Event", "NodeAgent")

#: The most events one :meth:`NodeAgent.events` returns (a bound on one reply's size:
#: ``job.output`` events carry at most 64 KiB each).
MAX_EVENTS_PER_PULL: Final = 256

#: ``("start", trusted, job_id, JobRequest fields)``, ``("cancel", job_id)``, ``("close",)``:
#: what :meth:`NodeAgent.commands` applies, in order.
Command = tuple[Any, ...]
#: ``(seq, method, params)``: one lanes event, ``jobId`` the runner's id.
Event = tuple[int, str, "JSONObject"]


class NodeAgent:
    """Hosts the lanes of one node. Built by Ray on that node (``ray.remote(NodeAgent)``).

    Thread-safe: Ray calls its methods from several threads (a pull waits while commands
    arrive). Every method returns plain data that Ray can carry. No method may be
    ``async def``: Ray would run the class as an asyncio actor, one call at a time.

    Args:
        name: How the runner names this node in reports (``host/node-id``).
        max_output_bytes: The lanes' output cap per job and stream, in bytes.
        own_process: The agent is the process's only user (a Ray worker made for it), not
            the runner: its watchdog is started now and detached (see below).

    Raises:
        RuntimeError: Its lanes could not open (the cause chained).
        OSError: Its watchdog could not start.
    """

    def __init__(self, name: str, max_output_bytes: int, *, own_process: bool = False) -> None:
        if own_process:
            # When the run's driver dies, Ray ends its workers, and a worker that exits first
            # SIGKILLs its direct children (``kill_child_processes_on_worker_exit``): the
            # watchdog must be none of them, or nobody ends the trees' orphaned grandchildren.
            # Started before any tree opens, while this process is no subreaper yet; it starts
            # while the lanes below open and the first jobs run (they are told to it through
            # its pipe, read once it runs).
            from .._process._watchdog import detach_watchdog

            detach_watchdog(wait=False)
        self.name = name
        self._max_output_bytes = max_output_bytes
        self._lock = threading.Condition()
        self._log: list[Event] = []
        self._seq = 0
        self._token: trio.lowlevel.TrioToken | None = None
        self._lanes_open: Lanes | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        # The runner's job ids: core job id -> runner id, and the reverse.
        self._to_runner: dict[str, str] = {}
        self._to_core: dict[str, str] = {}
        self._submitting: str | None = None
        self._submitted_finished = False
        self._thread = threading.Thread(target=self._run, name="supervisor-node-agent", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise RuntimeError(f"the node agent on {name} could not start") from self._error
        if own_process:
            from .._process._watchdog import ensure_watchdog

            ensure_watchdog()  # one that failed to start is replaced now, not at a job

    # -- what the runner calls -------------------------------------------------------------

    def describe(self) -> JSONObject:
        """``{name, host, pid}``: where this agent runs (the pid owns the node's trees)."""
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
        """``(pid, command line)`` of live processes this agent's lanes started.

        Waits up to ``settle_s`` for killed processes to be reaped (the runner's sweep,
        done on this node).
        """
        from .._process._marker import marked_processes

        deadline = time.monotonic() + settle_s
        while True:
            found = marked_processes()
            if not found or time.monotonic() >= deadline:
                return found
            time.sleep(0.05)

    def shutdown(self) -> None:
        """Close the lanes (every job ends ``cancelled``, every tree ends), stop the thread."""
        token = self._token
        if token is not None and self._stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._stop.set, trio_token=token)
        self._thread.join()

    # -- the Trio side ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            trio.run(_serve, self)
        except BaseException as exc:
            self._error = exc
        finally:
            self._token = None
            self._ready.set()
            with self._lock:
                self._lock.notify_all()

    def _lanes(self) -> Lanes:
        assert self._lanes_open is not None
        return self._lanes_open

    def _apply(self, batch: list[Command]) -> list[bool]:
        from lanes import JobRequest

        results: list[bool] = []
        lanes = self._lanes()
        for command in batch:
            kind = command[0]
            if kind == "start":
                job_id: str = command[2]
                request = JobRequest(**command[3])
                # A job can finish inside start_job (denied): its events name it meanwhile.
                self._submitting = job_id
                self._submitted_finished = False
                try:
                    lanes.trusted = bool(command[1])
                    core_id = lanes.start_job(request)
                finally:
                    self._submitting = None
                if not self._submitted_finished:
                    self._to_runner[core_id] = job_id
                    self._to_core[job_id] = core_id
                results.append(True)
            elif kind == "cancel":
                core_id_or_none = self._to_core.get(command[1])
                results.append(core_id_or_none is not None and lanes.cancel_job(core_id_or_none))
            else:
                for core_id in list(self._to_core.values()):
                    lanes.cancel_job(core_id)
                results.append(True)
        return results

    def _record(self, method: str, params: JSONObject) -> None:
        core_id = str(params.get("jobId"))
        runner_id = self._to_runner.get(core_id)
        if runner_id is None:
            # The job being submitted (start_job maps it once it returns).
            assert self._submitting is not None, (method, params)
            runner_id = self._submitting
            if method == "job.finished":
                self._submitted_finished = True
        elif method == "job.finished":
            del self._to_runner[core_id]
            self._to_core.pop(runner_id, None)
        with self._lock:
            self._seq += 1
            self._log.append((self._seq, method, {**params, "jobId": runner_id}))
            self._lock.notify_all()


async def _serve(agent: NodeAgent) -> None:
    """The agent's Trio side: its lanes, until :meth:`NodeAgent.shutdown`.

    The lanes alone, as a local ``supervisor run`` has them, not an embedded Core: a Core
    would import (and open) its language-server, debug, terminal and plugin services, which
    an agent never uses, and that was most of an agent's start. Each event goes to the
    agent's lossless log (:meth:`NodeAgent._record`): the runner drains it continuously and
    the lanes cap each job's output, so it is bounded by lanes x output cap.

    A function, not a method: Ray runs an actor class with any ``async def`` method as an
    asyncio actor, whose plain methods then run one at a time on its event loop, so every
    call would wait behind a pending :meth:`NodeAgent.events` pull (a second's delay per
    command, per sweep, per stop). :class:`NodeAgent` must stay a threaded actor.
    """
    from lanes import open_lanes

    from .._core._jobs import ProcessJobRunner

    agent._stop = trio.Event()
    async with open_lanes(
        ProcessJobRunner(), on_event=agent._record, max_output_bytes=agent._max_output_bytes
    ) as lanes:
        agent._lanes_open = lanes
        agent._token = trio.lowlevel.current_trio_token()
        agent._ready.set()
        await agent._stop.wait()
