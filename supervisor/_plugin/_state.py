"""Pure rules of the plugin-function protocol and host requests (host side).

Nothing here does I/O or touches Trio: every rule is a function or a small class that the
plugin session (:mod:`supervisor._plugin._session`) applies, so each is table-tested without a
process. References are to the plugin contract: "Plugin functions" (Negotiation, References
and IDs, Registration and withdrawal, Invocation, Progress, Host services, Workspace contexts
and capability discovery, Host notifications, Extending the host services) and "Structured
plugin diagnostics".

Where the reference gives an order of checks, the functions below check in that order and
the first failing check wins.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from protocol import CoreError, lookup_error

from .._boundary import cut_utf8
from ._wire import (
    ERROR_MESSAGE_BYTES,
    FUNCTION_ID_BYTES,
    FUNCTION_RESULT_BYTES,
    MAX_FUNCTIONS,
    MAX_PENDING_HOST_REQUESTS,
    OFFERED_VERSIONS,
    PLUGIN_ERROR_CODE_BYTES,
    is_function_id,
    is_log_code,
    is_operation_id,
    is_plugin_error_code,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from protocol import JSONObject, JSONValue

__all__ = (
    "ERROR_DETAILS_BYTES",
    "ERROR_MESSAGE_BYTES",
    "FUNCTION_ID_BYTES",
    "FUNCTION_RESULT_BYTES",
    "HOST_METHODS",
    "HOST_NOTIFICATIONS",
    "HOST_REQUEST_BYTES",
    "HOST_RESULT_BYTES",
    "MAX_FUNCTIONS",
    "MAX_FUNCTION_TIMEOUT_MS",
    "MAX_PENDING_HOST_REQUESTS",
    "NOTIFICATION_BYTES",
    "OFFERED_VERSIONS",
    "PLUGIN_ERROR_CODE_BYTES",
    "FunctionRegistry",
    "HostMethod",
    "HostRefusal",
    "RegistrationError",
    "capabilities_result",
    "check_function_request",
    "check_host_notification",
    "check_host_request",
    "check_host_services",
    "cut_utf8",
    "function_failure",
    "function_timeout_ms",
    "host_failure",
    "is_function_id",
    "is_plugin_id",
    "json_size",
    "negotiate_functions",
    "negotiate_logging",
    "normalize_progress",
    "validate_log_fact",
)

#: Invocation: ``timeoutMilliseconds`` is capped at one hour.
MAX_FUNCTION_TIMEOUT_MS: Final = 3_600_000
#: Host failure ``details``: an object of at most 4 KiB serialized.
ERROR_DETAILS_BYTES: Final = 4096
#: "Public document, file and window methods": the 1 MiB serialized host request/result
#: budget.
HOST_REQUEST_BYTES: Final = 1024 * 1024
HOST_RESULT_BYTES: Final = 1024 * 1024
#: Ours (the reference names ``limits.notificationBytes`` without a number): 64 KiB.
NOTIFICATION_BYTES: Final = 64 * 1024

#: Ours (the reference defines no plugin ID grammar here): ASCII letters, digits, ``.``,
#: ``_`` and ``-``, starting with a letter or digit, at most 128 bytes.
_PLUGIN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: The key alphabet (credentials keys, context and subscription IDs): 1-128 characters.
_KEY = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
_MAX_SAFE_INTEGER: Final = 9_007_199_254_740_991


def json_size(value: JSONValue) -> int:
    """The size of ``value`` serialized as compact JSON, in bytes."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_plugin_id(value: object) -> bool:
    """A well-formed plugin ID (our grammar; see ``_PLUGIN_ID``)."""
    return isinstance(value, str) and _PLUGIN_ID.fullmatch(value) is not None


# -- negotiation --------------------------------------------------------------------------


def _experimental(initialize_result: JSONValue, name: str) -> JSONValue:
    if not isinstance(initialize_result, dict):
        return None
    capabilities = initialize_result.get("capabilities")
    if not isinstance(capabilities, dict):
        return None
    experimental = capabilities.get("experimental")
    return experimental.get(name) if isinstance(experimental, dict) else None


