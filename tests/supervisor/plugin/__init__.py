"""Tests of supervisor._plugin: plugin-owned sessions and the relay."""

from __future__ import annotations
