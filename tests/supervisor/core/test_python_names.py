"""One Python name per concept (issue 28.5): ``cwd`` and ``env``, whatever the wire says.

The wire keeps the reference's names (``workingDirectory``, ``environment``); the typed
helpers and the session clients' options take ``cwd`` / ``env`` everywhere, and the older
keywords still work with a ``DeprecationWarning``. Real processes show the value arrives.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import msgspec
import pytest
import trio

from supervisor import StartFailed, open_core
from supervisor._api import COMMANDS
from supervisor._api._helpers import CommandHelpers
from supervisor._api._terminal import TerminalExit
from supervisor._api.docgen import snake

if TYPE_CHECKING:
    from pathlib import Path

    from supervisor import Core

WAIT_S = 60
#: Wire names of one concept, and its one Python name.
_CONCEPTS = {"cwd": {"cwd", "workingDirectory"}, "env": {"env", "environment"}}
_OLD = {"working_directory", "environment"}
#: A program that prints where it runs and what X is, then fails its start.
_PRINTS_AND_EXITS = ["sh", "-c", 'printf "%s|%s\\n" "$PWD" "$X" >&2; exit 3']


def test_every_helper_names_a_concept_one_way() -> None:
    checked = 0
    for name, command in COMMANDS.items():
        if not isinstance(command.payload, type):
            continue
        wire = {field.encode_name for field in msgspec.structs.fields(command.payload)}
        parameters = inspect.signature(getattr(CommandHelpers, snake(name))).parameters
        for python_name, wire_names in _CONCEPTS.items():
            if wire & wire_names:
                checked += 1
                assert python_name in parameters, (name, python_name)
        # An older keyword is only there beside the new one, and only as a fallback.
        for old in _OLD & set(parameters):
            assert parameters[old].default is None, (name, old)
    assert checked >= 7  # process.run, job.start, lsp.startServer, terminal.create


async def _terminal_says(core: Core, **options: Any) -> str:
    created = await core.terminal_create(
        executable="sh", arguments=["-c", 'printf "%s|%s" "$PWD" "$X"'], **options
    )
    text = ""
    try:
        while True:
            drained = await core.terminal_wait_events(
                terminal_id=created.terminal_id, timeout_milliseconds=10_000
            )
            for event in drained.events:
                if isinstance(event, TerminalExit):
                    return text
                text += event.data
    finally:
        await core.terminal_dispose(terminal_id=created.terminal_id)


async def test_terminal_create_takes_env_and_still_environment(tmp_path: Path) -> None:
    with trio.fail_after(WAIT_S):
        async with open_core() as core:
            said = await _terminal_says(core, cwd=str(tmp_path), env={"X": "new"})
            assert said == f"{tmp_path}|new"
            with pytest.warns(DeprecationWarning, match="environment= is deprecated; use env="):
                said = await _terminal_says(core, cwd=str(tmp_path), environment={"X": "old"})
            assert said == f"{tmp_path}|old"
            with pytest.raises(TypeError, match="give env= or environment=, not both"):
                await core.terminal_create(executable="sh", env={}, environment={})


async def test_language_server_options_take_cwd_and_env(tmp_path: Path) -> None:
    root = tmp_path.as_uri()
    with trio.fail_after(WAIT_S):
        async with open_core() as core:
            with pytest.raises(StartFailed) as new:
                async with core.language_server(
                    _PRINTS_AND_EXITS, root_uri=root, cwd="/", env={"X": "new"}
                ):
                    raise AssertionError("not reached")
            assert new.value.stderr_tail == ["/|new"]
            with (
                pytest.warns(DeprecationWarning, match="working_directory= is deprecated"),
                pytest.warns(DeprecationWarning, match="environment= is deprecated"),
                pytest.raises(StartFailed) as old,
            ):
                async with core.language_server(
                    _PRINTS_AND_EXITS,
                    root_uri=root,
                    working_directory="/",
                    environment={"X": "old"},
                ):
                    raise AssertionError("not reached")
            assert old.value.stderr_tail == ["/|old"]
            with pytest.raises(TypeError, match="give cwd= or working_directory="):
                async with core.language_server(
                    _PRINTS_AND_EXITS, root_uri=root, cwd="/", working_directory="/"
                ):
                    raise AssertionError("not reached")


async def test_debug_adapter_options_take_cwd_and_env(tmp_path: Path) -> None:
    with trio.fail_after(WAIT_S):
        async with open_core() as core:
            with pytest.raises(StartFailed) as new:
                async with core.debug_adapter(
                    _PRINTS_AND_EXITS, cwd=str(tmp_path), env={"X": "new"}
                ):
                    raise AssertionError("not reached")
            assert new.value.stderr_tail == [f"{tmp_path}|new"]
            with (
                pytest.warns(DeprecationWarning, match="environment= is deprecated"),
                pytest.raises(StartFailed) as old,
            ):
                async with core.debug_adapter(_PRINTS_AND_EXITS, environment={"X": "old"}):
                    raise AssertionError("not reached")
            assert old.value.stderr_tail[0].endswith("|old")
