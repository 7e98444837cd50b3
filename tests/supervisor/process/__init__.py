"""Tests of supervisor._process: marker, /proc, spawn, trees, reaper, process.run."""

from __future__ import annotations
