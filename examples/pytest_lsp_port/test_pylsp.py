"""pytest-lsp's documented examples, ported to this package's fixtures, run against pylsp.

The originals (pytest-lsp's docs and its ``tests/examples``, ``getting-started`` and
``diagnostics``) drive a toy server through pytest-lsp::

    @pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "server.py"]))
    async def client(lsp_client: LanguageClient):
        await lsp_client.initialize_session(InitializeParams(capabilities=ClientCapabilities()))
        yield
        await lsp_client.shutdown_session()

    async def test_completions(client: LanguageClient):
        results = await client.text_document_completion_async(
            params=CompletionParams(position=..., text_document=TextDocumentIdentifier(uri=...))
        )
        ...

    async def test_diagnostics(client: LanguageClient):
        client.text_document_did_open(DidOpenTextDocumentParams(text_document=TextDocumentItem(...)))
        await client.wait_for_notification(TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        assert client.diagnostics[test_uri][0].message == "..."

Ported: the ``lsp_client`` fixture starts the server and returns once it is ready (or fails
the test with its exit code and stderr tail); ``initialize`` and ``shutdown`` are the
supervisor's, and so is the end of every process the server started. Results are the same
lsprotocol types. A failing test's report carries pylsp's stderr tail and log messages.

Run it: ``cd examples/pytest_lsp_port && pytest`` (with the ``test`` extra installed: pylsp
and pyflakes). The test suite runs it too (tests/check/test_example_port.py).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest
from lsprotocol import types as lsp

if TYPE_CHECKING:
    from pathlib import Path

    from supervisor.pytest_plugin import LspClientFactory, SyncLspClient

PYLSP = [sys.executable, "-m", "pylsp"]


@pytest.fixture
def client(lsp_client: LspClientFactory, tmp_path: Path) -> SyncLspClient:
    # pytest-lsp: @pytest_lsp.fixture(config=ClientServerConfig(server_command=PYLSP)) with
    # initialize_session() before the yield and shutdown_session() after it.
    return lsp_client(PYLSP, root_uri=tmp_path.as_uri())


def test_completions(client: SyncLspClient, tmp_path: Path) -> None:
    """Ensure that the server implements completions correctly."""
    uri = (tmp_path / "file.py").as_uri()
    client.open_document(uri, "python", "import os\nos.getc\n")

    results = client.completion(uri, line=1, character=7)
    assert results is not None

    items = results.items if isinstance(results, lsp.CompletionList) else results
    labels = [item.label for item in items]
    assert any(label.startswith("getcwd") for label in labels)


def test_diagnostics(client: SyncLspClient, tmp_path: Path) -> None:
    """Ensure that the server implements diagnostics correctly."""
    uri = (tmp_path / "file.py").as_uri()
    client.open_document(uri, "python", "import sys\n")

    # Wait for the server to publish its diagnostics (one published before this call
    # counts: each notification is handed out once).
    client.wait_for_notification("textDocument/publishDiagnostics", timeout_ms=30_000)

    assert uri in client.diagnostics
    assert client.diagnostics[uri][0].message == "'sys' imported but unused"


def test_hover(client: SyncLspClient, tmp_path: Path) -> None:
    """Typed results beyond the originals: hover and definition."""
    uri = (tmp_path / "file.py").as_uri()
    client.open_document(uri, "python", "def greet():\n    pass\n\ngreet()\n")

    hover = client.hover(uri, line=3, character=1)
    assert isinstance(hover, lsp.Hover)
    assert isinstance(hover.contents, lsp.MarkupContent)
    assert "greet()" in hover.contents.value

    definition = client.definition(uri, line=3, character=1)
    locations = [definition] if isinstance(definition, lsp.Location) else list(definition or [])
    assert [
        (loc.uri, loc.range.start.line) for loc in locations if isinstance(loc, lsp.Location)
    ] == [(uri, 0)]