def negotiate_functions(initialize_result: JSONValue) -> tuple[int, list[str]] | None:
    """Negotiation: read ``capabilities.experimental.litheFunctions`` of an initialize result.

    An answer with a version the host did not offer, a ``functions`` that is not an array,
    a descriptor that is not an object, or a malformed or duplicate function ID (or more
    than :data:`MAX_FUNCTIONS`) does not negotiate at all. Unknown fields are ignored.

    Returns:
        ``(version, sorted function IDs)``, or None when the protocol is not negotiated.
    """
    answer = _experimental(initialize_result, "litheFunctions")
    if not isinstance(answer, dict):
        return None
    version = answer.get("version")
    if not _is_int(version) or version not in OFFERED_VERSIONS:
        return None
    functions = answer.get("functions", [])
    if not isinstance(functions, list) or len(functions) > MAX_FUNCTIONS:
        return None
    ids: set[str] = set()
    for descriptor in functions:
        if not isinstance(descriptor, dict):
            return None
        function_id = descriptor.get("id")
        if not is_function_id(function_id) or function_id in ids:
            return None
        assert isinstance(function_id, str)
        ids.add(function_id)
    assert isinstance(version, int)
    return version, sorted(ids)


def negotiate_logging(initialize_result: JSONValue) -> bool:
    """Structured plugin diagnostics: True when the answer is ``litheLogging {version: 0}``."""
    answer = _experimental(initialize_result, "litheLogging")
    if not isinstance(answer, dict):
        return False
    version = answer.get("version")
    return _is_int(version) and version in OFFERED_VERSIONS


# -- registration and withdrawal -------------------------------------------------------


class RegistrationError(Exception):
    """A refused register/unregister: JSON-RPC -32602, ``plugin.function.invalidRegistration``."""


class FunctionRegistry:
    """The functions one session serves (References and IDs; Registration and withdrawal).

    Every change is all or nothing: a refused request leaves the registry as it was.

    Args:
        initial: The negotiated IDs (already validated).
    """

    def __init__(self, initial: Iterable[str] = ()) -> None:
        self._ids: set[str] = set(initial)

    def __contains__(self, function_id: object) -> bool:
        return function_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def sorted_ids(self) -> list[str]:
        """The registered IDs, sorted."""
        return sorted(self._ids)

    def register(self, params: JSONValue) -> list[str]:
        """``lithe/function/register {functions: [{id}]}`` (nonempty).

        Returns:
            The added IDs, sorted.

        Raises:
            RegistrationError: params malformed or empty, a malformed ID, an ID listed
                twice, one already registered, or more than :data:`MAX_FUNCTIONS` in all.
        """
        functions = params.get("functions") if isinstance(params, dict) else None
        if not isinstance(functions, list) or not functions:
            raise RegistrationError("functions must be a nonempty array")
        added: set[str] = set()
        for descriptor in functions:
            function_id = descriptor.get("id") if isinstance(descriptor, dict) else None
            if not is_function_id(function_id):
                raise RegistrationError("a function ID is malformed")
            assert isinstance(function_id, str)
            if function_id in added:
                raise RegistrationError(f"{function_id} is listed twice")
            if function_id in self._ids:
                raise RegistrationError(f"{function_id} is already registered")
            added.add(function_id)
        if len(self._ids) + len(added) > MAX_FUNCTIONS:
            raise RegistrationError(f"a session holds at most {MAX_FUNCTIONS} functions")
        self._ids |= added
        return sorted(added)

    def unregister(self, params: JSONValue) -> list[str]:
        """``lithe/function/unregister {ids: [...]}`` (nonempty).

        Returns:
            The removed IDs, sorted.

        Raises:
            RegistrationError: params malformed or empty, a malformed ID, an ID listed
                twice, or one not registered.
        """
        ids = params.get("ids") if isinstance(params, dict) else None
        if not isinstance(ids, list) or not ids:
            raise RegistrationError("ids must be a nonempty array")
        removed: set[str] = set()
        for function_id in ids:
            if not is_function_id(function_id):
                raise RegistrationError("a function ID is malformed")
            assert isinstance(function_id, str)
            if function_id in removed:
                raise RegistrationError(f"{function_id} is listed twice")
            if function_id not in self._ids:
                raise RegistrationError(f"{function_id} is not registered")
            removed.add(function_id)
        self._ids -= removed
        return sorted(removed)


# -- invocation -------------------------------------------------------------------------


