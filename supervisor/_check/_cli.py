"""``supervisor check lsp|dap [options] -- CMD ARGS...``.

Exit status: 0 when every check passed or was skipped, 1 when at least one failed, 2 for bad
usage (no program, an unknown profile or check, bad ``--launch`` JSON) or a program that
cannot be started at all (nothing was checked), 130/143 when interrupted by SIGINT/SIGTERM
(every program under check is ended first).
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._report import ConformanceReport

__all__ = ("CHECK_EPILOG", "CHECK_HELP", "add_options", "run_check")

# _profiles.CLIENTS and _report.EXIT_BAD_USAGE, spelled out so --help imports nothing.
_CLIENTS = ("vscode", "neovim", "helix")
EXIT_BAD_USAGE = 2
#: The largest ``--time-scale``: a bound of hours is a mistake, not a slow machine.
MAX_TIME_SCALE = 1000.0


def _add_options(check: argparse.ArgumentParser) -> None:
    check.add_argument(
        "--client",
        choices=_CLIENTS,
        default="vscode",
        help="the client-capability profile sent in initialize (default vscode)",
    )
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument(
        "--only",
        action="append",
        default=None,
        metavar="CHECK",
        help="run only this check (repeatable; initialize always runs)",
    )
    check.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiply every time bound (a slow machine or a JIT-started program; default 1,"
        f" at most {MAX_TIME_SCALE:g})",
    )
    check.add_argument(
        "--cwd",
        default=None,
        help="workspace folder and working directory (default: the current one)",
    )
    check.add_argument(
        "--launch",
        default=None,
        metavar="JSON",
        help='dap: the launch request\'s arguments, e.g. \'{"program": "app.py"}\'; without'
        " it the debuggee checks are skipped",
    )


#: ``supervisor check --help``: what it does, then (epilog) its exit codes and examples.
CHECK_HELP = """\
Run a language server (lsp) or debug adapter (dap) through a battery of
lifecycle checks and print a conformance table: each check, pass/fail/skip,
the evidence and the rule (README, "Check your own server or adapter").
Usage: supervisor check lsp|dap [OPTIONS] -- CMD [ARGS...]
"""
CHECK_EPILOG = """\
exit status:
  0  every check passed or was skipped
  1  a check failed
  2  bad usage, or the program could not be started (nothing checked)
  130/143  interrupted by SIGINT/SIGTERM (every program under check ended first)

examples:
  supervisor check lsp -- pylsp
  supervisor check lsp --client neovim --json -- ruff server
  supervisor check dap --launch '{"program": "app.py"}' -- python -m debugpy.adapter
