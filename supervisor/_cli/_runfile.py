"""The lanes file of ``supervisor run``: parse and validate, naming the line of every error.

Strategy: the stdlib ``tomllib`` (strict TOML 1.0) checks the syntax first and its error
names the line; only then does tomlkit parse the text. tomlkit alone is not enough: it
accepts some text TOML 1.0 refuses (an inline table spread over several lines), and the
locator below, which follows TOML 1.0, would lose its place in such text and report wrong
lines. Each job table is then converted (msgspec) to :class:`JobTable`, the one
declaration of its keys, types, required keys and bounds; the rules a type can not say
(directories that exist, argv and env text the OS can take, the shared checks of
:mod:`protocol`; placeholders; ``needs``) follow on the converted values. tomlkit keeps
no source positions on its items, so a small locator (:func:`_locate`) walks the same,
already valid, text once and records the line of every table header, every key and every
element of a top-level array value (so ``argv[3]`` of a multi-line ``argv = [...]`` is
reported at its own line); a validation error asks it for the line of the key it is about.
Nothing here starts a process or touches Trio: a bad file is refused before anything runs, so
nothing is left half-started.

Jobs must be written as ``[[job]]`` tables. The equivalent inline form
``job = [{...}, {...}]`` is refused, at its line, with a message that says so: its keys
all sit inside one value, where errors could not name their own line, and one form keeps
files uniform.

The file is an array of tables, one ``[[job]]`` per job, in submission order, and an
optional ``[defaults]`` table. ``argv`` is the one required key; every other key has the
default shown::

    [defaults]                      # optional: a default for every job's keys (all but
    project = "."                   # name, argv and needs); a job's own key replaces it,
    env = { CI = "1" }              # except env, whose tables merge (the job's name wins)
    timeout_ms = 600000

    [[job]]
    name = "build"                  # optional, unique; default "<kind>#<n>"
    argv = ["{python}", "-m", "compileall", "-q", "calc"]   # required, non-empty; no shell
    project = "project"             # default ".": a directory (relative to this file)
    lane = "lint"                   # default: the project. Jobs on one lane run one at a
                                    # time; lanes run side by side (``-j`` bounds them)
    kind = "build"                  # default "command": a lanes job kind (build, test,
                                    # pack, toolchain, add, command)
    cwd = "calc"                    # optional, relative to the project; default: the project
    env = { PYTHONHASHSEED = "0" }  # optional, strings only; added to the inherited env
    env_file = ".env"               # optional, a path or an array of them (relative to
                                    # this file): NAME=VALUE lines, read as .env files are
                                    # (see :func:`read_env_file`); ``env`` wins over them
    timeout_ms = 60000              # optional: the job's deadline (failed + timedOut); 0 or
                                    # absent: none (as ``exec --timeout-ms 0``)
    needs = ["build"]               # optional: jobs (by name) that must end ok first; if one
                                    # does not, this job ends "skipped" without starting
    supersede = false               # optional: cancel the lane's running job (superseded)
    replace_waiting = false         # optional: true replaces a waiting job of the same kind
                                    # on the lane (build, test: it ends superseded); false
                                    # waits until no such job waits, so every job runs
    start_after_ms = 0              # optional, >= 0: submit this long after the run started
    cancel_after_ms = 500           # optional, >= 0: cancel it this long after submitting
    trusted = true                  # optional: false submits it to an untrusted workspace
    expect = "ok"                   # optional: a status or a list; default "ok"
    expect_timed_out = false        # optional: also require timedOut to be this value (true
                                    # needs "failed" in expect: a timed-out job ends failed)
    node = "zone=eu"                # optional, with --ray: pin the project's lane to a node
                                    # with this label ("key=value") or resource ("name");
                                    # the jobs of one project that give it must agree
    report = false                  # optional: true gives the job a report channel (JSON
                                    # lines on the fd $SUPERVISOR_REPORT_FD names: progress
                                    # shown as "3/10" while it runs, records in --json)

A name that other tools use for a key (``cmd``, ``command``, ``run`` for ``argv``,
``depends_on`` for ``needs``, ``working_dir`` for ``cwd``, ...) is refused with the key
it means (:data:`KEY_ALIASES`).

Durations are integers of milliseconds: ``timeout_ms`` at most :data:`MAX_TIMEOUT_MS`
(``2**31 - 1``, about 24.8 days: the protocol's bound), ``start_after_ms`` and
``cancel_after_ms`` at most :data:`MAX_DELAY_MS` (one hour: a run is not a scheduler, and a
longer delay is a typo that would hold the run for ever).

Placeholders, replaced in ``argv``, ``cwd`` and ``env`` values when a job is submitted
(only these exact tokens; other braces are left alone): ``{python}`` is the interpreter
that runs the supervisor (``sys.executable``: no PATH search and no pyenv shim, which
costs about 185 ms a launch), ``{here}`` the directory of the lanes file, and
``{tmpdir}`` a scratch directory created for the run and removed after it. A ``{word}``
close to one of them (``{pyhton}``, ``{PYTHON}``) is refused at its line with a
did-you-mean; any other ``{word}`` is passed as is (``find -exec {} ;`` and format strings
need their braces).
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import re
import shlex
import tomllib
import typing
from dataclasses import dataclass, field
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, Final, Union

import msgspec
import tomlkit
import tomlkit.exceptions
import tomlkit.items
from msgspec import Meta

from protocol import (
    MAX_MILLISECONDS,
    argv_item_problem,
    did_you_mean,
    echo,
    env_item_problem,
    path_problem,
    suggest,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from protocol import JSONObject

__all__ = (
    "DEFAULT_EXPECT",
    "JOB_STATUSES",
    "KEY_ALIASES",
    "MAX_DELAY_MS",
    "MAX_ENV_FILE_BYTES",
    "MAX_LANE_CHARS",
    "MAX_TIMEOUT_MS",
    "PLACEHOLDERS",
    "EnvFileError",
    "JobTable",
    "RunFile",
    "RunFileError",
    "RunFileJob",
    "argv_hint",
    "load_run_file",
    "parse_run_file",
    "read_env_file",
)

#: The statuses of ``job.finished`` (those the lanes report), and ``skipped``: a job whose
#: ``needs`` did not all end ok, never submitted.
JOB_STATUSES: Final = ("ok", "failed", "cancelled", "denied", "superseded", "skipped")
#: What a job is expected to end with when its ``expect`` key is absent: a job replaced or
#: superseded did not run, so that counts as expected only where the file says so.
DEFAULT_EXPECT: Final = frozenset({"ok"})
#: The largest ``timeout_ms``: the protocol's bound on every duration (about 24.8 days).
MAX_TIMEOUT_MS: Final = MAX_MILLISECONDS
#: The largest ``start_after_ms`` and ``cancel_after_ms``: one hour.
MAX_DELAY_MS: Final = 3_600_000
#: The placeholder tokens a job's argv, cwd and env values may hold.
PLACEHOLDERS: Final = ("{python}", "{here}", "{tmpdir}")
#: Used when the lanes package does not publish its own list of kinds.
_FALLBACK_KINDS: Final = ("build", "test", "pack", "toolchain", "add", "command")

#: A token that looks like a placeholder: ``{word}``.
_PLACEHOLDER_LIKE: Final = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")


def _what(what: str, **more: str) -> Meta:
    """A key's metadata: ``what`` it must be (for messages), and ``item`` / ``empty`` texts."""
    return Meta(extra={"what": what, **more})


