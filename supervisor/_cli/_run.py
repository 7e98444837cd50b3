"""``supervisor run FILE.toml [--json]``: run a lanes file headless and check its outcomes.

Contract: the file is validated completely before anything starts (a
bad file prints ``FILE:LINE: message`` on stderr and exits 2). The jobs are then submitted
to job lanes run by :class:`~supervisor._core._jobs.ProcessJobRunner`, each at its
``start_after_ms``; human progress goes to stderr (a live view per lane when stderr is a
terminal, one line per event otherwise) and, with ``--json``, one JSON object per event
goes to stdout. When every job has finished the run checks that no process it started is
left (a sweep by scope marker) and exits 0 when every job ended as its ``expect`` says, 1
otherwise with a summary naming each job that did not. SIGINT or SIGTERM cancels every job,
ends every process tree and exits 130 or 143. With ``ray`` (``--ray ADDRESS``) the lanes
run on the nodes of a Ray cluster (:mod:`supervisor._ray`); the reports name each lane's node.

Strategy: one Trio nursery owns a signal watcher, the submitter and (on a terminal) a
redraw ticker; the lanes sit inside it, so cancelling the nursery (a signal) closes the
lanes, whose ``aclose`` cancels every job and whose runner ends every tree shielded. Lanes
report events synchronously through ``on_event``; the reporter only formats them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TextIO

import trio

from ._runfile import (
    JOB_STATUSES,
    PLACEHOLDERS,
    RunFile,
    RunFileError,
    RunFileJob,
    load_run_file,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from lanes import JobRequest
    from protocol import JSONObject

    from .._ray._executor import RayCluster
    from ._executor import JobExecutor, RunLanes

__all__ = ("run_command",)

#: Exit codes (supervisor/_cli/_main.py): every job as expected / some not / bad file.
EXIT_OK: Final = 0
EXIT_UNEXPECTED: Final = 1
EXIT_BAD_FILE: Final = 2
#: How long the final sweep waits for killed processes to be reaped, in milliseconds.
LEFTOVER_SETTLE_MS: Final = 1000
#: How often the live view on a terminal redraws its clocks, in milliseconds.
REDRAW_INTERVAL_MS: Final = 250
#: Output lines in the human view are cut to this many characters.
MAX_LINE_CHARS: Final = 200


def run_command(path: str, *, json_output: bool, ray: str | None = None) -> int:
    """Run the lanes file at ``path`` and return the process exit code.

    Runs its own ``trio.run``; call it from synchronous code only.

    Args:
        path: the lanes file (format: :mod:`supervisor._cli._runfile`).
        json_output: print one JSON object per event on stdout (``{"event": "job.started",
            "name": ..., "lane": ..., **params}``, plus ``"node"`` with ``ray``), then one
            ``run.finished`` object.
        ray: run the lanes on the Ray cluster at this address (``auto``: the running
            cluster, else a local one started for the run); needs the ``[ray]`` extra.

    Returns:
        0 every job ended as expected, 1 some did not (or a process was left behind), 2 the
        file is bad or the cluster can not run it (nothing started), 130 / 143 interrupted
        by SIGINT / SIGTERM.
    """
    try:
        run_file = load_run_file(path)
    except RunFileError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_FILE
    with tempfile.TemporaryDirectory(prefix="supervisor-run-") as tmpdir:
        placeholders = {
            "{python}": sys.executable,
            "{here}": run_file.directory,
            "{tmpdir}": tmpdir,
        }
        try:
            requests = _job_requests(run_file, placeholders)
        except RunFileError as exc:
            print(str(exc), file=sys.stderr)
            return EXIT_BAD_FILE
        json_stream = sys.stdout if json_output else None
        with contextlib.ExitStack() as stack:
            cluster = None
            if ray is not None:
                # Ray prints its own notices (a worker that died, ...) on sys.stdout, which
                # carries only our JSON: they go to stderr, with the human progress.
                stack.enter_context(contextlib.redirect_stdout(sys.stderr))
                cluster = _connect_cluster(ray, run_file)
                if cluster is None:
                    return EXIT_BAD_FILE
                stack.callback(cluster.disconnect)
            reporter = _Reporter(
                run_file,
                human=sys.stderr,
                live=_is_tty(sys.stderr),
                json_stream=json_stream,
                node_of=None if cluster is None else cluster.node_name,
            )
            try:
                return trio.run(_run, run_file, requests, reporter, cluster)
            except KeyboardInterrupt:
                # SIGINT before the run's own handler was in place (while the node agents
                # start): what had started was stopped on the way out.
                print("supervisor run: interrupted while starting", file=sys.stderr)
                return 128 + signal.SIGINT


def _connect_cluster(address: str, run_file: RunFile) -> RayCluster | None:
    """Join the cluster and place the lanes, or say why not (on stderr) and return None."""
    try:
        from .._ray._executor import ClusterError, connect_cluster
    except ImportError as exc:
        print(
            f"supervisor run: --ray needs Ray: pip install 'trio-process-supervisor[ray]' ({exc})",
            file=sys.stderr,
        )
        return None
    lanes = [(job.project, job.node) for job in run_file.jobs]
    try:
        return connect_cluster(address, lanes)
    except ClusterError as exc:
        print(f"supervisor run: --ray {address}: {exc}", file=sys.stderr)
        return None


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def _job_requests(run_file: RunFile, placeholders: Mapping[str, str]) -> list[JobRequest]:
    """Every job's request, validated by the lanes' own ``job.start`` parser."""
    from lanes import parse_job_start
    from protocol import CoreError

    requests: list[JobRequest] = []
    for job in run_file.jobs:
        try:
            requests.append(parse_job_start(job.payload(placeholders)))
        except CoreError as exc:
            raise RunFileError(run_file.path, job.line, exc.message) from None
    return requests


async def _run(
    run_file: RunFile, requests: list[JobRequest], reporter: _Reporter, cluster: RayCluster | None
) -> int:
    from ._executor import open_executor

    # Outside the signal nursery: a remote executor still carries the lanes' last events
    # while a signal cancels the run.
    async with open_executor(cluster) as executor:
        return await _run_on(executor, run_file, requests, reporter)


async def _run_on(
    executor: JobExecutor,
    run_file: RunFile,
    requests: list[JobRequest],
    reporter: _Reporter,
) -> int:
    interrupted: list[int] = []
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def watch_signals() -> None:
                async for signum in signals:
                    if not interrupted:
                        interrupted.append(signum)
                        reporter.interrupted(signum)
                        nursery.cancel_scope.cancel()

            nursery.start_soon(watch_signals)
            if reporter.live:
                nursery.start_soon(reporter.tick)
            reporter.run_started(trio.current_time())
            async with contextlib.AsyncExitStack() as stack:
                lanes_by_trust: dict[bool, RunLanes] = {}
                for trusted in sorted({job.trusted for job in run_file.jobs}, reverse=True):
                    lanes_by_trust[trusted] = await stack.enter_async_context(
                        executor.open_lanes(
                            on_event=reporter.on_event_for(trusted),
                            trusted=trusted,
                        )
                    )
                await _submit_all(run_file, requests, lanes_by_trust, reporter)
            nursery.cancel_scope.cancel()
        leftovers = await executor.leftover_processes(LEFTOVER_SETTLE_MS)
    reporter.close_live()
    if interrupted:
        signum = interrupted[0]
        reporter.finished(exit_code=128 + signum, leftovers=leftovers, signum=signum)
        return 128 + signum
    ok = reporter.all_as_expected() and not leftovers
    exit_code = EXIT_OK if ok else EXIT_UNEXPECTED
    reporter.finished(exit_code=exit_code, leftovers=leftovers, signum=None)
    return exit_code


async def _submit_all(
    run_file: RunFile,
    requests: list[JobRequest],
    lanes_by_trust: Mapping[bool, RunLanes],
    reporter: _Reporter,
) -> None:
    """Submit every job at its time, cancel the ones that ask for it, wait for the end."""
    start = trio.current_time()
    # Jobs submitted at the same moment go in file order: lane order is submission order.
    order = sorted(range(len(run_file.jobs)), key=lambda i: run_file.jobs[i].start_after_ms)
    async with trio.open_nursery() as cancellers:
        for index in order:
            job = run_file.jobs[index]
            await trio.sleep_until(start + job.start_after_ms / 1000)
            lanes = lanes_by_trust[job.trusted]
            job_id = reporter.submit(job, lambda lanes=lanes, i=index: lanes.start_job(requests[i]))
            if job.cancel_after_ms is not None:
                cancellers.start_soon(_cancel_later, lanes, job_id, job, reporter)
        for lanes in lanes_by_trust.values():
            await lanes.wait_idle()
        # A cancel that comes after its job ended has nothing left to do.
        cancellers.cancel_scope.cancel()


async def _cancel_later(lanes: RunLanes, job_id: str, job: RunFileJob, reporter: _Reporter) -> None:
    assert job.cancel_after_ms is not None
    await trio.sleep(job.cancel_after_ms / 1000)
    if lanes.cancel_job(job_id):
        reporter.cancel_requested(job)


async def _leftover_processes(settle_ms: int = LEFTOVER_SETTLE_MS) -> list[tuple[int, str]]:
    """Live processes that still carry this run's scope marker, after a short settle time.

    The runner ends every tree it started; this sweep is the run's own evidence of it
    (a scope's end must leave no process behind), reported rather than trusted.
    """
    deadline = trio.current_time() + settle_ms / 1000
    while True:
        found = _marked_processes()
        if not found or trio.current_time() >= deadline:
            return found
        await trio.sleep(0.05)


def _marked_processes() -> list[tuple[int, str]]:
    """``(pid, command line)`` of live processes marked by this supervisor instance."""
    from .._process._marker import SCOPE_ENV, instance_id
    from .._process._procfs import HAVE_PROCFS, all_pids, read_env_var, read_stat

    if not HAVE_PROCFS:
        return []
    prefix = instance_id() + "/"
    found: list[tuple[int, str]] = []
    for pid in all_pids():
        value = read_env_var(pid, SCOPE_ENV)
        if value is None or not value.startswith(prefix):
            continue
        stat = read_stat(pid)
        if stat is None or stat.dead:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmdline = "?"
        found.append((pid, cmdline))
    return found


# --- Reporting ---------------------------------------------------------------------------


@dataclass(slots=True)
class _JobView:
    job: RunFileJob
    lane: str
    job_id: str | None = None
    started_at: float | None = None
    finished: JSONObject | None = None
    partial: dict[str, str] = field(default_factory=dict)
    last_line: str = ""


class _Reporter:
    """Formats lanes events for people (stderr) and, optionally, for programs (stdout)."""

    def __init__(
        self,
        run_file: RunFile,
        *,
        human: TextIO,
        live: bool,
        json_stream: TextIO | None,
        node_of: Callable[[str], str | None] | None = None,
    ) -> None:
        self.run_file = run_file
        self.human = human
        self.live = live
        self.json_stream = json_stream
        self.views = [
            _JobView(job, _lane_name(job.project, run_file.directory)) for job in run_file.jobs
        ]
        self._by_id: dict[tuple[bool, str], _JobView] = {}
        self._submitting: _JobView | None = None
        self._lanes = sorted({v.lane for v in self.views}, key=[v.lane for v in self.views].index)
        #: Lane -> the node it runs on (``--ray``); empty when it runs here.
        self._nodes: dict[str, str] = {}
        for view in self.views:
            node = None if node_of is None else node_of(view.job.project)
            if node is not None:
                self._nodes[view.lane] = node
        self._live_lines = 0
        self._started_at = 0.0

    # Event intake ---------------------------------------------------------------------

    def run_started(self, now: float) -> None:
        self._started_at = now
        lanes = ", ".join(self._lane_label(lane) for lane in self._lanes)
        self._say(
            f"running {_count(len(self.views), 'job')} from {self.run_file.path}"
            f" on {'lane' if len(self._lanes) == 1 else 'lanes'}: {lanes}"
        )

    def submit(self, job: RunFileJob, start: Any) -> str:
        """Call ``start()`` (``lanes.start_job``) with events for the new job attributed."""
        view = next(v for v in self.views if v.job is job)
        # A job can finish inside start_job (denied), before its id is known to us.
        self._submitting = view
        try:
            job_id: str = start()
        finally:
            self._submitting = None
        view.job_id = job_id
        self._by_id[(job.trusted, job_id)] = view
        self._redraw()
        return job_id

    def on_event_for(self, trusted: bool) -> Any:
        def on_event(method: str, params: JSONObject) -> None:
            job_id = str(params.get("jobId"))
            view = self._by_id.get((trusted, job_id))
            if view is None and self._submitting is not None:
                view = self._submitting
                self._by_id[(trusted, job_id)] = view
            self.event(method, params, view)

        return on_event

    def event(self, method: str, params: JSONObject, view: _JobView | None) -> None:
        name = view.job.name if view is not None else str(params.get("jobId"))
        lane = view.lane if view is not None else "?"
        if self.json_stream is not None:
            where = {"node": self._nodes[lane]} if lane in self._nodes else {}
            self._emit_json({"event": method, "name": name, "lane": lane, **where, **params})
        if view is None:
            return
        prefix = f"[{lane}] {name}"
        if method == "job.started":
            view.started_at = trio.current_time()
            argv = params.get("argv")
            shown = _show_argv(argv) if isinstance(argv, list) else ""
            self._say(f"{prefix} started: {shown}")
        elif method == "job.output":
            stream = str(params.get("stream", "stdout"))
            text = view.partial.get(stream, "") + str(params.get("text", ""))
            *lines, rest = text.split("\n")
            view.partial[stream] = rest
            for line in lines:
                self._output_line(view, prefix, stream, line)
        elif method == "job.finished":
            for stream, rest in sorted(view.partial.items()):
                if rest:
                    self._output_line(view, prefix, stream, rest)
            view.partial.clear()
            view.finished = params
            outcome = _describe_outcome(params, started=view.started_at is not None)
            hint = _placeholder_hint(view.job, params)
            self._say(f"{prefix} finished {outcome}{hint}{self._verdict(view)}")
        else:
            self._redraw()

    def cancel_requested(self, job: RunFileJob) -> None:
        view = next(v for v in self.views if v.job is job)
        self._say(f"[{view.lane}] {job.name} cancel requested")

    def interrupted(self, signum: int) -> None:
        name = signal.Signals(signum).name
        self._say(f"received {name}: cancelling every job and ending their processes")
        if self.json_stream is not None:
            self._emit_json({"event": "run.interrupted", "signal": name})

    # Outcome ----------------------------------------------------------------------------

    def all_as_expected(self) -> bool:
        return all(self._as_expected(v) for v in self.views)

    def _as_expected(self, view: _JobView) -> bool:
        if view.finished is None:
            return False
        return view.job.is_expected(
            str(view.finished.get("status")), view.finished.get("timedOut") is True
        )

    def finished(
        self, *, exit_code: int, leftovers: list[tuple[int, str]], signum: int | None
    ) -> None:
        elapsed_ms = round((trio.current_time() - self._started_at) * 1000)
        counts = dict.fromkeys(JOB_STATUSES, 0)
        for view in self.views:
            if view.finished is not None:
                status = str(view.finished.get("status"))
                counts[status] = counts.get(status, 0) + 1
        tally = ", ".join(f"{s} {n}" for s, n in counts.items() if n)
        unexpected = [v for v in self.views if not self._as_expected(v)]
        lines: list[str] = []
        if leftovers:
            lines.append(f"{len(leftovers)} process(es) left behind:")
            lines.extend(f"  pid {pid}: {cmd}" for pid, cmd in leftovers)
        else:
            lines.append("no process left behind (swept by scope marker)")
        if signum is not None:
            lines.append(
                f"interrupted by {signal.Signals(signum).name} after {elapsed_ms} ms "
                f"({tally or 'no job finished'}); exit {exit_code}"
            )
        elif not unexpected:
            every = "as expected" if len(self.views) == 1 else "all as expected"
            lines.append(
                f"{_count(len(self.views), 'job')}, {every} ({tally}) in {elapsed_ms} ms; exit 0"
            )
        else:
            lines.append(
                f"{len(unexpected)} of {len(self.views)} jobs did not end as expected "
                f"({tally}) in {elapsed_ms} ms; exit {exit_code}:"
            )
            for view in unexpected:
                got = (
                    "no result"
                    if view.finished is None
                    else _describe_outcome(view.finished, started=view.started_at is not None)
                )
                lines.append(
                    f"  {view.job.name} ({self.run_file.path}:{view.job.line}): "
                    f"expected {view.job.describe_expectation()}, got {got}"
                )
        for line in lines:
            self._say(line)
        if self.json_stream is not None:
            self._emit_json(
                {
                    "event": "run.finished",
                    "exitCode": exit_code,
                    "interrupted": None if signum is None else signal.Signals(signum).name,
                    "durationMs": elapsed_ms,
                    "leftovers": [{"pid": pid, "cmdline": cmd} for pid, cmd in leftovers],
                    "jobs": [
                        {
                            "name": v.job.name,
                            "lane": v.lane,
                            **({"node": self._nodes[v.lane]} if v.lane in self._nodes else {}),
                            "line": v.job.line,
                            "expected": sorted(v.job.expect),
                            "status": None if v.finished is None else v.finished.get("status"),
                            "timedOut": None if v.finished is None else v.finished.get("timedOut"),
                            "asExpected": self._as_expected(v),
                        }
                        for v in self.views
                    ],
                }
            )

    def _verdict(self, view: _JobView) -> str:
        if self._as_expected(view):
            return ""
        return f"  [expected {view.job.describe_expectation()}]"

    # Output -----------------------------------------------------------------------------

    def _output_line(self, view: _JobView, prefix: str, stream: str, line: str) -> None:
        line = line.rstrip("\r")
        if len(line) > MAX_LINE_CHARS:
            line = line[: MAX_LINE_CHARS - 3] + "..."
        view.last_line = line
        if self.live:
            # On a terminal the output shows in the lane's live line, not in the log.
            self._redraw()
            return
        mark = "|" if stream == "stdout" else "!"
        self._say(f"{prefix} {mark} {line}")

    def _emit_json(self, obj: dict[str, Any]) -> None:
        assert self.json_stream is not None
        self.json_stream.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
        self.json_stream.flush()

    def _say(self, line: str) -> None:
        self._clear_live()
        self.human.write(line + "\n")
        self._draw_live()
        self.human.flush()

    def _redraw(self) -> None:
        if self.live:
            self._clear_live()
            self._draw_live()
            self.human.flush()

    async def tick(self) -> None:
        """Redraw the live view's clocks until cancelled."""
        while True:
            await trio.sleep(REDRAW_INTERVAL_MS / 1000)
            self._redraw()

    def close_live(self) -> None:
        if self.live:
            self._clear_live()
            self.live = False
            self.human.flush()

    def _clear_live(self) -> None:
        if self._live_lines:
            # Up to the first live line, then erase to the end of the screen.
            self.human.write(f"\x1b[{self._live_lines}F\x1b[J")
            self._live_lines = 0

    def _draw_live(self) -> None:
        if not self.live:
            return
        now = trio.current_time()
        width = max(self._lane_width(), 4)
        for lane in self._lanes:
            views = [v for v in self.views if v.lane == lane]
            running = [v for v in views if v.started_at is not None and v.finished is None]
            waiting = [
                v
                for v in views
                if v.job_id is not None and v.started_at is None and v.finished is None
            ]
            if running:
                v = running[0]
                assert v.started_at is not None
                text = f"running {v.job.name} ({now - v.started_at:.1f} s)"
                if v.last_line:
                    text += f"  {v.last_line}"
            else:
                done = sum(1 for v in views if v.finished is not None)
                text = f"idle ({done}/{len(views)} done)"
            if waiting:
                text += f"  [+{len(waiting)} waiting]"
            label = self._lane_label(lane)
            self.human.write(f"  {label:<{width}}  {text}"[: _terminal_columns()] + "\n")
        self._live_lines = len(self._lanes)

    def _lane_width(self) -> int:
        return max((len(self._lane_label(lane)) for lane in self._lanes), default=0)

    def _lane_label(self, lane: str) -> str:
        """``lane``, or ``lane @ node`` when it runs on a cluster node."""
        node = self._nodes.get(lane)
        return lane if node is None else f"{lane} @ {node}"


def _terminal_columns() -> int:
    try:
        columns = os.get_terminal_size(2).columns
    except OSError:
        columns = 0
    # A pseudo-terminal without a size (script, CI) reports 0 columns.
    return max(columns - 1, 20) if columns > 0 else 120


def _lane_name(project: str, directory: str) -> str:
    """How a lane is shown: its project directory relative to the lanes file, or absolute."""
    relative = os.path.relpath(project, directory)
    if relative == ".":
        return os.path.basename(project) or project
    if relative.startswith(".."):
        return project
    return relative


def _count(number: int, noun: str) -> str:
    """``1 job``, ``2 jobs``."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _show_argv(argv: list[Any]) -> str:
    words = [str(a) for a in argv]
    if words and words[0] == sys.executable:
        return " ".join(["{python}", shlex.join(words[1:])]).rstrip()
    return shlex.join(words)


#: A token that looks like a placeholder: ``{word}``.
_PLACEHOLDER_LIKE = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")


def _placeholder_hint(job: RunFileJob, params: Mapping[str, Any]) -> str:
    """When a launch failed and argv holds an unknown ``{word}``, name the known placeholders.

    Returns:
        ``" (argv holds {foo}: ...)"`` to append to the ``finished`` line, or ``""``.

    Unknown braces stay as they are (``find -exec {} ;`` needs them); this only helps the
    user who misspelled ``{python}``.
    """
    if params.get("error") is None:
        return ""
    unknown = sorted(
        {t for arg in job.argv for t in _PLACEHOLDER_LIKE.findall(arg) if t not in PLACEHOLDERS}
    )
    if not unknown:
        return ""
    return (
        f" (argv holds {', '.join(unknown)}: not a placeholder, passed as is;"
        f" the placeholders are {', '.join(PLACEHOLDERS)})"
    )


def _describe_outcome(params: Mapping[str, Any], *, started: bool) -> str:
    """E.g. ``ok in 120 ms (exit 0)``, ``failed in 800 ms (timed out, SIGKILL)``, or
    ``failed in 1 ms: executable not found: /nonexistent`` when the job failed to launch
    (the ``error`` of ``job.finished``; its ``errorCode`` is for programs).

    A job cancelled (or superseded) whose process exited 0 (just before the cancel landed,
    or on the SIGTERM it brought) keeps its status: the cancel was accepted, so the lanes
    report it (schema ``job/finished``). The text says so, ``cancelled in 40 ms (cancel
    accepted; its process exited 0)``, rather than the contradictory ``cancelled (exit 0)``."""
    text = str(params.get("status"))
    duration = params.get("durationMs")
    if isinstance(duration, int | float) and started:
        text += f" in {round(duration)} ms"
    details: list[str] = []
    if not started:
        details.append("never started")
    if params.get("timedOut") is True:
        details.append("timed out")
    sig = params.get("signal")
    exit_code = params.get("exitCode")
    if isinstance(sig, int) and not isinstance(sig, bool):
        try:
            details.append(signal.Signals(sig).name)
        except ValueError:
            details.append(f"signal {sig}")
    elif isinstance(sig, str) and sig:
        details.append(sig)
    elif isinstance(exit_code, int) and not isinstance(exit_code, bool):
        if exit_code == 0 and params.get("status") in ("cancelled", "superseded"):
            details.append("cancel accepted; its process exited 0")
        else:
            details.append(f"exit {exit_code}")
    if details:
        text += f" ({', '.join(details)})"
    error = params.get("error")
    if isinstance(error, str) and error:
        text += f": {error}"
    return text
