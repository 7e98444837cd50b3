"""Tests of supervisor._dap: debug sessions, pure and against adapters."""

from __future__ import annotations
