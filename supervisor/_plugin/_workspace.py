"""Workspace contexts: the open workspaces a backend may name (pure model, no I/O but the
state directory and the host secret).

the plugin contract "Workspace contexts and capability discovery". A context is one open
workspace in one window: ``{contextID, generation, name, authority, folders,
stateDirectory}``. The embedding host says which workspaces are open
(:meth:`WorkspaceContexts.set_contexts`, the ``workspace.setContexts`` command); the model
keeps the rules:

- ``generation`` starts at 1 and grows whenever the same context's folders or authority
  change; ``revision`` grows whenever a context opens, closes or changes.
- A reference ``{contextID, generation}`` to a closed context or an older generation is
  -32011 ``plugin.host.contextExpired`` (:meth:`WorkspaceContexts.resolve`).
- ``rootID`` names a root folder stably for the same location, across restarts, without
  revealing its path: ``r`` and 16 hex digits of HMAC-SHA256 over the plugin ID and the
  folder's path, keyed with a host secret kept in the state root (``host-secret``, mode
  0600). Two plugins get different IDs for the same folder. ``path`` is given only for a
  local authority.
- ``stateDirectory`` is ``<state root>/<plugin>/backend/workspaces/<digest>``, private to the
  plugin and workspace; only ``getContext`` returns it, and creates it then.
- Host requests that name a context run in a cancel scope tied to it
  (:meth:`WorkspaceContexts.bound`): closing the context, or replacing its generation,
  cancels them, and they end with ``contextExpired``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

import trio

from protocol import CoreError

from ._state import HostRefusal, _refusal

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from protocol import JSONObject, JSONValue

__all__ = (
    "MAX_CONTEXTS",
    "MAX_FOLDERS",
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "Folder",
    "WorkspaceContext",
    "WorkspaceContexts",
    "context_expired",
    "default_state_root",
)

#: Open contexts the host may declare at once (ours: the reference names no number).
MAX_CONTEXTS: Final = 256
#: Root folders of one context (ours).
MAX_FOLDERS: Final = 64
#: Ours: the longest context or folder name, and remote authority id, in UTF-8 bytes.
MAX_NAME_BYTES: Final = 1024
#: Ours: the longest folder path, in bytes (Linux's PATH_MAX).
MAX_PATH_BYTES: Final = 4096


def _too_long(value: str, limit: int) -> bool:
    return len(value.encode("utf-8", "surrogatepass")) > limit


_KEY: Final = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
_SECRET_FILE: Final = "host-secret"


def default_state_root() -> Path:
    """Where plugin state lives unless the host says otherwise:
    ``$XDG_STATE_HOME/trio-process-supervisor/plugins`` (``~/.local/state`` by default)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "trio-process-supervisor" / "plugins"


def context_expired(message: str) -> HostRefusal:
    """-32011 ``plugin.host.contextExpired``."""
    return _refusal("plugin.host.contextExpired", message)


@dataclass(frozen=True)
class Folder:
    """One root folder of a context: its display name and absolute path."""

    name: str
    path: str


@dataclass(eq=False)
class WorkspaceContext:
    """One open workspace in one window (see the module docstring)."""

    context_id: str
    generation: int
    name: str
    authority: JSONObject
    folders: tuple[Folder, ...]
    #: Cancel scopes of host requests that name this context (any generation).
    scopes: set[trio.CancelScope] = field(default_factory=set)

    @property
    def local(self) -> bool:
        """True for a local authority (paths are given, processes may start)."""
        return self.authority.get("kind") == "local"

    def reference(self) -> JSONObject:
        """``{contextID, generation}``."""
        return {"contextID": self.context_id, "generation": self.generation}


