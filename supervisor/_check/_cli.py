"""``supervisor check lsp|dap [options] -- CMD ARGS...``.

Exit status: 0 when every check passed or was skipped, 1 when at least one failed, 2 for bad
usage (no program, an unknown profile or check, bad ``--launch`` JSON) or a program that
cannot be started at all (nothing was checked).
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ("CHECK_EPILOG", "CHECK_HELP", "add_options", "run_check")

# _profiles.CLIENTS and _report.EXIT_BAD_USAGE, spelled out so --help imports nothing.
_CLIENTS = ("vscode", "neovim", "helix")
EXIT_BAD_USAGE = 2


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
        help="multiply every time bound (a slow machine or a JIT-started program; default 1)",
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


def run_check(args: argparse.Namespace) -> int:
    """Run ``supervisor check`` with parsed arguments; returns the exit status."""
    import trio

    from protocol import CoreError

    from ._common import Bounds
    from ._dap import check_debug_adapter
    from ._lsp import check_language_server

    rest = list(args.argv)
    if "--" in rest:
        cut = rest.index("--")
        options, argv = rest[:cut], rest[cut + 1 :]
        inner = argparse.ArgumentParser(prog=f"supervisor check {args.protocol}")
        _add_options(inner)
        inner.add_argument("--log-level", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        try:
            args = inner.parse_args(options, namespace=args)
        except SystemExit as exc:
            return int(exc.code) if isinstance(exc.code, int) else EXIT_BAD_USAGE
    else:
        argv = rest
    if not argv:
        return _usage("no program given: supervisor check lsp|dap -- CMD [ARGS...]")
    if not args.time_scale > 0:
        return _usage("--time-scale must be a positive number")
    launch = None
    if args.launch is not None:
        if args.protocol != "dap":
            return _usage("--launch is for dap")
        try:
            launch = json.loads(args.launch)
        except ValueError as exc:
            return _usage(f"--launch is not JSON: {exc}")
        if not isinstance(launch, dict):
            return _usage("--launch must be a JSON object")
    try:
        if args.protocol == "lsp":
            bounds = Bounds().scaled(args.time_scale)
            report = trio.run(
                lambda: check_language_server(
                    argv, client=args.client, cwd=args.cwd, bounds=bounds, only=args.only
                )
            )
        else:
            bounds = Bounds.for_dap().scaled(args.time_scale)
            report = trio.run(
                lambda: check_debug_adapter(
                    argv,
                    client=args.client,
                    cwd=args.cwd,
                    launch=launch,
                    bounds=bounds,
                    only=args.only,
                )
            )
    except ValueError as exc:
        return _usage(str(exc))
    except CoreError as exc:
        return _usage(f"cannot start {argv[0]!r}: {exc}")
    if args.json:
        print(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
    else:
        print(report.table())
    return report.exit_status()
