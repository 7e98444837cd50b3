"""A Trio SDK for plugin backends: the backend side of Lithe's plugin-function protocol.

A twin of the reference Node SDK's core (the Node plugin SDK contract) in Trio idioms::

    from supervisor.plugin_sdk import PluginError, create_backend

    backend = create_backend("example-backend", "1.0.0")

    @backend.function("snapshot.refresh")
    async def refresh(params, context):
        await context.progress("Refreshing", 10)
        result = await context.run([sys.executable, "-c", "print('ok')"])
        if result.exit_code != 0:
            raise PluginError("example.refreshFailed", "The refresh failed.")
        return {"output": result.stdout}

    raise SystemExit(backend.listen())
"""

from __future__ import annotations

from ._backend import (
    Backend as Backend,
    CallContext as CallContext,
    Diagnostics as Diagnostics,
    FunctionHandler as FunctionHandler,
    Host as Host,
    HostNotificationHandler as HostNotificationHandler,
    create_backend as create_backend,
)
from ._errors import (
    HostError as HostError,
    PluginError as PluginError,
    PluginSdkError as PluginSdkError,
)
from ._services import EventHandler as EventHandler, Subscription as Subscription
from ._state_store import StateStore as StateStore, open_state_store as open_state_store
from ._wire import (
    HOST_ERRORS as HOST_ERRORS,
    MAX_FUNCTIONS as MAX_FUNCTIONS,
    MAX_PENDING_HOST_REQUESTS as MAX_PENDING_HOST_REQUESTS,
    Negotiated as Negotiated,
    is_function_id as is_function_id,
)

__all__ = (
    "HOST_ERRORS",
    "MAX_FUNCTIONS",
    "MAX_PENDING_HOST_REQUESTS",
    "Backend",
    "CallContext",
    "Diagnostics",
    "EventHandler",
    "FunctionHandler",
    "Host",
    "HostError",
    "HostNotificationHandler",
    "Negotiated",
    "PluginError",
    "PluginSdkError",
    "StateStore",
    "Subscription",
    "create_backend",
    "is_function_id",
    "open_state_store",
)
