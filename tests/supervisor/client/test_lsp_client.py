"""The language-server session client (issue 28): requests with results, start = ready.

Against the fake server for what real servers rarely do, and pylsp for the common requests.
Every test ends with nothing left running (the suite's leak guard).
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

import pytest
import trio
from lsprotocol import types as lsp

from protocol import CoreError
from supervisor import (
    LanguageServerError,
    LspClient,
    RequestFailed,
    SessionFailed,
    StartFailed,
    open_core,
)
from tests.supervisor.lsp._support import PY, WAIT_S, fake

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from supervisor import Core

PYLSP = [PY, "-m", "pylsp"]


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    async with open_core() as opened:
        yield opened


async def test_hover_on_pylsp_in_five_lines(tmp_path: Path) -> None:
    """The README's Trio example, as it is written there."""
    pylsp, root, uri = (
        [sys.executable, "-m", "pylsp"],
        tmp_path.as_uri(),
        (tmp_path / "a.py").as_uri(),
    )
    with trio.fail_after(WAIT_S):
        async with open_core() as core, core.language_server(pylsp, root_uri=root) as server:
            await server.open_document(uri, "python", "import os\nos.getcwd()\n")
            hover = await server.hover(uri, 1, 4)
    assert isinstance(hover, lsp.Hover)
    assert isinstance(hover.contents, lsp.MarkupContent)
    assert "getcwd" in hover.contents.value


async def test_pylsp_common_requests_are_typed(core: Core, tmp_path: Path) -> None:
    uri = (tmp_path / "mod.py").as_uri()
    text = "import os\n\n\ndef greet(name):\n    return name\n\n\ngreet(os.sep)\nundefined_name\n"
    with trio.fail_after(WAIT_S):
        async with core.language_server(PYLSP, root_uri=tmp_path.as_uri()) as server:
            assert server.state == "ready"
            assert "hoverProvider" in server.capabilities
            document = await server.open_document(uri, "python", text)
            assert document.version == 1
            diagnostics = await server.wait_for_diagnostics(uri)
            assert any("undefined_name" in d.message for d in diagnostics)
            assert all(isinstance(d, lsp.Diagnostic) for d in server.diagnostics[uri])
            completion = await server.completion(uri, 7, 4)
            items = completion.items if isinstance(completion, lsp.CompletionList) else completion
            assert items is not None
            assert any(item.label.startswith("greet") for item in items)
            definition = await server.definition(uri, 7, 1)
            locations = [definition] if isinstance(definition, lsp.Location) else definition
            assert locations
            first = locations[0]
            assert isinstance(first, lsp.Location)
            assert (first.uri, first.range.start.line) == (uri, 3)
            references = await server.references(uri, 3, 5)
            assert references is not None
            assert {r.range.start.line for r in references} >= {3, 7}
            symbols = await server.document_symbol(uri)
            assert symbols is not None
            assert "greet" in [s.name for s in symbols]
            edits = await server.formatting(uri)
            assert edits is None or all(isinstance(e, lsp.TextEdit) for e in edits)
            changed = await server.change_document(uri, text + "x = 1\n")
            assert changed.version == 2
            assert (await server.change_document(uri, text + "x = 1\n")).version == 2
            # Any request; an lsprotocol params object is sent as its JSON.
            raw = await server.request(
                "textDocument/hover",
                lsp.HoverParams(
                    text_document=lsp.TextDocumentIdentifier(uri=uri),
                    position=lsp.Position(line=7, character=1),
                ),
            )
            assert isinstance(raw, dict)
            assert "greet" in str(raw["contents"])
            with pytest.raises(LanguageServerError) as unknown:
                await server.request("no/such", {})
            assert unknown.value.error_code == -32601
            await server.close_document(uri)
            assert uri not in server.documents


async def test_results_errors_timeouts_and_cancellation(core: Core, tmp_path: Path) -> None:
    with trio.fail_after(WAIT_S):
        async with core.language_server(fake(), root_uri=tmp_path.as_uri()) as server:
            assert await server.request("test/sleep", {"ms": 1}) == "slept"
            with pytest.raises(LanguageServerError) as failed:
                await server.request(
                    "test/fail", {"code": -32099, "message": "nope", "data": {"why": 1}}
                )
            error = failed.value
            assert (error.error_code, error.error_message, error.data) == (
                -32099,
                "nope",
                {"why": 1},
            )
            assert error.method == "test/fail"
            with pytest.raises(RequestFailed) as timed:
                await server.request("test/hang", {}, timeout_ms=200)
            assert timed.value.code == "requestTimeout"
            assert not isinstance(timed.value, LanguageServerError)
            # Cancelling the caller cancels the request: the server gets $/cancelRequest.
            with trio.move_on_after(0.3):
                await server.request("test/hang", {})
            # (the $/cancelRequest notifications may reach the server after the next request)
            cancelled: object = None
            while cancelled != ["test/hang", "test/hang"]:
                cancelled = await server.request("test/cancelled")
            echoed = await server.request(
                "test/notify",
                {"method": "custom/pos", "params": {"p": 1}},
            )
            assert echoed is None
            assert await server.wait_for_notification("custom/pos") == {"p": 1}
            with pytest.raises(CoreError) as bad:
                await server.notify("textDocument/didOpen", {})
            assert bad.value.code == "invalid_request"


