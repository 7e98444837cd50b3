"""A pytest plugin for people who test process lifecycles (a ``pytest11`` entry point).

Fixtures:

- ``no_leaked_processes``: fails the test when a process that appeared during the test
  outlives it, listing each with its command line, or when the test process holds an
  unreaped (zombie) child. It looks at every descendant of the test process, marked or not
  (by ancestry, each remembered with its start time; an orphan re-parents to the test
  process when that is a child subreaper, as it is once the supervisor ran), and at every
  process carrying the scope marker (``SUPERVISOR_SCOPE``) even when it escaped. Only
  processes of this pytest run are looked at: the plugin puts ``SUPERVISOR_TEST_RUN=<uuid>``
  into the environment at start, and every process the run starts inherits it, so another
  test run on the same machine never trips the guard. ``supervisor_leak_scope = marked``
  (ini) or ``@pytest.mark.supervisor_leak_scope("marked")`` keeps the older marker-only
  guard. Request it (or make it autouse in a ``conftest.py``) where you want it.
- ``lsp_server_under_test`` / ``dap_adapter_under_test``: run the lifecycle conformance
  battery of ``supervisor check lsp|dap`` against your own program:
  ``lsp_server_under_test(["my-server", "--stdio"], client="vscode")`` fails the test with the
  conformance table when a check fails and returns the report. Works in a plain test, in a
  Trio test (``@pytest.mark.trio`` or Trio mode: ``await lsp_server_under_test.check(...)``),
  in an asyncio test (the same ``await``: the battery runs its own Trio loop in a worker
  thread) and beside pytest-lsp or pytest-asyncio tests in the same suite.
- ``lsp_client`` / ``dap_client``: start your language server or debug adapter as a ready,
  blocking session client: ``server = lsp_client(["my-server", "--stdio"], root_uri=...)``
  then ``server.hover(uri, 0, 4)`` (typed lsprotocol results), ``server.open_document``,
  ``server.wait_for_notification``, ``server.diagnostics``... (:class:`LspClientFactory`,
  :class:`~supervisor.SyncLspClient`). Sync fixtures: they work in plain, asyncio (either
  ``asyncio_mode``) and Trio tests, beside pytest-lsp. A server that does not get ready
  fails the test with its reason, exit status and stderr tail (one line when the program
  can not be started); a failing test's report carries each server's stderr tail and log
  messages, and the tables of the conformance checks the test ran.
- ``supervisor_core``: a running :class:`supervisor.Core` (a Trio fixture: mark the test
  ``@pytest.mark.trio``, or use Trio mode), closed, with everything it started, when the
  test ends; ``async with supervisor_core.language_server(...)`` is the awaitable client.
  Outside a Trio test, or in one pytest-asyncio's ``asyncio_mode = auto`` also claims, it
  fails the test with one line saying what to set.
- ``supervisor_scenario`` / ``supervisor_scenario_session``:
  :func:`supervisor.testbed.open_scenario` and :func:`supervisor.testbed.open_scenario_session`,
  to start a misbehaving program under a chosen scenario.

Nothing heavy is imported until a fixture runs: loading the plugin costs a few
milliseconds of pytest start-up.

Example (a language-server author checks that a server which never answers ``shutdown`` is
still stopped within the bounds)::

    import pytest
    import trio

    @pytest.mark.trio
    async def test_stop_is_bounded(supervisor_scenario_session, no_leaked_processes):
        async with supervisor_scenario_session("no-shutdown-reply") as session:
            await session.endpoint.request("initialize", {"capabilities": {}})
            with trio.move_on_after(1):
                await session.endpoint.request("shutdown")
            report = await session.tree.aclose(term_grace_ms=500)
            assert session.tree.pid in report.terminated
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from typing import TYPE_CHECKING, Any, Final

import pytest

if TYPE_CHECKING:
    from collections.abc import (
        AsyncIterator,
        Awaitable,
        Callable,
        Coroutine,
        Generator,
        Iterator,
        Sequence,
    )

    from ._check._report import ConformanceReport
    from ._client._errors import StartFailed
    from ._client._sync import SyncDapClient, SyncLspClient
    from ._core._core import Core, CoreThread

__all__ = (
    "RUN_VARIABLE",
    "SETTLE_SECONDS",
    "ConformanceCheck",
    "ConformanceReport",
    "DapClientFactory",
    "LspClientFactory",
    "SyncDapClient",
    "SyncLspClient",
    "dap_adapter_under_test",
    "dap_client",
    "descendants",
    "lsp_client",
    "lsp_server_under_test",
    "marked_live_processes",
    "no_leaked_processes",
    "supervisor_core",
    "supervisor_scenario",
    "supervisor_scenario_session",
    "unreaped_children",
)

#: The fixtures' result types, loaded on first use (loading the plugin stays light).
_LAZY: Final = {
    "ConformanceReport": ("._check._report", "ConformanceReport"),
    "SyncLspClient": ("._client._sync", "SyncLspClient"),
    "SyncDapClient": ("._client._sync", "SyncDapClient"),
}


def __getattr__(name: str) -> object:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(module, "supervisor"), attribute)
    globals()[name] = value
    return value


#: The scope marker every supervised process carries (``supervisor.SCOPE_ENV``).
_MARKER: Final = "SUPERVISOR_SCOPE"
#: Every process a test run starts inherits this variable, so the guard looks only at the
#: processes of this run and never at those of another run on the same machine.
RUN_VARIABLE: Final = "SUPERVISOR_TEST_RUN"
#: A process that got SIGKILL can take a moment to be reaped by its parent; this is how long
#: a test's leftovers may take to disappear, in seconds.
SETTLE_SECONDS: Final = 3.0
#: ``/proc/<pid>/comm`` of a supervisor's watchdog (``supervisor._process._watchdog``).
_WATCHDOG_COMM: Final = "sv-watchdog"


#: ``supervisor_leak_scope`` values: every descendant and marked process, or marked only.
_LEAK_SCOPES: Final = ("descendants", "marked")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "supervisor_leak_scope",
        "what no_leaked_processes watches: 'descendants' (every descendant of the test"
        " process and every marked process; default) or 'marked' (marked processes only)",
        default="descendants",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Give this run its own id (inherited by every process it starts)."""
    os.environ[RUN_VARIABLE] = uuid.uuid4().hex
    config.addinivalue_line(
        "markers",
        "supervisor_leak_scope(scope): 'descendants' or 'marked' for this test's"
        " no_leaked_processes guard",
    )


