"""Supervision boundaries: what fails inside a node of the nursery tree ends only that node.

Trio's rule is that an exception cancels everything above it until someone handles it. A
supervisor needs the other half of the Erlang/OTP ``one_for_one`` rule too: every request,
session, terminal, job and plugin call is a node whose unexpected failure (a bug of ours, a
library raising on a value we did not foresee, a renderer rejecting a sequence) is caught at
the node, reported, and turned into that node's own end -- a request answered ``internal``,
a session ``failed`` with reason ``internal`` -- while its siblings, the Core and serve go on.

What is *not* contained: :class:`trio.Cancelled` (the tree's own control flow),
``KeyboardInterrupt`` and ``SystemExit`` (the interpreter's exit). They may arrive in the same
exception group as a failure; :func:`split_failure` separates the two so that the failure is
reported and the rest is re-raised as Trio intends.

A fault-injection hook for the chaos runner and tests lives here too: :func:`fault_point`
marks a place inside a node where an injected exception may be raised. It costs one global
read when nothing is armed. :func:`fault_unit` names the unit the code inside it (and every
task it starts) belongs to, so that a plan fires inside one chosen request, session,
terminal or job only.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import random
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, NoReturn, TypeVar

# One bound and one cut for every message on the wire, shared with protocol's payload readers.
from protocol import MAX_MESSAGE_BYTES, cut_utf8

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator

    from protocol import JSONObject

__all__ = (
    "FAULT_SITES",
    "MAX_MESSAGE_BYTES",
    "FaultPlan",
    "InjectedFault",
    "arm_faults",
    "crash_report",
    "cut_utf8",
    "fault_point",
    "fault_unit",
    "internal_message",
    "log_failure",
    "raise_single",
    "run_contained",
    "single_exception",
    "split_failure",
)

logger = logging.getLogger("supervisor.boundary")

_T = TypeVar("_T")

#: Stderr lines a crash report carries (the last ones).
CRASH_REPORT_LINES: Final = 20


def split_failure(
    exc: BaseException,
) -> tuple[Exception | None, BaseException | None]:
    """Split an exception into the failure a boundary contains and what must propagate.

    Returns:
        ``(failure, rest)``: ``failure`` is an :class:`Exception` (possibly an
        :class:`ExceptionGroup`) that the boundary reports and turns into its own end, or None;
        ``rest`` is what must be re-raised (:class:`trio.Cancelled`, ``KeyboardInterrupt``,
        ``SystemExit``, or a group of them), or None.
    """
    if isinstance(exc, Exception):
        return exc, None
    if isinstance(exc, BaseExceptionGroup):
        failure, rest = exc.split(Exception)
        return failure, rest
    return None, exc


def single_exception(exc: BaseException) -> BaseException:
    """``exc``, or the one exception a group holds (through nested one-member groups).

    A group of two or more is returned as it is: only a lone exception is unwrapped.
    """
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def raise_single(group: BaseExceptionGroup[BaseException]) -> NoReturn:
    """Raise the lone exception ``group`` holds as itself, or ``group`` when it holds more.

    For the edges of the public API (``open_core``, ``CoreThread``, the CLI): inside, Trio's
    strict exception groups stay on, but a caller whose own error crossed four nurseries on
    its way out gets that error, not four nested groups. The exception keeps its traceback,
    cause and context (re-raising would otherwise chain it to the group that held it).
    """
    exc = single_exception(group)
    context, cause, suppress = exc.__context__, exc.__cause__, exc.__suppress_context__
    try:
        raise exc
    finally:
        exc.__context__, exc.__cause__ = context, cause
        exc.__suppress_context__ = suppress
        del exc, group


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _first_leaf(exc: BaseException) -> BaseException:
    return next(_leaves(exc), exc)


def internal_message(exc: BaseException) -> str:
    """The one-line, bounded text a failure is reported with on the wire (no traceback).

    ``"<Type>: <message>"`` of the first leaf of a group, cut to :data:`MAX_MESSAGE_BYTES`.
    """
    leaf = _first_leaf(exc)
    text = str(leaf)
    name = type(leaf).__name__
    return cut_utf8(f"{name}: {text}" if text else name)


def crash_report(exc: BaseException, stderr_tail: Iterable[str] = ()) -> JSONObject:
    """The crash report of a node that failed on an unexpected exception.

    Returns:
        ``{exceptionType, message, stderrTail}``: the type name of the (first) exception, its
        bounded message, and the last :data:`CRASH_REPORT_LINES` stderr lines of the node's
        process (each bounded). The traceback is never on the wire; it goes to the log.
    """
    leaf = _first_leaf(exc)
    tail = list(stderr_tail)[-CRASH_REPORT_LINES:]
    return {
        "exceptionType": type(leaf).__name__,
        "message": cut_utf8(str(leaf)),
        "stderrTail": [cut_utf8(line) for line in tail],
    }


def log_failure(what: str, exc: BaseException) -> None:
    """Log a contained failure with its traceback (stderr only; never on the wire)."""
    logger.error(
        "%s failed; contained at its boundary:\n%s",
        what,
        "".join(traceback.format_exception(exc)).rstrip(),
    )


async def run_contained(
    what: str,
    fn: Callable[[], Awaitable[_T]],
    on_failure: Callable[[Exception], Awaitable[None]],
) -> _T | None:
    """Run ``fn()`` as a boundary: an unexpected failure ends it, not its caller.

    Args:
        what: Names the node in the log, e.g. ``"terminal term-3"``.
        fn: The node's work.
        on_failure: Awaited with the contained failure once it was logged (move the node to
            ``failed``, answer its request, start its stop ladder). It runs where ``fn`` ran,
            so it is cancelled with it; it must shield and bound what must finish.

    Returns:
        ``fn``'s result, or None when it failed.

    Raises:
        Whatever must propagate (:func:`split_failure`'s ``rest``), after ``on_failure``.
    """
    try:
        return await fn()
    except BaseException as exc:
        failure, rest = split_failure(exc)
        if failure is None:
            raise
        log_failure(what, failure)
        await on_failure(failure)
        if rest is not None:
            raise rest from None
        return None


# -- fault injection (tests and the chaos runner only) -------------------------------------


#: Every fault point in the code, by name (``fault_point(name)``); a test keeps it equal to the
#: calls in the source, so the chaos runner can name the points that never fired.
FAULT_SITES: Final = frozenset(
    {
        "request.dispatch",
        "job.spawn",
        "job.output",
        "job.exit",
        "lsp.reader",
        "lsp.handshake",
        "lsp.stderr",
        "lsp.exitWatch",
        "lsp.request",
        "lsp.serverRequest",
        "dap.reader",
        "dap.writer",
        "dap.drain",
        "dap.exit",
        "dap.initialize",
        "dap.configure",
        "dap.operation",
        "dap.reverse",
        "terminal.reader",
        "terminal.render",
        "terminal.exit",
        "terminal.cleanup",
        "terminal.outcome",
        "plugin.notification",
        "plugin.call",
        "plugin.hostRequest",
        "plugin.relay",
    }
)


class InjectedFault(RuntimeError):
    """An exception raised on purpose at a :func:`fault_point` by an armed :class:`FaultPlan`."""


#: The unit (a name the caller chose) the running code belongs to, for :attr:`FaultPlan.unit`.
#: Trio tasks inherit the context of the task that started them, so a session's tasks,
#: started from inside the request that created it, carry the unit of that request's caller.
_current_unit: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "supervisor_fault_unit", default=None
)


@contextlib.contextmanager
def fault_unit(name: str) -> Generator[None]:
    """Mark the code run inside (and every task it starts) as the unit ``name``.

    An armed plan whose :attr:`FaultPlan.unit` is ``name`` fires only there, so a test or the
    chaos runner knows which session, terminal, job or request a fault ended.
    """
    token = _current_unit.set(name)
    try:
        yield
    finally:
        _current_unit.reset(token)


@dataclass
class FaultPlan:
    """Which fault points raise, and a record of those that did.

    Attributes:
        sites: Site-name prefixes that may fire (``"lsp."`` fires every LSP site); empty
            means every site.
        probability: The chance, at each call of a matching site, that it raises.
        limit: How many faults may fire in all.
        rng: The source of randomness (seed it for a reproducible run).
        unit: Fire only inside this unit (see :func:`fault_unit`); None: anywhere.
        fired: The sites that raised, in order.
    """

    sites: tuple[str, ...] = ()
    probability: float = 1.0
    limit: int = 1
    rng: random.Random = field(default_factory=random.Random)
    unit: str | None = None
    fired: list[str] = field(default_factory=list)

    def should_fire(self, site: str) -> bool:
        if len(self.fired) >= self.limit:
            return False
        if self.sites and not any(site.startswith(prefix) for prefix in self.sites):
            return False
        if self.unit is not None and _current_unit.get() != self.unit:
            return False
        if self.probability < 1.0 and self.rng.random() >= self.probability:
            return False
        self.fired.append(site)
        return True


_plan: FaultPlan | None = None


def arm_faults(plan: FaultPlan | None) -> FaultPlan | None:
    """Arm ``plan`` (None disarms); return the plan that was armed before."""
    global _plan
    previous, _plan = _plan, plan
    return previous


def fault_point(site: str) -> None:
    """Raise :class:`InjectedFault` here when an armed plan says so; otherwise nothing.

    Sites are dotted names, kind first (``"lsp.reader"``, ``"terminal.render"``,
    ``"request.dispatch"``).
    """
    if _plan is not None and _plan.should_fire(site):
        raise InjectedFault(f"injected fault at {site}")