async def test_notifications_are_handed_out_once_including_early_ones(
    core: Core, tmp_path: Path
) -> None:
    with trio.fail_after(WAIT_S):
        async with core.language_server(fake(), root_uri=tmp_path.as_uri()) as server:
            # Two notifications arrive before anyone waits: neither is missed.
            for n in (1, 2):
                await server.request("test/notify", {"method": "custom/n", "params": {"n": n}})
            await server.notify("custom/echo", {"text": "hi"})
            echoed = await server.wait_for_notification("window/logMessage")
            assert echoed == {"type": 3, "message": "echo hi"}
            assert [m.message for m in server.log_messages] == ["echo hi"]
            assert server.log_messages[0].type == lsp.MessageType.Info
            second = await server.wait_for_notification(
                "custom/n", lambda p: isinstance(p, dict) and p["n"] == 2
            )
            assert second == {"n": 2}
            assert await server.wait_for_notification("custom/n") == {"n": 1}
            with trio.move_on_after(0.3) as nothing:
                await server.wait_for_notification("custom/n")
            assert nothing.cancelled_caught
            # Diagnostics of an open document: the map and the notification.
            uri = "file:///d.py"
            await server.open_document(uri, "python", "x")
            published = {"uri": uri, "diagnostics": [_diagnostic("bad")]}
            await server.request(
                "test/notify", {"method": "textDocument/publishDiagnostics", "params": published}
            )
            assert [d.message for d in await server.wait_for_diagnostics(uri)] == ["bad"]
            assert server.diagnostics[uri][0].severity == lsp.DiagnosticSeverity.Error
            assert "lsp-fake" in str(server.server_info)


def _diagnostic(message: str) -> dict[str, object]:
    span = {"line": 0, "character": 0}
    return {"range": {"start": span, "end": span}, "message": message, "severity": 1}


async def test_a_server_that_exits_at_start_raises_from_the_start(
    core: Core, tmp_path: Path
) -> None:
    """Issue 28: it used to be returned as started, its failure arriving later."""
    with trio.fail_after(WAIT_S), pytest.raises(StartFailed) as failed:
        async with core.language_server(fake("--crash-in-initialize"), root_uri=tmp_path.as_uri()):
            raise AssertionError("not reached")
    error = failed.value
    assert (error.reason, error.exit_code) == ("exitedEarly", 3)
    assert error.stderr_tail == ["fatal: cannot initialize"]
    assert "exitedEarly" in str(error)
    assert "fatal: cannot initialize" in str(error)
    # Nothing is left: the session was forgotten.
    with pytest.raises(CoreError) as gone:
        await core.call("lsp.snapshot", {"sessionId": error.session_id or "-"})
    assert gone.value.code == "not_found"


async def test_other_start_failures(core: Core, tmp_path: Path) -> None:
    root = tmp_path.as_uri()
    with trio.fail_after(WAIT_S):
        with pytest.raises(StartFailed) as missing:
            async with core.language_server(["no-such-server-xyz"], root_uri=root):
                raise AssertionError("not reached")
        assert missing.value.reason == "launchFailed"
        assert "no-such-server-xyz" in str(missing.value)
        with pytest.raises(StartFailed) as silent:
            async with core.language_server(
                fake("--no-initialize-answer"), root_uri=root, initialize_timeout_ms=300
            ):
                raise AssertionError("not reached")
        assert silent.value.reason == "initializeTimeout"
        with pytest.raises(StartFailed) as refused:
            async with core.language_server(fake("--initialize-error"), root_uri=root):
                raise AssertionError("not reached")
        assert refused.value.reason == "initializeFailed"
        assert "initialize exploded" in str(refused.value)