def _stat(pid: int) -> tuple[str, str] | None:
    """``(comm, state)`` of ``pid`` from /proc/<pid>/stat, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or ")".
    close = data.rfind(b")")
    comm = data[data.find(b"(") + 1 : close].decode(errors="replace")
    return comm, data[close + 2 :].split(b" ", 1)[0].decode()


def _running(pid: int) -> bool:
    """Whether ``pid`` runs: not gone, and not a zombie -- except a process whose main thread
    exited while another thread runs on (Go and Java helpers do this), which reads ``Z`` but
    lives (``/proc/<pid>/stat`` field 20 counts its threads)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return fields[0] not in (b"Z", b"X") or int(fields[17]) > 1
    except (IndexError, ValueError):
        return False


def _environ(pid: int) -> bytes | None:
    """``/proc/<pid>/environ``, read through another thread once the main thread has exited
    (the file then fails with ESRCH although the process runs); None when unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except ProcessLookupError:
        try:
            tids = [t for t in os.listdir(f"/proc/{pid}/task") if t != str(pid)]
        except OSError:
            return None
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/environ", "rb") as f:
                    return f.read()
            except OSError:
                continue
        return None
    except OSError:
        return None


def marked_live_processes(run_id: str | None = None) -> dict[int, str]:
    """Live (non-zombie) processes of a test run whose environment carries the scope marker.

    Args:
        run_id: The run whose processes count (default: this run's ``SUPERVISOR_TEST_RUN``;
            when that is unset, every marked process counts).

    Returns:
        ``{pid: command line}``.
    """
    run = run_id if run_id is not None else os.environ.get(RUN_VARIABLE)
    found: dict[int, str] = {}
    needle = _MARKER.encode() + b"="
    ours = f"{RUN_VARIABLE}={run}".encode() if run else None
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        environ = _environ(pid)
        if environ is None:
            continue
        entries = environ.split(b"\0")
        if ours is not None and ours not in entries:
            continue
        if not any(entry.startswith(needle) for entry in entries):
            continue
        if not _running(pid):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmdline = "?"
        found[pid] = cmdline
    return found


def _children(pid: int | str = "self") -> list[int]:
    pids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return pids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
        except OSError:
            continue
    return pids


def _starttime(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        return int(data[data.rfind(b")") + 2 :].split()[19])
    except (IndexError, ValueError):
        return None


def descendants() -> dict[tuple[int, int], str]:
    """Live (non-zombie) descendants of this process, by ancestry in /proc.

    The supervisor's own watchdog (``sv-watchdog``, one per process, it lives as long as the
    process does) does not count.

    Returns:
        ``{(pid, start time in clock ticks): command line}``; the start time tells a
        reused pid from the process seen before.
    """
    found: dict[tuple[int, int], str] = {}
    stack = _children()
    seen: set[int] = set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stack.extend(_children(pid))
        stat = _stat(pid)
        start = _starttime(pid)
        if stat is None or start is None or not _running(pid) or stat[0] == _WATCHDOG_COMM:
            continue
        found[(pid, start)] = _cmdline(pid)
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip() or "?"
    except OSError:
        return "?"


def _reap_adopted_watchdogs() -> None:
    # A supervisor started by the test (``supervisor serve``) leaves its watchdog behind when
    # it exits; the watchdog sweeps and exits, and is re-parented to this process when it is a
    # child subreaper. Collecting that status is the subreaper's duty, not a leak of the test.
    for pid in _children():
        stat = _stat(pid)
        if stat is not None and stat == (_WATCHDOG_COMM, "Z"):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def unreaped_children() -> list[int]:
    """Zombie children of this process: somebody forgot to ``wait()``."""
    _reap_adopted_watchdogs()
    zombies: list[int] = []
    for pid in _children():
        stat = _stat(pid)
        if stat is not None and stat[1] == "Z" and not _running(pid):
            zombies.append(pid)
    return zombies


def _children_in_exec() -> list[int]:
    """Live children of this process whose exec has begun but not finished.

    ``posix_spawn`` returns once the child's exec has replaced its memory, before the new
    program's arguments and environment are in place: until then ``/proc/<pid>/environ``
    reads empty, so a process a test has just started does not show its marker yet. On a
    busy machine the child may wait that long for a CPU, past the guard's first scan.
    """
    found: list[int] = []
    for pid in _children():
        stat = _stat(pid)
        if stat is None or stat[1] in ("Z", "X"):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if not f.read(1):
                    found.append(pid)
        except OSError:
            continue
    return found


def _leak_scope(request: pytest.FixtureRequest) -> str:
    marker = request.node.get_closest_marker("supervisor_leak_scope")
    scope = str(marker.args[0]) if marker and marker.args else None
    scope = scope or str(request.config.getini("supervisor_leak_scope"))
    if scope not in _LEAK_SCOPES:
        raise pytest.UsageError(f"supervisor_leak_scope must be one of {_LEAK_SCOPES}: {scope!r}")
    return scope


@pytest.fixture
def no_leaked_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if a process it started, or an unreaped child, outlives it.

    Watched (``supervisor_leak_scope``): every descendant of the test process and every
    marker-tagged process (``descendants``, the default), or marker-tagged processes only
    (``marked``). Leftovers get :data:`SETTLE_SECONDS` to disappear; the survivors are then
    listed with their command lines, SIGKILLed and (children of the test process) reaped, so
    one leak does not cascade into later tests, and the test fails.
    """
    if not os.path.isdir("/proc"):
        yield
        return
    by_ancestry = _leak_scope(request) == "descendants"
    before = set(marked_live_processes())
    before_descendants = set(descendants()) if by_ancestry else set()
    yield
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        starting = _children_in_exec()  # scanned again once their marker shows
        leaked = {p: c for p, c in marked_live_processes().items() if p not in before}
        if by_ancestry:
            for (pid, start), cmd in descendants().items():
                if (pid, start) not in before_descendants and pid not in starting:
                    leaked.setdefault(pid, cmd)
        zombies = unreaped_children()
        if (not leaked and not zombies and not starting) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    problems = [f"pid {p} still running: {c}" for p, c in sorted(leaked.items())]
    problems += [f"pid {p} is an unreaped zombie child of the test process" for p in zombies]
    # Do not let one leak cascade into every later test: end the survivors, collect the
    # zombies (the failure above already names them).
    for pid in leaked:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    # Reap the ones that are our children, or a later test's guard finds them as zombies
    # (on a busy machine they die after that test's first scan). Bounded: SIGKILL is quick.
    ours = set(leaked) & set(_children())
    reap_by = time.monotonic() + 1.0
    while ours and time.monotonic() < reap_by:
        for pid in list(ours):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    ours.discard(pid)
            except ChildProcessError:
                ours.discard(pid)
        if ours:
            time.sleep(0.01)
    for pid in zombies:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    if problems:
        pytest.fail("processes outlived the test:\n  " + "\n  ".join(problems), pytrace=False)


