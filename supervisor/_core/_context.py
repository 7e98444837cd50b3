"""Context of the Core operation running in the current task.

A separate module so that services, which the Core imports, can read it without importing
the Core.
"""

from __future__ import annotations

import contextvars

__all__ = ("current_operation_id",)

_current_operation_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "current_operation_id", default=None
)


def current_operation_id() -> str | None:
    """The operation id of the command running in this task, or None outside one.

    A command whose payload has an optional ``operationId`` (``debug.execute``,
    ``lsp.request``, ...) defaults to it, so the envelope's ``operationId`` (or ``id``) and
    the JSON-RPC id in ``supervisor serve`` name the operation without repeating it.
    """
    return _current_operation_id.get()
