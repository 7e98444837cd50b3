"""The client side of a language-server session: what it declares and which requests it serves.

Nothing here does I/O (tests/supervisor/lsp/test_client_policy.py checks it without a process).

Rule: a client capability that lets the server send a request is declared only when the
session answers that request per LSP 3.17 -- itself (:data:`SERVED_REQUESTS`) or through the
embedding host (:attr:`ClientPolicy.host_requests`). Otherwise a server that believes us
sends the request and gets -32601, which real servers treat as a broken client.

The embedding host may replace the declared capabilities with its editor's own set
(``lsp.startServer`` ``clientCapabilities``) and name the server requests it answers itself
(``hostRequests``); the session then forwards those as ``serverRequest`` events and waits for
``lsp.serverRequestResponse``. :func:`check_client_policy` refuses a set that declares a
request neither side serves, before anything starts.

Reference: LSP 3.17, "Client capabilities" and the server-to-client requests
(https://microsoft.github.io/language-server-protocol/specifications/lsp/3.17/specification/).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from protocol import CoreError

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

__all__ = (
    "DECLARED_BY",
    "DEFAULT_CLIENT_CAPABILITIES",
    "SERVED_REQUESTS",
    "ClientPolicy",
    "check_client_policy",
    "declared_requests",
)

#: What the session declares by default (LSP 3.17 ``ClientCapabilities``): enough that real
#: servers send diagnostics, progress, configuration and workspace-folder requests, and
#: nothing that would let a server send a request the session does not answer.
DEFAULT_CLIENT_CAPABILITIES: Final[JSONObject] = {
    "workspace": {
        "configuration": True,
        "didChangeConfiguration": {"dynamicRegistration": True},
        "didChangeWatchedFiles": {"dynamicRegistration": True},
        "workspaceFolders": True,
        "executeCommand": {"dynamicRegistration": False},
    },
    "textDocument": {
        "synchronization": {"dynamicRegistration": False, "didSave": False},
        "publishDiagnostics": {"relatedInformation": True, "versionSupport": True},
        "hover": {"contentFormat": ["markdown", "plaintext"]},
        "documentSymbol": {"hierarchicalDocumentSymbolSupport": True},
        "completion": {"completionItem": {"snippetSupport": False}},
    },
    "window": {"workDoneProgress": True, "showMessage": {}},
    "general": {"positionEncodings": ["utf-16"]},
}

#: Every LSP 3.17 server-to-client request and the client capability that allows it
#: (a path into ``ClientCapabilities``). ``client/registerCapability`` and
#: ``client/unregisterCapability`` are allowed by any ``dynamicRegistration: true``.
DECLARED_BY: Final[dict[str, tuple[str, ...] | None]] = {
    "workspace/configuration": ("workspace", "configuration"),
    "workspace/workspaceFolders": ("workspace", "workspaceFolders"),
    "window/showMessageRequest": ("window", "showMessage"),
    "window/workDoneProgress/create": ("window", "workDoneProgress"),
    "client/registerCapability": None,
    "client/unregisterCapability": None,
    "workspace/applyEdit": ("workspace", "applyEdit"),
    "window/showDocument": ("window", "showDocument", "support"),
    "workspace/codeLens/refresh": ("workspace", "codeLens", "refreshSupport"),
    "workspace/semanticTokens/refresh": ("workspace", "semanticTokens", "refreshSupport"),
    "workspace/inlayHint/refresh": ("workspace", "inlayHint", "refreshSupport"),
    "workspace/inlineValue/refresh": ("workspace", "inlineValue", "refreshSupport"),
    "workspace/diagnostic/refresh": ("workspace", "diagnostics", "refreshSupport"),
    "workspace/foldingRange/refresh": ("workspace", "foldingRange", "refreshSupport"),
}

#: The server-to-client requests the session answers itself, and how (LSP 3.17):
#: ``workspace/configuration`` -- the section of the workspace configuration per item;
#: ``workspace/workspaceFolders`` -- the session's one root folder; ``window/showMessageRequest``
#: -- ``null`` (no action chosen: there is no user to ask), the message goes out as a ``log``
#: event; ``window/workDoneProgress/create``, ``client/(un)registerCapability`` -- ``null``.
SERVED_REQUESTS: Final = frozenset(
    {
        "workspace/configuration",
        "workspace/workspaceFolders",
        "window/showMessageRequest",
        "window/workDoneProgress/create",
        "client/registerCapability",
        "client/unregisterCapability",
    }
)

#: Most server requests the host may take over, and the longest method name accepted.
MAX_HOST_REQUESTS: Final = 64
_MAX_METHOD_CHARS: Final = 128


def _at(capabilities: JSONValue, path: tuple[str, ...]) -> JSONValue:
    node = capabilities
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _dynamic(node: JSONValue) -> bool:
    """Whether any object inside ``node`` says ``dynamicRegistration: true``.

    A loop, not recursion: capabilities may nest as deep as the JSON limit (512 levels),
    deeper than Python's recursion limit allows when each level costs frames.
    """
    pending = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, dict):
            if current.get("dynamicRegistration") is True:
                return True
            pending.extend(value for value in current.values() if isinstance(value, dict))
    return False


def declared_requests(capabilities: JSONObject) -> frozenset[str]:
    """The server-to-client requests ``capabilities`` allows a server to send.

    A capability counts as declared when present and neither ``false`` nor ``null`` (LSP
    declares some, such as ``window.showMessage``, by an object).
    """
    declared = set()
    for method, path in DECLARED_BY.items():
        if path is None:
            if _dynamic(capabilities):
                declared.add(method)
        elif _at(capabilities, path) not in (None, False):
            declared.add(method)
    return frozenset(declared)


@dataclass(frozen=True)
class ClientPolicy:
    """What a session declares to its server and who answers the server's requests.

    Attributes:
        capabilities: The ``initialize`` ``capabilities`` (the default set, or the host
            editor's own).
        host_requests: Server-to-client methods the host answers itself (``serverRequest``
            events, answered by ``lsp.serverRequestResponse``); the session answers the
            rest of :data:`SERVED_REQUESTS` and refuses everything else with -32601.
    """

    capabilities: JSONObject = field(default_factory=lambda: DEFAULT_CLIENT_CAPABILITIES)
    host_requests: frozenset[str] = frozenset()


def check_client_policy(capabilities: JSONValue, host_requests: JSONValue) -> ClientPolicy:
    """Validate ``lsp.startServer``'s ``clientCapabilities`` and ``hostRequests``.

    Args:
        capabilities: An LSP ``ClientCapabilities`` object, or None for the default set.
        host_requests: Method names the host answers, or None for none.

    Raises:
        CoreError: ``invalid_request`` for a non-object, a bad list, or capabilities that
            declare a server request neither the session nor the host answers
            (``details.unservedRequests`` lists them).
    """
    if capabilities is None:
        capabilities = DEFAULT_CLIENT_CAPABILITIES
    if not isinstance(capabilities, dict):
        raise CoreError(
            "invalid_request",
            "clientCapabilities must be an object",
            {"field": "clientCapabilities"},
        )
    methods: set[str] = set()
    if host_requests is not None:
        if (
            not isinstance(host_requests, list)
            or len(host_requests) > MAX_HOST_REQUESTS
            or not all(
                isinstance(m, str) and 0 < len(m) <= _MAX_METHOD_CHARS for m in host_requests
            )
        ):
            raise CoreError(
                "invalid_request",
                f"hostRequests must be an array of at most {MAX_HOST_REQUESTS} method names",
                {"field": "hostRequests"},
            )
        methods = {m for m in host_requests if isinstance(m, str)}
    unserved = sorted(declared_requests(capabilities) - SERVED_REQUESTS - methods)
    if unserved:
        raise CoreError(
            "invalid_request",
            "clientCapabilities declare server requests nobody answers: "
            + ", ".join(unserved)
            + " (list them in hostRequests to answer them)",
            {"field": "clientCapabilities", "unservedRequests": list(unserved)},
        )
    return ClientPolicy(capabilities, frozenset(methods))