class ConformanceCheck:
    """The callable behind ``lsp_server_under_test`` / ``dap_adapter_under_test``.

    ``check(argv, client="vscode", ...)`` runs the battery and returns the
    :class:`~supervisor._check._report.ConformanceReport`; it fails the test (with the
    table) when a check failed, unless ``expect_ok=False``. Called plainly it runs its own
    Trio loop (in a worker thread when an event loop already runs in this one, as in an
    asyncio test). ``await check.check(argv, ...)`` runs on the test's loop in a Trio test,
    and in an asyncio test awaits a worker thread running its own Trio loop (Trio can't run
    inside asyncio); anywhere else it raises RuntimeError saying to call it plainly.
    """

    def __init__(self, protocol: str, *, node: pytest.Item | None = None) -> None:
        self.protocol = protocol
        #: The test whose failure report shows every report this check made.
        self._node = node

    def _keep(self, argv: Sequence[str], report: ConformanceReport) -> ConformanceReport:
        if self._node is not None:
            self._node.stash.setdefault(_FINDINGS, []).append(
                (f"{_FIXTURES[self.protocol]} {' '.join(argv)}", report.table())
            )
        return report

    def check(
        self,
        argv: Sequence[str],
        client: str = "vscode",
        *,
        only: Sequence[str] | None = None,
        cwd: str | None = None,
        time_scale: float = 1.0,
        launch: dict[str, object] | None = None,
        expect_ok: bool = True,
    ) -> Coroutine[Any, Any, ConformanceReport]:
        """The battery to ``await`` in a Trio or asyncio test (see the class docstring).

        Raises:
            RuntimeError: Neither a Trio nor an asyncio loop runs in this thread (in a plain
                test, call the fixture itself).
        """
        import functools

        run = functools.partial(
            self._run, argv, client, only=only, cwd=cwd, time_scale=time_scale, launch=launch
        )
        if _running_loop() == "trio":
            return self._checked(argv, run(), expect_ok)
        if _running_loop() == "asyncio":
            import asyncio

            import trio

            return self._checked(argv, asyncio.to_thread(trio.run, run), expect_ok)
        raise RuntimeError(
            "await .check(...) needs a running Trio or asyncio loop (a Trio or asyncio test);"
            f" in a plain test call the fixture itself: {_FIXTURES[self.protocol]}(argv, ...)"
        )

    async def _checked(
        self, argv: Sequence[str], battery: Awaitable[ConformanceReport], expect_ok: bool
    ) -> ConformanceReport:
        failure: str | None = None
        try:
            report = self._keep(argv, await battery)
        except _CannotStart as exc:
            failure = str(exc)
        if failure is not None:
            pytest.fail(failure, pytrace=False)
        if expect_ok and not report.ok:
            pytest.fail(report.table(), pytrace=False)
        return report

    async def _run(
        self,
        argv: Sequence[str],
        client: str,
        *,
        only: Sequence[str] | None,
        cwd: str | None,
        time_scale: float,
        launch: dict[str, object] | None,
    ) -> ConformanceReport:
        """The battery on the current Trio loop.

        Raises:
            _CannotStart: The program could not be started at all (one line saying why).
        """
        try:
            return await self._battery(
                argv, client, only=only, cwd=cwd, time_scale=time_scale, launch=launch
            )
        except Exception as exc:
            from protocol import CoreError

            if isinstance(exc, CoreError) and exc.code == "launch_failed":
                raise _CannotStart(
                    f"{_FIXTURES[self.protocol]}: cannot start {argv[0]!r}: {exc.message}"
                ) from None
            raise

    async def _battery(
        self,
        argv: Sequence[str],
        client: str,
        *,
        only: Sequence[str] | None,
        cwd: str | None,
        time_scale: float,
        launch: dict[str, object] | None,
    ) -> ConformanceReport:
        from ._check._common import Bounds

        if self.protocol == "lsp":
            from ._check._lsp import check_language_server

            return await check_language_server(
                list(argv), client=client, cwd=cwd, bounds=Bounds().scaled(time_scale), only=only
            )
        from ._check._dap import check_debug_adapter

        return await check_debug_adapter(
            list(argv),
            client=client,
            cwd=cwd,
            launch=launch,
            bounds=Bounds.for_dap().scaled(time_scale),
            only=only,
        )

    def __call__(
        self,
        argv: Sequence[str],
        client: str = "vscode",
        *,
        only: Sequence[str] | None = None,
        cwd: str | None = None,
        time_scale: float = 1.0,
        launch: dict[str, object] | None = None,
        expect_ok: bool = True,
    ) -> ConformanceReport:
        import functools

        import trio

        run = functools.partial(
            trio.run,
            functools.partial(
                self._run, argv, client, only=only, cwd=cwd, time_scale=time_scale, launch=launch
            ),
        )
        failure: str | None = None
        try:
            if _running_loop() is not None:
                # trio.run refuses to nest in a running loop: give it a thread of its own.
                import concurrent.futures

                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    report = pool.submit(run).result()
            else:
                report = run()
        except _CannotStart as exc:
            failure = str(exc)
        if failure is not None:
            pytest.fail(failure, pytrace=False)
        self._keep(argv, report)
        if expect_ok and not report.ok:
            pytest.fail(report.table(), pytrace=False)
        return report


