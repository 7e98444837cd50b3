"""Launching a process tree's main process: the checks, the lookup and the spawn, without Trio.

What :func:`_tree.open_process_tree` does before its main process runs -- the argv, environment
and working directory checked (``invalid_request``, ``launch_failed``: nothing starts), the
program looked up on the child's ``PATH``, the watchdog and the subreaper made ready, the spawn
and its records -- are system calls and plain checks, here so that ``supervisor exec`` can take
them without starting an event loop (``_direct``), and the tree's own start takes the same ones.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from typing import Any

from protocol import CoreError, JSONObject, argv_item_problem, env_item_problem, path_problem

from . import _reaper, _watchdog

__all__ = (
    "check_argv",
    "check_cwd",
    "check_env",
    "launch_failed",
    "resolve_executable",
    "spawn_failed",
    "spawned",
)


def _invalid(message: str, details: JSONObject | None = None) -> CoreError:
    return CoreError("invalid_request", message, details)


def launch_failed(message: str, details: JSONObject | None = None) -> CoreError:
    return CoreError("launch_failed", message, details)


def check_argv(argv: object) -> list[str]:
    if isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence):
        raise _invalid("argv must be a list of strings (no shell is used)")
    if not argv:
        raise _invalid("argv must not be empty")
    for index, arg in enumerate(argv):
        if (problem := argv_item_problem(index, arg)) is not None:
            raise _invalid(problem, {"field": "argv", "index": index})
    return list(argv)


#: ``(raw os.environ, its decoded copy)``: decoding the environment costs tens of
#: microseconds per spawn, comparing the raw bytes mapping about one.
_environ_cache: tuple[dict[Any, Any], dict[str, str]] | None = None


def _environ_copy() -> dict[str, str]:
    """A fresh ``dict(os.environ)``, decoded once per change of the environment."""
    global _environ_cache
    raw = getattr(os.environ, "_data", None)  # the encoded mapping behind os.environ
    if not isinstance(raw, dict):
        return dict(os.environ)
    if _environ_cache is None or _environ_cache[0] != raw:
        _environ_cache = (dict(raw), dict(os.environ))
    return dict(_environ_cache[1])


def check_env(env: object) -> dict[str, str]:
    merged = _environ_copy()
    if env is None:
        return merged
    if not isinstance(env, Mapping):
        raise _invalid("env must be an object mapping names to strings or null")
    for key, value in env.items():
        if (problem := env_item_problem(key, value)) is not None:
            raise _invalid(problem, {"field": "env"})
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def check_cwd(cwd: object) -> str | None:
    if cwd is None:
        return None
    if not isinstance(cwd, (str, os.PathLike)):
        raise _invalid("cwd must be a string path")
    path = os.fspath(cwd)
    if not isinstance(path, str):
        raise _invalid("cwd must be a string path", {"field": "cwd"})
    if (problem := path_problem(path, "cwd")) is not None:
        raise _invalid(problem, {"field": "cwd"})
    # One stat rather than exists() + isdir(): each system call counts at thousands of
    # jobs.
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        raise launch_failed(f"working directory does not exist: {path}", {"cwd": path}) from None
    if not stat.S_ISDIR(mode):
        raise launch_failed(f"working directory is not a directory: {path}", {"cwd": path})
    return path


def resolve_executable(name: str, cwd: str | None, env: Mapping[str, str]) -> str:
    if os.sep in name:
        # Absolute, not normalized: the child gets this path after its chdir, so a relative
        # cwd must not be applied twice; ".." keeps the kernel's meaning through symlinks.
        path = name if os.path.isabs(name) else os.path.join(os.getcwd(), cwd or "", name)
        try:
            mode = os.stat(path).st_mode
        except (OSError, ValueError):
            raise launch_failed(
                f"executable not found: {name}", {"executable": name, "reason": "notFound"}
            ) from None
        if stat.S_ISDIR(mode):
            raise launch_failed(
                f"executable is a directory: {name}",
                {"executable": name, "reason": "notExecutable"},
            )
        if not os.access(path, os.X_OK):
            raise launch_failed(
                f"executable is not executable: {name}",
                {"executable": name, "reason": "notExecutable"},
            )
        return path
    # The same lookup subprocess performs: the child's PATH, not ours.
    search = os.pathsep.join(os.get_exec_path(env))
    found = shutil.which(name, path=search)
    if found is None:
        raise launch_failed(
            f"executable not found on PATH: {name}", {"executable": name, "reason": "notFound"}
        )
    # A relative PATH entry was searched from our directory: run the file that was found.
    return found if os.path.isabs(found) else os.path.join(os.getcwd(), found)


def spawn_failed(exc: OSError, program: str) -> CoreError:
    """The ``launch_failed`` error for a spawn of ``program`` that raised ``exc``: resolved,
    yet not started; the errno tells why (ENOEXEC, E2BIG, ...)."""
    details: JSONObject = {"executable": program}
    if exc.errno is not None:
        details["errno"] = exc.errno
    return launch_failed(f"could not start {program}: {exc.strerror or exc}", details)


def spawned(pid: int) -> None:
    """Record a tree's main process just spawned: the reaper must not take it for an orphan,
    and the watchdog learns its tree (``_watchdog.watch_tree``)."""
    _reaper.register_managed(pid)
    _watchdog.watch_tree(pid)
