"""``core.*``: the Core's own commands."""

from __future__ import annotations

from typing import Annotated

import msgspec

from ._base import MAX_MILLISECONDS, JsonObject, JsonValue, NonEmpty, Payload, Result

__all__ = (
    "COMMANDS",
    "CorePing",
    "CorePingResult",
    "CoreSessions",
    "CoreSessionsResult",
    "Envelope",
    "ErrorBody",
    "Response",
)


class Envelope(msgspec.Struct, rename="camel", kw_only=True):
    """A request (the Core API contract "Envelope"); other fields are ignored.

    Attributes:
        id: The request's id, echoed in its response (a non-empty string or an integer).
        operation_id: The id ``cancel`` knows the operation by; default: ``id``.
        timeout_milliseconds: A positive value starts a cooperative deadline (``timed_out``);
            0 or absent: none.
        command: The command's name.
        payload: Its payload (absent or null: ``{}``).
    """

    id: NonEmpty | int | None = None
    operation_id: NonEmpty | None = None
    timeout_milliseconds: Annotated[int, msgspec.Meta(ge=0, le=MAX_MILLISECONDS)] | None = None
    command: NonEmpty
    payload: JsonObject | None = None


class ErrorBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A failure: a ``code`` from the catalog (see "Error codes"), a message of at most 1024
    UTF-8 bytes, and ``details`` (``field`` for ``invalid_request``).

    Attributes:
        code: The error code, from the catalog ("Error codes" below).
        message: What went wrong, for a person: at most 1 024 UTF-8 bytes.
        details: Facts a program can act on: ``field`` (the payload path at fault) for
            ``invalid_request``, or ``jsonrpcCode`` for a request that could not be read
            (-32700 not JSON, -32600 JSON that can not be used: the code ``supervisor
            serve`` answers it with, under the same message); others per code; absent when
            none.
    """

    code: str
    message: str
    details: JsonObject | None = None


class Response(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A response: ``{id, ok: true, data}`` or ``{id, ok: false, error}``, exactly once per
    request.

    Attributes:
        id: The request's ``id``, echoed (null when the request had none or it could not be
            read).
        ok: True: ``data`` holds the result; false: ``error`` says why.
        data: The command's result (with ``ok: true``).
        error: Why it failed (with ``ok: false``).
    """

    id: str | int | None
    ok: bool
    data: JsonValue = None
    error: ErrorBody | None = None


class CorePing(Payload, kw_only=True):
    """``core.ping {}``: no fields."""


class CorePingResult(Result, kw_only=True):
    """``core.ping``: the protocol version (1) and the package version.

    Attributes:
        protocol_version: The envelope protocol's version: 1.
        version: The installed package's version.
    """

    protocol_version: int
    version: str


class CoreSessions(Payload, kw_only=True):
    """``core.sessions {}``: no fields."""


class CoreSessionsResult(Result, kw_only=True):
    """``core.sessions``: what is alive in this Core, for a client that attaches to resume.

    Every item has ``uptimeMs`` (milliseconds its process has run; null without one) next to
    the fields of the command that lists it.

    Attributes:
        pid: The process that serves (the backend's worker).
        uptime_ms: How long it has run, in milliseconds.
        language_servers: Each language server: ``sessionId``, ``serverId``, ``state``,
            ``generation``, ``pid`` and its open ``documents`` (``{uri, languageId,
            version, diagnosticCount}``), as ``lsp.snapshot`` gives them.
        debug_sessions: As ``debug.listSessions``.
        terminals: As ``terminal.list``.
        jobs: As ``job.list``.
        runs: Plugin runs, as ``run.list``.
    """

    pid: int
    uptime_ms: int | None
    language_servers: list[JsonObject]
    debug_sessions: list[JsonObject]
    terminals: list[JsonObject]
    jobs: list[JsonObject]
    runs: list[JsonObject]


COMMANDS = {
    "core.ping": (CorePing, CorePingResult),
    "core.sessions": (CoreSessions, CoreSessionsResult),
}