def check_function_request(
    function: JSONValue,
    params: JSONValue,
    context: JSONValue,
    *,
    session_plugin_id: str | None,
    negotiated: bool,
    registry: FunctionRegistry | None,
    not_running: str | None = None,
) -> tuple[str, JSONObject]:
    """Invocation: the refusal checks of ``lsp.functionRequest``, in the reference's order.

    1. plugin or function ID malformed: ``invalid_request`` / ``plugin.function.invalidReference``
    2. params not an object (or a malformed ``context``): ``invalid_request`` /
       ``plugin.function.invalidParams``
    3. session belongs to no plugin: ``not_supported`` / ``plugin.function.unavailable``
    4. session belongs to another plugin: ``permission_denied`` /
       ``plugin.function.wrongPlugin``
    5. protocol not negotiated: ``not_supported`` / ``plugin.function.unavailable``
    6. function not registered: ``not_supported`` / ``plugin.function.unknown``

    As the reference's table puts them: the envelope ``error.code`` is the Core code, and
    ``error.details.code`` the ``plugin.function.*`` code. ``not_running`` (the session has
    failed or stopped) words check 5's message: no backend runs that could negotiate.

    Returns:
        ``(function ID, params object)`` for the invoke.

    Raises:
        CoreError: The first failing check.
    """
    plugin_id = function.get("pluginID") if isinstance(function, dict) else None
    function_id = function.get("functionID") if isinstance(function, dict) else None
    if not is_plugin_id(plugin_id) or not is_function_id(function_id):
        raise _function_error(
            "invalidReference", "invalid_request", "the plugin or function ID is malformed"
        )
    assert isinstance(plugin_id, str)
    assert isinstance(function_id, str)
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise _function_error("invalidParams", "invalid_request", "params must be an object")
    if context is not None and not _is_context(context):
        raise _function_error(
            "invalidParams",
            "invalid_request",
            "context must be {contextID, generation} with a key and a positive generation",
        )
    if session_plugin_id is None:
        raise _function_error("unavailable", "not_supported", "the session belongs to no plugin")
    if session_plugin_id != plugin_id:
        raise _function_error(
            "wrongPlugin", "permission_denied", "the session belongs to another plugin"
        )
    if not negotiated or registry is None:
        raise _function_error(
            "unavailable",
            "not_supported",
            not_running or "the backend did not negotiate litheFunctions",
        )
    if function_id not in registry:
        raise _function_error("unknown", "not_supported", f"{function_id} is not registered")
    return function_id, params


def _function_error(name: str, core_code: str, message: str) -> CoreError:
    return CoreError(core_code, message, {"code": f"plugin.function.{name}"})


def _is_context(value: JSONValue) -> bool:
    if not isinstance(value, dict) or set(value) != {"contextID", "generation"}:
        return False
    context_id = value["contextID"]
    generation = value["generation"]
    return (
        isinstance(context_id, str)
        and _KEY.fullmatch(context_id) is not None
        and _is_int(generation)
        and isinstance(generation, int)
        and 1 <= generation <= _MAX_SAFE_INTEGER
    )


def function_timeout_ms(requested: JSONValue, session_default_ms: int) -> int:
    """The deadline of a host-started function call, in milliseconds.

    the plugin contract "Invocation": ``timeoutMilliseconds`` defaults to the session's
    request timeout and is capped at one hour (:data:`MAX_FUNCTION_TIMEOUT_MS`). The value
    was validated by ``lsp.functionRequest`` (a positive integer or absent).
    """
    chosen = requested if _is_int(requested) else session_default_ms
    assert isinstance(chosen, int)
    return min(chosen, MAX_FUNCTION_TIMEOUT_MS)


def function_failure(error_message: object, error_data: JSONValue) -> JSONObject:
    """Invocation "Backend error": the ``requestCompleted.error`` of a failed call.

    The message is cut to :data:`ERROR_MESSAGE_BYTES`; ``pluginErrorCode`` is
    ``error.data.code`` when it is an identifier of at most 64 bytes.
    """
    message = error_message if isinstance(error_message, str) else ""
    error: JSONObject = {
        "code": "plugin.function.failed",
        "message": cut_utf8(message, ERROR_MESSAGE_BYTES),
    }
    code = error_data.get("code") if isinstance(error_data, dict) else None
    if is_plugin_error_code(code):
        error["pluginErrorCode"] = code
    return error


