"""Tests of supervisor._terminal: PTY terminals, pure and against programs."""

from __future__ import annotations
