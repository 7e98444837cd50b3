"""Tests of supervisor._core: the Core, its envelope API and job lanes."""

from __future__ import annotations
