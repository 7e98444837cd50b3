"""The ``supervisor`` command line: ``run``, ``exec``, ``serve``, ``reap``, ``testbed``, ``chaos``.

Each subcommand imports its implementation lazily so ``supervisor --help`` stays fast.

Exit codes:
    ``run``: 0 when every job ended as expected, 1 otherwise, 2 for a bad lanes file,
    130/143 when interrupted by SIGINT/SIGTERM.
    ``exec``: the command's own exit code; 128+N when a signal N ended it; 124 when it timed
    out; 2 when the request was refused (bad argv, missing executable or cwd); 130/143 when
    interrupted by SIGINT/SIGTERM (the command is cancelled and its processes end first).
    ``serve``: 0 after ``shutdown`` then ``exit``, 1 otherwise.
    ``reap``: 0.
    ``testbed list``: 0. ``testbed run``: the program's own status (128+N when a signal N
    ended it); 130/143/129 when interrupted by SIGINT/SIGTERM/SIGHUP (its tree is ended
    first); 2 for a bad scenario or option.
    ``chaos``: 0 when no round had a violation, 1 otherwise (the seed and the shortest
    failing step list are printed).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from protocol import JSONObject, JSONValue


__all__ = ("main",)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="supervisor",
        description="Trio structured-concurrency process supervisor for IDE backends.",
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="log level of the messages written to stderr (default WARNING)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the jobs of a lanes file (TOML) and report them")
    run.add_argument("file", help="the lanes file, e.g. examples/demo.toml")
    run.add_argument("--json", action="store_true", help="one JSON object per event on stdout")

    exec_ = sub.add_parser(
        "exec", help="run one command (process.run) and print its result as JSON"
    )
    exec_.add_argument("--timeout-ms", type=int, default=None, help="deadline in milliseconds")
    exec_.add_argument(
        "--max-output-bytes",
        type=int,
        default=None,
        help="output kept per stream in bytes (default 16 MiB)",
    )
    exec_.add_argument("--cwd", default=None, help="working directory of the command")
    exec_.add_argument("argv", nargs=argparse.REMAINDER, help="-- PROGRAM [ARGS...]")

    sub.add_parser("serve", help="JSON-RPC 2.0 over the LSP base protocol on stdin/stdout")
    reap = sub.add_parser(
        "reap", help="end processes left by supervisors that died (SIGKILL, crash)"
    )
    reap.add_argument("--json", action="store_true", help="print the reaped pids as JSON")

    testbed = sub.add_parser("testbed", help="misbehaving fixture programs")
    testbed_sub = testbed.add_subparsers(dest="testbed_command", required=True)
    testbed_list = testbed_sub.add_parser("list", help="list the scenarios and their handling")
    testbed_list.add_argument("--json", action="store_true", help="print the list as JSON")
    testbed_run = testbed_sub.add_parser(
        "run",
        help="run one scenario's program under the supervisor, its stdio on this terminal;"
        " its whole process tree ends when it exits or on Ctrl-C",
    )
    testbed_run.add_argument("scenario", help="a scenario name (see `supervisor testbed list`)")
    testbed_run.add_argument(
        "options",
        nargs=argparse.REMAINDER,
        help="--protocol, --bytes, --count, --pid-file, --exit, --no-supervise, ..."
        " (`supervisor testbed run SCENARIO --help`)",
    )

    chaos = sub.add_parser("chaos", help="seeded random mixes of scenarios, checked each round")
    chaos.add_argument("--iterations", type=int, default=200, help="rounds (default 200)")
    chaos.add_argument("--seed", type=int, default=0, help="the seed (default 0)")
    chaos.add_argument("--max-steps", type=int, default=4, help="most steps per round")
    chaos.add_argument(
        "--max-rss-growth-bytes",
        type=int,
        default=256 * 1024 * 1024,
        help="resident memory growth after round 0 that counts as a violation (bytes)",
    )
    chaos.add_argument(
        "--via",
        action="append",
        default=None,
        # supervisor.testbed._chaos.ALL_VIAS, spelled out so --help imports nothing.
        choices=("process.run", "job", "session", "lsp", "plugin", "debug", "debugpy", "terminal"),
        help="draw only this kind of step (repeatable; default: every kind that can run here)",
    )
    chaos.add_argument(
        "--faults",
        action="store_true",
        help="inject one fault per round inside a random step's unit and check it ends alone",
    )
    chaos.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def _exec(args: argparse.Namespace) -> int:
    import trio

    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    argv_json: list[JSONValue] = list(argv)
    payload: JSONObject = {"argv": argv_json}
    if args.timeout_ms is not None:
        payload["timeoutMilliseconds"] = args.timeout_ms
    if args.max_output_bytes is not None:
        payload["maxOutputBytes"] = args.max_output_bytes
    if args.cwd is not None:
        payload["cwd"] = args.cwd

    response, signum = trio.run(_exec_main, payload)
    print(json.dumps(response, ensure_ascii=False, indent=2))
    if signum is not None:
        name = signal.Signals(signum).name
        print(f"supervisor exec: {name}: the command was cancelled", file=sys.stderr)
        return 128 + signum
    if not response.get("ok"):
        return 2
    data = response["data"]
    assert isinstance(data, dict)
    if data.get("timedOut"):
        return 124
    killed_by = data.get("signal")
    if isinstance(killed_by, int):
        return 128 + killed_by
    code = data.get("exitCode")
    return code if isinstance(code, int) and 0 <= code < 256 else 1


async def _exec_main(payload: JSONObject) -> tuple[JSONObject, int | None]:
    """Run ``process.run`` once; SIGINT or SIGTERM cancels it (its processes end first).

    Returns:
        The envelope response and the signal that interrupted the command, or None.
    """
    import trio

    from .._core._core import open_core

    interrupted: list[int] = []
    response: JSONObject | None = None
    # Installed before anything starts, as `run` and `serve` do: a signal must cancel the
    # command rather than raise KeyboardInterrupt through the nursery, and a SIGINT
    # ignored by an inherited disposition (a job started with `&` by a script) is ours
    # to handle too.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with open_core() as core, trio.open_nursery() as nursery:

            async def watch_signals() -> None:
                async for signum in signals:
                    if not interrupted:
                        interrupted.append(signum)
                        if not core.cancel("exec"):
                            # Not registered yet or already done: end the wait itself.
                            nursery.cancel_scope.cancel()

            nursery.start_soon(watch_signals)
            response = await core.execute(
                {"id": "exec", "command": "process.run", "payload": payload}
            )
            nursery.cancel_scope.cancel()
    if response is None:
        response = {
            "id": "exec",
            "ok": False,
            "error": {"code": "cancelled", "message": "The operation was cancelled"},
        }
    return response, interrupted[0] if interrupted else None


def _reap(args: argparse.Namespace) -> int:
    from .._process._oneshot import reap_orphans

    pids = reap_orphans()
    if args.json:
        print(json.dumps({"reaped": pids}))
    else:
        print(f"reaped {len(pids)} process(es)" + (f": {' '.join(map(str, pids))}" if pids else ""))
    return 0


def _testbed(args: argparse.Namespace) -> int:
    from ..testbed import SCENARIOS

    if args.testbed_command == "list":
        if args.json:
            print(json.dumps([s.to_json() for s in SCENARIOS.values()], indent=2))
        else:
            for scenario in SCENARIOS.values():
                print(f"{scenario.name} [{', '.join(scenario.protocols)}]")
                print(f"    does:    {scenario.summary}")
                print(f"    correct: {scenario.handling}")
        return 0
    from ..testbed.run import run_supervised

    return run_supervised([args.scenario, *args.options])


def _chaos(args: argparse.Namespace) -> int:
    import trio

    from ..testbed import run_chaos

    report = trio.run(
        lambda: run_chaos(
            args.iterations,
            args.seed,
            max_steps=args.max_steps,
            max_rss_growth_bytes=args.max_rss_growth_bytes,
            only=args.via,
            faults=args.faults,
        )
    )
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.summary())
        if not report.ok:
            print(f"FAILED: seed {report.seed}, round {report.failing_round}")
            for violation in report.violations:
                print(f"  violation: {violation}")
            print("shortest failing step list:")
            for step in report.failing_steps:
                print(f"  {step.describe()}")
    return 0 if report.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit code.

    An exception no subcommand handles leaves as itself, not wrapped in the exception
    groups of the nurseries it crossed (a group leaves only when it holds two or more), so
    its traceback names the error first.
    """
    try:
        return _main(argv)
    except BaseExceptionGroup as group:
        from .._boundary import raise_single

        raise_single(group)
    except BrokenPipeError:
        # The reader of our stdout went away (`supervisor testbed list | head`): not an
        # error of ours. Point stdout at /dev/null so the interpreter's final flush is quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141  # 128 + SIGPIPE, as a shell reports it


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    # Logs always go to stderr: in serve mode stdout carries only protocol frames.
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "run":
        from ._run import run_command

        return run_command(args.file, json_output=args.json)
    if args.command == "exec":
        return _exec(args)
    if args.command == "serve":
        from ._serve import serve_stdio

        return serve_stdio()
    if args.command == "reap":
        return _reap(args)
    if args.command == "testbed":
        return _testbed(args)
    if args.command == "chaos":
        return _chaos(args)
    raise AssertionError(f"unhandled command {args.command!r}")  # argparse refuses others
