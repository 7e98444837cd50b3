"""The lanes file of ``supervisor run``: parse and validate, naming the line of every error.

Strategy: the stdlib ``tomllib`` (strict TOML 1.0) checks the syntax first and its error
names the line; only then does tomlkit parse the text. tomlkit alone is not enough: it
accepts some text TOML 1.0 refuses (an inline table spread over several lines), and the
locator below, which follows TOML 1.0, would lose its place in such text and report wrong
lines. The plain values are then validated key by key. tomlkit keeps no source positions
on its items, so a small locator (:func:`_locate`) walks the same, already valid, text
once and records the line of every table header, every key and every element of a
top-level array value (so ``argv[3]`` of a multi-line ``argv = [...]`` is reported at its
own line); a validation error asks it for the line of the key it is about. Nothing here
starts a process or touches Trio: a bad file is refused before anything runs, so
nothing is left half-started.

Jobs must be written as ``[[job]]`` tables. The equivalent inline form
``job = [{...}, {...}]`` is refused, at its line, with a message that says so: its keys
all sit inside one value, where errors could not name their own line, and one form keeps
files uniform.

The file is an array of tables, one ``[[job]]`` per job, in submission order::

    [[job]]
    name = "build"                  # optional, unique; default "<kind>#<n>"
    project = "project"             # required: the lane, a directory (relative to this file)
    kind = "build"                  # required: a lanes job kind (build, test, ...)
    argv = ["{python}", "-m", "compileall", "-q", "calc"]   # required, non-empty
    cwd = "calc"                    # optional, relative to the project; default: the project
    env = { PYTHONHASHSEED = "0" }  # optional, strings only; added to the inherited env
    timeout_ms = 60000              # optional, > 0: the job's deadline (failed + timedOut)
    supersede = false               # optional: cancel the lane's running job (superseded)
    start_after_ms = 0              # optional, >= 0: submit this long after the run started
    cancel_after_ms = 500           # optional, >= 0: cancel it this long after submitting
    trusted = true                  # optional: false submits it to an untrusted workspace
    expect = "ok"                   # optional: a status or a list; default ["ok", "superseded"]
    expect_timed_out = false        # optional: also require timedOut to be this value (true
                                    # needs "failed" in expect: a timed-out job ends failed)
    node = "zone=eu"                # optional, with --ray: pin the project's lane to a node
                                    # with this label ("key=value") or resource ("name");
                                    # the jobs of one project that give it must agree

Placeholders, replaced in ``argv``, ``cwd`` and ``env`` values when a job is submitted
(only these exact tokens; other braces are left alone): ``{python}`` is the interpreter
that runs the supervisor (``sys.executable``: no PATH search and no pyenv shim, which
costs about 185 ms a launch), ``{here}`` the directory of the lanes file, and
``{tmpdir}`` a scratch directory created for the run and removed after it. Any other
``{word}`` is passed as is (``find -exec {} ;`` needs its braces); when such a job fails to
launch, ``supervisor run`` names the known placeholders on its ``finished`` line.
"""

from __future__ import annotations

import bisect
import contextlib
import difflib
import os
import re
import tomllib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import tomlkit
import tomlkit.exceptions
import tomlkit.items

