"""The stop ladder: the one way every kind ends its program, and its bounds.

Every kind -- language servers and plugin backends, debug adapters, terminals, jobs,
``process.run``, plugin runs -- ends its process tree here, with one procedure::

    polite step     the kind's own (LSP ``shutdown`` + ``exit``, DAP closing the adapter's
                    input, a terminal's hang-up; none for a job), together with the wait for
                    the main process to exit, bounded by ``polite_ms``
    TERM            SIGTERM + SIGCONT to the group and to every known member outside it
    grace           up to ``term_grace_ms``; over as soon as everything is gone
    KILL            SIGKILL to the group and to every straggler found by marker and ancestry
    bounded wait    up to ``kill_wait_ms``; survivors are then reported, not waited for
    drain           the kind's readers run to the end of the output, at most ``drain_ms``
                    more once the tree is gone; while they are still reading (what the
                    tree wrote before it was gone, on a busy machine), ``drain_ms`` more at
                    a time, up to ``max_drain_ms`` in all
    pipes closed

The readers are never stopped before the drain ends: they read from the first step to the
last, so what the program writes while it stops -- after the polite step, from its SIGTERM or
SIGHUP handler, up to its exit -- is read, and a kind reports the exit only after the ladder
returned, so that output is delivered before the exit. A grandchild that holds a pipe open
stretches nothing: the drain is bounded from the moment the tree is gone (invariant 10). What
the tree wrote before it was gone is finite (at most the pipes' buffers) and is read in full
unless handing it on takes longer than ``max_drain_ms``: a drain slice that read something is
followed by another, so a loaded machine (many programs ending at once on busy cores) does
not cut a program's last words, while a process outside the tree that holds a pipe and
keeps writing stretches the end by ``max_drain_ms`` at most.

The signal steps are :meth:`ProcessTree._end <supervisor._process._tree.ProcessTree._end>`;
this module is the procedure around them and the one place the shared bounds are declared
(the design "Default bounds"). A kind keeps only its polite step and its polite bound. It
lives with the process trees, the lowest floor of ``supervisor/``, so that every kind,
``process.run`` included, reaches it without an import up a floor; the session skeleton
(``supervisor._session``) offers the same names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import trio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._tree import PoliteStep, ProcessTree, TreeEndReport

__all__ = (
    "DRAIN_AFTER_EXIT_MS",
    "KILL_WAIT_MS",
    "MAX_DRAIN_MS",
    "POLITE_TIMEOUT_MS",
    "TERM_GRACE_MS",
    "StopBounds",
    "stop_ladder",
)

#: After the polite step is refused or times out: SIGTERM, then this long before SIGKILL.
TERM_GRACE_MS: Final = 2_000
#: After SIGKILL: this long before the processes still there are reported "unkillable".
KILL_WAIT_MS: Final = 1_000
#: After the exit (and the end of the rest of the tree): this long to read what it wrote
#: before (its pipes may be held open by a grandchild, which must not stretch a deadline).
DRAIN_AFTER_EXIT_MS: Final = 500
#: A polite step's bound where the kind has no bound of its own (closing stdin).
POLITE_TIMEOUT_MS: Final = 2_000
#: The whole drain while the output is still being read (ours): ``DRAIN_AFTER_EXIT_MS`` at a
#: time, each slice after one that read something.
MAX_DRAIN_MS: Final = 5_000


@dataclass(frozen=True, slots=True)
class StopBounds:
    """The bounds of one stop ladder, in milliseconds.

    Attributes:
        polite_ms: The polite step's bound, the wait for the main process's exit included
            (the kind's own).
        term_grace_ms: After SIGTERM, the longest wait before SIGKILL.
        kill_wait_ms: After SIGKILL, the longest wait before survivors are reported.
        drain_ms: After the tree is gone, the longest wait for the readers to reach the end
            of the output while they read nothing.
        max_drain_ms: The longest drain while they still read (at least ``drain_ms``).

    Raises:
        ValueError: A bound is negative.
    """

    polite_ms: int = POLITE_TIMEOUT_MS
    term_grace_ms: int = TERM_GRACE_MS
    kill_wait_ms: int = KILL_WAIT_MS
    drain_ms: int = DRAIN_AFTER_EXIT_MS
    max_drain_ms: int = MAX_DRAIN_MS

    def __post_init__(self) -> None:
        for name in ("polite_ms", "term_grace_ms", "kill_wait_ms", "drain_ms", "max_drain_ms"):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if self.max_drain_ms < self.drain_ms:
            raise ValueError(
                f"max_drain_ms ({self.max_drain_ms}) must be >= drain_ms ({self.drain_ms})"
            )

    @property
    def total_ms(self) -> int:
        """The longest a whole stop can take: every step at its bound (plus procfs scans)."""
        return self.polite_ms + self.term_grace_ms + self.kill_wait_ms + self.max_drain_ms


async def stop_ladder(
    tree: ProcessTree,
    bounds: StopBounds,
    *,
    polite: PoliteStep | None = None,
    drained: Callable[[], Awaitable[object]] | None = None,
    progress: Callable[[], int] | None = None,
    close_pipes: bool = True,
) -> TreeEndReport:
    """End ``tree`` by the stop ladder (module docstring), drain its output, close its pipes.

    Idempotent: a second call (concurrent or later) joins the first end and gets its
    report; its own ``drained`` then still gets the drain bound.

    Args:
        tree: The program's process tree.
        bounds: The ladder's bounds.
        polite: The kind's polite step: an async callable asking the program to exit
            (None: none, TERM first). Skipped when the main process has already exited;
            an exception it raises is recorded in the report and the ladder goes on.
        drained: Returns once the program's output has ended and everything read has
            been handed on (the kind's readers reached end of file); it may do the reading
            itself. It runs from the first step on, concurrently with the ladder, and is
            cancelled ``bounds.drain_ms`` after the tree is gone. An exception it raises
            (a bug) is raised once the tree has ended. None: nothing to drain.
        progress: A count that grows whenever the readers read or hand something on (bytes,
            messages); a drain slice in which it grew is followed by another, up to
            ``bounds.max_drain_ms``. None: one slice of ``bounds.drain_ms``.
        close_pipes: False leaves the pipes open, for a caller that closes them itself
            (without the scheduler pass closing them here costs).

    Returns:
        The tree's :class:`~supervisor._process._tree.TreeEndReport`.

    **Cancellation:** shielded: it completes (bounded by ``bounds.total_ms`` plus procfs
    scans) even when called from a cancelled scope; the caller's cancellation is delivered
    at its next checkpoint.
    """
    if drained is None:
        # No scope of our own: the tree's end and the closing of the pipes are each shielded
        # where they wait (a cancel scope per end is measurable at thousands of jobs).
        report = await _end(tree, bounds, polite)
        if close_pipes:
            await tree._close_pipes()
        return report
    with trio.CancelScope(shield=True):
        report = await _end_while_draining(tree, bounds, polite, drained, progress)
        if close_pipes:
            await tree._close_pipes()
    return report


async def _end(tree: ProcessTree, bounds: StopBounds, polite: PoliteStep | None) -> TreeEndReport:
    return await tree._end(
        polite=polite,
        polite_timeout_ms=bounds.polite_ms,
        term_grace_ms=bounds.term_grace_ms,
        kill_wait_ms=bounds.kill_wait_ms,
    )


async def _end_while_draining(
    tree: ProcessTree,
    bounds: StopBounds,
    polite: PoliteStep | None,
    drained: Callable[[], Awaitable[object]],
    progress: Callable[[], int] | None,
) -> TreeEndReport:
    done = trio.Event()
    failures: list[Exception] = []

    async def drain() -> None:
        try:
            await drained()
        except Exception as exc:
            # Ending the tree comes first; the bug is raised after it.
            failures.append(exc)
        finally:
            done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        report = await _end(tree, bounds, polite)
        await _drain(done, bounds, progress)
        nursery.cancel_scope.cancel()
    if failures:
        raise failures[0]
    return report


async def _drain(done: trio.Event, bounds: StopBounds, progress: Callable[[], int] | None) -> None:
    """Wait for ``done``: ``drain_ms`` at a time while ``progress`` grows, at most
    ``max_drain_ms`` in all."""
    cap = trio.current_time() + bounds.max_drain_ms / 1000
    seen = progress() if progress is not None else 0
    while True:
        with trio.move_on_at(min(trio.current_time() + bounds.drain_ms / 1000, cap)):
            await done.wait()
        if done.is_set() or progress is None or trio.current_time() >= cap:
            return
        count = progress()
        if count == seen:
            return  # a slice without a byte: nothing left to read, or a holder gone quiet
        seen = count