"""


def add_options(check: argparse.ArgumentParser) -> None:
    """The arguments of ``supervisor check`` (its parser comes from the CLI's table)."""
    check.add_argument("protocol", choices=("lsp", "dap"), help="what CMD speaks on stdio")
    _add_options(check)
    # Options may also follow the protocol; argparse hands everything after it over here.
    check.add_argument("argv", nargs=argparse.REMAINDER, help="[OPTIONS] -- CMD [ARGS...]")


def _usage(message: str) -> int:
    print(f"supervisor check: {message}", file=sys.stderr)
    return EXIT_BAD_USAGE


def _inner_parser(protocol: str) -> argparse.ArgumentParser:
    """The options that follow the protocol (``check lsp --json -- CMD``), with its help."""
    inner = argparse.ArgumentParser(
        prog=f"supervisor check {protocol}",
        usage=f"supervisor check {protocol} [OPTIONS] -- CMD [ARGS...]",
        description=CHECK_HELP,
        epilog=CHECK_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_options(inner)
    inner.add_argument("--log-level", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return inner


def _parse_rest(args: argparse.Namespace) -> tuple[argparse.Namespace, list[str]] | int:
    """The options after the protocol and the program's argv, or an exit status
    (``--help``: 0; a bad option: 2)."""
    rest = list(args.argv)
    inner = _inner_parser(args.protocol)
    if "--" in rest:
        cut = rest.index("--")
        options, argv = rest[:cut], rest[cut + 1 :]
    else:
        # No "--": options up to the first word that is not one, then the program and its
        # own arguments (``check lsp --help`` is ours; ``check lsp pylsp --help`` is pylsp's).
        inner.add_argument("program", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        options, argv = rest, []
    try:
        args = inner.parse_args(options, namespace=args)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else EXIT_BAD_USAGE
    if "--" not in rest:
        argv = list(args.program)
    return args, argv


def _read_launch(text: str) -> dict[str, Any] | str:
    """``--launch`` as a JSON object, or why not: the project's JSON rules (no ``NaN`` or
    ``Infinity``, finite numbers, valid Unicode, bounded depth), as for any request."""
    from protocol import CoreError
    from protocol._json import loads
    from protocol._payload import check_request_values

    try:
        launch = loads(text)
    except ValueError as exc:
        return f"--launch is not JSON: {exc}"
    if not isinstance(launch, dict):
        return "--launch must be a JSON object"
    try:
        check_request_values(launch, "--launch")
    except CoreError as exc:
        return exc.message
    return launch


def _interrupt_status(exc: BaseException) -> int | None:
    """128 + SIGINT when ``exc`` is KeyboardInterrupt or a group of nothing else."""
    if isinstance(exc, KeyboardInterrupt):
        return 128 + signal.SIGINT
    if isinstance(exc, BaseExceptionGroup):
        matched, rest = exc.split(KeyboardInterrupt)
        if matched is not None and rest is None:
            return 128 + signal.SIGINT
    return None


async def _until_signal(
    battery: Callable[[], Awaitable[ConformanceReport]],
) -> ConformanceReport | int:
    """Run the battery; SIGINT or SIGTERM cancels it (its programs end first, shielded).

    Returns:
        The report, or the signal number that interrupted it.

    Raises:
        ValueError, CoreError: As the battery does (bad usage, a program that can't start),
            unwrapped from the nursery's group.
    """
    import trio

    from protocol import CoreError

    interrupted: list[int] = []
    report: ConformanceReport | None = None
    refused: ValueError | CoreError | None = None
    # Installed before anything starts: a signal cancels the battery rather than raising
    # KeyboardInterrupt through its nurseries as a traceback.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for signum in signals:
                    interrupted.append(signum)
                    nursery.cancel_scope.cancel()
                    return

            async def run() -> None:
                nonlocal report, refused
                try:
                    report = await battery()
                except (ValueError, CoreError) as exc:
                    refused = exc
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            nursery.start_soon(run)
    if interrupted:
        return interrupted[0]
    if refused is not None:
        raise refused
    assert report is not None
    return report


def run_check(args: argparse.Namespace) -> int:
    """Run ``supervisor check`` with parsed arguments; returns the exit status."""
    parsed = _parse_rest(args)
    if isinstance(parsed, int):
        return parsed
    args, argv = parsed
    if not argv:
        return _usage("no program given: supervisor check lsp|dap -- CMD [ARGS...]")
    if not (math.isfinite(args.time_scale) and 0 < args.time_scale <= MAX_TIME_SCALE):
        return _usage(f"--time-scale must be a number above 0 and at most {MAX_TIME_SCALE:g}")
    launch = None
    if args.launch is not None:
        if args.protocol != "dap":
            return _usage("--launch is for dap")
        read = _read_launch(args.launch)
        if isinstance(read, str):
            return _usage(read)
        launch = read

    import trio

    from protocol import CoreError

    from ._common import Bounds
    from ._dap import check_debug_adapter
    from ._lsp import check_language_server

    if args.protocol == "lsp":
        bounds = Bounds().scaled(args.time_scale)

        def battery() -> Awaitable[ConformanceReport]:
            return check_language_server(
                argv, client=args.client, cwd=args.cwd, bounds=bounds, only=args.only
            )
    else:
        bounds = Bounds.for_dap().scaled(args.time_scale)

        def battery() -> Awaitable[ConformanceReport]:
            return check_debug_adapter(
                argv, client=args.client, cwd=args.cwd, launch=launch, bounds=bounds, only=args.only
            )

    try:
        outcome = trio.run(_until_signal, battery)
    except ValueError as exc:
        return _usage(str(exc))
    except CoreError as exc:
        return _usage(f"cannot start {argv[0]!r}: {exc}")
    except BaseException as exc:
        # SIGINT before the handler was in place (while trio started): nothing had started.
        status = _interrupt_status(exc)
        if status is None:
            raise
        outcome = signal.SIGINT
    if isinstance(outcome, int):
        print(
            f"supervisor check: interrupted by {signal.Signals(outcome).name}; every program"
            " under check was ended",
            file=sys.stderr,
        )
        return 128 + outcome
    if args.json:
        print(json.dumps(outcome.to_json(), indent=2, ensure_ascii=False))
    else:
        print(outcome.table())
    return outcome.exit_status()