class JobTable(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """One ``[[job]]`` table as written: the one declaration of its keys, types and bounds.

    The parser derives from it the known keys (and the did-you-mean of an unknown one), the
    required keys, each value's type and each duration's bounds; every message names the
    key's line. The rules no type can say (a directory that exists, a kind the lanes know,
    argv and env text the OS can take, placeholders, statuses, ``needs``) are checked on
    the converted table. The defaults here are the documented defaults.
    """

    argv: Annotated[
        list[str],
        Meta(min_length=1, description="the program and its arguments"),
        _what("an array of strings", item="argv[{i}] must be a string"),
    ]
    project: Annotated[str, _what("a string (a directory)")] = "."
    lane: Annotated[str, _what("a string (a lane name)")] | None = None
    kind: Annotated[str, _what("a string")] = "command"
    name: Annotated[str, _what("a string")] | None = None
    cwd: Annotated[str, _what("a string (a directory)")] | None = None
    env: (
        Annotated[dict[str, str], _what("a table of strings", item="env.{k} must be a string")]
        | None
    ) = None
    env_file: (
        Annotated[str, _what("a path or an array of paths")]
        | Annotated[
            list[str],
            _what(
                "a path or an array of paths",
                item="env_file[{i}] must be a path (a string)",
            ),
        ]
        | None
    ) = None
    timeout_ms: (
        Annotated[int, Meta(ge=0, le=MAX_TIMEOUT_MS), _what("an integer (milliseconds)")] | None
    ) = None
    needs: Annotated[
        list[str],
        _what("an array of job names", item="needs[{i}] must be a job name (a string)"),
    ] = msgspec.field(default_factory=list)
    supersede: Annotated[bool, _what("a boolean")] = False
    replace_waiting: Annotated[bool, _what("a boolean")] = False
    start_after_ms: Annotated[
        int, Meta(ge=0, le=MAX_DELAY_MS), _what("an integer (milliseconds)")
    ] = 0
    cancel_after_ms: (
        Annotated[int, Meta(ge=0, le=MAX_DELAY_MS), _what("an integer (milliseconds)")] | None
    ) = None
    trusted: Annotated[bool, _what("a boolean")] = True
    expect: (
        Annotated[str, _what("a status or an array of statuses")]
        | Annotated[
            list[str],
            Meta(min_length=1),
            _what(
                "a status or an array of statuses",
                item="'expect' values must be strings",
                empty="'expect' must name at least one status",
            ),
        ]
        | None
    ) = None
    expect_timed_out: Annotated[bool, _what("a boolean")] | None = None
    node: Annotated[str, _what('a string ("label=value" or a resource name)')] | None = None
    report: Annotated[bool, _what("a boolean")] = False


#: The keys of a ``[[job]]`` table, in declaration order.
_JOB_KEYS: Final = tuple(f.name for f in msgspec.structs.fields(JobTable))


class RunFileError(Exception):
    """A lanes file that can not be run: bad TOML, an unknown key, a wrong type or value.

    Attributes:
        path: the file as the user named it.
        line: the 1-based line the error is about (0 when the file could not be read).
        message: what is wrong, without the location.
        job: the JOB named on the command line that the file has not, or None.
    """

    def __init__(self, path: str, line: int, message: str, *, job: str | None = None) -> None:
        super().__init__(path, line, message)
        self.path = path
        self.line = line
        self.message = message
        self.job = job

    def __str__(self) -> str:
        if self.line > 0:
            return f"{self.path}:{self.line}: {self.message}"
        return f"{self.path}: {self.message}"


@dataclass(frozen=True, slots=True)
class RunFileJob:
    """One ``[[job]]`` of a lanes file, validated; paths are absolute and normalized.

    ``argv``, ``cwd`` and ``env`` still hold their placeholders; :meth:`payload`
    replaces them.
    """

    name: str
    line: int
    project: str
    kind: str
    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str] | None = None
    #: The lane's name, or None for the project's own lane (see :attr:`lane_key`).
    lane: str | None = None
    #: What the ``env_file`` files set (read when the file was loaded; no placeholders).
    env_file_values: Mapping[str, str] | None = None
    timeout_ms: int | None = None
    needs: tuple[str, ...] = ()
    supersede: bool = False
    replace_waiting: bool = False
    start_after_ms: int = 0
    cancel_after_ms: int | None = None
    trusted: bool = True
    expect: frozenset[str] = DEFAULT_EXPECT
    expect_timed_out: bool | None = None
    node: str | None = None
    #: The line of its ``node`` (the job's, or ``[defaults]``'s); 0 without one.
    node_line: int = 0
    report: bool = False

    def payload(self, placeholders: Mapping[str, str]) -> JSONObject:
        """The ``job.start`` payload of this job, placeholders replaced.

        Args:
            placeholders: token (e.g. ``"{python}"``) to its value.

        Returns:
            ``{kind, root, argv, cwd, env?, timeoutMilliseconds?, supersede, report?}``, the wire
            shape ``lanes.parse_job_start`` validates.
        """
        payload: JSONObject = {
            "kind": self.kind,
            "root": self.project,
            "argv": [_substitute(arg, placeholders) for arg in self.argv],
            "cwd": _substitute(self.cwd, placeholders),
            "supersede": self.supersede,
        }
        if self.env is not None or self.env_file_values is not None:
            env: JSONObject = dict(self.env_file_values or {})
            for k, v in (self.env or {}).items():
                env[k] = _substitute(v, placeholders)
            payload["env"] = env
        if self.timeout_ms is not None:
            payload["timeoutMilliseconds"] = self.timeout_ms
        if self.report:
            payload["report"] = True
        return payload

    @property
    def lane_key(self) -> str:
        """What tells lanes apart: the project's real path, or ``lane:<name>`` for a named
        lane (a real path is absolute, so the two never meet)."""
        return self.project if self.lane is None else f"lane:{self.lane}"

    def is_expected(self, status: str, timed_out: bool) -> bool:
        """Whether a ``job.finished`` with this ``status`` and ``timedOut`` is what we expect."""
        if status not in self.expect:
            return False
        return self.expect_timed_out is None or self.expect_timed_out == timed_out

    def describe_expectation(self) -> str:
        """The expectation in words, e.g. ``"failed (timedOut)"`` or ``"ok or superseded"``."""
        text = " or ".join(s for s in JOB_STATUSES if s in self.expect)
        if self.expect_timed_out is True:
            text += " (timedOut)"
        elif self.expect_timed_out is False:
            text += " (not timedOut)"
        return text