def normalize_progress(params: JSONValue) -> tuple[str, JSONObject] | None:
    """Progress: a ``lithe/function/progress`` report, normalized, or None when malformed.

    Returns:
        ``(wire operationID, {message?, percentage?})``: the message cut to 1024 bytes;
        the percentage a whole number 0..100 (an integral float such as ``50.0`` counts).
    """
    if not isinstance(params, dict):
        return None
    wire_id = params.get("operationID")
    if not isinstance(wire_id, str) or not wire_id:
        return None
    report: JSONObject = {}
    if "message" in params:
        message = params["message"]
        if not isinstance(message, str):
            return None
        report["message"] = cut_utf8(message, ERROR_MESSAGE_BYTES)
    if "percentage" in params:
        percentage = params["percentage"]
        if isinstance(percentage, bool) or not isinstance(percentage, (int, float)):
            return None
        if percentage != int(percentage) or not 0 <= percentage <= 100:
            return None
        report["percentage"] = int(percentage)
    return wire_id, report


# -- host requests ----------------------------------------------------------------------


class HostRefusal(Exception):
    """A host request refused by Core before the host sees it.

    Attributes:
        number: The JSON-RPC error code.
        code: The ``plugin.host.*`` / ``plugin.function.*`` code (``error.data.code``).
        message: The message.
        details: ``error.data.details``, or None.
    """

    def __init__(
        self, number: int, code: str, message: str, details: JSONObject | None = None
    ) -> None:
        super().__init__(message)
        self.number = number
        self.code = code
        self.message = message
        self.details = details

    def data(self) -> JSONObject:
        """``error.data``: ``{code, details?}``."""
        data: JSONObject = {"code": self.code}
        if self.details is not None:
            data["details"] = self.details
        return data


def _refusal(code: str, message: str, details: JSONObject | None = None) -> HostRefusal:
    number = lookup_error(code).jsonrpc_code
    assert number is not None
    return HostRefusal(number, code, message, details)


Check = "Callable[[JSONValue], bool]"


def _key(value: JSONValue) -> bool:
    return isinstance(value, str) and _KEY.fullmatch(value) is not None


def _secret(value: JSONValue) -> bool:
    return isinstance(value, str) and len(value.encode()) <= 16 * 1024


def _string(value: JSONValue) -> bool:
    return isinstance(value, str)


def _object(value: JSONValue) -> bool:
    return isinstance(value, dict)


def _any(value: JSONValue) -> bool:
    return True


def _nonnegative(value: JSONValue) -> bool:
    return _is_int(value) and isinstance(value, int) and 0 <= value <= _MAX_SAFE_INTEGER


def _positive(value: JSONValue) -> bool:
    return _nonnegative(value) and value != 0


def _bool(value: JSONValue) -> bool:
    return isinstance(value, bool)


def _resource(value: JSONValue) -> bool:
    return (
        isinstance(value, dict)
        and set(value) == {"rootID", "path"}
        and _key(value["rootID"])
        and isinstance(value["path"], str)
    )


@dataclass(frozen=True)
class HostMethod:
    """One ``lithe/host/*`` request Core knows.

    Attributes:
        service: The service it belongs to (the key in ``getCapabilities.services``).
        grant: The ``hostServices`` name that grants it; None for every plugin-owned
            session.
        required: Fields that must be present, with their checks.
        optional: Fields that may be present, with their checks; None means Core does not
            type the params beyond "an object" (any field is passed on).
    """

    service: str
    grant: str | None
    required: dict[str, Callable[[JSONValue], bool]]
    optional: dict[str, Callable[[JSONValue], bool]] | None


def _ctx(**fields: Callable[[JSONValue], bool]) -> dict[str, Callable[[JSONValue], bool]]:
    return {"context": _is_context, **fields}


def _method_grant(
    name: str,
    required: dict[str, Callable[[JSONValue], bool]],
    optional: dict[str, Callable[[JSONValue], bool]] | None = None,
) -> tuple[str, HostMethod]:
    method = f"lithe/host/{name}"
    service = name.split("/", 1)[0]
    return method, HostMethod(service, method, required, optional if optional is not None else {})


#: Methods granted by another method's grant: ``terminal.create`` grants the six terminal
#: methods (the plugin contract "Plugin-owned native terminals").
_GRANTED_BY: Final = {
    f"terminal/{name}": "terminal/create"
    for name in ("show", "close", "reopen", "dispose", "onExit")
}

