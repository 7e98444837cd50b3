"""Tests of supervisor._cli: the command line, serve and run."""

from __future__ import annotations