_FIXTURES: Final = {"lsp": "lsp_server_under_test", "dap": "dap_adapter_under_test"}


class _CannotStart(Exception):
    """The program under test could not be started; the message is the whole story."""


#: What a failing test's report shows: ``(title, text)`` of each conformance run.
_FINDINGS: Final = pytest.StashKey[list[tuple[str, str]]]()
#: The session clients a test made (their stderr, logs and output go into its report).
_CLIENTS: Final = pytest.StashKey[list["SyncLspClient | SyncDapClient"]]()


def _running_loop() -> str | None:
    """``"trio"`` or ``"asyncio"`` when that loop runs in this thread, else None."""
    import sys

    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_trio_token()
            return "trio"
        except RuntimeError:
            pass
    asyncio = sys.modules.get("asyncio")
    if asyncio is not None:
        try:
            asyncio.get_running_loop()
            return "asyncio"
        except RuntimeError:
            pass
    return None


@pytest.fixture
def lsp_server_under_test(request: pytest.FixtureRequest) -> ConformanceCheck:
    """Check a language server's lifecycle: ``lsp_server_under_test(argv, client="vscode")``.

    Fails the test with the conformance table when a check fails (see
    :class:`ConformanceCheck`; ``supervisor check lsp`` runs the same battery), and with
    one line when the program can not be started at all.
    """
    return ConformanceCheck("lsp", node=request.node)


