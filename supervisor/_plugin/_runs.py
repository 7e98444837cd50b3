"""Run sessions: ``lithe/host/run/start`` processes on the supervisor's process trees.

the plugin contract "Run and debug sessions". A run is one process tree the host owns: it is
started with the checked :class:`~supervisor._plugin._run_state.RunStart`, its temporary files
are written to a directory of its own before the start and removed when it ends, its output
goes to the host as events, and its end is told to the backend that started it with exactly
one ``lithe/host/run/didExit``.

Runs belong to the Core, not to the backend session: they run in the Core's nursery, so a
backend that exits (or is stopped, or restarts) leaves its runs running; the run then ends
the way a run without a backend ends, and a later backend process, which did not see it
begin, is not told. Only the Core closing ends every run.

Ours where the reference names no number: at most :data:`MAX_RUNS` live runs per plugin
(``plugin.host.limitExceeded``), output events of at most :data:`OUTPUT_CHUNK_BYTES` each.

A run ends by the stop ladder (:func:`~supervisor._process._ladder.stop_ladder`, no polite
step: SIGTERM, grace, SIGKILL, sweep) on a stop, the Core closing and after its own exit (what
it left running), and its output is read through it: what the program writes from its SIGTERM
handler is a ``runOutput`` event before ``runExited``.
"""

from __future__ import annotations

import codecs
import itertools
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import trio

from protocol import CoreError

from .._process._ladder import StopBounds, stop_ladder
from .._process._tree import DEVNULL, PIPE, STDOUT, ProcessTree, open_process_tree
from .._session._events import EventBudget, EventQueue
from .._session._registry import SessionRegistry
from ._run_state import expand_temporary_files
from ._state import HostRefusal

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from protocol import JSONObject

    from ._run_state import RunStart

__all__ = ("MAX_ENDED_RUNS", "MAX_RUNS", "OUTPUT_CHUNK_BYTES", "Run", "RunTable")

#: Live runs one plugin may have at once.
MAX_RUNS: Final = 32
#: Ended runs kept for the listing and their last events; the oldest go first.
MAX_ENDED_RUNS: Final = 64
#: Output is read and reported in chunks of at most this many bytes.
OUTPUT_CHUNK_BYTES: Final = 16 * 1024
#: A run's stop ladder: no polite step, the shared bounds.
_STOP_BOUNDS: Final = StopBounds(polite_ms=0)


@dataclass(eq=False)
class Run:
    """One run session.

    Attributes:
        run_id: The opaque ``runID`` the backend got.
        plugin_id: The plugin whose backend started it.
        session_id: The backend session that started it.
        generation: The backend process (session generation) that started it; only that
            process is told of its end.
        label: Its title.
        rerun: ``{function, data}`` when the run can be run again, else None.
        pid: The main process id once started.
        exit: ``{exitCode}`` or ``{signal}`` once ended.
        events: Its host-facing events (``runStarted {label, pid}``, ``runOutput {text}``,
            ``runExited {exitCode | signal}``), drained by ``run.waitEvents``.
    """

    run_id: str
    plugin_id: str
    session_id: str
    generation: int
    label: str
    rerun: JSONObject | None
    events: EventQueue
    #: Who started it, for the ``exited`` callback (the table does not look inside).
    owner: object = None
    pid: int | None = None
    exit: JSONObject | None = None
    stop_requested: trio.Event = field(default_factory=trio.Event)
    ended: trio.Event = field(default_factory=trio.Event)

    def describe(self) -> JSONObject:
        """A run as listed: ``{runId, pluginId, sessionId, label, pid, state, exit?,
        rerun?: {function, data}}``."""
        listed: JSONObject = {
            "runId": self.run_id,
            "pluginId": self.plugin_id,
            "sessionId": self.session_id,
            "label": self.label,
            "pid": self.pid,
            "state": "ended" if self.ended.is_set() else "running",
        }
        if self.rerun is not None:
            # "Run again": the host invokes rerun.function with rerun.data as the params and
            # the current context (lsp.functionRequest); the backend answers with a new start.
            listed["rerun"] = dict(self.rerun)
        if self.exit is not None:
            listed["exit"] = dict(self.exit)
        return listed


