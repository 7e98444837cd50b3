"""The ``supervisor`` command line: ``run``, ``exec``, ``serve``, ``status``, ``reap``,
``testbed``, ``chaos``, ``check``, ``completion``.

Each subcommand imports its implementation lazily so ``supervisor --help`` stays fast. A
subcommand is one ``_add_<name>`` function (its parser, with the global options, its
description, exit codes and example, and its handler) listed in :data:`_SUBCOMMANDS`.

Exit codes:
    ``run``: 0 when every job ended as expected (``--list``, ``--dry-run``: the file is
    valid), 1 otherwise, 2 for a bad lanes file (or an unknown job name, a bad ``-j``, an
    unusable ``--log-dir`` or ``--junit`` file), 130/143 when interrupted by
    SIGINT/SIGTERM, 141 when the reader of its output went away, 120 when ``--json`` is
    given and stdout is closed (nothing started).
    ``exec``: the command's own exit code; 128+N when a signal N ended it; 124 when it timed
    out; 127 when the program is not found, 126 when it can not be run; 2 (``--stream``:
    125) when the request was refused (bad argv, missing cwd); 130/143 when
    interrupted by SIGINT/SIGTERM (the command is cancelled and its processes end first);
    120 when stdout is closed (nothing run) or the result can not be written to it; 141
    when the reader of stdout went away.
    ``serve``: 0 after ``shutdown`` then ``exit``, 1 otherwise. ``serve --listen``: 0 when
    the backend ended by ``shutdown {"scope": "backend"}`` or its idle grace, 1 when another
    backend listens there, 130/143 on SIGINT/SIGTERM. ``serve --attach``: 0 when the backend
    closed the connection, 1 when it could not be reached or started.
    ``status``: 0.
    ``reap``: 0.
    ``testbed list``: 0. ``testbed run``: the program's own status (128+N when a signal N
    ended it); 130/143/129 when interrupted by SIGINT/SIGTERM/SIGHUP (its tree is ended
    first); 2 for a bad scenario or option.
    ``chaos``: 0 when no round had a violation, 1 otherwise (the seed and the shortest
    failing step list are printed).
    ``check``: 0 when every conformance check passed or was skipped, 1 when one failed, 2
    for bad usage or a program that cannot start.
    ``completion``: 0.
    Any subcommand: 2 for a bad option (argparse); 1 from the ``supervisor`` command when
    Python finds another distribution's package under one of our names
    (``_trio_process_supervisor``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import signal
import sys
from typing import TYPE_CHECKING, Any, Final, NoReturn

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from protocol import JSONObject, JSONValue


__all__ = ("main",)


#: The global options: accepted before the subcommand and after it (``supervisor run F
#: --log-level DEBUG``). On the subcommands their default is SUPPRESS, so a value given
#: before the subcommand is not overwritten by the subcommand's default.
_LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")

_RUN_HELP: Final = """\
Run the jobs of a lanes file (TOML), each as its [[job]] table says (README,
"supervisor run"): one job at a time per lane (a job's `lane`, by default its
project), lanes side by side (-j N: at most N jobs at once). A bad file is
refused with FILE:LINE: message before anything starts. Progress goes to
stderr: a live view per lane on a terminal, one line per event otherwise (under
GITHUB_ACTIONS=true each job's output in a log group, an ::error annotation per
job that did not end as expected). The summary shows the end of the output of
each job that did not end as expected and names every job that did not run.
"""
_RUN_EPILOG: Final = """\
exit status:
  0    every job ended as its `expect` says, and no process was left behind
       (--list, --dry-run: the file is valid; nothing ran)
  1    some job did not (or a process was left behind)
  2    bad lanes file, unknown job name, bad option or -j, unusable --log-dir or
       --junit file, or a --ray cluster that can not run the file (nothing
       started; with --json one {"event": "run.refused", ...} object on stdout)
  130  interrupted by SIGINT (every job cancelled, every process ended)
  143  interrupted by SIGTERM (likewise)
  141  the reader of stdout or stderr went away (| head): likewise, quietly
  120  --json and stdout is closed (>&-): nothing started

examples:
  supervisor run examples/demo.toml
  supervisor run ci.toml --list
  supervisor run ci.toml test --dry-run
  supervisor run ci.toml -j 4 --junit report.xml --log-dir logs
  supervisor run ci.toml test --json --log-dir logs > events.jsonl
  supervisor run examples/demo.toml --ray auto
