"""Client-capability profiles: what real editors announce in ``initialize``.

Abbreviated from what each client sends today (VS Code 1.9x with vscode-languageclient 9,
Neovim 0.10's ``vim.lsp.protocol.make_client_capabilities()``, Helix 24.x ``helix-lsp``;
for DAP: VS Code, nvim-dap, Helix's ``helix-dap``): the parts a server's lifecycle
reacts to -- position encodings, progress, configuration and watched-file registration,
workspace folders, snippet and markdown support -- not every per-feature flag.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable

    from protocol import JSONObject

__all__ = ("CLIENTS", "dap_initialize_arguments", "lsp_initialize_params")

#: The profile names ``--client`` takes.
CLIENTS: Final = ("vscode", "neovim", "helix")

_CLIENT_INFO: Final[dict[str, JSONObject]] = {
    "vscode": {"name": "Visual Studio Code", "version": "1.95.0"},
    "neovim": {"name": "Neovim", "version": "0.10.2"},
    "helix": {"name": "helix", "version": "24.7"},
}


def _lsp_capabilities(client: str) -> JSONObject:
    profile = _CAPABILITIES.get(client)
    if profile is None:
        raise ValueError(f"unknown client profile {client!r}; known: {', '.join(CLIENTS)}")
    return profile()


def _vscode_capabilities() -> JSONObject:
    """Visual Studio Code's client capabilities."""
    markdown: JSONObject = {"documentationFormat": ["markdown", "plaintext"]}
    return {
        "general": {
            "positionEncodings": ["utf-16"],
            "staleRequestSupport": {
                "cancel": True,
                "retryOnContentModified": [
                    "textDocument/semanticTokens/full",
                    "textDocument/semanticTokens/range",
                    "textDocument/semanticTokens/full/delta",
                ],
            },
            "markdown": {"parser": "marked", "version": "1.1.0"},
        },
        "window": {
            "workDoneProgress": True,
            "showMessage": {"messageActionItem": {"additionalPropertiesSupport": True}},
            "showDocument": {"support": True},
        },
        "workspace": {
            "applyEdit": True,
            "configuration": True,
            "workspaceFolders": True,
            "didChangeConfiguration": {"dynamicRegistration": True},
            "didChangeWatchedFiles": {
                "dynamicRegistration": True,
                "relativePatternSupport": True,
            },
            "symbol": {"dynamicRegistration": True},
            "executeCommand": {"dynamicRegistration": True},
            "semanticTokens": {"refreshSupport": True},
            "inlayHint": {"refreshSupport": True},
            "diagnostics": {"refreshSupport": True},
            "workspaceEdit": {"documentChanges": True, "resourceOperations": ["create"]},
        },
        "textDocument": {
            "synchronization": {"dynamicRegistration": True, "didSave": True},
            "completion": {
                "dynamicRegistration": True,
                "contextSupport": True,
                "completionItem": {"snippetSupport": True, **markdown},
            },
            "hover": {"dynamicRegistration": True, "contentFormat": ["markdown", "plaintext"]},
            "publishDiagnostics": {"relatedInformation": True, "versionSupport": False},
            "diagnostic": {"dynamicRegistration": True, "relatedDocumentSupport": False},
            "documentSymbol": {"hierarchicalDocumentSymbolSupport": True},
        },
    }


def _neovim_capabilities() -> JSONObject:
    """Neovim's client capabilities."""
    markdown: JSONObject = {"documentationFormat": ["markdown", "plaintext"]}
    return {
        "general": {"positionEncodings": ["utf-8", "utf-16", "utf-32"]},
        "window": {
            "workDoneProgress": True,
            "showMessage": {"messageActionItem": {"additionalPropertiesSupport": True}},
            "showDocument": {"support": True},
        },
        "workspace": {
            "applyEdit": True,
            "configuration": True,
            "workspaceFolders": True,
            "didChangeWatchedFiles": {
                "dynamicRegistration": False,
                "relativePatternSupport": True,
            },
            "symbol": {"dynamicRegistration": False},
            "semanticTokens": {"refreshSupport": True},
            "inlayHint": {"refreshSupport": True},
            "workspaceEdit": {"resourceOperations": ["rename", "create", "delete"]},
        },
        "textDocument": {
            "synchronization": {"dynamicRegistration": False, "didSave": True},
            "completion": {
                "dynamicRegistration": False,
                "contextSupport": False,
                "completionItem": {"snippetSupport": False, **markdown},
            },
            "hover": {"dynamicRegistration": True, "contentFormat": ["markdown", "plaintext"]},
            "publishDiagnostics": {"relatedInformation": True, "dataSupport": True},
            "diagnostic": {"dynamicRegistration": False},
            "documentSymbol": {"hierarchicalDocumentSymbolSupport": True},
        },
    }


