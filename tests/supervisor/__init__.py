"""Tests of the supervisor package."""

from __future__ import annotations
