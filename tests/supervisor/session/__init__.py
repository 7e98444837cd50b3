"""Tests of supervisor._session: the session skeleton every kind stands on."""

from __future__ import annotations
