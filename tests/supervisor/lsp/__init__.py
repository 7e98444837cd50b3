"""Tests of supervisor._lsp: language-server sessions, pure and against servers."""

from __future__ import annotations