#: Host services, Workspace contexts and capability discovery, Public document, file and
#: window methods: the requests Core types. ``credentials`` and ``workspace`` are service
#: grants; the public methods are granted by their full method names. The methods Core
#: does not type (run, debug, terminal, language server, keymap import) take any object.
#: The relay's ``lithe/host/functions/*`` are not here: the session hands them to the relay.
HOST_METHODS: Final[dict[str, HostMethod]] = dict(
    [
        ("lithe/host/getCapabilities", HostMethod("host", None, {}, {})),
        (
            "lithe/host/subscriptions/dispose",
            HostMethod("subscriptions", None, {"subscriptionID": _key}, {}),
        ),
        ("lithe/host/credentials/get", HostMethod("credentials", "credentials", {"key": _key}, {})),
        (
            "lithe/host/credentials/set",
            HostMethod("credentials", "credentials", {"key": _key, "secret": _secret}, {}),
        ),
        (
            "lithe/host/credentials/delete",
            HostMethod("credentials", "credentials", {"key": _key}, {}),
        ),
        ("lithe/host/workspace/listContexts", HostMethod("workspace", "workspace", {}, {})),
        ("lithe/host/workspace/getContext", HostMethod("workspace", "workspace", _ctx(), {})),
        ("lithe/host/workspace/getFolders", HostMethod("workspace", "workspace", _ctx(), {})),
        _method_grant("documents/list", _ctx()),
        _method_grant("documents/getSnapshot", _ctx(documentID=_string)),
        _method_grant("editor/getActive", _ctx()),
        _method_grant("editor/getSelections", _ctx(documentID=_string)),
        _method_grant(
            "editor/applyEdits", _ctx(documentID=_string, expectedVersion=_any, edits=_any)
        ),
        _method_grant(
            "editor/replaceSelections",
            _ctx(documentID=_string, expectedVersion=_any, selections=_any, replacements=_any),
        ),
        _method_grant(
            "editor/insertText",
            _ctx(documentID=_string, expectedVersion=_any, at=_any, text=_string),
        ),
        _method_grant("editor/registerActions", _ctx(id=_string, function=_string, selector=_any)),
        _method_grant("editor/registerProviders", _ctx(id=_string, selector=_any, providers=_any)),
        _method_grant(
            "workspace/readDirectory",
            _ctx(resource=_resource),
            {"cursor": _any, "limit": _positive},
        ),
        _method_grant("workspace/stat", _ctx(resource=_resource)),
        _method_grant("workspace/readFile", _ctx(resource=_resource), {"maximumBytes": _positive}),
        _method_grant("workspace/watch", _ctx(resource=_resource), {"recursive": _bool}),
        _method_grant(
            "workspace/findFiles",
            _ctx(resource=_resource, query=_string),
            {"fileMask": _any, "cursor": _any, "limit": _positive},
        ),
        _method_grant(
            "workspace/findText",
            _ctx(resource=_resource, pattern=_string),
            {
                "fileMask": _any,
                "caseSensitive": _bool,
                "wholeWords": _bool,
                "regularExpression": _bool,
                "cursor": _any,
                "limit": _positive,
            },
        ),
        _method_grant(
            "editor/open",
            _ctx(resource=_resource),
            {"activation": _string, "range": _any, "tab": _any},
        ),
        _method_grant(
            "editor/reveal",
            _ctx(resource=_resource),
            {"activation": _string, "range": _any, "tab": _any},
        ),
        _method_grant(
            "preview/openHTML", _ctx(resource=_resource), {"presentation": _string, "range": _any}
        ),
        _method_grant(
            "browser/openExternal",
            _ctx(),
            {"url": _string, "resource": _resource, "unsaved": _string},
        ),
        _method_grant("window/showInformation", _ctx(text=_string), {"actions": _any}),
        _method_grant("window/showWarning", _ctx(text=_string), {"actions": _any}),
        _method_grant("window/showError", _ctx(text=_string), {"actions": _any}),
        # run/stop is granted by the run.start permission ("Run and debug sessions").
        ("lithe/host/run/stop", HostMethod("run", "lithe/host/run/start", {}, None)),
        # Typed by their own services, not by Core: any object is passed on.
        *(
            (
                f"lithe/host/{name}",
                HostMethod(
                    name.split("/", 1)[0], f"lithe/host/{_GRANTED_BY.get(name, name)}", {}, None
                ),
            )
            for name in (
                "run/start",
                "debug/start",
                "terminal/create",
                "terminal/show",
                "terminal/close",
                "terminal/reopen",
                "terminal/dispose",
                "terminal/onExit",
                "documents/registerContentProvider",
                "keymapImport/listInputs",
                "keymapImport/readChunk",
                "languageServer/request",
                "languageServer/notify",
                "languageServer/setStatus",
            )
        ),
    ]
)

