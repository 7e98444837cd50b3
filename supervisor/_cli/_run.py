"""``supervisor run FILE.toml [JOB...]``: run a lanes file headless and check its outcomes.

Contract: the file is validated completely before anything starts (a bad file prints
``FILE:LINE: message`` on stderr, with ``--json`` one ``run.refused`` object on stdout, and
exits 2). The jobs are then submitted to one set of job lanes run by
:class:`~supervisor._core._jobs.ProcessJobRunner` (so every job of the run has
its own id), each on its lane (its ``lane``, else its project; ``-j N`` bounds the jobs
running at once over every lane), each at its ``start_after_ms`` once every job it ``needs``
ended ok (a need that did not makes it ``skipped``, never submitted). A lanes file means
what it says: a ``build``/``test`` job is held back while a job of its kind waits on its
lane, so it never replaces that one, unless it declares ``replace_waiting = true``; per
lane, jobs go in the order they became ready. Human progress goes to stderr (a live view per
lane when stderr is a terminal, one line per event otherwise) and, with ``--json``, one JSON
object per event goes to stdout (under ``GITHUB_ACTIONS=true`` each job's output as one log
group and an ``::error`` per job not as expected; ``--junit`` a JUnit report at the end,
:mod:`._ci`). ``--list`` and ``--dry-run`` print the file and the plan and run nothing
(:mod:`._plan`). When every job has finished the run checks that no process it started is
left (a sweep by scope marker) and exits 0 when every job ended as its ``expect`` says, 1
otherwise, with a summary that shows the end of each such job's output and names every job
that did not run. SIGINT or SIGTERM cancels every job, ends every process tree and exits 130
or 143; a reader of stdout or stderr that goes away (``| head``) does the same, exit 141
(128 + SIGPIPE), without a traceback: one line says so, then nothing more is printed. With
``ray`` (``--ray ADDRESS``) the lanes run on the nodes of a Ray cluster
(:mod:`supervisor._ray`); the reports name each lane's node.

Strategy: one Trio nursery owns a signal watcher, the scheduler and (on a terminal) a
redraw ticker; the lanes sit inside it, so cancelling the nursery (a signal) closes the
lanes, whose ``aclose`` cancels every job and whose runner ends every tree shielded. Lanes
report events synchronously through ``on_event``; the reporter only formats them and wakes
the scheduler, which decides in its own task what to submit next.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import re
import shlex
import signal
import sys
import tempfile
from collections import deque
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Final, TextIO

import trio

from protocol import did_you_mean

from ._ci import (
    ENDGROUP,
    GroupBuffer,
    JUnitCase,
    error_command,
    group_command,
    in_github_actions,
    write_junit,
)
from ._runfile import (
    JOB_STATUSES,
    PLACEHOLDERS,
    RunFile,
    RunFileError,
    RunFileJob,
    argv_hint,
    load_run_file,
)
from ._screen import SGR, SGR_RESET, Style, cells, cut_cells, is_terminal, visible

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

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
#: Output lines in the line-per-event view are cut to this many display cells.
MAX_LINE_CELLS: Final = 200
#: Characters kept of an output line (it shows cut to MAX_LINE_CELLS): a line that never
#: ends costs no more than this.
MAX_KEPT_LINE_CHARS: Final = 4096
#: Output kept per job for the summary of a job that did not end as expected, in bytes of
#: the lines as shown (each stream keeps as much; the summary shows the last this many of
#: both, merged in the order they came). A byte bound, not a line count: a linter's two
#: errors of ten lines each both show (20 lines showed only the second).
TAIL_BYTES: Final = 8 * 1024
#: Lines of a running job's output the live view shows under its lane.
LIVE_TAIL_LINES: Final = 3
#: Output forwarded per job and stream with ``--log-dir`` (the default of the lanes, 1 MiB,
#: otherwise): past it the log file gets a dropped-bytes notice and the last 64 KiB.
LOG_MAX_OUTPUT_BYTES: Final = 1024 * 1024 * 1024
#: The kinds a newer request replaces while they wait on a lane (lanes.LanePolicy).
_REPLACEABLE_KINDS: Final = frozenset({"build", "test"})


def run_command(
    path: str,
    *,
    json_output: bool,
    only: Sequence[str] = (),
    log_dir: str | None = None,
    color: str = "auto",
    ray: str | None = None,
    max_running: int | None = None,
    list_only: bool = False,
    dry_run: bool = False,
    junit: str | None = None,
    leave_by_exit: bool = False,
) -> int:
    """Run the lanes file at ``path`` and return the process exit code.

    Runs its own ``trio.run``; call it from synchronous code only.

    Args:
        path: the lanes file (format: :mod:`supervisor._cli._runfile`).
        json_output: print one JSON object per event on stdout (``{"event": "job.started",
            "name": ..., "lane": ..., **params}``), then one ``run.finished`` object; a run
            refused before it starts prints one ``run.refused`` object (:class:`_Refuser`).
        only: run only the jobs of these names, and the jobs they need (all when empty).
        log_dir: write each job's whole output (stdout and stderr as they came) to
            ``LOG_DIR/<n>-<name>.log``; created if missing.
        color: ``auto`` (colours on a terminal unless ``NO_COLOR``; ``FORCE_COLOR`` and
            ``CLICOLOR_FORCE`` turn them on), ``always`` or ``never``. With colours on, a
            job's own colours pass through.
        ray: run the lanes on the Ray cluster at this address (``auto``: the running
            cluster, else a local one started for the run); needs the ``[ray]`` extra. The
            JSON objects that name a lane then also carry its ``"node"``.
        max_running: ``-j``: the most jobs that run at once over every lane (None: one per
            lane, no other bound). Not with ``ray``.
        list_only: print the jobs (``--list``) and run nothing.
        dry_run: print the plan (``--dry-run``) and run nothing.
        junit: write a JUnit XML report to this file when the run ends.
        leave_by_exit: the caller ends the process as soon as this returns (the command
            line's own process): a Ray cluster joined as one of its nodes is then left by
            that end (:func:`supervisor._cli._main.end_process`), not ``ray.shutdown``, whose
            teardown waited out a 250 ms gRPC poll in about half the runs.

    Returns:
        0 every job ended as expected (or the list or plan was printed), 1 some did not (or
        a process was left behind), 2 the file, a job name, ``-j``, the log directory or the
        JUnit file is bad, or the cluster can not run the file (nothing started), 130 / 143
        interrupted by SIGINT / SIGTERM, 141 the reader of stdout or stderr went away.
    """
    refuse = _Refuser(sys.stdout if json_output else None)
    try:
        run_file = _select(load_run_file(path), only)
    except RunFileError as exc:
        return refuse.file(exc)
    if max_running is not None and max_running < 1:
        return refuse.option("-j", f"-j {max_running}: must be at least 1")
    if ray is not None and (problem := _ray_problem(run_file, max_running)) is not None:
        return refuse.option("--ray", f"--ray: {problem}")
    if list_only:
        from ._plan import list_jobs

        list_jobs(run_file, _lane_of(run_file), json_output=json_output, out=sys.stdout)
        return EXIT_OK
    if dry_run:
        return _dry_run(run_file, max_running, json_output=json_output, refuse=refuse)
    if log_dir is not None:
        try:
            os.makedirs(log_dir, exist_ok=True)
        except OSError as exc:
            return refuse.option("--log-dir", f"--log-dir {log_dir}: {exc.strerror}")
    if junit is not None and (problem := _junit_problem(junit)) is not None:
        return refuse.option("--junit", f"--junit {junit}: {problem}")
    with tempfile.TemporaryDirectory(prefix="supervisor-run-") as tmpdir:
        placeholders = {
            "{python}": sys.executable,
            "{here}": run_file.directory,
            "{tmpdir}": tmpdir,
        }
        try:
            requests = _job_requests(run_file, placeholders)
        except RunFileError as exc:
            return refuse.file(exc)
        json_stream = sys.stdout if json_output else None
        with contextlib.ExitStack() as stack:
            cluster: RayCluster | None = None
            if ray is not None:
                # Ray prints its own notices (a worker that died, ...) on sys.stdout, which
                # carries only our JSON: they go to stderr, with the human progress.
                stack.enter_context(contextlib.redirect_stdout(sys.stderr))
                try:
                    joined = _connect_cluster(ray, run_file, refuse)
                except KeyboardInterrupt:
                    # SIGINT while Ray is imported or joins (before the run's own handler):
                    # nothing has started on the cluster; what the join set up is left.
                    _leave_interrupted_join()
                    print("supervisor run: interrupted while joining the cluster", file=sys.stderr)
                    return 128 + signal.SIGINT
                if isinstance(joined, int):
                    return joined
                cluster = joined
                stack.push(_leaving(cluster, by_exit=leave_by_exit))
            live = is_terminal(sys.stderr)
            reporter = _Reporter(
                run_file,
                human=sys.stderr,
                live=live,
                json_stream=json_stream,
                style=Style.for_stream(sys.stderr, color),
                log_dir=log_dir,
                node_of=None if cluster is None else cluster.node_name,
                github=not live and in_github_actions(),
                junit=junit,
            )
            try:
                return trio.run(_run, run_file, requests, reporter, cluster, max_running)
            except KeyboardInterrupt:
                # SIGINT before the run's own handler was in place (while the node agents
                # start): what had started was stopped on the way out.
                print("supervisor run: interrupted while starting", file=sys.stderr)
                return 128 + signal.SIGINT
            finally:
                reporter.close_logs()


def _lane_of(run_file: RunFile) -> Callable[[RunFileJob], str]:
    """How a job's lane is shown: its name, or its project relative to the file."""

    def lane_of(job: RunFileJob) -> str:
        if job.lane is not None:
            return job.lane
        return _lane_name(job.project, run_file.directory)

    return lane_of


def _ray_problem(run_file: RunFile, max_running: int | None) -> str | None:
    """Why the file can not run on a Ray cluster as asked, or None.

    Ray places lanes per project (each on one node, its own lanes there), so a bound over
    every lane, or a named lane over several projects, would span nodes.
    """
    if max_running is not None:
        return "-j bounds the jobs of one machine; it does not apply with --ray"
    projects: dict[str, str] = {}
    for job in run_file.jobs:
        if job.lane is None:
            continue
        first = projects.setdefault(job.lane, job.project)
        if first != job.project:
            return (
                f"lane {job.lane!r} holds jobs of two projects ({first}, {job.project}):"
                " on a cluster each project's lanes run on its own node"
            )
    return None


def _junit_problem(path: str) -> str | None:
    """Why a JUnit report can not be written to ``path`` (checked before anything runs)."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        return f"the directory {directory} does not exist"
    if os.path.isdir(path):
        return "is a directory"
    if not os.access(directory, os.W_OK):
        return f"the directory {directory} is not writable"
    return None


def _dry_run(
    run_file: RunFile, max_running: int | None, *, json_output: bool, refuse: _Refuser
) -> int:
    """``--dry-run``: print the plan, resolved as a run would submit it; start nothing."""
    from lanes import parse_job_start
    from protocol import CoreError

    from .._core._jobs import check_job_launch
    from ._plan import describe_plan

    placeholders = {"{python}": sys.executable, "{here}": run_file.directory}
    payloads = {job.name: job.payload(placeholders) for job in run_file.jobs}

    def launch_problem(job: RunFileJob) -> str | None:
        try:
            check_job_launch(parse_job_start(payloads[job.name]))
        except CoreError as exc:
            return exc.message
        return None

    try:
        _job_requests(run_file, {**placeholders, "{tmpdir}": "/tmp"})
    except RunFileError as exc:
        return refuse.file(exc)
    describe_plan(
        run_file,
        payloads,
        _lane_of(run_file),
        max_running=max_running,
        launch_problem=launch_problem,
        json_output=json_output,
        out=sys.stdout,
    )
    return EXIT_OK


def _leaving(cluster: RayCluster, *, by_exit: bool) -> Callable[..., bool]:
    """How the run leaves ``cluster`` (an exit callback): by the process's end when it may
    (``leave_by_exit``) and the run returned; with ``ray.shutdown`` when an error leaves
    (it is then reported by Python, through Ray's excepthook, as any error)."""

    def leave(exc_type: type[BaseException] | None, *_: object) -> bool:
        if exc_type is None and by_exit and cluster.may_leave_by_exit:
            cluster.leave_before_exit()
        else:
            cluster.disconnect()
        return False

    return leave


def _leave_interrupted_join() -> None:
    ray = sys.modules.get("ray")
    if ray is not None:
        with contextlib.suppress(Exception):
            ray.shutdown()


def _connect_cluster(address: str, run_file: RunFile, refuse: _Refuser) -> RayCluster | int:
    """Join the cluster and place the lanes, or refuse (exit status 2) saying why not."""
    try:
        from .._ray._executor import (
            ClusterAuthenticationError,
            ClusterError,
            ClusterPinError,
            connect_cluster,
        )
    except ImportError as exc:
        return refuse.option(
            "--ray",
            f"--ray needs Ray: pip install 'trio-process-supervisor[ray]' ({exc})",
            code="not_supported",
        )
    lanes = _pinned_lanes(run_file)
    if not is_terminal(sys.stderr):
        # Ray colours the notices it prints (a worker that died...) whatever the stream; ours
        # carry no escape sequence where no terminal shows them, nor do Ray's then.
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    try:
        return connect_cluster(address, lanes)
    except ClusterAuthenticationError as exc:
        return refuse.option("--ray", f"--ray {address}: {exc}", code="permission_denied")
    except ClusterPinError as exc:
        from lanes import normalize_root

        pinned = next(
            (
                job
                for job in run_file.jobs
                if job.node == exc.pin and normalize_root(job.project) == exc.root
            ),
            None,
        )
        if pinned is not None:
            return refuse.pin(run_file.path, pinned.node_line, f"--ray {address}: {exc}")
        return refuse.option("--ray", f"--ray {address}: {exc}", code="launch_failed")
    except ClusterError as exc:
        return refuse.option("--ray", f"--ray {address}: {exc}", code="launch_failed")


def _pinned_lanes(run_file: RunFile) -> list[tuple[str, str | None]]:
    """``(project, pin)`` per job, in file order, each job with its project's pin.

    A lane is placed at its first job: a job without ``node`` before the project's pinned
    one would otherwise place the lane anywhere, and the pin would be ignored (the jobs of
    a project that give ``node`` agree: the file's loader checked).
    """
    pins: dict[str, str] = {}
    for job in run_file.jobs:
        if job.node is not None:
            pins.setdefault(job.project, job.node)
    return [(job.project, pins.get(job.project)) for job in run_file.jobs]


@dataclass(frozen=True, slots=True)
class _Refuser:
    """Says why ``run`` starts nothing (exit status 2): the line on stderr and, with
    ``--json``, one ``run.refused`` object on stdout, so a script that reads the events gets
    an answer it can parse: ``{"event": "run.refused", "exitCode": 2, "error": {"code",
    "message", "details"}}``, the error as the Core's envelope carries one (a code of
    ``protocol.ERROR_CATALOG``). An option argparse refuses never gets here: the command
    line's parser prints the same object (``_main._Parser``).

    Attributes:
        json_stream: stdout with ``--json`` (taken before a ``--ray`` run sends Ray's own
            prints to stderr), else None.
    """

    json_stream: TextIO | None

    def file(self, exc: RunFileError) -> int:
        """A bad lanes file (``details``: its ``file`` and ``line``, None when no line) or a
        JOB it has not (code ``not_found``, ``details.job``)."""
        details: JSONObject = {"file": exc.path, "line": exc.line or None}
        if exc.job is not None:
            details["job"] = exc.job
        code = "invalid_request" if exc.job is None else "not_found"
        return self._refuse(visible(str(exc)), str(exc), code, details)

    def option(self, option: str, message: str, *, code: str = "invalid_request") -> int:
        """A command-line option that can not work (``details.option``: ``-j``, ``--ray``...)."""
        line = f"supervisor run: {message}"
        return self._refuse(visible(line), line, code, {"option": option})

    def pin(self, path: str, line: int, message: str) -> int:
        """A job's ``node`` that no node of the cluster satisfies (code ``launch_failed``,
        ``details``: ``option`` ``--ray`` and the ``file`` and ``line`` of the pin)."""
        where = f"{path}:{line}: {message}"
        details: JSONObject = {"option": "--ray", "file": path, "line": line}
        return self._refuse(visible(where), where, "launch_failed", details)

    def _refuse(self, shown: str, message: str, code: str, details: JSONObject) -> int:
        print(shown, file=sys.stderr)
        if self.json_stream is not None:
            refused = {
                "event": "run.refused",
                "exitCode": EXIT_BAD_FILE,
                "error": {"code": code, "message": message, "details": details},
            }
            # A reader that went away raises BrokenPipeError (main() exits 141); any other
            # failure to write leaves the line on stderr.
            try:
                self.json_stream.write(
                    json.dumps(refused, ensure_ascii=False, separators=(",", ":")) + "\n"
                )
                self.json_stream.flush()
            except BrokenPipeError:
                raise
            except OSError:
                pass
        return EXIT_BAD_FILE


def _select(run_file: RunFile, only: Sequence[str]) -> RunFile:
    """The jobs named in ``only`` and, transitively, the jobs they need (file order kept).

    Raises:
        RunFileError: a name no job has (``line`` 0), with a close match when there is one
            and the names the file has.
    """
    if not only:
        return run_file
    by_name = {job.name: job for job in run_file.jobs}
    wanted: set[str] = set()
    pending = list(only)
    while pending:
        name = pending.pop()
        if name in wanted:
            continue
        job = by_name.get(name)
        if job is None:
            known = ", ".join(by_name)
            raise RunFileError(
                run_file.path,
                0,
                f"no job is named {name!r}{did_you_mean(name, by_name)}; the jobs are: {known}",
                job=name,
            )
        wanted.add(name)
        pending.extend(job.needs)
    return dataclasses.replace(
        run_file, jobs=tuple(job for job in run_file.jobs if job.name in wanted)
    )


def _job_requests(run_file: RunFile, placeholders: Mapping[str, str]) -> list[JobRequest]:
    """Every job's request, validated by the lanes' own ``job.start`` parser, on its lane."""
    from lanes import parse_job_start
    from protocol import CoreError

    requests: list[JobRequest] = []
    for job in run_file.jobs:
        try:
            request = parse_job_start(job.payload(placeholders))
        except CoreError as exc:
            raise RunFileError(run_file.path, job.line, exc.message) from None
        # The lane is no wire field of job.start: the runner sets it on the request.
        requests.append(dataclasses.replace(request, lane=job.lane))
    return requests


async def _run(
    run_file: RunFile,
    requests: list[JobRequest],
    reporter: _Reporter,
    cluster: RayCluster | None,
    max_running: int | None = None,
) -> int:
    from ._executor import open_executor

    max_output_bytes = LOG_MAX_OUTPUT_BYTES if reporter.log_dir is not None else 1024 * 1024
    # Outside the signal nursery: a remote executor still carries the lanes' last events
    # while a signal cancels the run.
    async with open_executor(
        cluster, max_output_bytes=max_output_bytes, max_running=max_running
    ) as executor:
        return await _run_on(executor, run_file, requests, reporter)


async def _run_on(
    executor: JobExecutor, run_file: RunFile, requests: list[JobRequest], reporter: _Reporter
) -> int:
    interrupted: list[int] = []
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            def interrupt(signum: int) -> None:
                if not interrupted:
                    interrupted.append(signum)
                    reporter.interrupted(signum)
                    nursery.cancel_scope.cancel()

            async def watch_signals() -> None:
                async for signum in signals:
                    interrupt(signum)

            reporter.on_output_closed = lambda: interrupt(signal.SIGPIPE)
            nursery.start_soon(watch_signals)
            if reporter.live:
                nursery.start_soon(reporter.tick)
            reporter.run_started(trio.current_time())
            async with executor.open_lanes(on_event=reporter.on_event) as lanes:
                await _Scheduler(run_file, requests, lanes, reporter).run()
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


class _Scheduler:
    """Submits each job when its time has come, its needs ended ok and its lane lets it.

    Jobs become *due* at ``start_after_ms``; a due job whose needs all ended ok becomes
    *ready* and joins its lane's ready list (a need that ended otherwise skips it). The head
    of a lane's ready list is submitted unless it would replace a waiting job of its kind
    without saying so (``replace_waiting``); the rest of that list waits behind it, so a
    lane takes jobs in the order they became ready.
    """

    def __init__(
        self,
        run_file: RunFile,
        requests: list[JobRequest],
        lanes: RunLanes,
        reporter: _Reporter,
    ) -> None:
        self.jobs = run_file.jobs
        self.requests = requests
        self.lanes = lanes
        self.reporter = reporter
        self.views = reporter.views
        self.by_name = {job.name: index for index, job in enumerate(self.jobs)}
        self.due: list[int] = []
        self.ready: dict[str, list[int]] = {}
        self.released_all = False
        self.handled = 0
        self.wake = trio.Event()
        reporter.on_change = self._wake

    def _wake(self) -> None:
        self.wake.set()

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._release)
            while True:
                self._pump(nursery)
                if self.released_all and self.handled == len(self.jobs):
                    break
                await self.wake.wait()
                self.wake = trio.Event()
            await self.lanes.wait_idle()
            # A cancel that comes after its job ended has nothing left to do.
            nursery.cancel_scope.cancel()

    async def _release(self) -> None:
        start = trio.current_time()
        # Jobs due at the same moment go in file order.
        order = sorted(range(len(self.jobs)), key=lambda i: self.jobs[i].start_after_ms)
        for index in order:
            await trio.sleep_until(start + self.jobs[index].start_after_ms / 1000)
            self.due.append(index)
            self._wake()
        self.released_all = True
        self._wake()

    def _pump(self, nursery: trio.Nursery) -> None:
        progress = True
        while progress:
            progress = False
            for index in list(self.due):
                verdict = self._needs_verdict(index)
                if verdict is None:
                    continue
                self.due.remove(index)
                progress = True
                if verdict:
                    self.reporter.skip(self.views[index], verdict)
                    self.handled += 1
                else:
                    self.ready.setdefault(self.jobs[index].lane_key, []).append(index)
            for queue in self.ready.values():
                while queue and self._may_submit(queue[0]):
                    self._submit(queue.pop(0), nursery)
                    progress = True

    def _needs_verdict(self, index: int) -> str | None:
        """None: a need has not ended yet; "": every need ended ok; else why it is skipped."""
        for need in self.jobs[index].needs:
            finished = self.views[self.by_name[need]].finished
            if finished is None:
                return None
            status = finished.get("status")
            if status != "ok":
                return f"needs {need!r}, which ended {status}"
        return ""

    def _may_submit(self, index: int) -> bool:
        job = self.jobs[index]
        if job.replace_waiting or not job.trusted or job.kind not in _REPLACEABLE_KINDS:
            return True
        return not any(
            view.job.lane_key == job.lane_key
            and view.job.kind == job.kind
            and view.job_id is not None
            and view.started_at is None
            and view.finished is None
            for view in self.views
        )

    def _submit(self, index: int, nursery: trio.Nursery) -> None:
        job = self.jobs[index]
        request = self.requests[index]
        lanes = self.lanes
        self.handled += 1

        def start() -> str:
            # Read at submission: one set of lanes serves both, so ids stay unique.
            lanes.trusted = job.trusted
            return lanes.start_job(request)

        job_id = self.reporter.submit(self.views[index], start)
        if job.cancel_after_ms is not None:
            nursery.start_soon(self._cancel_later, job_id, index)

    async def _cancel_later(self, job_id: str, index: int) -> None:
        job = self.jobs[index]
        assert job.cancel_after_ms is not None
        await trio.sleep(job.cancel_after_ms / 1000)
        if self.lanes.cancel_job(job_id):
            self.reporter.cancel_requested(self.views[index])


async def _leftover_processes(settle_ms: int = LEFTOVER_SETTLE_MS) -> list[tuple[int, str]]:
    """Live processes that still carry this run's scope marker, after a short settle time.

    The runner ends every tree it started; this sweep is the run's own evidence of it
    (a scope's end must leave no process behind), reported rather than trusted.
    """
    from .._process._marker import marked_processes

    deadline = trio.current_time() + settle_ms / 1000
    while True:
        found = marked_processes()
        if not found or trio.current_time() >= deadline:
            return found
        await trio.sleep(0.05)


# --- Reporting ---------------------------------------------------------------------------


class _StreamTail:
    """The last :data:`TAIL_BYTES` of one output stream, in lines, each with its arrival number.

    The line not ended yet counts as the last one. Every line is bounded
    (:data:`MAX_KEPT_LINE_CHARS`), and a carriage return inside a line redraws it (a
    progress bar): what shows last is kept. Past the lanes' forwarding cap a dropped-bytes
    notice comes, then the stream's last bytes: :meth:`dropped_before_end` forgets the lines
    before them, which are not the last ones.

    Args:
        keep_sgr: Keep the job's colours (SGR sequences) in the lines as shown.
    """

    __slots__ = ("_bytes", "_cut", "dropped", "keep_sgr", "lines", "partial", "partial_seq")

    def __init__(self, *, keep_sgr: bool = False) -> None:
        #: ``(arrival number, line as shown)``, oldest first.
        self.lines: deque[tuple[int, str]] = deque()
        self._bytes = 0
        self.partial = ""
        self.partial_seq = 0
        #: Bytes of the stream never forwarded (between the cap and its last bytes).
        self.dropped = 0
        self._cut = False
        self.keep_sgr = keep_sgr

    def _keep(self, seq: int, line: str) -> None:
        self.lines.append((seq, line))
        self._bytes += _size(line)
        while self._bytes > TAIL_BYTES and len(self.lines) > 1:
            self._bytes -= _size(self.lines.popleft()[1])

    def feed(self, text: str, order: Iterator[int]) -> list[str]:
        """Take a chunk of output; return the lines it ended, as they show.

        ``order`` numbers every line as it ends (and the unfinished one as it grows), across
        the job's streams.
        """
        *ended, rest = text.split("\n")
        shown: list[str] = []
        for piece in ended:
            line = self._shown(_keep_line(self.partial + piece))
            self.partial = ""
            self._cut = False
            self._keep(next(order), line)
            shown.append(line)
        if rest:
            self.partial = _keep_line(self.partial + rest)
            self.partial_seq = next(order)
        return shown

    def dropped_before_end(self, dropped: int) -> str | None:
        """The forwarded head ended ``dropped`` bytes before the stream's last bytes.

        Returns:
            The unfinished line the head ended in (as it shows), if any.
        """
        head = self._shown(self.partial) if self.partial else None
        self.lines.clear()
        self._bytes = 0
        self.partial = ""
        self.dropped += dropped
        # The last bytes start anywhere, most likely inside a line.
        self._cut = True
        return head

    def last(self) -> list[tuple[int, str]]:
        """The kept lines and the unfinished one, oldest first, within :data:`TAIL_BYTES`."""
        if not self.partial:
            return list(self.lines)
        return _within_bytes([*self.lines, (self.partial_seq, self._shown(self.partial))])

    def _shown(self, raw: str) -> str:
        line = visible(raw.rstrip("\r").rpartition("\r")[2], keep_sgr=self.keep_sgr)
        line = cut_cells(("…" if self._cut else "") + line, MAX_LINE_CELLS)
        if self.keep_sgr and "\x1b" in line and not line.endswith(SGR_RESET):
            # A job's colour never runs into our next line.
            line += SGR_RESET
        return line


def _size(line: str) -> int:
    """What a kept line costs against :data:`TAIL_BYTES` (its newline included)."""
    return len(line.encode("utf-8", "replace")) + 1


def _within_bytes(lines: list[tuple[int, str]], limit: int = TAIL_BYTES) -> list[tuple[int, str]]:
    """The last of ``lines`` that fit in ``limit`` bytes (always at least the last one)."""
    total = 0
    start = len(lines)
    while start > 0:
        total += _size(lines[start - 1][1])
        if total > limit and start < len(lines):
            break
        start -= 1
    return lines[start:]


def _keep_line(raw: str) -> str:
    """``raw`` from its last carriage return on (one that ends it aside), bounded."""
    redraw = raw.rstrip("\r").rfind("\r")
    if redraw >= 0:
        raw = raw[redraw + 1 :]
    return raw[:MAX_KEPT_LINE_CHARS]


@dataclass(slots=True)
class _JobView:
    job: RunFileJob
    lane: str
    index: int
    job_id: str | None = None
    started_at: float | None = None
    finished: JSONObject | None = None
    streams: dict[str, _StreamTail] = field(
        default_factory=lambda: {"stdout": _StreamTail(), "stderr": _StreamTail()}
    )
    log: IO[str] | None = None
    #: The last ``job.progress`` of a reporting job, ``(finished, total)``.
    progress: tuple[int, int] | None = None
    #: Its output for its GitHub Actions log group (None: not grouped).
    group: GroupBuffer | None = None

    def tail(self, count: int | None = None) -> list[tuple[str, str]]:
        """The last lines of output, ``(stream, line)``, in the order they came: within
        :data:`TAIL_BYTES`, and at most ``count`` of them when given."""
        merged = sorted(
            (seq, stream, line)
            for stream, tail in self.streams.items()
            for seq, line in tail.last()
        )
        kept = _within_bytes([(seq, line) for seq, _stream, line in merged])
        pairs = [(stream, line) for _seq, stream, line in merged[len(merged) - len(kept) :]]
        return pairs if count is None else pairs[-count:]


class _Reporter:
    """Formats lanes events for people (stderr) and, optionally, for programs (stdout)."""

    def __init__(
        self,
        run_file: RunFile,
        *,
        human: TextIO,
        live: bool,
        json_stream: TextIO | None,
        style: Style | None = None,
        log_dir: str | None = None,
        node_of: Callable[[str], str | None] | None = None,
        github: bool = False,
        junit: str | None = None,
    ) -> None:
        self.run_file = run_file
        self.human: TextIO | None = human
        self.live = live
        self.json_stream = json_stream
        self.style = style or Style(False)
        self.log_dir = log_dir
        #: GitHub Actions: each job's output in a log group, an ``::error`` per unexpected end.
        self.github = github
        self.junit = junit
        lane_of = _lane_of(run_file)
        keep_sgr = self.style.enabled
        self.views = [
            _JobView(
                job,
                visible(lane_of(job)),
                index,
                streams={
                    "stdout": _StreamTail(keep_sgr=keep_sgr),
                    "stderr": _StreamTail(keep_sgr=keep_sgr),
                },
                group=GroupBuffer() if github else None,
            )
            for index, job in enumerate(run_file.jobs)
        ]
        self._by_id: dict[str, _JobView] = {}
        self._submitting: _JobView | None = None
        self._lanes = sorted({v.lane for v in self.views}, key=[v.lane for v in self.views].index)
        #: Lane -> the node it runs on (``--ray``); empty when it runs here.
        self._nodes: dict[str, str] = {}
        for view in self.views:
            node = None if node_of is None else node_of(view.job.project)
            if node is not None:
                self._nodes[view.lane] = visible(node)
        #: The display width, in cells, of each line of the live view on the screen now.
        self._live_widths: list[int] = []
        self._started_at = 0.0
        #: Numbers output lines in the order they came, for the tails.
        self._order = itertools.count()
        #: Called when a job starts or ends (the scheduler's wake-up).
        self.on_change: Callable[[], None] = lambda: None
        #: Called once when the reader of stdout or stderr has gone away.
        self.on_output_closed: Callable[[], None] = lambda: None

    # Event intake ---------------------------------------------------------------------

    def run_started(self, now: float) -> None:
        self._started_at = now
        lanes = ", ".join(self._lane_label(lane) for lane in self._lanes)
        self._say(
            f"running {_count(len(self.views), 'job')} from {visible(self.run_file.path)}"
            f" on {'lane' if len(self._lanes) == 1 else 'lanes'}: {lanes}"
        )

    def _lane_label(self, lane: str) -> str:
        """``lane``, or ``lane @ node`` when it runs on a cluster node."""
        node = self._nodes.get(lane)
        return lane if node is None else f"{lane} @ {node}"

    def submit(self, view: _JobView, start: Callable[[], str]) -> str:
        """Call ``start()`` (``lanes.start_job``) with events for the new job attributed."""
        # A job can finish inside start_job (denied), before its id is known to us.
        self._submitting = view
        try:
            job_id = start()
        finally:
            self._submitting = None
        view.job_id = job_id
        self._by_id[job_id] = view
        self._redraw()
        return job_id

    def on_event(self, method: str, params: JSONObject) -> None:
        job_id = str(params.get("jobId"))
        view = self._by_id.get(job_id)
        if view is None and self._submitting is not None:
            view = self._submitting
            self._by_id[job_id] = view
        self.event(method, params, view)
        if method in ("job.started", "job.finished"):
            self.on_change()

    def event(self, method: str, params: JSONObject, view: _JobView | None) -> None:
        name = view.job.name if view is not None else str(params.get("jobId"))
        lane = view.lane if view is not None else "?"
        if self.json_stream is not None:
            self._emit_json({"event": method, "name": name, "lane": lane, **params})
        if view is None:
            return
        prefix = self._prefix(view)
        if method == "job.started":
            view.started_at = trio.current_time()
            # Every job that ran has its file, empty when it printed nothing.
            self._log(view, "")
            argv = params.get("argv")
            shown = _show_argv(argv) if isinstance(argv, list) else ""
            self._say(f"{prefix} {self.style.paint('started', 'running')}: {visible(shown)}")
        elif method == "job.output":
            stream = "stderr" if params.get("stream") == "stderr" else "stdout"
            chunk = str(params.get("text", ""))
            self._log(view, chunk)
            if view.group is not None:
                view.group.feed(chunk if "droppedBytes" not in params else f"\n{chunk}\n")
            tail = view.streams[stream]
            dropped = params.get("droppedBytes")
            if isinstance(dropped, int) and not isinstance(dropped, bool):
                # The lanes' notice: what follows is the stream's end, after a gap.
                head = tail.dropped_before_end(dropped)
                lines = [] if head is None else [head]
                lines.append(cut_cells(visible(chunk.strip()), MAX_LINE_CELLS))
            else:
                lines = tail.feed(chunk, self._order)
            for line in lines:
                self._output_line(view, prefix, stream, line)
        elif method == "job.finished":
            for stream, tail in view.streams.items():
                if tail.partial:
                    self._output_line(view, prefix, stream, tail.last()[-1][1])
            view.finished = params
            self._close_log(view)
            if not self.live and view.lane in self._nodes:
                # A log read later has no live view naming each lane's node: the line of
                # the job's end says where it ran, as the lane labels do (``lane @ node``).
                prefix = f"[{self._lane_label(view.lane)}] {visible(view.job.name)}"
            ended = f"{prefix} finished {self._outcome(view)}{self._verdict(view)}"
            if view.group:
                # One group per job, titled with its outcome: open it to read the output.
                keep_sgr = self.style.enabled
                grouped = [group_command(_SGR.sub("", ended))]
                for raw in view.group.lines():
                    text = visible(raw, keep_sgr=keep_sgr)
                    grouped.append(text + SGR_RESET if keep_sgr and "\x1b" in text else text)
                grouped.append(ENDGROUP)
                self._write("".join(text + "\n" for text in grouped))
                view.group = GroupBuffer()
            else:
                self._say(ended)
        else:
            if method == "job.progress":
                view.progress = (int(str(params["finished"])), int(str(params["total"])))
            self._redraw()

    def skip(self, view: _JobView, reason: str) -> None:
        """End a job that will never be submitted: a job it needs did not end ok."""
        view.finished = {"status": "skipped", "error": reason}
        if self.json_stream is not None:
            self._emit_json(
                {
                    "event": "job.finished",
                    "name": view.job.name,
                    "lane": view.lane,
                    "jobId": None,
                    "status": "skipped",
                    "error": reason,
                }
            )
        self._say(f"{self._prefix(view)} {self._outcome(view)}{self._verdict(view)}")

    def cancel_requested(self, view: _JobView) -> None:
        self._say(f"{self._prefix(view)} cancel requested")

    def interrupted(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGPIPE:
            # One line, then quiet: the cancelled jobs' last events and the summary would
            # only scroll past a reader that is gone.
            self._write(
                self._clear_live() + "the reader of our output went away: cancelling every job\n"
            )
            self.live = False
            self.human = None
        else:
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
        for view in unexpected:
            lines.extend(self._tail_block(view))
        not_run = [v for v in self.views if v.started_at is None]
        if not_run:
            lines.append(f"{_count(len(not_run), 'job')} did not run:")
            for view in not_run:
                note = "" if self._as_expected(view) else "  [not expected]"
                lines.append(f"  {self._where(view)}: {self._never_ran(view)}{note}")
        if leftovers:
            lines.append(f"{len(leftovers)} process(es) left behind:")
            lines.extend(f"  pid {pid}: {visible(cmd)}" for pid, cmd in leftovers)
        else:
            lines.append("no process left behind (swept by scope marker)")
        if self.log_dir is not None:
            lines.append(f"the output of each job is in {visible(self.log_dir)}")
        if signum is not None:
            lines.append(
                self.style.paint(
                    f"interrupted by {signal.Signals(signum).name} after {elapsed_ms} ms "
                    f"({tally or 'no job finished'}); exit {exit_code}",
                    "failed",
                )
            )
        elif not unexpected:
            every = "as expected" if len(self.views) == 1 else "all as expected"
            lines.append(
                self.style.paint(
                    f"{_count(len(self.views), 'job')}, {every} ({tally}) in {elapsed_ms} ms;"
                    " exit 0",
                    "ok",
                )
            )
        else:
            lines.append(
                self.style.paint(
                    f"{len(unexpected)} of {len(self.views)} jobs did not end as expected "
                    f"({tally}) in {elapsed_ms} ms; exit {exit_code}:",
                    "failed",
                )
            )
            for view in unexpected:
                got = "no result" if view.finished is None else self._outcome(view)
                lines.append(
                    f"  {self._where(view)}: expected {view.job.describe_expectation()}, got {got}"
                )
        for line in lines:
            self._say(line)
        if self.github:
            for view in unexpected:
                self._say(self._error_command(view))
        if self.junit is not None:
            self._write_junit(elapsed_ms)
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
                            "jobId": v.job_id,
                            "lane": v.lane,
                            **({"node": self._nodes[v.lane]} if v.lane in self._nodes else {}),
                            "line": v.job.line,
                            "expected": sorted(v.job.expect),
                            "status": None if v.finished is None else v.finished.get("status"),
                            "timedOut": None if v.finished is None else v.finished.get("timedOut"),
                            "durationMs": self._duration_ms(v),
                            "exitCode": None if v.finished is None else v.finished.get("exitCode"),
                            "signal": None if v.finished is None else v.finished.get("signal"),
                            "ran": v.started_at is not None,
                            "asExpected": self._as_expected(v),
                        }
                        for v in self.views
                    ],
                }
            )

    def _duration_ms(self, view: _JobView) -> int | None:
        """How long the job ran (ms), None when it never started."""
        if view.started_at is None or view.finished is None:
            return None
        duration = view.finished.get("durationMs")
        return duration if isinstance(duration, int) and not isinstance(duration, bool) else None

    def _got(self, view: _JobView) -> str:
        """``expected ok, got failed in 20 ms (exit 1)``, without colours."""
        got = "no result" if view.finished is None else _SGR.sub("", self._outcome(view))
        return f"expected {view.job.describe_expectation()}, got {got}"

    def _plain_tail(self, view: _JobView) -> str:
        return "\n".join(_SGR.sub("", line) for _stream, line in view.tail())

    def _error_command(self, view: _JobView) -> str:
        """The ``::error`` annotation of a job that did not end as expected."""
        message = self._got(view)
        tail = self._plain_tail(view)
        if tail:
            message += "\n" + tail
        return error_command(
            file=self.run_file.path,
            line=view.job.line,
            title=f"job {visible(view.job.name)} did not end as expected",
            message=message,
        )

    def _write_junit(self, elapsed_ms: int) -> None:
        assert self.junit is not None
        cases: list[JUnitCase] = []
        for view in self.views:
            if not self._as_expected(view):
                outcome = "failed"
                message = self._got(view)
            elif view.started_at is None:
                outcome = "skipped"
                message = _SGR.sub("", self._never_ran(view))
            else:
                outcome = "passed"
                message = ""
            cases.append(
                JUnitCase(
                    name=view.job.name,
                    lane=view.lane,
                    duration_ms=self._duration_ms(view) or 0,
                    line=view.job.line,
                    outcome=outcome,
                    message=message,
                    output=self._plain_tail(view),
                )
            )
        try:
            write_junit(
                self.junit,
                suite=self.run_file.path,
                file=self.run_file.path,
                cases=cases,
                duration_ms=elapsed_ms,
            )
        except OSError as exc:
            self._say(f"cannot write the JUnit report {visible(self.junit)}: {exc.strerror}")

    def _where(self, view: _JobView) -> str:
        return f"{visible(view.job.name)} ({visible(self.run_file.path)}:{view.job.line})"

    def _never_ran(self, view: _JobView) -> str:
        """Why a job never started, in words."""
        if view.finished is None:
            if view.job_id is None:
                return "never submitted (the run ended first)"
            return "no result"
        status = str(view.finished.get("status"))
        painted = self.style.paint(status, status)
        if status == "superseded":
            return f"{painted}: replaced while waiting by a newer request of its kind"
        if status == "cancelled":
            return f"{painted} while waiting"
        if status == "denied":
            return f"{painted}: the workspace is not trusted"
        error = view.finished.get("error")
        return f"{painted}: {visible(str(error))}" if error else painted

    def _tail_block(self, view: _JobView) -> list[str]:
        """The last lines of the job's output: both streams in the order they came, or,
        when a stream passed the forwarding cap (its end came late), stream by stream."""
        outcome = "no result" if view.finished is None else self._outcome(view)
        where = f"--- {self._where(view)} {outcome}: "
        if not any(tail.dropped for tail in view.streams.values()):
            merged = view.tail()
            if not merged:
                return []
            head = f"{where}the last {_count(len(merged), 'line')} of its output ---"
            return [self.style.paint(head, "bold")] + [
                f"  {self._mark(stream)} {line}" for stream, line in merged
            ]
        lines = [self.style.paint(f"{where}the end of its output, stream by stream ---", "bold")]
        for stream, tail in view.streams.items():
            last = tail.last()
            if not last:
                continue
            gap = f"; {tail.dropped} bytes before them were not forwarded" if tail.dropped else ""
            lines.append(f"  {stream}, its last {_count(len(last), 'line')}{gap}:")
            lines.extend(f"  {self._mark(stream)} {line}" for _seq, line in last)
        return lines

    def _outcome(self, view: _JobView) -> str:
        assert view.finished is not None
        status = str(view.finished.get("status"))
        text = _describe_outcome(view.finished, started=view.started_at is not None)
        hint = _placeholder_hint(view.job, view.finished)
        if view.finished.get("errorCode") == "launch_failed":
            hint += argv_hint(view.job.argv)
        return self.style.paint(status, status) + visible(text[len(status) :] + hint)

    def _verdict(self, view: _JobView) -> str:
        if self._as_expected(view):
            return ""
        return f"  [expected {view.job.describe_expectation()}]"

    # Output -----------------------------------------------------------------------------

    def _prefix(self, view: _JobView) -> str:
        return f"[{view.lane}] {visible(view.job.name)}"

    def _mark(self, stream: str) -> str:
        return "|" if stream == "stdout" else self.style.paint("!", "failed")

    def _output_line(self, view: _JobView, prefix: str, stream: str, line: str) -> None:
        """Show a line of output (made visible and cut already)."""
        if view.group is not None:
            return  # in the job's log group, printed whole when it ends
        if self.live:
            # On a terminal the output shows under the lane's live line, not in the log.
            self._redraw()
            return
        self._say(f"{prefix} {self._mark(stream)} {line}")

    def _log(self, view: _JobView, text: str) -> None:
        """Append ``text`` to the job's log file, which the first call creates."""
        if self.log_dir is None:
            return
        if view.log is None:
            slug = re.sub(r"[^A-Za-z0-9._-]+", "_", view.job.name).strip("_.") or "job"
            name = os.path.join(self.log_dir, f"{view.index + 1:02d}-{slug}.log")
            try:
                view.log = open(name, "w", encoding="utf-8", errors="replace")  # noqa: SIM115
            except OSError as exc:
                self._say(f"{self._prefix(view)}: cannot write {visible(name)}: {exc.strerror}")
                self.log_dir = None
                return
        view.log.write(text)

    def _close_log(self, view: _JobView) -> None:
        if view.log is not None:
            view.log.close()
            view.log = None

    def close_logs(self) -> None:
        for view in self.views:
            self._close_log(view)

    def _emit_json(self, obj: dict[str, Any]) -> None:
        stream = self.json_stream
        assert stream is not None
        lane = obj.get("lane")
        if isinstance(lane, str) and lane in self._nodes:
            obj = {**obj, "node": self._nodes[lane]}
        try:
            stream.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
            stream.flush()
        except BrokenPipeError:
            self.json_stream = None
            self._output_closed(stream)

    def _output_closed(self, stream: TextIO) -> None:
        """The reader went away (``| head``): write nowhere from now on, end the run."""
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
        self.on_output_closed()

    def _write(self, text: str) -> None:
        human = self.human
        if human is None:
            return
        try:
            human.write(text)
            human.flush()
        except BrokenPipeError:
            self.human = None
            self.live = False
            self._output_closed(human)

    def _say(self, line: str) -> None:
        self._write(self._clear_live() + line + "\n" + self._draw_live())

    def _redraw(self) -> None:
        if self.live:
            self._write(self._clear_live() + self._draw_live())

    async def tick(self) -> None:
        """Redraw the live view's clocks until cancelled."""
        while True:
            await trio.sleep(REDRAW_INTERVAL_MS / 1000)
            self._redraw()

    def close_live(self) -> None:
        if self.live:
            self._write(self._clear_live())
            self.live = False

    def _clear_live(self) -> str:
        if not self._live_widths:
            return ""
        # Up to the first live line, then erase to the end of the screen. A terminal made
        # narrower since the lines were drawn rewraps each into more rows (most do: VTE,
        # kitty, iTerm2, tmux); one that cuts them instead loses as many rows above.
        rows = _rows_taken(self._live_widths, _terminal_size(raw=True)[0])
        self._live_widths = []
        return f"\x1b[{rows}F\x1b[J"

    def _draw_live(self) -> str:
        if not self.live:
            return ""
        columns, rows = _terminal_size()
        now = trio.current_time()
        width = max(max((cells(self._lane_label(lane)) for lane in self._lanes), default=0), 4)
        heads: list[str] = []
        tails: list[list[str]] = []
        for lane in self._lanes:
            views = [v for v in self.views if v.lane == lane]
            running = [v for v in views if v.started_at is not None and v.finished is None]
            waiting = [
                v
                for v in views
                if v.job_id is not None and v.started_at is None and v.finished is None
            ]
            tail: list[str] = []
            if running:
                v = running[0]
                assert v.started_at is not None
                # The progress before the clock: a narrow terminal cuts the end of the line.
                steps = "" if v.progress is None else f" {v.progress[0]}/{v.progress[1]}"
                text = (
                    f"{self.style.paint('running', 'running')} {visible(v.job.name)}{steps}"
                    f" ({now - v.started_at:.1f} s)"
                )
                tail = [
                    f"      {self._mark(stream)} {line}" for stream, line in v.tail(LIVE_TAIL_LINES)
                ]
            else:
                done = sum(1 for v in views if v.finished is not None)
                text = f"idle ({done}/{len(views)} done)"
            if waiting:
                text += f"  [+{len(waiting)} waiting]"
            label = self._lane_label(lane)
            heads.append(f"  {label}{' ' * (width - cells(label))}  {text}")
            tails.append(tail)
        # The whole block must fit on the screen, or moving up to redraw it would miss lines.
        room = max(rows - 1 - len(heads), 0)
        lines: list[str] = []
        for head, tail in zip(heads, tails, strict=True):
            lines.append(head)
            take = min(len(tail), room)
            lines.extend(tail[len(tail) - take :])
            room -= take
        # Cut by display cells, colours aside, so that no line wraps.
        shown = [_cut_painted(line, columns) for line in lines]
        self._live_widths = [cells(_SGR.sub("", line)) for line in shown]
        return "".join(line + "\n" for line in shown)