"""
_EXEC_HELP: Final = """\
Run one command (the Core's process.run) and print its envelope response as
JSON: {"id": "exec", "ok": true, "data": {exitCode, signal, stdout, stderr,
timedOut, truncated, durationMs}}, or "ok": false with error {code, message}.
stdin is passed to the command when it is a pipe or a file (--no-stdin: not).
With --stream the command gets our stdin, stdout and stderr themselves, nothing
is printed but what it prints, and the exit status is timeout(1)'s. Either way
its whole process tree ends when it exits, times out or is interrupted.
"""
_EXEC_EPILOG: Final = """\
exit status:
  N        the command's own exit code
  128+N    a signal N ended it
  124      it timed out (--timeout-ms)
  127      the program is not found; 126: it is found but can not be run
  2        the request was refused (bad argv, missing cwd, bad --env, stdin
           not UTF-8); "ok": false tells it apart from an exit 2
           (--stream: 125, as timeout(1))
  130/143  interrupted by SIGINT/SIGTERM (the command is cancelled first)
  120      stdout is closed (>&-: nothing is run) or the result could not be
           written to it (not with --stream)
  141      the reader of stdout went away (| head) before the result was written

examples:
  echo hello | supervisor exec --env LANG=C.UTF-8 --timeout-ms 5000 -- tr a-z A-Z
  supervisor exec --stream --timeout-ms 600000 -- make test
"""
_SERVE_HELP: Final = """\
Serve the Core as JSON-RPC 2.0 over the LSP base protocol (Content-Length
framing) on stdin/stdout; logs go to stderr. Send `initialize` first; every
Core command is a method of the same name (params = payload); job lanes push
job.started / job.output / job.finished notifications (+ job.progress /
job.record for a job started with report: true); $/cancelRequest cancels
a request (-32800). Every request received is answered exactly once.
At most 4096 requests are in flight at once (the in-flight limit); one past it is
answered at once with -32803 and error.data.code "busy": send it again later.
With --listen it is a backend on a private Unix socket that clients attach to
and detach from (sessions, terminals and jobs outlive them); --attach is the
stdio bridge an editor starts instead of plain `serve` (it starts the backend
when none listens). Both default to the workspace's socket.
"""
_SERVE_EPILOG: Final = """\
exit status:
  0        `shutdown` then `exit`
  1        `exit` without `shutdown`, end of input, or a broken frame header
  130/143  SIGINT/SIGTERM (requests cancelled and answered, processes ended)
  --listen: 0 ended by shutdown {"scope": "backend"} or the idle grace; 1 when
           another backend listens on PATH; 130/143 SIGINT/SIGTERM
  --attach: 0 when the backend closed the connection; 1 when it could not be
           reached or started (see PATH.log)

examples:
  python examples/serve_client.py     # starts `supervisor serve` and drives it
  supervisor serve --attach           # in an editor: the workspace's backend
  supervisor serve --listen --idle-grace never
"""
_COMPLETION_HELP: Final = """\
Print a shell completion script for `supervisor` (generated by shtab from this
command line's own parser, so it never goes stale): subcommands and options,
`*.toml` files and then the file's job names after `run`, scenario names after
`testbed run` (tcsh: files only).
"""
_COMPLETION_EPILOG: Final = """\
exit status:
  0  the script was printed

examples:
  supervisor completion bash > ~/.local/share/bash-completion/completions/supervisor
  supervisor completion zsh > "${fpath[1]}/_supervisor"
  supervisor completion fish > ~/.config/fish/completions/supervisor.fish
"""


#: What shtab completes a file or directory argument with (``shtab.FILE`` and
#: ``shtab.DIRECTORY``, spelled out so building the parser imports nothing).
_FILE: Final = {
    "bash": "_shtab_compgen_files",
    "zsh": "_files",
    "tcsh": "f",
    "fish": "(__fish_complete_path)",
}
_DIRECTORY: Final = {
    "bash": "_shtab_compgen_dirs",
    "zsh": "_files -/",
    "tcsh": "d",
    "fish": "(__fish_complete_directories)",
}
#: ``run FILE``: lanes files (``*.toml``) and directories; ``run FILE JOB...``: the file's
#: job names (``supervisor run FILE --complete-jobs``); ``testbed run SCENARIO``: the
#: scenarios. The shell functions are in :data:`_COMPLETION_PREAMBLES`. fish completes a
#: subcommand's positionals without their order, so one function there tells them apart.
_RUN_FILE: Final = {
    "bash": "_supervisor_toml_files",
    "zsh": "_supervisor_toml_files",
    "tcsh": "f",
    "fish": "(__supervisor_run_words)",
}
_RUN_JOBS: Final = {
    "bash": "_supervisor_run_jobs",
    "zsh": "_supervisor_run_jobs",
    "fish": "(__supervisor_run_words)",
}
_SCENARIO: Final = {
    "bash": "_supervisor_scenarios",
    "zsh": "_supervisor_scenarios",
    "fish": "(__supervisor_scenarios)",
}
#: The options of ``run`` (and the global ones) that take a value: the word after one is
#: no lanes file.
_RUN_VALUE_OPTIONS: Final = "--log-level --log-dir --color --ray -j --jobs --junit"
_COMPLETION_PREAMBLES: Final = {
    "bash": """\
_supervisor_toml_files() {
  compgen -f -X '!*.toml' -- "$1"
  compgen -d -- "$1"
}
_supervisor_run_file() {  # the lanes file on the command line: the first word after `run`
  local i word skip=0 seen=0
  for ((i = 1; i < COMP_CWORD; i++)); do
    word="${COMP_WORDS[i]}"
    if ((skip)); then skip=0; continue; fi
    if ((!seen)); then [[ $word == run ]] && seen=1; continue; fi
    case " @VALUE_OPTIONS@ " in *" $word "*) skip=1; continue ;; esac
    case $word in -*) ;; *) printf '%s' "$word"; return ;; esac
  done
}
_supervisor_run_jobs() {
  local file
  file=$(_supervisor_run_file)
  [[ -n $file ]] || return 0
  compgen -W "$(command supervisor run "$file" --complete-jobs 2>/dev/null)" -- "$1"
}
_supervisor_scenarios() {
  compgen -W "@SCENARIOS@" -- "$1"
}
""",
    "zsh": """\