@dataclass(frozen=True, slots=True)
class RunFile:
    """A validated lanes file: its jobs in file order and the directory it lives in."""

    path: str
    directory: str
    jobs: tuple[RunFileJob, ...] = field(default_factory=tuple)


def load_run_file(path: str) -> RunFile:
    """Read and validate the lanes file at ``path``.

    Args:
        path: the file; relative paths in it are resolved against its directory.

    Returns:
        The validated file.

    Raises:
        RunFileError: the file can not be read (``line`` 0) or is not a valid lanes file.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise RunFileError(path, 0, f"cannot read the file: {exc}") from None
    try:
        return parse_run_file(text, path=path, directory=os.path.dirname(os.path.abspath(path)))
    except RecursionError:  # pragma: no cover - the parsers refuse deep nesting first
        raise RunFileError(path, 1, "invalid TOML: values nested too deeply") from None


def parse_run_file(text: str, *, path: str, directory: str) -> RunFile:
    """Validate the text of a lanes file (the format is in this module's docstring).

    Args:
        text: the TOML text.
        path: the name errors carry.
        directory: what relative ``project`` paths are resolved against.

    Returns:
        The validated file with at least one job.

    Raises:
        RunFileError: with the line of the first problem found.
    """
    _check_toml_1_0(text, path)
    try:
        document = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:  # pragma: no cover - tomllib refused it first
        # Text TOML 1.0 accepts and tomlkit does not: its message, at its line.
        message = re.sub(r" at line \d+ col \d+$", "", str(exc))
        raise RunFileError(path, exc.line, f"invalid TOML: {message}") from None
    except tomlkit.exceptions.TOMLKitError as exc:  # pragma: no cover - likewise
        raise RunFileError(path, 1, f"invalid TOML: {exc}") from None
    data: dict[str, Any] = document.unwrap()
    where = _locate(text)
    for key in data:
        if key not in _TOP_LEVEL_KEYS:
            raise RunFileError(
                path,
                where.key_line(None, key),
                f"unknown top-level key {key!r}{_hint(key, _TOP_LEVEL_KEYS)}",
            )
    defaults = _read_defaults(data.get("defaults"), path, where)
    jobs_value = data.get("job")
    if jobs_value is None:
        raise RunFileError(path, 1, "no jobs: add at least one [[job]] table")
    if not isinstance(jobs_value, list) or not all(isinstance(j, dict) for j in jobs_value):
        raise RunFileError(
            path, where.key_line(None, "job"), "'job' must be an array of tables ([[job]])"
        )
    if not jobs_value:
        raise RunFileError(path, where.key_line(None, "job"), "no jobs: 'job' is empty")
    if not isinstance(document.get("job"), tomlkit.items.AoT):
        # `job = [{...}, ...]`: see the module docstring.
        raise RunFileError(
            path,
            where.key_line(None, "job"),
            "write each job as a [[job]] table (an array of inline tables, "
            "'job = [{...}]', is not supported: its errors could not name their line)",
        )
    kinds = _job_kinds()
    counts: dict[str, int] = {}
    names: dict[str, int] = {}
    jobs: list[RunFileJob] = []
    for index, raw in enumerate(jobs_value):
        job = _parse_job(
            raw, index, path=path, directory=directory, where=where, kinds=kinds, defaults=defaults
        )
        if job.name == "":
            counts[job.kind] = counts.get(job.kind, 0) + 1
            job = _replace_name(job, f"{job.kind}#{counts[job.kind]}")
        if job.name in names:
            raise RunFileError(
                path,
                where.job_key_line(index, "name"),
                f"duplicate job name {job.name!r} (first used on line {names[job.name]})",
            )
        names[job.name] = job.line
        jobs.append(job)
    _check_needs(jobs, path=path, where=where)
    _check_lane_nodes(jobs, path, where)
    return RunFile(path=path, directory=directory, jobs=tuple(jobs))


#: The top-level keys of a lanes file.
_TOP_LEVEL_KEYS: Final = ("job", "defaults")
#: The job keys that have no default: each job gives its own.
_NOT_DEFAULTS: Final = ("name", "argv", "needs")
#: The keys ``[defaults]`` may hold.
_DEFAULT_KEYS: Final = tuple(k for k in _JOB_KEYS if k not in _NOT_DEFAULTS)


def _read_defaults(value: object, path: str, where: _Locations) -> dict[str, Any]:
    """The ``[defaults]`` table's keys (each checked against the job keys), or ``{}``.

    Their values are checked where they apply, as a job's own: an error names the line in
    ``[defaults]``.
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RunFileError(path, where.key_line(None, "defaults"), "'defaults' must be a table")
    for key in value:
        if key in _NOT_DEFAULTS:
            raise RunFileError(
                path,
                where.table_key_line(("defaults",), key),
                f"{key!r} can not be a default: each [[job]] gives its own",
            )
        if key not in _DEFAULT_KEYS:
            raise RunFileError(
                path,
                where.table_key_line(("defaults",), key),
                f"unknown key {key!r} in [defaults]{_hint(key, _DEFAULT_KEYS, KEY_ALIASES)}",
            )
    return dict(value)


def _check_needs(jobs: list[RunFileJob], *, path: str, where: _Locations) -> None:
    """Refuse a ``needs`` entry naming no job (with a did-you-mean), itself, or a cycle."""
    by_name = {job.name: index for index, job in enumerate(jobs)}
    names = tuple(by_name)
    for index, job in enumerate(jobs):
        for position, need in enumerate(job.needs):
            line = where.job_key_line(index, "needs", element=position)
            if need == job.name:
                raise RunFileError(path, line, f"job {job.name!r} needs itself")
            if need not in by_name:
                raise RunFileError(
                    path,
                    line,
                    f"needs[{position}]: no job is named {need!r}{_hint(need, names)}",
                )
    # Depth-first search; a job met again while on the current path closes a cycle.
    state: dict[int, int] = {}  # 1: on the path, 2: done
    for first in range(len(jobs)):
        if state.get(first):
            continue
        stack: list[tuple[int, int]] = [(first, 0)]
        state[first] = 1
        while stack:
            index, position = stack[-1]
            needs = jobs[index].needs
            if position == len(needs):
                state[index] = 2
                stack.pop()
                continue
            stack[-1] = (index, position + 1)
            target = by_name[needs[position]]
            if state.get(target) == 1:
                cycle = [i for i, _ in stack]
                cycle = cycle[cycle.index(target) :]
                chain = " -> ".join(repr(jobs[i].name) for i in [*cycle, target])
                raise RunFileError(
                    path,
                    where.job_key_line(index, "needs", element=position),
                    f"the needs form a cycle: {chain}",
                )
            if not state.get(target):
                state[target] = 1
                stack.append((target, 0))


#: tomllib ends its messages with the position: "(at line 3, column 7)".
_TOMLLIB_POSITION = re.compile(r" \(at line (\d+), column \d+\)$")
_TOMLLIB_END = " (at end of document)"


def _check_toml_1_0(text: str, path: str) -> None:
    """Refuse text that strict TOML 1.0 (stdlib ``tomllib``) refuses, at tomllib's line.

    Raises:
        RunFileError: ``invalid TOML: ...`` with the line tomllib names (the last line with
            text when the error is at the end of the file).
    """
    # First our own bound on nesting (no lanes file nests more than three levels): past
    # tomllib's recursion it raises RecursionError, and tomlkit's own bound depends on its
    # release (0.12 has none), so neither decides what a deep file gets.
    _refuse_deep_nesting(text, path)
    try:
        tomllib.loads(text)
    except RecursionError:  # pragma: no cover - refused above
        raise RunFileError(
            path, 1, f"invalid TOML: values nested more than {MAX_NESTING} levels deep"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _TOMLLIB_POSITION.search(message)
        if match is not None:
            line = int(match.group(1))
            message = message[: match.start()]
        elif message.endswith(_TOMLLIB_END):
            line = text.rstrip().count("\n") + 1
            message = message[: -len(_TOMLLIB_END)] + " (at the end of the file)"
        else:  # pragma: no cover - every tomllib error carries one of the two forms
            line = 1
        if message.startswith(("Cannot overwrite", "Cannot declare")):
            # tomllib only says "a value": name it ourselves (no library's wording, which
            # changes between releases, reaches the user or a test).
            raise RunFileError(path, line, f"invalid TOML: {_defined_twice(text, line)}") from None
        raise RunFileError(path, line, f"invalid TOML: {message}") from None


def _defined_twice(text: str, line: int) -> str:
    """What tomllib found defined twice at ``line``, in our words, from the locator."""
    for duplicate in _locate(text).duplicates:
        if duplicate.line == line:
            return duplicate.describe()
    return "a key or table is defined twice (TOML allows each only once)"


#: Arrays and inline tables nested deeper than this are refused (tomlkit's own bound).
MAX_NESTING: Final = 100


def _refuse_deep_nesting(text: str, path: str) -> None:
    """Refuse arrays or inline tables nested deeper than :data:`MAX_NESTING`, or a key of
    more dotted parts, at the line where the bound is passed.

    One linear pass that knows only what it must: strings (basic, literal, multi-line) and
    comments, whose brackets and dots do not count. It judges nothing else; text it
    misreads (TOML that is invalid anyway) can only seem less deep, and tomllib refuses it.

    Raises:
        RunFileError: ``invalid TOML: values nested more than 100 levels deep`` (or keys).
    """
    depth = 0
    line = 1
    in_key = True  # before the `=` of a key: dots there separate key parts
    dots = 0
    i = 0
    end = len(text)
    while i < end:
        ch = text[i]
        if ch == "\n":
            line += 1
            in_key = depth == 0
            dots = 0
        elif ch == "#":
            newline = text.find("\n", i)
            i = end if newline < 0 else newline
            continue
        elif ch in "\"'":
            i, line = _skip_string(text, i, line)
            continue
        elif ch in "[{":
            depth += 1
            if depth > MAX_NESTING:
                raise RunFileError(
                    path, line, f"invalid TOML: values nested more than {MAX_NESTING} levels deep"
                )
            if ch == "{":
                in_key, dots = True, 0
        elif ch in "]}":
            depth = max(depth - 1, 0)
        elif ch == ",":
            in_key, dots = True, 0
        elif ch == "=":
            in_key = False
        elif ch == "." and in_key:
            dots += 1
            if dots >= MAX_NESTING:
                raise RunFileError(
                    path, line, f"invalid TOML: keys nested more than {MAX_NESTING} levels deep"
                )
        i += 1


def _skip_string(text: str, i: int, line: int) -> tuple[int, int]:
    """The index after the string that starts at ``i``, and the line it ends on."""
    quote = text[i]
    if text.startswith(quote * 3, i):
        j = i + 3
        while j < len(text):
            if quote == '"' and text[j] == "\\":
                j += 2
                continue
            if text.startswith(quote * 3, j):
                j += 3
                break
            j += 1
        return j, line + text.count("\n", i, min(j, len(text)))
    j = i + 1
    while j < len(text) and text[j] != quote and text[j] != "\n":
        j += 2 if quote == '"' and text[j] == "\\" else 1
    return (j + 1 if j < len(text) and text[j] == quote else j), line


def _replace_name(job: RunFileJob, name: str) -> RunFileJob:
    import dataclasses

    return dataclasses.replace(job, name=name)


def _job_kinds() -> tuple[str, ...]:
    try:
        import lanes
    except ImportError:  # pragma: no cover - lanes is part of this distribution
        return _FALLBACK_KINDS
    kinds = getattr(lanes, "JOB_KINDS", None)
    if kinds is None:
        job_kind = getattr(lanes, "JobKind", None)
        if job_kind is None:
            return _FALLBACK_KINDS
        return tuple(str(k) for k in job_kind)
    return tuple(str(k) for k in kinds)


#: Names other tools give a job's keys (GitHub Actions, just, docker compose, Procfiles),
#: mapped to ours: an unknown key suggests ours (``cmd`` -> ``argv``).
KEY_ALIASES: Final = {
    "cmd": "argv",
    "command": "argv",
    "args": "argv",
    "run": "argv",
    "script": "argv",
    "exec": "argv",
    "depends_on": "needs",
    "depends": "needs",
    "dependencies": "needs",
    "after": "needs",
    "requires": "needs",
    "timeout": "timeout_ms",
    "timeout-minutes": "timeout_ms",
    "environment": "env",
    "dir": "cwd",
    "workdir": "cwd",
    "working_dir": "cwd",
    "working-directory": "cwd",
    "working_directory": "cwd",
    "envfile": "env_file",
    "dotenv": "env_file",
    "env-file": "env_file",
    "group": "lane",
    "queue": "lane",
    "type": "kind",
}


def _hint(name: str, known: tuple[str, ...], aliases: Mapping[str, str] | None = None) -> str:
    """A did-you-mean (the shared rule, :func:`protocol.did_you_mean`), else the known names."""
    return did_you_mean(name, known, aliases=aliases) or f" (known: {', '.join(known)})"


class _JobTable:
    """One ``[[job]]`` table being read: its values, ``[defaults]`` applied, and how to
    report a bad one (at its line in the job, or in ``[defaults]`` for a default)."""

    def __init__(
        self,
        raw: dict[str, Any],
        index: int,
        *,
        path: str,
        where: _Locations,
        defaults: Mapping[str, Any],
    ) -> None:
        self.own = raw
        self.defaults = defaults
        merged = {**defaults, **raw}
        if isinstance(defaults.get("env"), dict) and isinstance(raw.get("env"), dict):
            merged["env"] = {**defaults["env"], **raw["env"]}
        self.raw = merged
        self.index = index
        self.path = path
        self.where = where
        self.header_line = where.job_line(index)

    def _from_defaults(self, key: str, subkey: str | None) -> bool:
        if key not in self.defaults:
            return False
        if key not in self.own:
            return True
        own = self.own[key]
        return key == "env" and isinstance(own, dict) and subkey is not None and subkey not in own

    def fail(
        self,
        key: str | None,
        message: str,
        subkey: str | None = None,
        element: int | None = None,
    ) -> RunFileError:
        """The error for ``key`` (its line), or for the table header when ``key`` is None."""
        return RunFileError(self.path, self.line_of(key, subkey, element), message)

    def line_of(
        self, key: str | None, subkey: str | None = None, element: int | None = None
    ) -> int:
        """The line of ``key`` (in the job, or in ``[defaults]`` when it comes from there),
        or of the table header when ``key`` is None."""
        if key is None:
            return self.header_line
        if self._from_defaults(key, subkey):
            return self.where.table_key_line(("defaults",), key, subkey, element)
        return self.where.job_key_line(self.index, key, subkey, element)

    def declared(self) -> JobTable:
        """The table converted to its declaration; a value it refuses names its own line."""
        try:
            return msgspec.convert(self.raw, JobTable, strict=True)
        except msgspec.ValidationError as exc:
            raise self._declaration_error(str(exc)) from None

    def _declaration_error(self, message: str) -> RunFileError:
        """Our message for msgspec's, at the line of the key (or element) it is about."""
        at = _AT.search(message)
        if at is None:
            missing = _MISSING.search(message)
            if missing is None:  # pragma: no cover - msgspec names a path or a missing field
                return self.fail(None, message)
            key = missing.group(1)
            return self.fail(None, f"missing required key {key!r} ({_key_hint(key)})")
        parts = _PATH_PART.findall(at.group(1))
        key = parts[0][0]
        value = self.raw[key]
        extra = _key_extra(key, value)
        if len(parts) > 1:
            index = parts[1][1]
            if isinstance(value, dict):  # msgspec says `[...]`: find the bad entry
                sub, item = next((k, v) for k, v in value.items() if not isinstance(v, str))
                text = extra["item"].format(k=sub)
                return self.fail(key, f"{text}, not {_toml_type(item)}", subkey=sub)
            position = int(index)
            text = extra["item"].format(i=position)
            return self.fail(key, f"{text}, not {_toml_type(value[position])}", element=position)
        body = message[: at.start()]
        if "of length >= 1" in body:
            return self.fail(key, extra.get("empty", f"{key!r} must not be empty"))
        bound = _BOUND.search(body)
        if bound is not None:
            unit = " (milliseconds)" if key.endswith("_ms") else ""
            relation = ">=" if bound.group(1) == ">=" else "at most"
            return self.fail(key, f"{key!r} must be {relation} {bound.group(2)}{unit}")
        hint = ""
        if key == "argv" and isinstance(value, str):
            hint = f" (no shell splits it: write argv = {_argv_suggestion(value)})"
        return self.fail(key, f"{key!r} must be {extra['what']}, not {_toml_type(value)}{hint}")


#: Where msgspec says the error is (``$.argv[1]``), and what its path is made of.
_AT: Final = re.compile(r" - at `\$((?:\.\w+|\[[^\]]*\])*)`$")
_PATH_PART: Final = re.compile(r"\.(\w+)|\[([^\]]*)\]")
_MISSING: Final = re.compile(r"missing required field `(\w+)`")
_BOUND: Final = re.compile(r"([<>]=) (-?\d+)$")


def _field_metas(key: str) -> list[tuple[Meta, ...]]:
    """The ``Meta`` groups of ``key``'s declared type, one per member of a union."""
    hints = typing.get_type_hints(JobTable, include_extras=True)
    hint = hints[key]
    members = typing.get_args(hint) if typing.get_origin(hint) in (Union, UnionType) else (hint,)
    return [
        tuple(m for m in typing.get_args(member)[1:] if isinstance(m, Meta))
        for member in members
        if typing.get_origin(member) is Annotated
    ]


def _key_extra(key: str, value: object) -> dict[str, str]:
    """The message texts of ``key`` (for an array value, those of its array member)."""
    found: dict[str, str] = {}
    for metas in _field_metas(key):
        extra: dict[str, str] = {}
        for meta in metas:
            extra.update(meta.extra or {})
        if not found or ("item" in extra and isinstance(value, list | dict)):
            found = extra
    return found


def _key_hint(key: str) -> str:
    """The description of a required key, for "missing required key" messages."""
    if key == "kind":
        return f"one of: {', '.join(_job_kinds())}"
    for metas in _field_metas(key):
        for meta in metas:
            if meta.description:
                return meta.description
    return key  # pragma: no cover - every required key is described


def _parse_job(
    raw: dict[str, Any],
    index: int,
    *,
    path: str,
    directory: str,
    where: _Locations,
    kinds: tuple[str, ...],
    defaults: Mapping[str, Any],
) -> RunFileJob:
    table = _JobTable(raw, index, path=path, where=where, defaults=defaults)
    _refuse_unknown_job_keys(table)
    declared = table.declared()
    if declared.name is not None and not declared.name.strip():
        raise table.fail("name", "'name' must not be empty")
    project_path = _job_project(table, declared.project, directory)
    _check_lane(table, declared.lane)
    if declared.kind not in kinds:
        raise table.fail(
            "kind",
            f"unknown kind {declared.kind!r} (one of: {', '.join(kinds)}; the kinds are the"
            " IDE's lane kinds: for any other job leave 'kind' out, it defaults to"
            f' "command", and say what it does in its name: name = {json.dumps(declared.kind)})',
        )
    _check_argv(table, declared.argv)
    cwd_path = _job_cwd(table, declared.cwd, project_path)
    _check_env(table, declared.env)
    env_file_values = _job_env_files(table, declared.env_file, directory)
    expect = _job_expect(table, declared.expect)
    _check_timed_out_expectation(table, expect, declared.expect_timed_out)
    _check_node(table, declared.node)
    return RunFileJob(
        name=declared.name or "",
        line=table.header_line,
        project=project_path,
        kind=declared.kind,
        argv=tuple(declared.argv),
        cwd=cwd_path,
        env=declared.env,
        lane=declared.lane,
        env_file_values=env_file_values,
        # 0 means no deadline, as ``timeoutMilliseconds: 0`` does on the wire.
        timeout_ms=declared.timeout_ms or None,
        needs=tuple(declared.needs),
        supersede=declared.supersede,
        replace_waiting=declared.replace_waiting,
        start_after_ms=declared.start_after_ms,
        cancel_after_ms=declared.cancel_after_ms,
        trusted=declared.trusted,
        expect=expect,
        expect_timed_out=declared.expect_timed_out,
        node=declared.node,
        node_line=0 if declared.node is None else table.line_of("node"),
        report=declared.report,
    )


#: The longest lane name, in characters.
MAX_LANE_CHARS: Final = 256


def _check_lane(table: _JobTable, lane: str | None) -> None:
    """A lane name: shown in every report, so non-empty, bounded and printable."""
    if lane is None:
        return
    if not lane.strip() or len(lane) > MAX_LANE_CHARS or not lane.isprintable():
        raise table.fail(
            "lane",
            f"'lane' must be a name of 1 to {MAX_LANE_CHARS} printable characters",
        )


def _job_env_files(
    table: _JobTable, env_file: str | list[str] | None, directory: str
) -> dict[str, str] | None:
    """What the job's ``env_file`` files set, later files winning; None without any."""
    if env_file is None:
        return None
    files = [env_file] if isinstance(env_file, str) else env_file
    values: dict[str, str] = {}
    for position, name in enumerate(files):
        element = position if isinstance(env_file, list) else None
        if path_problem(name, "env_file") is not None:
            raise table.fail("env_file", "'env_file' must name a file", element=element)
        file_path = os.path.join(directory, os.path.expanduser(name))
        try:
            values.update(read_env_file(file_path))
        except OSError as exc:
            raise table.fail(
                "env_file", f"env_file {name!r}: cannot read it: {exc.strerror}", element=element
            ) from None
        except EnvFileError as exc:
            raise table.fail(
                "env_file", f"env_file {name!r}, line {exc.line}: {exc.message}", element=element
            ) from None
    return values


class EnvFileError(ValueError):
    """A line of a ``.env`` file that is not ``NAME=VALUE``.

    Attributes:
        line: Its 1-based line.
        message: What is wrong.
    """

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


#: The most a ``.env`` file may hold, in bytes: it is read whole, before anything runs.
MAX_ENV_FILE_BYTES: Final = 1024 * 1024
_ENV_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "$": "$"}


def read_env_file(path: str) -> dict[str, str]:
    """Read a ``.env`` file as docker compose and python-dotenv read one.

    One ``NAME=VALUE`` per line, optionally after ``export``; blank lines and lines that
    start with ``#`` are skipped. A value in single quotes is taken as written; one in double
    quotes may span lines and knows the escapes ``\\n \\t \\r \\" \\\\ \\$``; an
    unquoted value ends at `` #`` (a comment) and is stripped of spaces around it. Nothing is
    expanded (``$HOME`` and ``${VAR}`` stay as written): the file says what the job gets.

    Args:
        path: The file.

    Returns:
        Each name with its value, in file order (a name given twice: the last wins).

    Raises:
        OSError: The file can not be read (or is over :data:`MAX_ENV_FILE_BYTES`).
        EnvFileError: A line that is not ``NAME=VALUE``, an unclosed quote, text that the
            OS can not take in an environment (NUL, ``=`` in a name).
    """
    with open(path, "rb") as f:
        data = f.read(MAX_ENV_FILE_BYTES + 1)
    if len(data) > MAX_ENV_FILE_BYTES:
        raise OSError(0, f"larger than {MAX_ENV_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise EnvFileError(_text_line(data, exc.start), "not UTF-8 text") from None
    values: dict[str, str] = {}
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        start = number
        raw = lines[number].strip()
        number += 1
        if not raw or raw.startswith("#"):
            continue
        if raw.startswith(("export ", "export\t")):
            raw = raw[len("export") :].lstrip()
        name, equals, rest = raw.partition("=")
        name = name.strip()
        if not equals or not name:
            raise EnvFileError(start + 1, f"expected NAME=VALUE, not {echo(raw)}")
        rest = rest.lstrip()
        if rest[:1] in ("'", '"'):
            quote = rest[0]
            body = rest[1:]
            while not _closes(body, quote):
                if number >= len(lines):
                    raise EnvFileError(start + 1, f"the {quote} quote of {name} is not closed")
                body += "\n" + lines[number]
                number += 1
            value, after = _split_quoted(body, quote)
            after = after.strip()
            if after and not after.startswith("#"):
                raise EnvFileError(number, f"text after the closing quote of {name}")
        else:
            value = re.split(r"\s#", rest, maxsplit=1)[0].strip()
        if env_item_problem(name, value) is not None:
            raise EnvFileError(start + 1, f"{echo(name)} can not be set in an environment")
        values[name] = value
    return values


def _text_line(data: bytes, offset: int) -> int:
    """The 1-based line of byte ``offset`` in ``data``."""
    return data.count(b"\n", 0, offset) + 1


def _closes(body: str, quote: str) -> bool:
    """Whether ``body`` (what follows an opening quote) holds its closing quote."""
    escaped = False
    for ch in body:
        if escaped:
            escaped = False
        elif ch == "\\" and quote == '"':
            escaped = True
        elif ch == quote:
            return True
    return False


def _split_quoted(body: str, quote: str) -> tuple[str, str]:
    """The value up to the closing quote (escapes read in double quotes), and what follows."""
    if quote == "'":
        end = body.index("'")
        return body[:end], body[end + 1 :]
    out: list[str] = []
    i = 0
    while body[i] != '"':
        if body[i] == "\\" and i + 1 < len(body):
            out.append(_ENV_ESCAPES.get(body[i + 1], "\\" + body[i + 1]))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out), body[i + 1 :]


def _argv_suggestion(text: str) -> str:
    """``["ruff", "check", "."]`` for ``"ruff check ."``: how argv says what a shell would."""
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    return "[" + ", ".join(json.dumps(w, ensure_ascii=False) for w in words) + "]"


def argv_hint(argv: tuple[str, ...] | list[str]) -> str:
    """A hint for an argv of one word that holds spaces (a shell command line), or ``""``.

    argv is never split: ``["ruff check ."]`` names a program called ``ruff check .``.
    """
    if len(argv) != 1 or " " not in argv[0].strip():
        return ""
    return (
        f" (argv[0] holds spaces, and argv is not split by a shell: did you mean"
        f" argv = {_argv_suggestion(argv[0])}?)"
    )


def _check_node(table: _JobTable, node: str | None) -> None:
    """The ``node`` pin (``--ray`` only): ``"key=value"`` (a node label) or a resource name."""
    if node is None:
        return
    key, equals, value = node.partition("=")
    if not node.strip() or "\0" in node or (equals and not (key.strip() and value.strip())):
        raise table.fail("node", "'node' must be \"label=value\" (a node label) or a resource name")


def _check_lane_nodes(jobs: list[RunFileJob], path: str, where: _Locations) -> None:
    """A lane stays on one node: the jobs of a project that pin it must agree."""
    pins: dict[str, RunFileJob] = {}
    for index, job in enumerate(jobs):
        if job.node is None:
            continue
        first = pins.setdefault(job.project, job)
        if first.node != job.node:
            raise RunFileError(
                path,
                where.job_key_line(index, "node"),
                f"node {job.node!r} differs from {first.node!r} (line {first.line}): the jobs"
                " of a project run on one node",
            )


def _refuse_unknown_job_keys(table: _JobTable) -> None:
    """Raise at the first key a ``[[job]]`` table does not know, with a close match."""
    for key in table.raw:
        if key not in _JOB_KEYS:
            raise table.fail(
                key, f"unknown key {key!r} in [[job]]{_hint(key, _JOB_KEYS, KEY_ALIASES)}"
            )


def _job_project(table: _JobTable, project: str, directory: str) -> str:
    """The lane's project directory, resolved against the file's directory, links resolved.

    The real path is the lane key (``lanes.normalize_root``): two spellings of one project,
    one through a symbolic link, are one lane.
    """
    if path_problem(project, "project") is not None:
        raise table.fail("project", "'project' must be a non-empty path")
    project_path = os.path.realpath(os.path.join(directory, os.path.expanduser(project)))
    if not os.path.isdir(project_path):
        raise table.fail(
            "project", f"project directory {project_path!r} {_not_a_directory(project_path)}"
        )
    return project_path


def _check_argv(table: _JobTable, argv: list[str]) -> None:
    """Every argument the OS can take (no NUL, a program), reported at its own line."""
    for position, arg in enumerate(argv):
        if (problem := argv_item_problem(position, arg)) is not None:
            raise table.fail("argv", problem, element=position)
        _check_placeholders(table, "argv", arg, element=position)


def _job_cwd(table: _JobTable, cwd: str | None, project_path: str) -> str:
    """The working directory, under the project; checked now unless it holds a placeholder."""
    if cwd is not None and path_problem(cwd, "cwd") is not None:
        raise table.fail("cwd", "'cwd' must be a non-empty path")
    if cwd is not None:
        _check_placeholders(table, "cwd", cwd)
    cwd_path: str = project_path if cwd is None else os.path.join(project_path, cwd)
    if not any(p in cwd_path for p in PLACEHOLDERS):
        cwd_path = os.path.normpath(cwd_path)
        if not os.path.isdir(cwd_path):
            raise table.fail("cwd", f"working directory {cwd_path!r} {_not_a_directory(cwd_path)}")
    return cwd_path


def _check_env(table: _JobTable, env: dict[str, str] | None) -> None:
    """Every name and value must be OS-encodable (no NUL, no ``=`` in a name)."""
    for var, value in (env or {}).items():
        if env_item_problem(var, value) is not None:
            raise table.fail("env", f"invalid environment variable {echo(var)}", subkey=var)
        _check_placeholders(table, "env", value, subkey=var)


def _check_placeholders(table: _JobTable, key: str, text: str, **where: Any) -> None:
    """Refuse a ``{word}`` that is a misspelt placeholder (``{pyhton}``), with a did-you-mean."""
    known = [p[1:-1] for p in PLACEHOLDERS]
    for token in _PLACEHOLDER_LIKE.findall(text):
        word = token[1:-1]
        if token in PLACEHOLDERS:
            continue
        close = suggest(word, known)
        if close is not None:
            raise table.fail(
                key,
                f"unknown placeholder {token} in {key!r} (did you mean {{{close}}}?"
                f" the placeholders are {', '.join(PLACEHOLDERS)})",
                **where,
            )


def _job_expect(table: _JobTable, expect_value: str | list[str] | None) -> frozenset[str]:
    """The statuses ``expect`` accepts (a status or an array of them), or the default."""
    if expect_value is None:
        return DEFAULT_EXPECT
    values = [expect_value] if isinstance(expect_value, str) else expect_value
    for position, value in enumerate(values):
        element = position if isinstance(expect_value, list) else None
        if value not in JOB_STATUSES:
            raise table.fail(
                "expect",
                f"'expect' has unknown status {value!r} (one of: {', '.join(JOB_STATUSES)})",
                element=element,
            )
    return frozenset(values)


def _check_timed_out_expectation(
    table: _JobTable, expect: frozenset[str], expect_timed_out: bool | None
) -> None:
    """Refuse ``expect_timed_out = true`` when ``expect`` can never hold a timed-out job."""
    if expect_timed_out is True and "failed" not in expect:
        # Only a job that fails has timedOut (lanes: a deadline ends a job "failed").
        default = "" if "expect" in table.raw else " (the default)"
        raise table.fail(
            "expect_timed_out",
            f"'expect_timed_out = true' can never be met with expect = {_show_expect(expect)}"
            f"{default}: a job that times out ends 'failed' (add \"failed\" to 'expect')",
        )


def _not_a_directory(path: str) -> str:
    """Why ``path``, which is not a directory, can not be one: for an error message."""
    return "is not a directory" if os.path.exists(path) else "does not exist"


def _show_expect(expect: frozenset[str]) -> str:
    statuses = [s for s in JOB_STATUSES if s in expect]
    if len(statuses) == 1:
        return f'"{statuses[0]}"'
    return "[" + ", ".join(f'"{s}"' for s in statuses) + "]"


def _toml_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


def _substitute(text: str, placeholders: Mapping[str, str]) -> str:
    for token, value in placeholders.items():
        text = text.replace(token, value)
    return text


# --- The locator -------------------------------------------------------------------------
#
# It reads text tomllib and tomlkit have already accepted (so TOML 1.0: an inline table is
# on one line), so it only needs to tell statements apart:
# table headers, `key = value` lines, and values that span lines (multi-line strings,
# arrays, inline tables). It never judges validity; if it gets lost it stops, and lookups
# fall back to the nearest line it knows (the job's header, else line 1).


@dataclass(frozen=True, slots=True)
class _Duplicate:
    """A key or ``[table]`` header defined a second time: where, and where first."""

    line: int
    first_line: int
    #: The key path (the table's path for a header, else the key's within its table).
    path: tuple[str, ...]
    #: The header of the table the key is in as written (``[[job]]``, ``""`` for the top
    #: level); None when the duplicate is a ``[table]`` header itself.
    table: str | None

    def describe(self) -> str:
        dotted = ".".join(self.path)
        if self.table is None:
            return f"table [{dotted}] is defined twice (first on line {self.first_line})"
        inside = f" in {self.table}" if self.table else ""
        return f"key {dotted!r}{inside} is defined twice (first on line {self.first_line})"


@dataclass(slots=True)
class _Locations:
    #: (header path, is an array table, line), in file order.
    tables: list[tuple[tuple[str, ...], bool, int]] = field(default_factory=list)
    #: (index into tables or -1 for the root, key path) -> line.
    keys: dict[tuple[int, tuple[str, ...]], int] = field(default_factory=dict)
    #: Keys and ``[table]`` headers that repeat an earlier one, in file order.
    duplicates: list[_Duplicate] = field(default_factory=list)
    #: (index into tables or -1, key path) -> the line of each element of an array value.
    elements: dict[tuple[int, tuple[str, ...]], list[int]] = field(default_factory=dict)

    def key_line(self, table: int | None, key: str) -> int:
        ordinal = -1 if table is None else table
        for (t, path), line in self.keys.items():
            if t == ordinal and path[0] == key:
                return line
        for path, _is_array, line in self.tables:
            if path[0] == key:
                return line
        return 1

    def _job_table(self, index: int) -> int | None:
        seen = -1
        for ordinal, (path, is_array, _line) in enumerate(self.tables):
            if path == ("job",) and is_array:
                seen += 1
                if seen == index:
                    return ordinal
        return None

    def job_line(self, index: int) -> int:
        ordinal = self._job_table(index)
        return 1 if ordinal is None else self.tables[ordinal][2]

    def job_key_line(
        self, index: int, key: str, subkey: str | None = None, element: int | None = None
    ) -> int:
        ordinal = self._job_table(index)
        if ordinal is None:
            return 1
        return self._key_line_in(ordinal, key, subkey, element)

    def table_key_line(
        self,
        header: tuple[str, ...],
        key: str,
        subkey: str | None = None,
        element: int | None = None,
    ) -> int:
        """The line of ``key`` in the (non-array) table ``[header]``, e.g. ``[defaults]``."""
        for ordinal, (path, is_array, _line) in enumerate(self.tables):
            if path == header and not is_array:
                return self._key_line_in(ordinal, key, subkey, element)
        return self.key_line(None, header[0])

    def _key_line_in(self, ordinal: int, key: str, subkey: str | None, element: int | None) -> int:
        if element is not None:
            lines = self.elements.get((ordinal, (key,)), [])
            if element < len(lines):
                return lines[element]
        wanted = (key,) if subkey is None else (key, subkey)
        best: int | None = None
        for (t, path), line in self.keys.items():
            if t == ordinal and path[: len(wanted)] == wanted:
                return line
            if t == ordinal and best is None and path[0] == key:
                best = line
        # Sub-tables (`[job.env]`, `[defaults.env]`) that follow the table's header, up to
        # the next table that is not one of them.
        header = self.tables[ordinal][0]
        for sub in range(ordinal + 1, len(self.tables)):
            path, _is_array, line = self.tables[sub]
            if len(path) <= len(header) or path[: len(header)] != header:
                break
            if path[len(header)] == key:
                if subkey is not None:
                    sub_line = self.keys.get((sub, (subkey,)))
                    if sub_line is not None:
                        return sub_line
                return line
        return best if best is not None else self.tables[ordinal][2]


class _Lost(Exception):
    """The locator met text it does not understand; what it found so far stands."""


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SCALAR_END = frozenset(",]}#\n")


def _locate(text: str) -> _Locations:
    where = _Locations()
    newlines = [i for i, ch in enumerate(text) if ch == "\n"]
    with contextlib.suppress(_Lost, IndexError):
        _Locator(text, newlines, where).run()
    return where


class _Locator:
    def __init__(self, text: str, newlines: list[int], where: _Locations) -> None:
        self.text = text
        self.newlines = newlines
        self.where = where
        self.i = 0

    def line(self, index: int) -> int:
        return bisect.bisect_left(self.newlines, index) + 1

    def run(self) -> None:
        text = self.text
        table = -1
        while True:
            self.skip_blank(newlines=True)
            if self.i >= len(text):
                return
            start = self.i
            if text.startswith("[[", self.i):
                self.i += 2
                path = self.key_path("]")
                self.expect("]]")
                self.where.tables.append((path, True, self.line(start)))
                table = len(self.where.tables) - 1
            elif text[self.i] == "[":
                self.i += 1
                path = self.key_path("]")
                self.expect("]")
                for seen, is_array, first in self.where.tables:
                    if seen == path and not is_array:
                        self.where.duplicates.append(
                            _Duplicate(self.line(start), first, path, None)
                        )
                        break
                self.where.tables.append((path, False, self.line(start)))
                table = len(self.where.tables) - 1
            else:
                path = self.key_path("=")
                self.expect("=")
                first_line = self.where.keys.get((table, path))
                if first_line is not None:
                    header = ""
                    if table >= 0:
                        header_path, is_array, _line = self.where.tables[table]
                        dotted = ".".join(header_path)
                        header = f"[[{dotted}]]" if is_array else f"[{dotted}]"
                    self.where.duplicates.append(
                        _Duplicate(self.line(start), first_line, path, header)
                    )
                self.where.keys.setdefault((table, path), self.line(start))
                self.skip_blank(newlines=False)
                elements: list[int] = []
                self.value(top_level=True, elements=elements)
                self.where.elements.setdefault((table, path), elements)

    def expect(self, token: str) -> None:
        self.skip_blank(newlines=False)
        if not self.text.startswith(token, self.i):
            raise _Lost
        self.i += len(token)

    def skip_blank(self, *, newlines: bool) -> None:
        text = self.text
        while self.i < len(text):
            ch = text[self.i]
            if ch in " \t\r" or (newlines and ch == "\n"):
                self.i += 1
            elif ch == "#":
                end = text.find("\n", self.i)
                self.i = len(text) if end < 0 else end
            else:
                return

    def key_path(self, terminator: str) -> tuple[str, ...]:
        parts: list[str] = []
        while True:
            self.skip_blank(newlines=False)
            ch = self.text[self.i]
            if ch in "\"'":
                start = self.i + 1
                self.string(ch)
                parts.append(self.text[start : self.i - 1])
            else:
                match = _BARE_KEY.match(self.text, self.i)
                if match is None:
                    raise _Lost
                parts.append(match.group())
                self.i = match.end()
            self.skip_blank(newlines=False)
            if self.text.startswith(".", self.i):
                self.i += 1
                continue
            if not self.text.startswith(terminator, self.i):
                raise _Lost
            return tuple(parts)

    def string(self, quote: str) -> None:
        text = self.text
        triple = quote * 3
        if text.startswith(triple, self.i):
            self.i += 3
            while True:
                if quote == '"' and text[self.i] == "\\":
                    self.i += 2
                elif text.startswith(triple, self.i):
                    self.i += 3
                    # Up to two quotes may sit right before the closing delimiter.
                    while self.i < len(text) and text[self.i] == quote:
                        self.i += 1
                    return
                else:
                    self.i += 1
        self.i += 1
        while text[self.i] != quote:
            if quote == '"' and text[self.i] == "\\":
                self.i += 1
            if text[self.i] == "\n":
                raise _Lost
            self.i += 1
        self.i += 1

    def value(self, *, top_level: bool, elements: list[int] | None = None) -> None:
        """Skip one value; for an array, append each element's line to ``elements``."""
        text = self.text
        ch = text[self.i]
        if ch in "\"'":
            self.string(ch)
        elif ch == "[":
            self.i += 1
            while True:
                self.skip_blank(newlines=True)
                if text[self.i] == "]":
                    self.i += 1
                    return
                if elements is not None:
                    elements.append(self.line(self.i))
                self.value(top_level=False)
                self.skip_blank(newlines=True)
                if text[self.i] == ",":
                    self.i += 1
        elif ch == "{":
            self.i += 1
            while True:
                self.skip_blank(newlines=False)
                if text[self.i] == "}":
                    self.i += 1
                    return
                self.key_path("=")
                self.expect("=")
                self.skip_blank(newlines=False)
                self.value(top_level=False)
                self.skip_blank(newlines=False)
                if text[self.i] == ",":
                    self.i += 1
        else:
            # Numbers, booleans, dates (which may hold a space): up to a delimiter.
            while self.i < len(text) and text[self.i] not in _SCALAR_END:
                self.i += 1
            if top_level and self.i < len(text) and text[self.i] in ",]}":
                raise _Lost