#: Service grant names: each admits the methods whose ``grant`` is that name.
_SERVICE_GRANTS: Final = frozenset({"credentials", "workspace"})

#: Host notifications: method -> (grant or None for every plugin-owned session, params
#: check). ``workspace.metadata`` is the ``workspace`` grant; ``run.start`` and
#: ``languageServer.request`` are the grants of their methods.
HOST_NOTIFICATIONS: Final[dict[str, tuple[str | None, Callable[[JSONValue], bool]]]] = {
    "lithe/host/workspace/didChangeContexts": (
        "workspace",
        lambda p: isinstance(p, dict) and _positive(p.get("revision")),
    ),
    "lithe/host/subscriptions/notify": (
        None,
        lambda p: (
            isinstance(p, dict)
            and _key(p.get("subscriptionID"))
            and _positive(p.get("sequence"))
            and isinstance(p.get("event"), dict)
        ),
    ),
    "lithe/host/commands/didRun": (
        None,
        lambda p: (
            isinstance(p, dict)
            and isinstance(p.get("commandID"), str)
            and ("context" not in p or _is_context(p["context"]))
        ),
    ),
    "lithe/host/run/didExit": (
        "lithe/host/run/start",
        lambda p: (
            isinstance(p, dict)
            and isinstance(p.get("runID"), str)
            and ("exitCode" not in p or _is_int(p["exitCode"]))
            and (
                "signal" not in p
                or (
                    _is_int(p["signal"])
                    and isinstance(p["signal"], int)
                    and 1 <= p["signal"] <= 127
                )
            )
        ),
    ),
    "lithe/host/languageServer/didChangeState": (
        "lithe/host/languageServer/request",
        lambda p: (
            isinstance(p, dict)
            and _is_context(p.get("context"))
            and isinstance(p.get("serverID"), str)
            and p.get("state") in ("starting", "running", "stopped", "crashed")
            and _positive(p.get("generation"))
        ),
    ),
    "lithe/host/languageServer/didReceiveNotification": (
        "lithe/host/languageServer/request",
        lambda p: (
            isinstance(p, dict)
            and _is_context(p.get("context"))
            and isinstance(p.get("serverID"), str)
            and _positive(p.get("generation"))
            and isinstance(p.get("method"), str)
        ),
    ),
}


def check_host_services(value: JSONValue) -> frozenset[str]:
    """``lsp.startServer.hostServices``: service names this Core defines, or method grants.

    Raises:
        CoreError: ``invalid_request`` for a list that is not of strings, or an unknown name.
    """
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CoreError("invalid_request", "hostServices must be an array of strings")
    grants = {str(v) for v in value}
    known = _SERVICE_GRANTS | {m.grant for m in HOST_METHODS.values() if m.grant is not None}
    unknown = sorted(grants - known)
    if unknown:
        raise CoreError(
            "invalid_request",
            f"hostServices names a service this Core does not define: {unknown[0]}",
        )
    return frozenset(grants)


def _granted(method: HostMethod, grants: frozenset[str]) -> bool:
    return method.grant is None or method.grant in grants


#: Host services / "Cross-plugin calls": a backend never asks the host to dispatch a function
#: or a domain operation.
_RECURSIVE_PREFIXES: Final = ("lithe/build/",)
_RECURSIVE_METHODS: Final = frozenset({"lithe/function/invoke"})