_SGR: Final = SGR


def _cut_painted(line: str, width: int) -> str:
    """``line`` (text and SGR sequences: ours, a job's) cut to ``width`` display cells,
    colours kept whole (:func:`cut_cells`)."""
    return cut_cells(line, width)


def _terminal_size(*, raw: bool = False) -> tuple[int, int]:
    """``(columns - 1, rows)`` of the terminal on stderr to draw in; (120, 24) when it has
    no size. ``raw``: ``(columns, rows)`` as the terminal says, 0 when it has no size."""
    try:
        size = os.get_terminal_size(2)
        columns, rows = size.columns, size.lines
    except OSError:
        columns, rows = 0, 0
    if raw:
        return columns, rows
    # A pseudo-terminal without a size (script, CI) reports 0 columns.
    return (max(columns - 1, 20) if columns > 0 else 120), (rows if rows > 0 else 24)


def _rows_taken(widths: Sequence[int], columns: int) -> int:
    """The rows lines of these display widths take on a terminal ``columns`` wide (a line
    wider than the terminal wraps onto more rows; a terminal without a size: one each)."""
    if columns <= 0:
        return len(widths)
    return sum(max(1, -(-width // columns)) for width in widths)


def _lane_name(project: str, directory: str) -> str:
    """How a lane is shown: its project directory relative to the lanes file, or absolute."""
    # The project is a real path (links resolved); so must the directory be to compare them.
    relative = os.path.relpath(project, os.path.realpath(directory))
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