_supervisor_toml_files() {
  _files -g '*.toml'
}
_supervisor_run_file() {
  local word skip=0 seen=0
  for word in "${(@)words[1,CURRENT-1]}"; do
    if (( skip )); then skip=0; continue; fi
    if (( ! seen )); then [[ $word == run ]] && seen=1; continue; fi
    if [[ " @VALUE_OPTIONS@ " == *" $word "* ]]; then skip=1; continue; fi
    if [[ $word != -* ]]; then print -r -- "$word"; return; fi
  done
}
_supervisor_run_jobs() {
  local file=$(_supervisor_run_file)
  [[ -n $file ]] || return 1
  local -a names
  names=(${(f)"$(command supervisor run ${(Q)file} --complete-jobs 2>/dev/null)"})
  compadd -a names
}
_supervisor_scenarios() {
  compadd @SCENARIOS@
}
""",
    "fish": """\
function __supervisor_run_file
    set -l skip 0
    set -l seen 0
    for word in (commandline -opc)[2..-1]
        if test $skip = 1
            set skip 0
            continue
        end
        if test $seen = 0
            test "$word" = run; and set seen 1
            continue
        end
        if contains -- $word @VALUE_OPTIONS@
            set skip 1
        else if not string match -q -- '-*' $word
            echo $word
            return
        end
    end
end
function __supervisor_run_words
    set -l file (__supervisor_run_file)
    if test -z "$file"
        __fish_complete_suffix .toml
    else
        command supervisor run $file --complete-jobs 2>/dev/null
    end
end
function __supervisor_scenarios
    printf '%s\\n' @SCENARIOS@
end
""",
}


def _complete(action: argparse.Action, how: dict[str, str]) -> None:
    action.complete = how  # type: ignore[attr-defined]  # read by shtab


def _log_level_option(parser: argparse.ArgumentParser, *, default: str | None) -> None:
    parser.add_argument(
        "--log-level",
        choices=_LOG_LEVELS,
        default=argparse.SUPPRESS if default is None else default,
        help="level of the log messages written to stderr (default WARNING)",
    )


def _subcommand(
    sub: Any, name: str, summary: str, description: str | None = None, epilog: str | None = None
) -> argparse.ArgumentParser:
    """A subcommand with the global options, its description and its exit codes."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=summary,
        description=description or summary,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _log_level_option(parser, default=None)
    return parser


def _add_run(sub: Any) -> None:
    run = _subcommand(
        sub, "run", "run the jobs of a lanes file (TOML) and report them", _RUN_HELP, _RUN_EPILOG
    )
    _complete(run.add_argument("file", help="the lanes file, e.g. examples/demo.toml"), _RUN_FILE)
    _complete(
        run.add_argument(
            "jobs",
            nargs="*",
            metavar="JOB",
            # A default keeps argparse from calling an optional list required.
            default=[],
            help="run only these jobs (by name) and the jobs they need; default: every job",
        ),
        _RUN_JOBS,
    )
    # For completion scripts: the file's job names, one a line (nothing for a bad file).
    run.add_argument("--complete-jobs", action="store_true", help=argparse.SUPPRESS)
    run.add_argument("--json", action="store_true", help="one JSON object per event on stdout")
    _complete(
        run.add_argument(
            "--log-dir",
            metavar="DIR",
            default=None,
            help="keep each job's whole output in DIR/<n>-<name>.log (DIR is created)",
        ),
        _DIRECTORY,
    )
    run.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the status words and pass jobs' colours through: auto (default) on a"
        " terminal or with FORCE_COLOR / CLICOLOR_FORCE set, unless NO_COLOR is set",
    )
    run.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=None,
        help="run the lanes on a Ray cluster (auto: the running one, else a local one);"
        " needs the [ray] extra",
    )
    run.add_argument(
        "-j",
        "--jobs",
        dest="max_running",
        type=int,
        default=None,
        metavar="N",
        help="run at most N jobs at once over every lane (default: one per lane, no other"
        " bound); a lane still runs one job at a time",
    )
    run.add_argument(
        "--list",
        action="store_true",
        help="print the jobs (lane, kind, needs, expected statuses) and run nothing",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (each job resolved as it would be submitted) and run nothing",
    )
    _complete(
        run.add_argument(
            "--junit",
            metavar="FILE",
            default=None,
            help="write a JUnit XML report to FILE when the run ends",
        ),
        _FILE,
    )
    run.set_defaults(handler=_run)