def check_host_request(method: str, params: JSONValue, grants: frozenset[str]) -> HostMethod:
    """Host services: Core's refusals of a backend request, in the reference's order.

    0. ``lithe/function/invoke`` or any ``lithe/build/*``: ``plugin.function.recursiveCall``.
    1. a method the protocol does not define: -32601 ``plugin.host.unavailable``;
    2. a service the session is not granted: -32010 ``plugin.host.permissionDenied``;
    3. malformed params: -32602 ``plugin.host.invalidParams``; a field the method does not
       define: -32018 ``plugin.host.unsupportedOption`` with ``details.option`` (checked
       before the field types, so an unknown field always names itself);
    4. params over :data:`HOST_REQUEST_BYTES`: -32014 ``plugin.host.limitExceeded``.

    Returns:
        The method's entry.

    Raises:
        HostRefusal: The first failing check.
    """
    if method in _RECURSIVE_METHODS or method.startswith(_RECURSIVE_PREFIXES):
        raise HostRefusal(
            lookup_error("plugin.function.recursiveCall").jsonrpc_code or -32603,
            "plugin.function.recursiveCall",
            f"a backend cannot ask the host for {method}",
        )
    entry = HOST_METHODS.get(method)
    if entry is None:
        raise _refusal("plugin.host.unavailable", f"the host offers no method {method}")
    if not _granted(entry, grants):
        raise _refusal("plugin.host.permissionDenied", f"{method} is not granted to this plugin")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise _refusal("plugin.host.invalidParams", "params must be an object")
    if entry.optional is not None:
        allowed = entry.required.keys() | entry.optional.keys()
        for name in params:
            if name not in allowed:
                raise _refusal(
                    "plugin.host.unsupportedOption",
                    f"{method} has no field {name}",
                    {"option": name},
                )
        for name, check in entry.required.items():
            if name not in params or not check(params[name]):
                raise _refusal("plugin.host.invalidParams", f"{name} is missing or malformed")
        for name, check in entry.optional.items():
            if name in params and not check(params[name]):
                raise _refusal("plugin.host.invalidParams", f"{name} is malformed")
    if json_size(params) > HOST_REQUEST_BYTES:
        raise _refusal("plugin.host.limitExceeded", f"params are over {HOST_REQUEST_BYTES} bytes")
    return entry


def _wire_list(items: Iterable[str]) -> list[JSONValue]:
    """``items`` sorted, typed as a JSON array."""
    return [*sorted(items)]


def capabilities_result(version: int, grants: frozenset[str]) -> JSONObject:
    """``lithe/host/getCapabilities``: only what the session may use.

    The implicit ``host``, ``subscriptions`` and ``commands`` services are always listed;
    granted ones are added with the methods and notifications their grant admits.
    """
    services: dict[str, dict[str, list[str]]] = {
        "host": {"methods": [], "notifications": []},
        "subscriptions": {"methods": [], "notifications": []},
        "commands": {"methods": [], "notifications": []},
    }
    for name, entry in HOST_METHODS.items():
        if _granted(entry, grants):
            services.setdefault(entry.service, {"methods": [], "notifications": []})
            services[entry.service]["methods"].append(name)
    for name, (grant, _check) in HOST_NOTIFICATIONS.items():
        if grant is None or grant in grants:
            service = name.removeprefix("lithe/host/").split("/", 1)[0]
            services.setdefault(service, {"methods": [], "notifications": []})
            services[service]["notifications"].append(name)
    wire: JSONObject = {
        service: {
            "methods": _wire_list(entry["methods"]),
            "notifications": _wire_list(entry["notifications"]),
        }
        for service, entry in sorted(services.items())
    }
    return {
        "protocolVersion": version,
        "backendAuthority": "local",
        "services": wire,
        "limits": {
            "pendingHostRequests": MAX_PENDING_HOST_REQUESTS,
            "functionResultBytes": FUNCTION_RESULT_BYTES,
            "hostRequestBytes": HOST_REQUEST_BYTES,
            "hostResultBytes": HOST_RESULT_BYTES,
            "errorMessageBytes": ERROR_MESSAGE_BYTES,
            "errorDetailsBytes": ERROR_DETAILS_BYTES,
            "notificationBytes": NOTIFICATION_BYTES,
        },
    }


def host_failure(error: JSONValue) -> tuple[int, str, JSONObject]:
    """``lsp.hostResponse.error`` -> what the backend receives.

    A ``plugin.host.*`` code with a JSON-RPC number is passed on with its own number; any
    other code, or none, is ``plugin.host.failed`` (-32603). The message is cut to 1024
    bytes; ``details`` reaches the backend as ``error.data.details`` when it is an object
    of at most 4 KiB serialized, and is dropped otherwise.

    Returns:
        ``(JSON-RPC code, message, error.data)``.

    Raises:
        CoreError: ``invalid_request`` when ``error`` is not an object with a string message.
    """
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        raise CoreError("invalid_request", "error must be an object with a string message")
    unknown = set(error) - {"message", "code", "details"}
    if unknown:
        raise CoreError(
            "invalid_request",
            f"error has an unknown field {sorted(unknown)[0]!r} (known: code, details, message)",
        )
    code = error.get("code")
    number: int | None = None
    if isinstance(code, str) and code.startswith("plugin.host."):
        try:
            number = lookup_error(code).jsonrpc_code
        except KeyError:
            number = None
    if number is None or not isinstance(code, str):
        code, number = "plugin.host.failed", -32603
    data: JSONObject = {"code": code}
    details = error.get("details")
    if isinstance(details, dict) and json_size(details) <= ERROR_DETAILS_BYTES:
        data["details"] = details
    return number, cut_utf8(str(error["message"]), ERROR_MESSAGE_BYTES), data