from protocol import (
    MAX_MILLISECONDS,
    argv_item_problem,
    echo,
    env_item_problem,
    path_problem,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from protocol import JSONObject

__all__ = (
    "DEFAULT_EXPECT",
    "JOB_STATUSES",
    "PLACEHOLDERS",
    "RunFile",
    "RunFileError",
    "RunFileJob",
    "load_run_file",
    "parse_run_file",
)

#: The statuses of ``job.finished`` (those the lanes report).
JOB_STATUSES: Final = ("ok", "failed", "cancelled", "denied", "superseded")
#: What a job is expected to end with when its ``expect`` key is absent.
DEFAULT_EXPECT: Final = frozenset({"ok", "superseded"})
#: The placeholder tokens a job's argv, cwd and env values may hold.
PLACEHOLDERS: Final = ("{python}", "{here}", "{tmpdir}")
#: Used when the lanes package does not publish its own list of kinds.
_FALLBACK_KINDS: Final = ("build", "test", "pack", "toolchain", "add", "command")

_JOB_KEYS: Final = (
    "name",
    "project",
    "kind",
    "argv",
    "cwd",
    "env",
    "timeout_ms",
    "supersede",
    "start_after_ms",
    "cancel_after_ms",
    "trusted",
    "expect",
    "expect_timed_out",
    "node",
)


class RunFileError(Exception):
    """A lanes file that can not be run: bad TOML, an unknown key, a wrong type or value.

    Attributes:
        path: the file as the user named it.
        line: the 1-based line the error is about (0 when the file could not be read).
        message: what is wrong, without the location.
    """

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(path, line, message)
        self.path = path
        self.line = line
        self.message = message

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
    timeout_ms: int | None = None
    supersede: bool = False
    start_after_ms: int = 0
    cancel_after_ms: int | None = None
    trusted: bool = True
    expect: frozenset[str] = DEFAULT_EXPECT
    expect_timed_out: bool | None = None
    node: str | None = None

    def payload(self, placeholders: Mapping[str, str]) -> JSONObject:
        """The ``job.start`` payload of this job, placeholders replaced.

        Args:
            placeholders: token (e.g. ``"{python}"``) to its value.

        Returns:
            ``{kind, root, argv, cwd, env?, timeoutMilliseconds?, supersede}``, the wire
            shape ``lanes.parse_job_start`` validates.
        """
        payload: JSONObject = {
            "kind": self.kind,
            "root": self.project,
            "argv": [_substitute(arg, placeholders) for arg in self.argv],
            "cwd": _substitute(self.cwd, placeholders),
            "supersede": self.supersede,
        }
        if self.env is not None:
            payload["env"] = {k: _substitute(v, placeholders) for k, v in self.env.items()}
        if self.timeout_ms is not None:
            payload["timeoutMilliseconds"] = self.timeout_ms
        return payload

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
    return parse_run_file(text, path=path, directory=os.path.dirname(os.path.abspath(path)))


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
    except tomlkit.exceptions.ParseError as exc:
        message = str(exc)
        # tomlkit appends " at line L col C"; we already say the line.
        message = re.sub(r" at line \d+ col \d+$", "", message)
        # tomlkit reads past the end as a NUL character.
        message = message.replace("Unexpected character: '\\x00'", "unexpected end of file")
        raise RunFileError(path, exc.line, f"invalid TOML: {message}") from None
    except tomlkit.exceptions.TOMLKitError as exc:
        # Semantic errors (a key or table defined twice) carry no position: find it.
        duplicate = _locate(text).duplicates
        line = duplicate[0] if duplicate else 1
        raise RunFileError(path, line, f"invalid TOML: {exc}") from None
    data: dict[str, Any] = document.unwrap()
    where = _locate(text)
    for key in data:
        if key != "job":
            raise RunFileError(
                path, where.key_line(None, key), f"unknown top-level key {key!r}{_hint(key)}"
            )
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
        job = _parse_job(raw, index, path=path, directory=directory, where=where, kinds=kinds)
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
    _check_lane_nodes(jobs, path, where)
    return RunFile(path=path, directory=directory, jobs=tuple(jobs))


#: tomllib ends its messages with the position: "(at line 3, column 7)".
_TOMLLIB_POSITION = re.compile(r" \(at line (\d+), column \d+\)$")
_TOMLLIB_END = " (at end of document)"


def _check_toml_1_0(text: str, path: str) -> None:
    """Refuse text that strict TOML 1.0 (stdlib ``tomllib``) refuses, at tomllib's line.

    Raises:
        RunFileError: ``invalid TOML: ...`` with the line tomllib names (the last line with
            text when the error is at the end of the file).
    """
    try:
        tomllib.loads(text)
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
            # tomllib only says "a value"; tomlkit names the key (but not its line).
            try:
                tomlkit.parse(text)
            except tomlkit.exceptions.ParseError:
                pass
            except tomlkit.exceptions.TOMLKitError as semantic:
                message = str(semantic)
        raise RunFileError(path, line, f"invalid TOML: {message}") from None


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


def _hint(key: str, known: tuple[str, ...] = ("job",)) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known: {', '.join(known)})"


class _JobTable:
    """One ``[[job]]`` table being read: its raw values and how to report a bad one."""

    def __init__(self, raw: dict[str, Any], index: int, *, path: str, where: _Locations) -> None:
        self.raw = raw
        self.index = index
        self.path = path
        self.where = where
        self.header_line = where.job_line(index)

    def fail(
        self,
        key: str | None,
        message: str,
        subkey: str | None = None,
        element: int | None = None,
    ) -> RunFileError:
        """The error for ``key`` (its line), or for the table header when ``key`` is None."""
        if key is None:
            line = self.header_line
        else:
            line = self.where.job_key_line(self.index, key, subkey, element)
        return RunFileError(self.path, line, message)

    def typed(self, key: str, kind: type | tuple[type, ...], what: str) -> Any:
        """The value of ``key`` (None when absent); raises when it is not a ``kind``."""
        value = self.raw.get(key)
        # bool is an int subclass: `timeout_ms = true` must not pass as 1.
        if value is None:
            return None
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            raise self.fail(key, f"{key!r} must be {what}, not a boolean")
        if not isinstance(value, kind):
            raise self.fail(key, f"{key!r} must be {what}, not {_toml_type(value)}")
        return value