def _helix_capabilities() -> JSONObject:
    """Helix's client capabilities."""
    markdown: JSONObject = {"documentationFormat": ["markdown", "plaintext"]}
    return {
        "general": {"positionEncodings": ["utf-8", "utf-32", "utf-16"]},
        "window": {"workDoneProgress": True},
        "workspace": {
            "applyEdit": True,
            "configuration": True,
            "workspaceFolders": True,
            "didChangeConfiguration": {"dynamicRegistration": False},
            "didChangeWatchedFiles": {
                "dynamicRegistration": True,
                "relativePatternSupport": False,
            },
            "executeCommand": {"dynamicRegistration": False},
            "inlayHint": {"refreshSupport": False},
            "workspaceEdit": {"documentChanges": True, "resourceOperations": ["create"]},
        },
        "textDocument": {
            "completion": {
                "completionItem": {"snippetSupport": True, **markdown},
            },
            "hover": {"contentFormat": ["markdown"]},
            "publishDiagnostics": {"versionSupport": True, "tagSupport": {"valueSet": [1, 2]}},
        },
    }


_CAPABILITIES: Final[dict[str, Callable[[], JSONObject]]] = {
    "vscode": _vscode_capabilities,
    "neovim": _neovim_capabilities,
    "helix": _helix_capabilities,
}


def lsp_initialize_params(client: str, *, root: str, pid: int) -> JSONObject:
    """The ``initialize`` params the ``client`` profile sends (LSP 3.17 "initialize").

    Args:
        client: A name from :data:`CLIENTS`.
        root: The workspace folder (an existing directory).
        pid: The ``processId`` announced (the process that owns the server).

    Raises:
        ValueError: Unknown profile.
    """
    from pathlib import Path

    capabilities = _lsp_capabilities(client)
    uri = Path(root).as_uri()
    return {
        "processId": pid,
        "clientInfo": _CLIENT_INFO[client],
        "locale": "en",
        "rootPath": root,
        "rootUri": uri,
        "capabilities": capabilities,
        "trace": "off",
        "workspaceFolders": [{"uri": uri, "name": Path(root).name or "root"}],
    }


def dap_initialize_arguments(client: str) -> JSONObject:
    """The DAP ``initialize`` arguments the ``client`` profile sends.

    Raises:
        ValueError: Unknown profile.
    """
    base: JSONObject = {
        "pathFormat": "path",
        "linesStartAt1": True,
        "columnsStartAt1": True,
        "supportsVariableType": True,
    }
    if client == "vscode":
        return {
            "clientID": "vscode",
            "clientName": "Visual Studio Code",
            "adapterID": "conformance",
            "locale": "en",
            **base,
            "supportsVariablePaging": True,
            "supportsRunInTerminalRequest": True,
            "supportsMemoryReferences": True,
            "supportsProgressReporting": True,
            "supportsInvalidatedEvent": True,
            "supportsMemoryEvent": True,
            "supportsArgsCanBeInterpretedByShell": True,
            "supportsStartDebuggingRequest": True,
        }
    if client == "neovim":
        return {
            "clientID": "neovim",
            "clientName": "neovim",
            "adapterID": "nvim-dap",
            "locale": "en_US",
            **base,
            "supportsRunInTerminalRequest": True,
            "supportsProgressReporting": True,
            "supportsStartDebuggingRequest": True,
        }
    if client == "helix":
        return {
            "clientID": "hx",
            "clientName": "helix",
            "adapterID": "conformance",
            "locale": "en-us",
            **base,
            "supportsVariablePaging": False,
            "supportsRunInTerminalRequest": True,
            "supportsMemoryReferences": False,
            "supportsProgressReporting": False,
            "supportsInvalidatedEvent": False,
        }
    raise ValueError(f"unknown client profile {client!r}; known: {', '.join(CLIENTS)}")