@pytest.fixture
def dap_adapter_under_test(request: pytest.FixtureRequest) -> ConformanceCheck:
    """Check a debug adapter's lifecycle: ``dap_adapter_under_test(argv, launch={...})``."""
    return ConformanceCheck("dap", node=request.node)


class _TestCore:
    """One CoreThread per test, made when a client fixture first needs it."""

    def __init__(self) -> None:
        self._thread: CoreThread | None = None

    def get(self) -> CoreThread:
        if self._thread is None:
            from ._core._core import CoreThread

            self._thread = CoreThread()
            self._thread.__enter__()
        return self._thread

    def close(self) -> None:
        if self._thread is not None:
            self._thread.close()
            self._thread = None


class LspClientFactory:
    """The ``lsp_client`` fixture: ``server = lsp_client(argv, root_uri=...)``.

    Each call starts a language server and returns it once it is ready, as a
    :class:`~supervisor.SyncLspClient` (the methods of :class:`~supervisor.LspClient`,
    blocking: they work in a plain test, an asyncio test in either ``asyncio_mode``, and a
    Trio test). A server that does not get ready fails the test with the reason, its exit
    status and its stderr tail (one line when the program can not be started at all).
    Every server is stopped when the test ends; a failing test's report carries each one's
    stderr tail and log messages. In a Trio test that wants ``await``, use
    ``supervisor_core.language_server(...)`` instead.
    """

    def __init__(self, core: _TestCore, node: pytest.Item) -> None:
        self._core = core
        self._node = node

    def __call__(
        self, argv: Sequence[str], *, root_uri: str | None = None, **options: Any
    ) -> SyncLspClient:
        """Start ``argv`` (default root: the current directory) with the options of
        :func:`supervisor.open_lsp_client`."""
        from ._client._errors import StartFailed

        root = root_uri if root_uri is not None else _cwd_uri()
        try:
            client = self._core.get().language_server(argv, root_uri=root, **options)
        except StartFailed as exc:
            failure = f"lsp_client: {_start_failure(exc)}"
        else:
            self._node.stash.setdefault(_CLIENTS, []).append(client)
            return client
        # Outside the except block: the report shows this line, not a chain of causes.
        pytest.fail(failure, pytrace=False)