def _parse_job(
    raw: dict[str, Any],
    index: int,
    *,
    path: str,
    directory: str,
    where: _Locations,
    kinds: tuple[str, ...],
) -> RunFileJob:
    table = _JobTable(raw, index, path=path, where=where)
    _refuse_unknown_job_keys(table)
    name = _job_name(table)
    project_path = _job_project(table, directory)
    kind = _job_kind(table, kinds)
    argv = _job_argv(table)
    cwd_path = _job_cwd(table, project_path)
    env = _job_env(table)
    timeout_ms, start_after_ms, cancel_after_ms = _job_times(table)
    supersede = table.typed("supersede", bool, "a boolean")
    trusted = table.typed("trusted", bool, "a boolean")
    expect_timed_out = table.typed("expect_timed_out", bool, "a boolean")
    expect = _job_expect(table)
    _check_timed_out_expectation(table, expect, expect_timed_out)
    node = _job_node(table)
    return RunFileJob(
        name=name,
        line=table.header_line,
        project=project_path,
        kind=kind,
        argv=tuple(argv),
        cwd=cwd_path,
        env=None if env is None else dict(env),
        timeout_ms=timeout_ms,
        supersede=bool(supersede),
        start_after_ms=start_after_ms,
        cancel_after_ms=cancel_after_ms,
        trusted=True if trusted is None else trusted,
        expect=expect,
        expect_timed_out=expect_timed_out,
        node=node,
    )


def _job_node(table: _JobTable) -> str | None:
    """The ``node`` pin (``--ray`` only): ``"key=value"`` (a node label) or a resource name."""
    node: str | None = table.typed("node", str, 'a string ("label=value" or a resource name)')
    if node is not None:
        key, equals, value = node.partition("=")
        if not node.strip() or "\0" in node or (equals and not (key.strip() and value.strip())):
            raise table.fail(
                "node", "'node' must be \"label=value\" (a node label) or a resource name"
            )
    return node


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
            raise table.fail(key, f"unknown key {key!r} in [[job]]{_hint(key, _JOB_KEYS)}")


def _job_name(table: _JobTable) -> str:
    """The job's ``name``: "" when absent; raises when given but blank."""
    name: str = table.typed("name", str, "a string") or ""
    if "name" in table.raw and not name.strip():
        raise table.fail("name", "'name' must not be empty")
    return name


def _job_project(table: _JobTable, directory: str) -> str:
    """The lane's project directory, normalised and resolved against the file's directory."""
    project = table.typed("project", str, "a string (a directory)")
    if project is None:
        raise table.fail(None, "missing required key 'project' (the lane: a project directory)")
    if path_problem(project, "project") is not None:
        raise table.fail("project", "'project' must be a non-empty path")
    project_path = os.path.normpath(os.path.join(directory, os.path.expanduser(project)))
    if not os.path.isdir(project_path):
        raise table.fail(
            "project", f"project directory {project_path!r} {_not_a_directory(project_path)}"
        )
    return project_path


def _job_kind(table: _JobTable, kinds: tuple[str, ...]) -> str:
    """The job's ``kind``, one of ``kinds``."""
    kind: str | None = table.typed("kind", str, "a string")
    if kind is None:
        raise table.fail(None, f"missing required key 'kind' (one of: {', '.join(kinds)})")
    if kind not in kinds:
        raise table.fail("kind", f"unknown kind {kind!r} (one of: {', '.join(kinds)})")
    return kind


def _job_argv(table: _JobTable) -> list[str]:
    """The job's ``argv``: a non-empty array of strings the OS can take, reported per element."""
    argv: list[Any] | None = table.typed("argv", list, "an array of strings")
    if argv is None:
        raise table.fail(None, "missing required key 'argv' (the program and its arguments)")
    if not argv:
        raise table.fail("argv", "'argv' must not be empty")
    for position, arg in enumerate(argv):
        if not isinstance(arg, str):
            raise table.fail(
                "argv",
                f"argv[{position}] must be a string, not {_toml_type(arg)}",
                element=position,
            )
        if (problem := argv_item_problem(position, arg)) is not None:
            raise table.fail("argv", problem, element=position)
    return argv


