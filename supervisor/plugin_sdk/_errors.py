"""The SDK's exceptions: ``PluginError``, ``HostError`` and ``PluginSdkError``.

Reference: the Node plugin SDK contract "API" (``PluginError``, ``HostError``), "Results and
errors",
"Calling other plugins" (``sdk.functions.invalidCall``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._plugin._wire import plugin_error_name
from ._wire import HOST_ERRORS, is_plugin_error_code

if TYPE_CHECKING:
    from protocol import JSONValue

__all__ = ("HostError", "PluginError", "PluginSdkError")


class PluginError(Exception):
    """A failure meant for the plugin's own UI, raised by a function handler.

    The host sees ``plugin.function.failed`` with ``message`` (cut to 1024 UTF-8 bytes)
    and ``pluginErrorCode`` = ``code``; Lithe never branches on the code.

    Args:
        code: An identifier (``[A-Za-z_][A-Za-z0-9_.-]*``) of at most 64 bytes, the rule
            the host applies to ``pluginErrorCode``.
        message: Shown to the user.

    Raises:
        ValueError: ``code`` is not such an identifier (a bug in the plugin, caught where
            it is made rather than silently dropped on the wire).
    """

    def __init__(self, code: str, message: str) -> None:
        if not is_plugin_error_code(code):
            raise ValueError(f"invalid PluginError code {code!r}")
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class HostError(Exception):
    """The host refused or failed a host request (``lithe/host/*``).

    Attributes:
        code: The stable code from ``error.data.code`` (e.g. ``plugin.host.cancelled``,
            ``plugin.function.callCycle``); when the host sent none, the code
            :data:`HOST_ERRORS` maps ``rpc_code`` to, else ``plugin.host.failed``.
        message: The host's message.
        rpc_code: The JSON-RPC ``error.code`` number (None for a local refusal that never
            reached the host... which still carries its code's number).
        details: ``error.data.details`` when it is an object, else None.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        rpc_code: int | None = None,
        details: dict[str, JSONValue] | None = None,
    ) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.rpc_code = HOST_ERRORS.get(code) if rpc_code is None else rpc_code
        self.details = details

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    @classmethod
    def from_wire(cls, rpc_code: int, message: str, data: JSONValue | None) -> HostError:
        """Map a JSON-RPC error answered by the host to a ``HostError``.

        Args:
            rpc_code: ``error.code``.
            message: ``error.message``.
            data: ``error.data``: ``{code?, details?}``.
        """
        code: str | None = None
        details: dict[str, JSONValue] | None = None
        if isinstance(data, dict):
            raw = data.get("code")
            code = raw if isinstance(raw, str) and raw else None
            raw_details = data.get("details")
            details = raw_details if isinstance(raw_details, dict) else None
        if code is None:
            code = plugin_error_name(rpc_code) or "plugin.host.failed"
        return cls(code, message, rpc_code=rpc_code, details=details)


class PluginSdkError(Exception):
    """A mistake in the backend's own use of the SDK, refused locally; nothing was sent.

    Attributes:
        code: ``sdk.functions.invalidCall``, ``sdk.functions.invalidId``,
            ``sdk.host.invalidContext``, ``sdk.host.invalidMethod``,
            ``sdk.reservedMethod`` or ``sdk.notListening``.
        message: What was wrong.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"