#: Server-to-client requests an editor answers with null (LSP 3.17: each one's result is
#: ``void``/``null``; ``window/showMessageRequest``: null is "no action chosen").
_NULL_ANSWERED: Final = frozenset(
    {
        "client/registerCapability",
        "client/unregisterCapability",
        "window/workDoneProgress/create",
        "window/showMessageRequest",
        "workspace/codeLens/refresh",
        "workspace/semanticTokens/refresh",
        "workspace/inlayHint/refresh",
        "workspace/inlineValue/refresh",
        "workspace/diagnostic/refresh",
        "workspace/foldingRange/refresh",
    }
)


def lsp_client_answer(method: str, params: object, folders: list[JSONObject]) -> tuple[str, object]:
    """What an editor answers to a server-to-client request: ``("result", value)`` or
    ``("error", error object)`` (LSP 3.17, each request's "Response").

    ``workspace/configuration`` gets null for each item (no setting of that section is
    set), ``workspace/workspaceFolders`` the folders sent in ``initialize``,
    ``workspace/applyEdit`` and ``window/showDocument`` a refusal in their own result shape
    (the checker edits and shows nothing), the registrations, refreshes, progress creation and
    message requests null, and any other method MethodNotFound (-32601), as VS Code does
    ("Unhandled method ...").

    Args:
        method: The request's method.
        params: Its params.
        folders: The ``workspaceFolders`` sent in ``initialize``.
    """
    if method == "workspace/configuration":
        items = params.get("items") if isinstance(params, dict) else None
        return "result", [None] * (len(items) if isinstance(items, list) else 0)
    if method == "workspace/workspaceFolders":
        return "result", folders
    if method == "workspace/applyEdit":
        return "result", {
            "applied": False,
            "failureReason": "the conformance checker applies no edits",
        }
    if method == "window/showDocument":
        return "result", {"success": False}
    if method in _NULL_ANSWERED:
        return "result", None
    return "error", {"code": -32601, "message": f"Unhandled method {method}"}


#: What LSP 3.17 lets a server send before its ``initialize`` answer ("initialize": "the
#: server is allowed to send the notifications window/showMessage, window/logMessage and
#: telemetry/event as well as the window/showMessageRequest request to the client").
LSP_BEFORE_INITIALIZE: Final = frozenset(
    {"window/showMessage", "window/logMessage", "telemetry/event", "window/showMessageRequest"}
)


def early_message_problem(
    message: JSONObject, *, dap: bool, progress_token: object = None
) -> str | None:
    """What is wrong with ``message`` when a server sends it before its ``initialize`` answer:
    ``"workspace/configuration (a request)"``, or None when the rule allows it.

    LSP allows only :data:`LSP_BEFORE_INITIALIZE`, and ``$/progress`` with the
    ``workDoneToken`` the client sent in ``initialize`` (``progress_token``; the checker's
    profiles send none, as the editors they copy do). DAP allows nothing: "the debug adapter is
    not allowed to send any requests or events to the client until it has responded with an
    'initialize' response", the ``initialized`` event included ("but not before the
    initialize request has finished").
    """
    if dap:
        kind = message.get("type")
        if kind == "event":
            return f"the {message.get('event')!s} event"
        if kind == "request":
            return f"{message.get('command')!s} (a reverse request)"
        return None
    method = message.get("method")
    if not isinstance(method, str):
        return None  # an answer: the client sent no request yet
    if method in LSP_BEFORE_INITIALIZE:
        return None
    if method == "$/progress" and progress_token is not None:
        params = message.get("params")
        if isinstance(params, dict) and params.get("token") == progress_token:
            return None
    return f"{method} ({'a request' if 'id' in message else 'a notification'})"