async def test_a_crash_ends_every_wait_and_refuses_what_follows(core: Core, tmp_path: Path) -> None:
    with trio.fail_after(WAIT_S):
        async with core.language_server(fake(), root_uri=tmp_path.as_uri()) as server:
            async with trio.open_nursery() as nursery:
                outcomes: list[BaseException] = []

                async def wait_forever() -> None:
                    try:
                        await server.wait_for_notification("custom/never")
                    except SessionFailed as exc:
                        outcomes.append(exc)

                async def pending() -> None:
                    try:
                        await server.request("test/hang", {})
                    except RequestFailed as exc:
                        outcomes.append(exc)

                nursery.start_soon(wait_forever)
                nursery.start_soon(pending)
                await trio.sleep(0.2)
                with pytest.raises(RequestFailed):
                    await server.request("test/exit", {"code": 7})
            kinds = sorted(type(e).__name__ for e in outcomes)
            assert kinds == ["RequestFailed", "SessionFailed"]
            assert server.state == "failed"
            # A request to the failed session is refused at once, with the reason.
            with pytest.raises(SessionFailed) as refused:
                await server.hover("file:///x.py", 0, 0)
            assert (refused.value.reason, refused.value.exit_code) == ("crashed", 7)
            assert "crashing on purpose" in "\n".join(refused.value.stderr_tail)
            assert "crashing on purpose" in "\n".join(await server.stderr_tail())


async def test_leaving_the_block_stops_and_forgets_the_session(core: Core, tmp_path: Path) -> None:
    with trio.fail_after(WAIT_S):
        async with core.language_server(fake(), root_uri=tmp_path.as_uri()) as server:
            session_id = server.session_id
        with pytest.raises(CoreError) as gone:
            await core.call("lsp.snapshot", {"sessionId": session_id})
        assert gone.value.code == "not_found"
        assert server.state == "stopped"
        with pytest.raises(SessionFailed):
            await server.request("test/sleep", {"ms": 1})
        with pytest.raises(TypeError, match="no public constructor"):
            LspClient()  # type: ignore[call-arg]


async def test_an_unknown_option_is_refused_with_a_suggestion(core: Core, tmp_path: Path) -> None:
    """A misspelt option, or the wire's name of one, is not ignored (newcomer report)."""
    with pytest.raises(TypeError, match=r"'workingDirectory' \(did you mean 'cwd'\?\)"):
        async with core.language_server(
            fake(),
            root_uri=tmp_path.as_uri(),
            workingDirectory=str(tmp_path),  # type: ignore[call-arg]
        ):
            raise AssertionError("not reached")
    with pytest.raises(TypeError, match="unexpected keyword argument 'adapterID'"):
        async with core.debug_adapter(fake(), adapterID="x"):  # type: ignore[call-arg]
            raise AssertionError("not reached")


async def test_awaiting_a_session_block_says_how_to_use_it(core: Core, tmp_path: Path) -> None:
    """pytest-lsp's habit, ``await core.language_server(...)``, is a TypeError naming the
    ``async with`` form (not Python's "can't be used in 'await' expression"); nothing starts."""
    with pytest.raises(TypeError, match=r"async with core\.language_server\(\.\.\.\) as client"):
        await core.language_server(fake(), root_uri=tmp_path.as_uri())  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"async with core\.debug_adapter\(\.\.\.\) as client"):
        await core.debug_adapter(fake())  # type: ignore[misc]


async def test_a_path_given_as_root_uri_is_refused_with_its_uri(core: Core, tmp_path: Path) -> None:
    """rootUri is a DocumentUri: a path (the usual slip) is refused before anything starts,
    the message giving the URI to pass instead."""
    with pytest.raises(ValueError, match=re.escape(repr(tmp_path.as_uri()))):
        async with core.language_server(fake(), root_uri=str(tmp_path)):
            raise AssertionError("not reached")
    with pytest.raises(TypeError, match="root_uri must be a URI string"):
        async with core.language_server(fake(), root_uri=tmp_path):  # type: ignore[arg-type]
            raise AssertionError("not reached")
    async with core.language_server(fake(), root_uri="untitled:workspace") as server:
        assert server.state == "ready"


async def test_a_server_that_exits_at_start_says_so_in_our_words(
    core: Core, tmp_path: Path
) -> None:
    with pytest.raises(StartFailed) as failed:
        async with core.language_server(
            ["sh", "-c", "echo 'boom: missing config' >&2; exit 3"], root_uri=tmp_path.as_uri()
        ):
            raise AssertionError("not reached")
    assert failed.value.reason == "exitedEarly"
    assert failed.value.exit_code == 3
    assert "exited with code 3 before it was ready" in str(failed.value)
    assert "Error" not in str(failed.value).split("stderr tail")[0]


async def test_an_older_option_name_warns_at_the_callers_line(core: Core, tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning, match="working_directory= is deprecated") as record:
        async with core.language_server(
            fake(), root_uri=tmp_path.as_uri(), working_directory=str(tmp_path)
        ):
            pass
    assert record[0].filename == __file__