class WorkspaceContexts:
    """The open contexts of one Core; see the module docstring.

    Args:
        state_root: Where plugin state directories and the host secret live (created when
            first needed).
        on_revision: Called with the new revision after every change (the sessions that
            hold the ``workspace`` grant are told ``workspace/didChangeContexts``).
    """

    def __init__(
        self,
        state_root: Path | None = None,
        on_revision: Callable[[int], None] | None = None,
    ) -> None:
        self.state_root = state_root if state_root is not None else default_state_root()
        self.revision = 0
        self._contexts: dict[str, WorkspaceContext] = {}
        self._secret: bytes | None = None
        self._listeners: list[Callable[[int], None]] = []
        if on_revision is not None:
            self._listeners.append(on_revision)

    # -- the host's side --------------------------------------------------------------

    def listen(self, callback: Callable[[int], None]) -> Callable[[], None]:
        """Call ``callback(revision)`` after every change; returns the unsubscribe."""
        self._listeners.append(callback)

        def remove() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return remove

    def set_contexts(self, payload: JSONValue) -> JSONObject:
        """``workspace.setContexts {contexts: [{contextID, name?, authority?, folders}]}`` ->
        ``{revision, contexts: [{contextID, generation}]}``: the open contexts, all of them.

        A context not listed closes (its host requests end with ``contextExpired``); a new
        one opens at generation 1; one whose folders or authority changed gets the next
        generation (its requests naming the older one end). ``authority`` is
        ``{kind: "local"}`` (the default) or ``{kind: "remote", id}``; a folder is ``{name?,
        path}`` with an absolute path (the name defaults to the path's last part).

        Raises:
            CoreError: ``invalid_request`` (with ``details.field``) for a malformed list;
                nothing changes then.
        """
        if not isinstance(payload, dict) or set(payload) - {"contexts"}:
            raise _invalid("payload must be {contexts}", "contexts")
        raw = payload.get("contexts")
        if not isinstance(raw, list) or len(raw) > MAX_CONTEXTS:
            raise _invalid(f"contexts must be an array of at most {MAX_CONTEXTS}", "contexts")
        parsed = [_parse_context(entry, f"contexts[{n}]") for n, entry in enumerate(raw)]
        if len({c.context_id for c in parsed}) != len(parsed):
            raise _invalid("two contexts have the same contextID", "contexts")
        changed = False
        fresh: dict[str, WorkspaceContext] = {}
        for context in parsed:
            old = self._contexts.get(context.context_id)
            if old is None:
                changed = True
            elif (old.folders, old.authority) != (context.folders, context.authority):
                context.generation = old.generation + 1
                changed = True
                _cancel(old.scopes)
            else:
                changed = changed or context.name != old.name
                old.name = context.name
                context = old
            fresh[context.context_id] = context
        for context_id, old in self._contexts.items():
            if context_id not in fresh:
                changed = True
                _cancel(old.scopes)
        self._contexts = fresh
        if changed:
            self.revision += 1
            for listener in list(self._listeners):
                listener(self.revision)
        return {
            "revision": self.revision,
            "contexts": [c.reference() for c in self._contexts.values()],
        }

    # -- the backends' side -----------------------------------------------------------

    @property
    def contexts(self) -> tuple[WorkspaceContext, ...]:
        """The open contexts, in the host's order."""
        return tuple(self._contexts.values())

    def resolve(self, reference: JSONValue) -> WorkspaceContext:
        """The open context a ``{contextID, generation}`` names.

        Raises:
            HostRefusal: -32011 ``plugin.host.contextExpired`` for a closed or unknown
                context or another generation; -32602 ``plugin.host.invalidParams`` for a
                malformed reference.
        """
        if (
            not isinstance(reference, dict)
            or not isinstance(reference.get("contextID"), str)
            or not isinstance(reference.get("generation"), int)
        ):
            raise _refusal("plugin.host.invalidParams", "context must be {contextID, generation}")
        context = self._contexts.get(str(reference["contextID"]))
        if context is None:
            raise context_expired(f"the context {reference['contextID']} is closed")
        if context.generation != reference["generation"]:
            raise context_expired(
                f"the context {context.context_id} is at generation {context.generation}"
            )
        return context

    @contextmanager
    def bound(self, context: WorkspaceContext) -> Iterator[trio.CancelScope]:
        """A cancel scope that closing or replacing ``context`` cancels.

        Raises:
            HostRefusal: ``contextExpired`` when the scope was cancelled for that reason
                (the body's :class:`trio.Cancelled` is absorbed by the scope).
        """
        scope = trio.CancelScope()
        context.scopes.add(scope)
        try:
            with scope:
                yield scope
        finally:
            context.scopes.discard(scope)
        if scope.cancelled_caught and not self.is_current(context):
            raise context_expired(f"the context {context.context_id} closed or changed")

    def is_current(self, context: WorkspaceContext) -> bool:
        """True while ``context`` is open at its generation."""
        return self._contexts.get(context.context_id) is context

    def root_id(self, plugin_id: str, folder: Folder) -> str:
        """``rootID``: ``r`` + 16 hex digits, keyed per plugin with the host secret."""
        digest = hmac.new(
            self._host_secret(), f"{plugin_id}\0{folder.path}".encode(), hashlib.sha256
        )
        return "r" + digest.hexdigest()[:16]

    def folder_of(self, plugin_id: str, context: WorkspaceContext, root_id: str) -> Folder:
        """The folder of ``context`` whose ``rootID`` (for ``plugin_id``) is ``root_id``.

        Raises:
            HostRefusal: -32016 ``plugin.host.notFound`` when no folder has it.
        """
        for folder in context.folders:
            if self.root_id(plugin_id, folder) == root_id:
                return folder
        raise _refusal("plugin.host.notFound", f"no root folder {root_id} in this context")

    def wire(
        self, plugin_id: str, context: WorkspaceContext, *, state_directory: bool = False
    ) -> JSONObject:
        """``<context>`` as ``plugin_id`` sees it; ``stateDirectory`` (created) on request.

        Raises:
            OSError: The state directory could not be created.
        """
        wire: JSONObject = {
            "contextID": context.context_id,
            "generation": context.generation,
            "name": context.name,
            "authority": dict(context.authority),
            "folders": self.folders_wire(plugin_id, context),
        }
        if state_directory:
            directory = self.state_directory(plugin_id, context)
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            wire["stateDirectory"] = str(directory)
        return wire

    def folders_wire(self, plugin_id: str, context: WorkspaceContext) -> list[JSONValue]:
        """``[{rootID, name, path?}]``: ``path`` only for a local authority."""
        folders: list[JSONValue] = []
        for folder in context.folders:
            entry: JSONObject = {"rootID": self.root_id(plugin_id, folder), "name": folder.name}
            if context.local:
                entry["path"] = folder.path
            folders.append(entry)
        return folders

    def state_directory(self, plugin_id: str, context: WorkspaceContext) -> Path:
        """``<state root>/<plugin>/backend/workspaces/<digest>`` (not created here).

        The digest is of the workspace's folders and authority, so the same workspace finds
        its state again in a later context.
        """
        identity = "\0".join(
            [str(context.authority.get("id", "")), *(f.path for f in context.folders)]
        )
        digest = hashlib.sha256(identity.encode()).hexdigest()[:32]
        return self.state_root / plugin_id / "backend" / "workspaces" / digest

    def _host_secret(self) -> bytes:
        if self._secret is None:
            self._secret = _read_or_make_secret(self.state_root / _SECRET_FILE)
        return self._secret


