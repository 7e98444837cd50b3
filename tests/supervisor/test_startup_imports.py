"""What each start imports (issue 26.2): ``import supervisor`` and the command line's
``--version``, ``--help``, a command's ``--help`` and ``exec`` of a command that leaves nothing
import neither trio, nor msgspec, nor a session kind; the Core, every ``exec`` and ``serve``'s
``initialize`` import no session kind (each
kind is imported when it is first used: docs/architecture.md "The Core and its services").

Read from ``sys.modules`` of a fresh interpreter at its exit, never from a timing: the
start-up's speed is benchmarks/bench_startup.py's.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: The session kinds: opened by name on first use, never imported by the Core's start.
KINDS = ("supervisor._lsp", "supervisor._dap", "supervisor._terminal", "supervisor._plugin")
#: What the light starts leave out (a module, or the package of a kind).
HEAVY = ("trio", "msgspec", *KINDS)

#: Runs ``code`` and, at the interpreter's exit, prints the heavy modules it imported.
_PROBE = """
import atexit, json, sys
heavy = {heavy!r}
atexit.register(lambda: print("\\nIMPORTED " + json.dumps(sorted(
    {{h for h in heavy for m in list(sys.modules) if m == h or m.startswith(h + ".")}}
)), file=sys.stderr))
{code}
"""


def _imported(
    code: str, *argv: str, heavy: tuple[str, ...] = HEAVY, stdin: bytes = b""
) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=heavy, code=code), *argv],
        input=stdin,
        capture_output=True,
        timeout=60,
    )
    stderr = done.stderr.decode(errors="replace")
    lines = [line for line in stderr.splitlines() if line.startswith("IMPORTED ")]
    assert len(lines) == 1, stderr
    found: list[str] = json.loads(lines[0].removeprefix("IMPORTED "))
    return found


#: The ``supervisor`` command as its console script runs it.
_COMMAND = (
    "import _trio_process_supervisor, sys\n"
    "sys.argv[0] = 'supervisor'\n"
    "raise SystemExit(_trio_process_supervisor.main())"
)


def test_import_supervisor_imports_nothing_heavy() -> None:
    assert _imported("import supervisor") == []


@pytest.mark.parametrize(
    "argv",
    [("--version",), ("--help",), ("exec", "--help"), ("run", "--help"), ("serve", "--help")],
)
def test_the_command_lines_light_starts_import_nothing_heavy(argv: tuple[str, ...]) -> None:
    assert _imported(_COMMAND, *argv) == []


def test_the_core_imports_no_session_kind() -> None:
    assert _imported("import supervisor._core._core", heavy=KINDS) == []
    assert _imported("from supervisor import open_core, DEFAULT_SERVICES", heavy=KINDS) == []


def test_exec_imports_no_session_kind() -> None:
    assert _imported(_COMMAND, "exec", "--", "/bin/true", heavy=KINDS) == []


def test_exec_of_a_command_that_leaves_nothing_imports_neither_trio_nor_msgspec() -> None:
    """``exec``'s direct path (``_process/_direct.py``): no event loop, no JSON layer."""
    assert _imported(_COMMAND, "exec", "--", "/bin/true") == []
    assert _imported(_COMMAND, "exec", "--", "sh", "-c", "echo hi >&2; exit 3") == []
    assert _imported(_COMMAND, "exec", "--stream", "--", "/bin/true") == []


def test_exec_past_its_deadline_takes_trio_for_the_stop_ladder() -> None:
    """What needs the stop ladder is handed over to Trio (the probe sees the import)."""
    found = _imported(_COMMAND, "exec", "--timeout-ms", "100", "--", "sleep", "5")
    assert "trio" in found


def test_serve_answers_initialize_without_a_session_kind() -> None:
    """``supervisor serve`` to its ``initialize`` answer (then the end of its input)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    frame = f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
    assert _imported(_COMMAND, "serve", heavy=KINDS, stdin=frame) == []


def test_the_probe_sees_what_is_imported() -> None:
    """The probe can fail: a start that imports trio and a kind is seen doing so."""
    assert {"trio", "supervisor._lsp"} <= set(_imported("import trio, supervisor._lsp._service"))