def _add_exec(sub: Any) -> None:
    exec_ = _subcommand(
        sub,
        "exec",
        "run one command (process.run) and print its result as JSON",
        _EXEC_HELP,
        _EXEC_EPILOG,
    )
    exec_.add_argument(
        "--timeout-ms",
        type=int,
        default=None,
        metavar="MS",
        help="deadline in milliseconds, 1 to 2147483647; 0: none; absent: a day (86400000)",
    )
    exec_.add_argument(
        "--max-output-bytes",
        type=int,
        default=None,
        metavar="N",
        help="output kept per stream in bytes, its start (default 16 MiB, at most 64 MiB;"
        " the rest is dropped: truncated)",
    )
    _complete(
        exec_.add_argument("--cwd", default=None, help="working directory of the command"),
        _DIRECTORY,
    )
    exec_.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a variable on top of the inherited environment (repeatable)",
    )
    exec_.add_argument(
        "--no-stdin",
        action="store_true",
        help="do not pass stdin to the command (for a pipe that never closes)",
    )
    exec_.add_argument(
        "--stream",
        action="store_true",
        help="pass the command's output through and exit with its status, as `timeout`"
        " does (124 timed out, 125 refused, 126 not executable, 127 not found); no JSON",
    )
    exec_.add_argument("argv", nargs=argparse.REMAINDER, help="-- PROGRAM [ARGS...]")
    exec_.set_defaults(handler=_exec)


def _add_serve(sub: Any) -> None:
    serve = _subcommand(
        sub,
        "serve",
        "JSON-RPC 2.0 over the LSP base protocol on stdin/stdout",
        _SERVE_HELP,
        _SERVE_EPILOG,
    )
    where = serve.add_mutually_exclusive_group()
    where.add_argument(
        "--listen",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="be a backend clients attach to: serve on the Unix socket PATH (default: the"
        " workspace's socket, $XDG_RUNTIME_DIR/trio-process-supervisor/NAME-HASH.sock, HASH"
        " naming the realpath of --workspace or the cwd; without XDG_RUNTIME_DIR a 0700"
        " directory in the temp dir)",
    )
    where.add_argument(
        "--attach",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="bridge stdin/stdout to the backend on PATH (default as --listen), starting"
        " it if none listens: what an editor that starts a stdio backend runs",
    )
    serve.add_argument(
        "--workspace",
        default=None,
        metavar="DIR",
        help="the workspace that names the default socket (default: the cwd)",
    )
    serve.add_argument(
        "--idle-grace",
        default="10m",
        metavar="DURATION",
        help="with --listen/--attach: how long the backend keeps everything running with no"
        " client attached, then ends it and exits: N ms, or with a unit (500ms, 30s, 10m,"
        " 1h); 0 at once; never (default: 10m)",
    )
    serve.add_argument(
        "--untrusted",
        action="store_true",
        help="with --listen/--attach: the workspace is untrusted (build and test jobs end"
        " denied) for every client",
    )
    serve.set_defaults(handler=_serve, guarded=True)


def _add_status(sub: Any) -> None:
    status = _subcommand(
        sub,
        "status",
        "list the running backends (serve --listen) and what each keeps alive",
        "Ask every backend of this user (the sockets in $XDG_RUNTIME_DIR/trio-process-"
        "supervisor,\nor a 0700 directory in the temp dir) for its language servers, debug"
        " sessions,\nterminals, jobs and plugin runs, with their states, pids and uptimes."
        " Asking does\nnot count as attaching: the idle grace goes on.",
        "exit status:\n  0  always (no backend running is not an error)\n\n"
        "examples:\n  supervisor status\n  supervisor status --json\n",
    )
    status.add_argument("--json", action="store_true", help="print the backends as JSON")
    status.set_defaults(handler=_status)


def _add_reap(sub: Any) -> None:
    reap = _subcommand(
        sub,
        "reap",
        "end processes left by supervisors that died (SIGKILL, crash)",
        epilog="exit status:\n  0  always (the pids ended are printed)\n\n"
        "examples:\n  supervisor reap --json\n  supervisor reap --dry-run\n",
    )
    reap.add_argument("--json", action="store_true", help="print the reaped pids as JSON")
    reap.add_argument(
        "--dry-run",
        action="store_true",
        help="end nothing: list what would be ended, and the marked processes left alone"
        " because their supervisor can not be proven dead (another pid namespace or boot)",
    )
    reap.set_defaults(handler=_reap)


def _add_testbed(sub: Any) -> None:
    testbed = _subcommand(
        sub,
        "testbed",
        "misbehaving fixture programs",
        epilog="exit status:\n  list: 0\n  run: the program's own status (128+N for a signal N);"
        " 130/143/129 when\n       interrupted; 2 for a bad scenario or option\n\n"
        "example:\n  supervisor testbed list\n",
    )
    testbed_sub = testbed.add_subparsers(dest="testbed_command", required=True)
    testbed_list = testbed_sub.add_parser("list", help="list the scenarios and their handling")
    testbed_list.add_argument("--json", action="store_true", help="print the list as JSON")
    testbed_run = testbed_sub.add_parser(
        "run",
        help="run one scenario's program under the supervisor, its stdio on this terminal;"
        " its whole process tree ends when it exits or on Ctrl-C",
    )
    _complete(
        testbed_run.add_argument(
            "scenario", help="a scenario name (see `supervisor testbed list`)"
        ),
        _SCENARIO,
    )
    testbed_run.add_argument(
        "options",
        nargs=argparse.REMAINDER,
        help="--protocol, --bytes, --count, --pid-file, --exit, --no-supervise, ..."
        " (`supervisor testbed run SCENARIO --help`)",
    )
    testbed.set_defaults(handler=_testbed)