def _job_cwd(table: _JobTable, project_path: str) -> str:
    """The working directory, under the project; checked now unless it holds a placeholder."""
    cwd = table.typed("cwd", str, "a string (a directory)")
    if cwd is not None and path_problem(cwd, "cwd") is not None:
        raise table.fail("cwd", "'cwd' must be a non-empty path")
    cwd_path: str = project_path if cwd is None else os.path.join(project_path, cwd)
    if not any(p in cwd_path for p in PLACEHOLDERS):
        cwd_path = os.path.normpath(cwd_path)
        if not os.path.isdir(cwd_path):
            raise table.fail("cwd", f"working directory {cwd_path!r} {_not_a_directory(cwd_path)}")
    return cwd_path


def _job_env(table: _JobTable) -> dict[str, str] | None:
    """The ``env`` table (None when absent); every name and value must be OS-encodable."""
    env: dict[str, Any] | None = table.typed("env", dict, "a table of strings")
    if env is not None:
        for var, value in env.items():
            if not isinstance(value, str):
                raise table.fail(
                    "env",
                    f"env.{var} must be a string, not {_toml_type(value)}",
                    subkey=var,
                )
            if env_item_problem(var, value) is not None:
                raise table.fail("env", f"invalid environment variable {echo(var)}", subkey=var)
    return env


def _job_times(table: _JobTable) -> tuple[int | None, int, int | None]:
    """``(timeout_ms, start_after_ms, cancel_after_ms)``, each within its range, in ms."""
    timeout_ms = table.typed("timeout_ms", int, "an integer (milliseconds)")
    if timeout_ms is not None and timeout_ms <= 0:
        raise table.fail("timeout_ms", "'timeout_ms' must be > 0 (milliseconds)")
    start_after_ms = table.typed("start_after_ms", int, "an integer (milliseconds)") or 0
    if start_after_ms < 0:
        raise table.fail("start_after_ms", "'start_after_ms' must be >= 0 (milliseconds)")
    cancel_after_ms = table.typed("cancel_after_ms", int, "an integer (milliseconds)")
    if cancel_after_ms is not None and cancel_after_ms < 0:
        raise table.fail("cancel_after_ms", "'cancel_after_ms' must be >= 0 (milliseconds)")
    for key, ms in (
        ("timeout_ms", timeout_ms),
        ("start_after_ms", start_after_ms),
        ("cancel_after_ms", cancel_after_ms),
    ):
        if ms is not None and ms > MAX_MILLISECONDS:
            raise table.fail(key, f"{key!r} must be at most {MAX_MILLISECONDS} (milliseconds)")
    return timeout_ms, start_after_ms, cancel_after_ms


def _job_expect(table: _JobTable) -> frozenset[str]:
    """The statuses ``expect`` accepts (a status or an array of them), or the default."""
    expect_value = table.typed("expect", (str, list), "a status or an array of statuses")
    if expect_value is None:
        return DEFAULT_EXPECT
    values = [expect_value] if isinstance(expect_value, str) else expect_value
    if not values:
        raise table.fail("expect", "'expect' must name at least one status")
    for position, value in enumerate(values):
        element = position if isinstance(expect_value, list) else None
        if not isinstance(value, str):
            raise table.fail(
                "expect",
                f"'expect' values must be strings, not {_toml_type(value)}",
                element=element,
            )
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


@dataclass(slots=True)
class _Locations:
    #: (header path, is an array table, line), in file order.
    tables: list[tuple[tuple[str, ...], bool, int]] = field(default_factory=list)
    #: (index into tables or -1 for the root, key path) -> line.
    keys: dict[tuple[int, tuple[str, ...]], int] = field(default_factory=dict)
    #: Lines of keys and ``[table]`` headers that repeat an earlier one, in file order.
    duplicates: list[int] = field(default_factory=list)
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
        # `[job.env]` sub-tables that follow this job's header, up to the next [[job]].
        for sub in range(ordinal + 1, len(self.tables)):
            path, is_array, line = self.tables[sub]
            if path == ("job",) and is_array:
                break
            if path[:2] == ("job", key):
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
                if (path, False) in ((p, a) for p, a, _line in self.where.tables):
                    self.where.duplicates.append(self.line(start))
                self.where.tables.append((path, False, self.line(start)))
                table = len(self.where.tables) - 1
            else:
                path = self.key_path("=")
                self.expect("=")
                if (table, path) in self.where.keys:
                    self.where.duplicates.append(self.line(start))
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