class DapClientFactory:
    """The ``dap_client`` fixture: ``debug = dap_client(argv, root_path=...)``.

    Each call starts a debug adapter and returns it once it answered ``initialize``, as a
    :class:`~supervisor.SyncDapClient` (see :class:`LspClientFactory`); a failing test's
    report carries its output and how it ended.
    """

    def __init__(self, core: _TestCore, node: pytest.Item) -> None:
        self._core = core
        self._node = node

    def __call__(self, argv: Sequence[str], **options: Any) -> SyncDapClient:
        """Start ``argv`` with the options of :func:`supervisor.open_dap_client`."""
        from ._client._errors import StartFailed

        try:
            client = self._core.get().debug_adapter(argv, **options)
        except StartFailed as exc:
            failure = f"dap_client: {_start_failure(exc)}"
        else:
            self._node.stash.setdefault(_CLIENTS, []).append(client)
            return client
        pytest.fail(failure, pytrace=False)


def _cwd_uri() -> str:
    from pathlib import Path

    return Path.cwd().as_uri()


def _start_failure(exc: StartFailed) -> str:
    """The message of a start that did not get ready: one line, then its stderr tail."""
    if exc.reason == "launchFailed" or not exc.stderr_tail:
        return exc.message
    return exc.message + "\nstderr tail:\n  " + "\n  ".join(exc.stderr_tail[-20:])


@pytest.fixture
def _supervisor_test_core() -> Iterator[_TestCore]:
    core = _TestCore()
    try:
        yield core
    finally:
        core.close()


@pytest.fixture
def lsp_client(
    request: pytest.FixtureRequest, _supervisor_test_core: _TestCore
) -> Iterator[LspClientFactory]:
    """Start language servers as ready, blocking clients: ``lsp_client(argv, root_uri=...)``
    (see :class:`LspClientFactory`); each is stopped when the test ends."""
    factory = LspClientFactory(_supervisor_test_core, request.node)
    yield factory
    _close_clients(request.node)


@pytest.fixture
def dap_client(
    request: pytest.FixtureRequest, _supervisor_test_core: _TestCore
) -> Iterator[DapClientFactory]:
    """Start debug adapters as ready, blocking clients: ``dap_client(argv, ...)`` (see
    :class:`DapClientFactory`); each is disconnected when the test ends."""
    factory = DapClientFactory(_supervisor_test_core, request.node)
    yield factory
    _close_clients(request.node)