def _add_chaos(sub: Any) -> None:
    chaos = _subcommand(
        sub,
        "chaos",
        "seeded random mixes of scenarios, checked each round",
        epilog="exit status:\n  0  no round had a violation\n  1  one did (the seed and the"
        " shortest failing step list are printed)\n\nexample:\n"
        "  supervisor chaos --iterations 50 --seed 7\n",
    )
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
    chaos.add_argument(
        "--attach",
        action="store_true",
        help="chaos for backends (serve --listen): clients attach, detach and reattach at"
        " random moments; nothing lost, nothing answered twice, nothing left",
    )
    chaos.add_argument("--json", action="store_true", help="print the report as JSON")
    chaos.set_defaults(handler=_chaos)


def _add_check(sub: Any) -> None:
    from .._check._cli import CHECK_EPILOG, CHECK_HELP, add_options

    check = _subcommand(
        sub,
        "check",
        "run a language server or debug adapter through lifecycle conformance checks",
        CHECK_HELP,
        CHECK_EPILOG,
    )
    add_options(check)
    check.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    from .._check._cli import run_check

    return run_check(args)


def _add_completion(sub: Any) -> None:
    completion = _subcommand(
        sub,
        "completion",
        "print a shell completion script (bash, zsh, fish, tcsh)",
        _COMPLETION_HELP,
        _COMPLETION_EPILOG,
    )
    completion.add_argument("shell", choices=("bash", "zsh", "fish", "tcsh"), help="the shell")
    completion.set_defaults(handler=_completion)


#: One entry per subcommand, in the order ``--help`` lists them: adding a subcommand is one
#: ``_add_<name>`` function (its parser, options and handler) and one entry here.
_SUBCOMMANDS: Final = (
    _add_run,
    _add_exec,
    _add_serve,
    _add_status,
    _add_reap,
    _add_testbed,
    _add_chaos,
    _add_check,
    _add_completion,
)


def _parser(*, run_json: bool = False) -> argparse.ArgumentParser:
    """The command line's parser; ``run_json``: the command line is ``run ... --json``
    (:func:`_asks_run_json`), so a bad option is a ``run.refused`` object too."""
    parser = _Parser(
        prog="supervisor",
        description="Trio structured-concurrency process supervisor for IDE backends.",
        epilog="Each subcommand has its own --help, with its exit codes and an example.",
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="print the version (the one core.ping answers) and exit",
    )
    _log_level_option(parser, default="WARNING")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    for add in _SUBCOMMANDS:
        add(sub)
    # An unknown option is reported by the top parser (the subcommand hands it up), a bad
    # value by the subcommand's: both refuse alike.
    for each in (parser, *sub.choices.values()):
        if isinstance(each, _Parser):
            each.run_json = run_json
    return parser


class _Parser(argparse.ArgumentParser):
    """An argument parser whose error, when the command line is ``run ... --json``, also
    prints the ``run.refused`` object every other refusal of ``run`` prints (the shape of
    ``_run._Refuser``): a script reading the events gets an answer it can parse. The usage
    and the error line on stderr are argparse's own, with ``--json`` or without."""

    run_json: bool = False

    def error(self, message: str) -> NoReturn:
        if self.run_json:
            line = f"{self.prog}: error: {message}"
            refused = {
                "event": "run.refused",
                "exitCode": 2,
                "error": {
                    "code": "invalid_request",
                    "message": line,
                    "details": {"option": _option_named(message)},
                },
            }
            try:
                print(json.dumps(refused, ensure_ascii=False, separators=(",", ":")), flush=True)
            except BrokenPipeError:
                raise
            except OSError:
                # Stdout closed: the line on stderr still says why.
                pass
        super().error(message)


#: argparse's error messages (Python 3.11 to 3.14) and where each names the option.
_ARGPARSE_OPTION: Final = (
    # "argument -j/--jobs: invalid int value: 'abc'", "argument --color: invalid choice: ..."
    re.compile(r"argument ([^/:\s]+)"),
    # "unrecognized arguments: --bogus x"
    re.compile(r"unrecognized arguments: ([^\s=]+)"),
    # "ambiguous option: --j could match --json, --jobs, --junit"
    re.compile(r"ambiguous option: ([^\s=]+)"),
    # "the following arguments are required: file"
    re.compile(r"the following arguments are required: ([^,\s]+)"),
)


def _option_named(message: str) -> str | None:
    """The option (or argument) an argparse error message names, or None."""
    for pattern in _ARGPARSE_OPTION:
        if (match := pattern.match(message)) is not None:
            return match.group(1)
    return None


