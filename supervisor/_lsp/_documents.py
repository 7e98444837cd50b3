"""Open documents of a language-server session: versions, text, diagnostics (pure).

Contract (the Core API contract ``lsp.syncDocument`` / ``lsp.closeDocument``): the first sync
of a URI is ``didOpen`` at version 1, later ones ``didChange`` with the next version; ranged
changes are forwarded as they are when the server advertised incremental sync, otherwise the
change is the full new text; a sync that leaves the text as it was sends nothing and keeps the
version. The store keeps every open document's text, so ranged edits can be turned into full
text for a full-sync server and so a restarted server can be given its documents again.

Positions are LSP's: zero-based lines and UTF-16 code-unit columns (LSP 3.17 "Position").
Diagnostics are kept only for open documents and, when the server versions them, only for
the current version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from protocol import CoreError

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

__all__ = ("Document", "DocumentStore", "SyncPlan", "apply_change")

#: ``TextDocumentSyncKind.Incremental`` (LSP 3.17).
SYNC_INCREMENTAL = 2


def _invalid(message: str) -> CoreError:
    return CoreError("invalid_request", message)


def _offset(text: str, position: JSONValue, line_starts: list[int]) -> int:
    """The string index of an LSP position (UTF-16 column) in ``text``."""
    if not isinstance(position, dict):
        raise _invalid("a range position must be an object {line, character}")
    line = position.get("line")
    character = position.get("character")
    if (
        isinstance(line, bool)
        or isinstance(character, bool)
        or not isinstance(line, int)
        or not isinstance(character, int)
        or line < 0
        or character < 0
    ):
        raise _invalid("line and character must be integers >= 0")
    if line >= len(line_starts):
        # LSP: a line past the end means the end of the document.
        return len(text)
    index = line_starts[line]
    end = line_starts[line + 1] - 1 if line + 1 < len(line_starts) else len(text)
    units = 0
    while index < end and units < character:
        units += 2 if ord(text[index]) > 0xFFFF else 1
        index += 1
    return index


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for index, char in enumerate(text):
        if char == "\n":
            starts.append(index + 1)
    return starts


def apply_change(text: str, change: JSONObject) -> str:
    """Apply one ``TextDocumentContentChangeEvent`` to ``text``.

    Args:
        text: The document's text.
        change: ``{text}`` (full replacement) or ``{range: {start, end}, text}``.

    Returns:
        The new text.

    Raises:
        CoreError: ``invalid_request`` for a malformed change or a reversed range.
    """
    new_text = change.get("text")
    if not isinstance(new_text, str):
        raise _invalid("contentChanges[].text must be a string")
    rng = change.get("range")
    if rng is None:
        return new_text
    if not isinstance(rng, dict):
        raise _invalid("contentChanges[].range must be an object {start, end}")
    starts = _line_starts(text)
    start = _offset(text, rng.get("start"), starts)
    end = _offset(text, rng.get("end"), starts)
    if end < start:
        raise _invalid("contentChanges[].range ends before it starts")
    return text[:start] + new_text + text[end:]


@dataclass
class Document:
    """One open document."""

    uri: str
    language_id: str
    version: int
    text: str
    diagnostics: list[JSONValue] = field(default_factory=list)
    #: The server generation that was sent ``didOpen`` for this document (0: none yet).
    opened_in: int = 0

    def did_open(self) -> JSONObject:
        """``textDocument/didOpen`` params with the current version and text."""
        return {
            "textDocument": {
                "uri": self.uri,
                "languageId": self.language_id,
                "version": self.version,
                "text": self.text,
            }
        }


@dataclass(frozen=True)
class SyncPlan:
    """What one ``lsp.syncDocument`` sends.

    Attributes:
        method: ``"textDocument/didOpen"``, ``"textDocument/didChange"`` or None (nothing).
        params: The notification's params (None with ``method`` None).
        version: The document version after the sync.
        changed: False when the text stayed the same.
    """

    method: str | None
    params: JSONObject | None
    version: int
    changed: bool


class DocumentStore:
    """The open documents of one session (the session's lifetime, across generations)."""

    def __init__(self) -> None:
        self._documents: dict[str, Document] = {}

    def __contains__(self, uri: object) -> bool:
        return uri in self._documents

    def get(self, uri: str) -> Document | None:
        """The open document ``uri``, or None."""
        return self._documents.get(uri)

    def documents(self) -> list[Document]:
        """Every open document, in opening order."""
        return list(self._documents.values())

    def plan_sync(
        self,
        uri: str,
        language_id: str,
        text: str | None,
        content_changes: list[JSONObject] | None,
        sync_kind: int,
    ) -> SyncPlan:
        """Decide what a sync sends and apply it to the store.

        Args:
            uri: The document URI.
            language_id: Its LSP language id (used by ``didOpen``).
            text: The full new text, or None when ``content_changes`` is given.
            content_changes: LSP content changes, or None when ``text`` is given.
            sync_kind: The server's ``textDocumentSync.change`` (2 is incremental).

        Returns:
            The :class:`SyncPlan`; the store already holds the new version and text.

        Raises:
            CoreError: ``invalid_request`` when both or neither of ``text`` and
                ``content_changes`` are given, or a first sync has no ``text``.
        """
        if (text is None) == (content_changes is None):
            raise _invalid("lsp.syncDocument needs exactly one of text and contentChanges")
        document = self._documents.get(uri)
        if document is None:
            if text is None:
                raise _invalid("the first sync of a document needs its full text")
            document = Document(uri, language_id, 1, text)
            self._documents[uri] = document
            params: JSONObject = {
                "textDocument": {
                    "uri": uri,
                    "languageId": language_id,
                    "version": 1,
                    "text": text,
                }
            }
            return SyncPlan("textDocument/didOpen", params, 1, True)
        if text is not None:
            new_text = text
            changes: list[JSONValue] = [{"text": text}]
        else:
            assert content_changes is not None
            new_text = document.text
            for change in content_changes:
                new_text = apply_change(new_text, change)
            ranged = all("range" in change for change in content_changes)
            if sync_kind == SYNC_INCREMENTAL and ranged:
                changes = list(content_changes)
            else:
                changes = [{"text": new_text}]
        if new_text == document.text:
            return SyncPlan(None, None, document.version, False)
        document.version += 1
        document.text = new_text
        params = {
            "textDocument": {"uri": uri, "version": document.version},
            "contentChanges": changes,
        }
        return SyncPlan("textDocument/didChange", params, document.version, True)

    def close(self, uri: str) -> Document:
        """Forget ``uri`` and its diagnostics.

        Raises:
            CoreError: ``not_found`` when the document is not open.
        """
        document = self._documents.pop(uri, None)
        if document is None:
            raise CoreError("not_found", f"document is not open: {uri}")
        return document

    def accept_diagnostics(self, params: JSONValue) -> Document | None:
        """Store ``textDocument/publishDiagnostics`` params if they belong to an open document.

        Returns:
            The document they were stored for, or None when they were dropped (a document
            that is not open, a version that is not the current one, malformed params).
        """
        if not isinstance(params, dict):
            return None
        uri = params.get("uri")
        diagnostics = params.get("diagnostics")
        if not isinstance(uri, str) or not isinstance(diagnostics, list):
            return None
        document = self._documents.get(uri)
        if document is None:
            return None
        version = params.get("version")
        if version is not None and version != document.version:
            return None
        document.diagnostics = diagnostics
        return document

    def clear_diagnostics(self) -> list[Document]:
        """Clear every document's diagnostics; return the documents that had some."""
        cleared = [document for document in self._documents.values() if document.diagnostics]
        for document in cleared:
            document.diagnostics = []
        return cleared