def exit_params(returncode: int | None) -> JSONObject:
    """``run/didExit``'s exit part: ``{exitCode}``, or ``{signal}`` for a killed process.

    A main process that could not be reaped (reported unkillable) has neither.
    """
    if returncode is None:
        return {}
    if returncode < 0:
        return {"signal": -returncode}
    return {"exitCode": returncode}


class RunTable:
    """The Core's run sessions, by ``runID``.

    Args:
        nursery: Where runs live (the Core's, so they outlive the backend session).
        exited: ``await exited(run)`` once per run after it ended: tells the backend process
            that started it (when it still runs) with ``run/didExit``. Called shielded; it
            must not wait long.
        max_events: The bound of each run's event queue.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        exited: Callable[[Run], Awaitable[None]],
        max_events: int = 1024,
        event_budget: EventBudget | None = None,
    ) -> None:
        self._nursery = nursery
        self._exited = exited
        self._max_events = max_events
        self._event_budget = event_budget
        #: Every run by ``runID`` (``runId`` in Core commands), live and recently ended.
        self.runs: SessionRegistry[Run] = SessionRegistry("run", "run", "runId", _events_of)
        self._serial = itertools.count(1)

    def get(self, run_id: str) -> Run | None:
        """The run, live or ended (ended runs are kept for the listing)."""
        return self.runs.get(run_id)

    def live(self, plugin_id: str | None = None) -> list[Run]:
        """Runs not yet ended, of one plugin or of all."""
        return [
            run
            for run in self.runs.values()
            if not run.ended.is_set() and plugin_id in (None, run.plugin_id)
        ]

    def describe(self) -> list[JSONObject]:
        """Every run, oldest first."""
        return [run.describe() for run in self.runs.values()]

    async def start(
        self,
        plan: RunStart,
        *,
        plugin_id: str,
        session_id: str,
        generation: int,
        owner: object = None,
    ) -> Run:
        """Write the temporary files and start the run's process tree.

        Returns:
            The running :class:`Run`.

        Raises:
            HostRefusal: ``plugin.host.limitExceeded`` past :data:`MAX_RUNS` live runs of
                the plugin; ``plugin.host.failed`` with ``details`` of the Core error when
                the files cannot be written or the process cannot start (nothing is left).

        **Cancellation:** a cancelled caller starts nothing; once the spawn has begun, the run
        is started (the backend's cancel of run/start then sees it in the listing).
        """
        if len(self.live(plugin_id)) >= MAX_RUNS:
            raise HostRefusal(
                -32014,
                "plugin.host.limitExceeded",
                f"{plugin_id} already has {MAX_RUNS} runs",
            )
        # Opaque: a serial for order plus random bits, so an ID is never guessed or reused.
        run = Run(
            f"run-{next(self._serial)}-{secrets.token_hex(4)}",
            plugin_id,
            session_id,
            generation,
            plan.label,
            plan.rerun,
            EventQueue(self._max_events, budget=self._event_budget),
            owner,
        )
        await self._nursery.start(self._run, run, plan)
        return run

    def _forget_ended(self) -> None:
        ended = [run for run in self.runs.values() if run.ended.is_set()]
        for run in ended[: max(0, len(ended) - MAX_ENDED_RUNS + 1)]:
            self.forget(run)

    def forget(self, run: Run) -> None:
        """Drop an ended run from the listing (``run.destroy``)."""
        self.runs.remove(run.run_id)

    async def stop(self, run: Run) -> None:
        """Stop ``run`` and wait until it ended; returns at once for an ended run.

        **Cancellation:** the stop goes on (it is the run's own task that ends the tree);
        only the wait is cancelled.
        """
        run.stop_requested.set()
        await run.ended.wait()

    async def aclose(self) -> None:
        """End every live run (the Core closing); bounded by the trees' end bounds."""
        runs = self.live()
        for run in runs:
            run.stop_requested.set()
        with trio.CancelScope(shield=True):
            for run in runs:
                await run.ended.wait()

    async def _run(
        self,
        run: Run,
        plan: RunStart,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        directory = None
        try:
            paths: dict[str, str] = {}
            if plan.temporary_files:
                directory = await trio.to_thread.run_sync(_write_files, plan.temporary_files)
                paths = {name: os.path.join(directory, name) for name, _ in plan.temporary_files}
            argv = [plan.executable, *(expand_temporary_files(a, paths) for a in plan.arguments)]
            env: dict[str, str | None] = {
                k: expand_temporary_files(v, paths) for k, v in plan.environment.items()
            }
            tree = await open_process_tree(
                argv, cwd=plan.working_directory, env=env, stdin=DEVNULL, stdout=PIPE, stderr=STDOUT
            )
        except BaseException as exc:
            # Nothing is left behind, whatever ended the start (a cancelled caller too).
            if directory is not None:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(shutil.rmtree, directory, True)
            if not isinstance(exc, (CoreError, OSError)):
                raise
            details: JSONObject = (
                {"code": exc.code, **(exc.details or {})}
                if isinstance(exc, CoreError)
                else {"errno": exc.errno or 0}
            )
            raise HostRefusal(
                -32603, "plugin.host.failed", f"the run could not start: {exc}", details
            ) from None
        run.pid = tree.pid
        self._forget_ended()
        self.runs.add(run.run_id, run)
        _event(run, "runStarted", {"label": run.label, "pid": tree.pid})
        task_status.started()
        try:
            await self._supervise(run, tree)
        finally:
            with trio.CancelScope(shield=True):
                # Joins the ladder _supervise ran (or runs it, after a failure before).
                report = await stop_ladder(tree, _STOP_BOUNDS)
                if directory is not None:
                    await trio.to_thread.run_sync(shutil.rmtree, directory, True)
                run.exit = exit_params(report.returncode)
                # The backend is told before a stop returns, so a stop's answer never
                # overtakes the run's didExit.
                await self._exited(run)
                _event(run, "runExited", dict(run.exit))
                run.ended.set()

    async def _supervise(self, run: Run, tree: ProcessTree) -> None:
        """Until the main process exits or a stop is asked, then the stop ladder; output is
        pumped meanwhile and through the ladder (a stop, the Core closing, the exit)."""
        drained = trio.Event()
        pumped = [0]
        async with trio.open_nursery() as nursery:
            # Shielded: the pump reads on while a cancelled run's tree ends, and stops when
            # the ladder's drain is over.
            reading = trio.CancelScope(shield=True)

            async def pump() -> None:
                with reading:
                    await self._pump(run, tree, drained, pumped)

            nursery.start_soon(pump)
            try:
                with trio.CancelScope() as waiting:

                    async def stop_requested() -> None:
                        await run.stop_requested.wait()
                        waiting.cancel()

                    nursery.start_soon(stop_requested)
                    await tree.wait()
                    # The output written before the exit is still read, unless something the
                    # main process left behind keeps the pipe open: the ladder then ends it.
                    with trio.move_on_after(_STOP_BOUNDS.drain_ms / 1000):
                        await drained.wait()
            finally:
                await stop_ladder(
                    tree, _STOP_BOUNDS, drained=drained.wait, progress=lambda: pumped[0]
                )
                reading.cancel()
                nursery.cancel_scope.cancel()

    async def _pump(
        self, run: Run, tree: ProcessTree, drained: trio.Event, pumped: list[int]
    ) -> None:
        stream = tree.stdout
        if stream is None:
            drained.set()
            return
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        while True:
            try:
                chunk = await stream.receive_some(OUTPUT_CHUNK_BYTES)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                chunk = b""
            pumped[0] += len(chunk)
            text = decoder.decode(chunk, final=not chunk)
            if text:
                _event(run, "runOutput", {"text": text})
            if not chunk:
                drained.set()
                return


def _events_of(run: Run) -> EventQueue:
    return run.events


def _event(run: Run, name: str, params: JSONObject) -> None:
    run.events.put(name, {"runId": run.run_id, **params})


def _write_files(files: tuple[tuple[str, bytes], ...]) -> str:
    """Make a private directory and write the files into it; returns its path."""
    directory = tempfile.mkdtemp(prefix="supervisor-run-")
    try:
        for name, data in files:
            with open(os.path.join(directory, name), "wb") as handle:
                handle.write(data)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return directory