def _close_clients(node: pytest.Item) -> None:
    for client in node.stash.get(_CLIENTS, []):
        client.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failing test's report shows what its servers said and what the checks found."""
    report = yield
    if report.when == "call" and report.failed:
        for title, text in _client_sections(item):
            report.sections.append((title, text))
        for title, table in item.stash.get(_FINDINGS, []):
            report.sections.append((f"supervisor: conformance of {title}", table))
    return report


def _client_sections(item: pytest.Item) -> Iterator[tuple[str, str]]:
    from ._client._sync import SyncLspClient

    for client in item.stash.get(_CLIENTS, []):
        try:
            if isinstance(client, SyncLspClient):
                name = f"language server {client.server_id} ({client.session_id})"
                tail = client.stderr_tail()
                yield f"supervisor: {name} stderr tail", "\n".join(tail) or "(none)"
                lines = [f"[{log.level}] {log.source}: {log.message}" for log in client.logs]
                yield f"supervisor: {name} log messages", "\n".join(lines[-100:]) or "(none)"
            else:
                name = f"debug adapter {client.adapter_id} ({client.session_id})"
                output = "".join(event.output for event in client.output)
                yield f"supervisor: {name} output", output[-8000:] or "(none)"
                ended = client.terminated
                if ended is not None:
                    yield f"supervisor: {name} ended", f"reason {ended.reason}"
        except Exception as exc:  # the report must not fail on a client that is gone
            yield "supervisor: a session client", f"could not be read: {exc}"


def supervisor_core() -> AsyncIterator[Core]:
    """A running Core with the default services; closed (everything ended) after the test.

    A Trio fixture: pytest-trio runs it for Trio tests (``@pytest.mark.trio``, or Trio
    mode). It is a plain function returning the async generator, marked for pytest-trio,
    so pytest-asyncio (whose ``auto`` mode takes every ``async def`` fixture) leaves it
    alone; a test that is not a Trio test fails with one line saying so.
    """
    return _open_test_core()


# pytest-trio's marker for a fixture it must run (what ``pytest_trio.trio_fixture`` sets),
# without importing pytest-trio when the plugin loads.
supervisor_core._force_trio_fixture = True  # type: ignore[attr-defined]
supervisor_core = pytest.fixture(supervisor_core)


async def _open_test_core() -> AsyncIterator[Core]:
    from ._core._core import open_core

    async with open_core() as core:
        yield core


#: Fixtures only a Trio test can use.
_TRIO_FIXTURES: Final = frozenset({"supervisor_core"})


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail at once, in one line, a test whose Trio fixture can not run.

    Before any fixture is set up: a fixture that fails inside pytest's fixture machinery
    would leave its definition half set up for the next test.
    """
    wanted = sorted(_TRIO_FIXTURES & set(getattr(item, "fixturenames", ())))
    if not wanted:
        return
    if item.get_closest_marker("trio") is None:
        pytest.fail(
            f"{wanted[0]} is a Trio fixture: mark the test @pytest.mark.trio (with"
            " pytest-trio), or use the blocking lsp_client / dap_client fixtures",
            pytrace=False,
        )
    if item.get_closest_marker("asyncio") is not None:
        pytest.fail(
            f"{wanted[0]}: pytest-asyncio's asyncio_mode = auto also claims this"
            " Trio test; set asyncio_mode = strict (and mark asyncio tests"
            " @pytest.mark.asyncio), or use the blocking lsp_client / dap_client fixtures",
            pytrace=False,
        )


@pytest.fixture
def supervisor_scenario() -> Callable[..., contextlib.AbstractAsyncContextManager[object]]:
    """:func:`supervisor.testbed.open_scenario`: ``async with supervisor_scenario(name, ...)``."""
    from .testbed import open_scenario

    return open_scenario


@pytest.fixture
def supervisor_scenario_session() -> Callable[..., contextlib.AbstractAsyncContextManager[object]]:
    """:func:`supervisor.testbed.open_scenario_session` (an LSP program with an endpoint)."""
    from .testbed import open_scenario_session

    return open_scenario_session
