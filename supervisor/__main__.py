"""``python -m supervisor`` runs the command-line program."""

from __future__ import annotations

from ._cli._main import main

raise SystemExit(main())
