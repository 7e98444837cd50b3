"""The Core's error types and codes, for the ``supervisor`` namespace (they live in
:mod:`protocol`); loaded on first use like every other name there."""

from __future__ import annotations

from protocol import (
    ERROR_CATALOG,
    CatalogEntry,
    CoreError,
    CoreErrorCode,
    ErrorCode,
    lookup_error,
)

__all__ = (
    "ERROR_CATALOG",
    "CatalogEntry",
    "CoreError",
    "CoreErrorCode",
    "ErrorCode",
    "lookup_error",
)