def _asks_run_json(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is ``run ... --json``: its command (the first word that is no
    global option) is ``run`` and ``--json`` (or a prefix argparse takes for it) comes
    before any ``--``. Read before parsing, so a parse error can answer in JSON."""
    words = iter(argv)
    for word in words:
        if word == "--log-level" or (word.startswith("--log") and "--log-level".startswith(word)):
            next(words, None)
        elif not word.startswith("-"):
            if word != "run":
                return False
            break
    else:
        return False
    for word in words:
        if word == "--":
            return False
        if len(word) >= len("--js") and "--json".startswith(word):
            return True
    return False


class _VersionAction(argparse.Action):
    """``--version``: read only when asked, so ``--help`` imports nothing of the Core."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from .._version import __version__

        print(f"supervisor {__version__}")
        parser.exit()


#: Exit status when stdout can not be written (closed, or a write error other than a
#: reader that went away); the interpreter's own status for a failed flush at exit.
EXIT_STDOUT_UNWRITABLE: Final = 120


def _stdout_closed(command: str) -> bool:
    """Whether stdout is closed (``>&-``); if so, say it on stderr."""
    try:
        # The interpreter leaves sys.stdout None when fd 1 was closed at its start.
        os.fstat(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        print(
            f"supervisor {command}: stdout is closed: nowhere to write the result;"
            " nothing was started",
            file=sys.stderr,
        )
        return True
    return False


def _run(args: argparse.Namespace) -> int:
    if args.complete_jobs:
        return _complete_jobs(args.file)

    from ._run import run_command

    if args.json and _stdout_closed("run"):
        return EXIT_STDOUT_UNWRITABLE

    return run_command(
        args.file,
        json_output=args.json,
        only=args.jobs,
        log_dir=args.log_dir,
        color=args.color,
        ray=args.ray,
        max_running=args.max_running,
        list_only=args.list,
        dry_run=args.dry_run,
        junit=args.junit,
        leave_by_exit=args.own_process,
    )


def _serve(args: argparse.Namespace) -> int:
    if args.listen is None and args.attach is None:
        from ._serve import serve_stdio

        return serve_stdio()
    from ._listen import default_socket_path, parse_idle_grace, serve_listen_main

    try:
        grace = parse_idle_grace(args.idle_grace)
    except ValueError as exc:
        print(f"supervisor serve: {exc}", file=sys.stderr)
        return 2
    path = args.listen or args.attach or default_socket_path(args.workspace)
    if args.attach is not None:
        from ._attach import attach_stdio

        return attach_stdio(path, idle_grace=args.idle_grace, untrusted=args.untrusted)
    return serve_listen_main(path, idle_grace_ms=grace, trusted=not args.untrusted)


def _status(args: argparse.Namespace) -> int:
    from ._status import status_main

    return status_main(as_json=args.json)


def _complete_jobs(path: str) -> int:
    """Print the job names of the lanes file at ``path`` for a completion script: quickly
    (no Trio), and nothing at all for a file that can not be read."""
    from ._runfile import RunFileError, load_run_file

    try:
        run_file = load_run_file(path)
    except RunFileError:
        return 0
    for job in run_file.jobs:
        if job.name.isprintable() and not any(ch.isspace() for ch in job.name):
            print(job.name)
    return 0


def _completion(args: argparse.Namespace) -> int:
    import shlex

    import shtab

    from ..testbed import SCENARIOS

    scenarios = " ".join(shlex.quote(name) for name in SCENARIOS)
    preamble = (
        _COMPLETION_PREAMBLES.get(args.shell, "")
        .replace("@SCENARIOS@", scenarios)
        .replace("@VALUE_OPTIONS@", _RUN_VALUE_OPTIONS)
    )
    print(shtab.complete(_parser(), shell=args.shell, preamble=preamble))
    return 0


def _exec(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if args.stream:
        return _exec_stream(args, argv)
    if _stdout_closed("exec"):
        return EXIT_STDOUT_UNWRITABLE
    argv_json: list[JSONValue] = list(argv)
    payload: JSONObject = {"argv": argv_json}
    if args.timeout_ms is not None:
        payload["timeoutMilliseconds"] = args.timeout_ms
    if args.max_output_bytes is not None:
        payload["maxOutputBytes"] = args.max_output_bytes
    if args.cwd is not None:
        payload["cwd"] = args.cwd
    if args.env:
        env: JSONObject = {}
        for item in args.env:
            name, sep, value = item.partition("=")
            if not sep:
                # A name the Core checks (empty, NUL) goes to it: its refusal is everyone's.
                return _exec_refused(f"--env {item!r}: expected NAME=VALUE", f"env.{item}")
            env[name] = value
        payload["env"] = env
    if not args.no_stdin:
        stdin = _read_stdin()
        if isinstance(stdin, int):
            return stdin
        if stdin is not None:
            payload["stdin"] = stdin

    outcome = _exec_direct(payload)
    if outcome is None:
        import trio

        outcome = trio.run(_exec_main, payload)
    response, signum = outcome
    if not _print_exec_answer(response):
        return EXIT_STDOUT_UNWRITABLE
    if signum is not None:
        name = signal.Signals(signum).name
        print(f"supervisor exec: {name}: the command was cancelled", file=sys.stderr)
        return 128 + signum
    if not response.get("ok"):
        from ._stream import launch_exit_status

        error = response.get("error")
        details = error.get("details") if isinstance(error, dict) else None
        # A program that is missing (127) or can not be run (126), as `env` and `timeout`.
        return launch_exit_status(details) or 2
    data = response["data"]
    assert isinstance(data, dict)
    if data.get("timedOut"):
        return 124
    killed_by = data.get("signal")
    if isinstance(killed_by, int):
        return 128 + killed_by
    code = data.get("exitCode")
    return code if isinstance(code, int) and 0 <= code < 256 else 1


def _exec_stream(args: argparse.Namespace, argv: list[str]) -> int:
    """``exec --stream``: our stdio to the command, its status ours (``_stream``)."""
    from ._stream import EXIT_REFUSED, exec_stream

    if args.max_output_bytes is not None:
        print(
            "supervisor exec: --max-output-bytes bounds the JSON result; --stream keeps no output",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    env: dict[str, str] = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            print(f"supervisor exec: --env {item!r}: expected NAME=VALUE", file=sys.stderr)
            return EXIT_REFUSED
        env[name] = value
    return exec_stream(
        argv,
        timeout_ms=args.timeout_ms,
        cwd=args.cwd,
        env=env or None,
        stdin=not args.no_stdin,
    )


#: The most stdin ``exec`` passes on (the protocol's bound on a payload's text).
MAX_STDIN_BYTES: Final = 64 * 1024 * 1024


def _read_stdin() -> str | int | None:
    """Our stdin as text when it is a pipe or a file (None otherwise), or exit status 2."""
    import stat

    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return None  # a terminal, /dev/null, a socket: nothing meant for the command
    data = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    if len(data) > MAX_STDIN_BYTES:
        return _exec_refused(f"stdin is larger than {MAX_STDIN_BYTES} bytes", "stdin")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _exec_refused(f"stdin is not UTF-8 text ({exc.reason})", "stdin")


def _exec_refused(message: str, field: str) -> int:
    """Refuse ``exec``'s request before anything starts, as the Core refuses a bad value:
    the envelope on stdout (code ``invalid_request``, ``details.field``), exit status 2."""
    response: JSONObject = {
        "id": "exec",
        "ok": False,
        "error": {
            "code": "invalid_request",
            "message": f"exec: {message}",
            "details": {"field": field},
        },
    }
    if not _print_exec_answer(response):
        return EXIT_STDOUT_UNWRITABLE
    return 2


def _print_exec_answer(response: JSONObject) -> bool:
    """Print ``exec``'s envelope on stdout; False when it can not be written (a full disk:
    said on stderr). A reader that went away raises ``BrokenPipeError`` (main() exits 141)."""
    try:
        print(json.dumps(response, ensure_ascii=False, indent=2), flush=True)
    except BrokenPipeError:
        raise
    except OSError as exc:
        print(f"supervisor exec: cannot write the result: {exc.strerror}", file=sys.stderr)
        return False
    return True


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
        response = _EXEC_CANCELLED
    return response, interrupted[0] if interrupted else None


#: ``exec``'s answer when SIGINT or SIGTERM cancelled the command.
_EXEC_CANCELLED: Final[JSONObject] = {
    "id": "exec",
    "ok": False,
    "error": {"code": "cancelled", "message": "The operation was cancelled"},
}


def _exec_direct(payload: JSONObject) -> tuple[JSONObject, int | None] | None:
    """Run ``exec``'s ``process.run`` without starting Trio when it can (``_process._direct``):
    the same answer, without an event loop's start for a command that exits and leaves
    nothing. None when the Core must answer: a value the direct path does not check itself
    (the Core's answer is then the one every client gets), or no pidfd or subreaper here.

    Returns:
        The envelope response and the signal that interrupted the command, or None.
    """
    from protocol import MAX_MILLISECONDS, MAX_OUTPUT_BYTES, CoreError
    from protocol._payload import DEFAULT_RUN_TIMEOUT_MS

    from .._process._direct import (
        direct_available,
        run_direct,
        signals_to_pipe,
    )
    from .._process._mux import DEFAULT_MAX_OUTPUT_BYTES
    from ._stream import finish

    timeout = payload.get("timeoutMilliseconds", DEFAULT_RUN_TIMEOUT_MS)
    max_output = payload.get("maxOutputBytes", DEFAULT_MAX_OUTPUT_BYTES)
    if not (
        isinstance(timeout, int)
        and 0 <= timeout <= MAX_MILLISECONDS
        and isinstance(max_output, int)
        and 1 <= max_output <= MAX_OUTPUT_BYTES
        and direct_available()
    ):
        return None
    argv, cwd, env, stdin = (payload.get(k) for k in ("argv", "cwd", "env", "stdin"))
    assert isinstance(argv, list)
    assert isinstance(cwd, str | None)
    assert isinstance(stdin, str | None)
    assert env is None or isinstance(env, dict)
    with signals_to_pipe() as (wake_fd, interrupted):
        try:
            outcome = run_direct(
                [str(item) for item in argv],
                cwd=cwd,
                env={str(k): v if v is None else str(v) for k, v in env.items()} if env else None,
                stdin=stdin,
                timeout_ms=timeout or None,
                max_output_bytes=max_output,
                wake_fd=wake_fd,
                interrupted=interrupted,
            )
        except CoreError:
            return None  # nothing started: the Core's answer is the one to give
        result = finish(outcome, interrupted)
    if result is None:
        return _EXEC_CANCELLED, interrupted[0]
    return {"id": "exec", "ok": True, "data": result.answer()}, None


def _reap(args: argparse.Namespace) -> int:
    from .._process._reaper import sweep_orphans

    report = sweep_orphans(dry_run=args.dry_run)
    verb = "would reap" if args.dry_run else "reaped"
    if args.json:
        left = [{"pid": pid, "instance": inst, "reason": why} for pid, inst, why in report.left]
        key = "wouldReap" if args.dry_run else "reaped"
        print(json.dumps({key: report.ended, "left": left}))
        return 0
    pids = report.ended
    print(f"{verb} {len(pids)} process(es)" + (f": {' '.join(map(str, pids))}" if pids else ""))
    for pid, instance, reason in report.left:
        print(f"left pid {pid} (supervisor {instance}): {reason}")
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

    if args.attach:
        from ._chaos_attach import run_attach_chaos

        attach_report = trio.run(run_attach_chaos, args.iterations, args.seed)
        if args.json:
            print(json.dumps(attach_report.to_json(), indent=2))
        else:
            print(attach_report.summary())
            for violation in attach_report.violations:
                print(f"  violation: {violation}")
        return 0 if attach_report.ok else 1

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

    The command line owns its process while it runs: no host shares it, so every child the
    supervisor did not spawn itself is an orphan it adopted, and the reaper collects each
    one (``_reaper.owning_whole_process``; a caller's process is a host again when it
    returns). An exception no subcommand handles leaves as itself, not wrapped in the
    exception groups of the nurseries it crossed (a group leaves only when it holds two or
    more), so its traceback names the error first.
    """
    _open_missing_stdio()
    try:
        # Parsed before anything of the Core is imported: ``--version``, ``--help`` and a
        # bad option answer in milliseconds (bench_startup), and exit here (SystemExit).
        args = _parser(run_json=_asks_run_json(sys.argv[1:] if argv is None else argv)).parse_args(
            argv
        )
        from .._process._reaper import owning_whole_process

        with owning_whole_process():
            code = _main(args, own_process=argv is None)
        if argv is None and _ray_joined():
            end_process(code)
        return code
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


def _open_missing_stdio() -> None:
    """Give stdin or stderr, when we were started without it, ``/dev/null``.

    Started with one closed (``2>&-``), the next file this process opens would take its
    number: a library's write to "stderr" would land in a pipe to a child or a log file.
    Python leaves ``sys.stderr`` None then, which Ray's ``init`` refuses (``--ray`` failed
    with "sys.stderr is None"): the stream is made again on ``/dev/null``, where nothing is
    shown, as nothing was. A closed stdout is left as it is: the commands that print a
    result refuse to start without it (exit 120).
    """
    for fd, name, flags in ((0, "stdin", os.O_RDONLY), (2, "stderr", os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, flags)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            if getattr(sys, name) is None:
                # Lives as long as the process, as the stream Python would have made.
                setattr(sys, name, open(fd, "r" if fd == 0 else "w", closefd=False))  # noqa: SIM115


def _ray_joined() -> bool:
    # Only a `run --ray` that may leave its cluster by ending is still joined here
    # (run_command's leave_by_exit); Ray is imported by nothing else.
    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


def end_process(code: int) -> NoReturn:
    """End the command line's own process with ``code`` now, after a ``--ray`` run that
    left its cluster joined (``run_command(leave_by_exit=True)``).

    The run has told the cluster it leaves (``RayCluster.leave_before_exit``: a graceful
    driver exit, its Ray job ended). What a normal exit does that matters is done next:
    stdout and stderr flushed, the logging handlers flushed, this process's watchdog ended
    and collected (as its ``atexit`` hook does), with SIGINT and SIGTERM ignored (the run's
    code is decided; a signal now would only turn it into a traceback). What is skipped is
    Ray's teardown: ``ray.shutdown`` destroys the core worker, whose gRPC polling thread is
    joined only at its next 250 ms poll when a call is still in flight (about half the runs
    on a local cluster: py-spy shows ``~ClientCallManager`` in ``std::thread::join``), and
    the interpreter's own teardown of Ray's thousand modules (about 80 ms) (README "Fixed
    costs of a Ray run").
    """
    from .._process._watchdog import finish_watchdog

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:  # closed when the command started (`>&-`)
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    logging.shutdown()
    finish_watchdog()
    os._exit(code)


def _main(args: argparse.Namespace, *, own_process: bool) -> int:
    # Logs always go to stderr: in serve mode stdout carries only protocol frames.
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if (
        own_process
        and getattr(args, "guarded", False)
        # The bridge owns no process: the backend it may start must outlive it.
        and getattr(args, "attach", None) is None
    ):
        # The process is this command line's own (python -m supervisor, the console
        # script): split it into a guardian and this worker, so that a SIGKILL of either
        # leaves the other to end everything (_process/_guardian.py).
        from .._process._guardian import guard_process

        guard_process()
    args.own_process = own_process
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)
