"""``open_state_store(directory)``: a small atomic JSON store (the Node plugin SDK contract "Backend
API", Rule 4 "The package is read-only").

The store is one JSON object in ``<directory>/state.json``. Every change writes a new file
next to it, flushes it to disk and renames it over the old one, so a reader (or a backend
killed mid-write) sees the old state or the new one, never a mix. The directory is one the
host provides (``${stateDir}``, ``${workspaceStateDir}``, a context's ``stateDirectory``);
a directory inside the plugin package is refused, as is a relative path.

Values are JSON values; the whole store is at most :data:`MAX_STATE_BYTES` serialized
(ours: the reference names no number), so a runaway cache fails loudly instead of filling
the disk.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

import trio

from ._errors import PluginSdkError

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

__all__ = ("MAX_STATE_BYTES", "StateStore", "open_state_store")

#: The largest store, serialized (ours).
MAX_STATE_BYTES: Final = 16 * 1024 * 1024
_FILE: Final = "state.json"


def _package_directory() -> Path:
    """The plugin package: the directory of the backend's entry script."""
    return Path(os.path.realpath(sys.argv[0] or ".")).parent


class StateStore:
    """An open store; see the module docstring. Made by :func:`open_state_store`."""

    def __init__(self, directory: Path, data: JSONObject) -> None:
        self.directory = directory
        self._data = data
        self._lock = trio.Lock()

    @property
    def path(self) -> Path:
        """The store's file."""
        return self.directory / _FILE

    def get(self, key: str, default: JSONValue = None) -> JSONValue:
        """The value under ``key``, or ``default``."""
        return self._data.get(key, default)

    def all(self) -> JSONObject:
        """A copy of the whole store."""
        return json.loads(json.dumps(self._data))  # type: ignore[no-any-return]

    async def set(self, key: str, value: JSONValue) -> None:
        """Store ``value`` under ``key`` (written atomically before this returns).

        Raises:
            PluginSdkError: ``sdk.stateStore.invalidValue`` for a value that is not JSON,
                ``sdk.stateStore.tooLarge`` past :data:`MAX_STATE_BYTES`;
                ``sdk.stateStore.writeFailed`` when the disk refused (the store is as before).
        """
        await self._change(key, value, delete=False)

    async def delete(self, key: str) -> None:
        """Remove ``key`` (also when absent)."""
        await self._change(key, None, delete=True)

    async def _change(self, key: str, value: JSONValue, *, delete: bool) -> None:
        if not isinstance(key, str):
            raise PluginSdkError("sdk.stateStore.invalidKey", "a key is a string")
        async with self._lock:
            data = dict(self._data)
            if delete:
                data.pop(key, None)
            else:
                data[key] = value
            try:
                text = json.dumps(data, ensure_ascii=False, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise PluginSdkError("sdk.stateStore.invalidValue", f"not JSON: {exc}") from None
            if len(text.encode("utf-8")) > MAX_STATE_BYTES:
                raise PluginSdkError(
                    "sdk.stateStore.tooLarge", f"the store would exceed {MAX_STATE_BYTES} bytes"
                )
            try:
                await trio.to_thread.run_sync(_write_atomically, self.path, text)
            except OSError as exc:
                raise PluginSdkError(
                    "sdk.stateStore.writeFailed", f"could not write the store: {exc.strerror}"
                ) from None
            self._data = data


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


async def open_state_store(
    directory: str | os.PathLike[str], *, package_directory: str | os.PathLike[str] | None = None
) -> StateStore:
    """Open (creating the directory when needed) the store in ``directory``.

    Args:
        directory: An absolute directory the host provided.
        package_directory: The plugin package (default: the entry script's directory).

    Raises:
        PluginSdkError: ``sdk.stateStore.invalidDirectory`` for a relative path or one
            inside the package; ``sdk.stateStore.corrupt`` for a store file that is not a
            JSON object; ``sdk.stateStore.writeFailed`` when the directory can't be made.
    """
    raw = os.fspath(directory)
    if not os.path.isabs(raw):
        raise PluginSdkError("sdk.stateStore.invalidDirectory", "the directory must be absolute")
    package_raw = None if package_directory is None else os.fspath(package_directory)

    def load() -> tuple[Path, JSONObject]:
        where = Path(os.path.realpath(raw))
        package = (
            Path(os.path.realpath(package_raw)) if package_raw is not None else _package_directory()
        )
        if where == package or package in where.parents:
            raise PluginSdkError(
                "sdk.stateStore.invalidDirectory",
                "the plugin package is read-only: keep state under the host's state directories",
            )
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            text = (where / _FILE).read_text(encoding="utf-8")
        except FileNotFoundError:
            return where, {}
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return where, data

    try:
        where, data = await trio.to_thread.run_sync(load)
    except OSError as exc:
        raise PluginSdkError(
            "sdk.stateStore.writeFailed", f"could not open the store: {exc.strerror}"
        ) from None
    except ValueError as exc:
        raise PluginSdkError(
            "sdk.stateStore.corrupt", f"the store is not a JSON object: {exc}"
        ) from None
    return StateStore(where, data)
