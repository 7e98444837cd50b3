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