def _read_secret(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data[:32] if len(data) >= 32 else None


def _read_or_make_secret(path: Path) -> bytes:
    """The host secret in ``path``, made (32 random bytes, mode 0600) when missing.

    A root that cannot be written (or a damaged secret file) gets a secret of this process
    only: root IDs stay private, they just don't survive a restart.
    """
    kept = _read_secret(path)
    if kept is not None:
        return kept
    secret = secrets.token_bytes(32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secret)
    except FileExistsError:
        # Another Core made it first (use theirs), or it is damaged (use ours).
        return _read_secret(path) or secret
    except OSError:
        pass
    return secret


def _cancel(scopes: set[trio.CancelScope]) -> None:
    for scope in list(scopes):
        scope.cancel()


def _invalid(message: str, field_name: str) -> CoreError:
    return CoreError("invalid_request", message, {"field": field_name})


def _parse_context(entry: JSONValue, where: str) -> WorkspaceContext:
    if not isinstance(entry, dict) or set(entry) - {"contextID", "name", "authority", "folders"}:
        raise _invalid(f"{where} must be {{contextID, name?, authority?, folders}}", where)
    context_id = entry.get("contextID")
    if not isinstance(context_id, str) or _KEY.fullmatch(context_id) is None:
        raise _invalid(f"{where}.contextID must use the key alphabet", f"{where}.contextID")
    authority = entry.get("authority", {"kind": "local"})
    if not isinstance(authority, dict):
        raise _invalid(f"{where}.authority must be an object", f"{where}.authority")
    kind = authority.get("kind")
    remote_id = authority.get("id")
    if kind == "local" and set(authority) == {"kind"}:
        authority = {"kind": "local"}
    elif (
        kind == "remote"
        and set(authority) == {"kind", "id"}
        and isinstance(remote_id, str)
        and not _too_long(remote_id, MAX_NAME_BYTES)
    ):
        authority = {"kind": "remote", "id": remote_id}
    else:
        raise _invalid(
            f"{where}.authority must be {{kind: local}} or {{kind: remote, id}}",
            f"{where}.authority",
        )
    raw_folders = entry.get("folders")
    if not isinstance(raw_folders, list) or len(raw_folders) > MAX_FOLDERS:
        raise _invalid(
            f"{where}.folders must be an array of at most {MAX_FOLDERS}", f"{where}.folders"
        )
    folders: list[Folder] = []
    for n, raw in enumerate(raw_folders):
        at = f"{where}.folders[{n}]"
        if not isinstance(raw, dict) or set(raw) - {"name", "path"}:
            raise _invalid(f"{at} must be {{name?, path}}", at)
        path = raw.get("path")
        if (
            not isinstance(path, str)
            or not path.startswith("/")
            or "\0" in path
            or _too_long(path, MAX_PATH_BYTES)
        ):
            raise _invalid(
                f"{at}.path must be an absolute path of at most {MAX_PATH_BYTES} bytes",
                f"{at}.path",
            )
        path = os.path.normpath(path)
        name = raw.get("name", os.path.basename(path) or path)
        if not isinstance(name, str) or not name or _too_long(name, MAX_NAME_BYTES):
            raise _invalid(
                f"{at}.name must be a nonempty string of at most {MAX_NAME_BYTES} bytes",
                f"{at}.name",
            )
        folders.append(Folder(name, path))
    name = entry.get("name", folders[0].name if folders else context_id)
    if not isinstance(name, str) or _too_long(name, MAX_NAME_BYTES):
        raise _invalid(
            f"{where}.name must be a string of at most {MAX_NAME_BYTES} bytes", f"{where}.name"
        )
    return WorkspaceContext(context_id, 1, name, authority, tuple(folders))