def check_host_notification(method: str, params: JSONValue, grants: frozenset[str]) -> None:
    """Host notifications: ``lsp.hostNotify``'s checks (not the session's state).

    Raises:
        CoreError: ``invalid_request`` for another method, a service the session is not
            granted, malformed params, or params over :data:`NOTIFICATION_BYTES`.
    """
    entry = HOST_NOTIFICATIONS.get(method)
    if entry is None:
        raise CoreError("invalid_request", f"{method} is not a host notification")
    grant, check = entry
    if grant is not None and grant not in grants:
        raise CoreError("invalid_request", f"{method} is not granted to this session")
    if not check(params):
        raise CoreError("invalid_request", f"the params of {method} are malformed")
    if json_size(params) > NOTIFICATION_BYTES:
        raise CoreError("invalid_request", f"params are over {NOTIFICATION_BYTES} bytes")


# -- structured plugin diagnostics --------------------------------------------------------

_LOG_KINDS: Final = {
    "operationFinished": "plugins.operation.finished",
    "operationFailed": "plugins.operation.failed",
    "degraded": "plugins.operation.fallback_selected",
    "recovered": "plugins.operation.recovery_finished",
}
_LOG_LEVELS: Final = {
    "operationFinished": "info",
    "operationFailed": "error",
    "degraded": "warning",
    "recovered": "warning",
}
_SDK_STAGES: Final = frozenset({"initialize", "shutdown", "notification", "result-encoding"})
_LOG_FIELDS: Final = frozenset({"kind", "operation", "durationMs", "code", "count", "operationId"})
_OPERATION_PREFIXES: Final = ("lithe/build/", "lithe/vcs/")


def validate_log_fact(params: JSONValue, registered: FunctionRegistry | None) -> JSONObject | None:
    """Structured plugin diagnostics: a ``lithe/log`` notification's params, or None.

    Only the listed fields, unknown fields rejected; ``operation`` a registered function
    ID of up to 64 bytes, ``function-call`` for a longer registered ID (checked loosely: a
    registry must exist), a ``lithe/build/*`` or ``lithe/vcs/*`` method,
    ``lithe/keymap/import`` or an SDK stage; ``durationMs`` required for finished/failed
    and absent otherwise; ``code`` required except for finished.

    Returns:
        ``{catalogEvent, level, kind, operation, durationMs?, code?, count?,
        operationId?}``, or None when malformed.
    """
    if not isinstance(params, dict) or not set(params) <= _LOG_FIELDS:
        return None
    kind = params.get("kind")
    if not isinstance(kind, str) or kind not in _LOG_KINDS:
        return None
    operation = params.get("operation")
    if not isinstance(operation, str) or not _is_log_operation(operation, registered):
        return None
    fact: JSONObject = {
        "catalogEvent": _LOG_KINDS[kind],
        "level": _LOG_LEVELS[kind],
        "kind": kind,
        "operation": operation,
    }
    timed = kind in ("operationFinished", "operationFailed")
    if timed != ("durationMs" in params):
        return None
    if timed:
        if not _nonnegative(params["durationMs"]):
            return None
        fact["durationMs"] = params["durationMs"]
    if kind != "operationFinished" and "code" not in params:
        return None
    if "code" in params:
        code = params["code"]
        if not is_log_code(code):
            return None
        fact["code"] = code
    if "count" in params:
        if not _nonnegative(params["count"]):
            return None
        fact["count"] = params["count"]
    if "operationId" in params:
        operation_id = params["operationId"]
        if not is_operation_id(operation_id):
            return None
        fact["operationId"] = operation_id
    return fact


def _is_log_operation(operation: str, registered: FunctionRegistry | None) -> bool:
    if operation in _SDK_STAGES or operation == "lithe/keymap/import":
        return True
    if operation.startswith(_OPERATION_PREFIXES):
        return re.fullmatch(r"lithe/(build|vcs)/[A-Za-z]+(/[A-Za-z]+)*", operation) is not None
    if registered is None:
        return False
    if operation == "function-call":
        return any(len(f.encode()) > 64 for f in registered.sorted_ids())
    return len(operation.encode()) <= 64 and operation in registered
