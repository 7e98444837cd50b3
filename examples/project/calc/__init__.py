"""calc: a small reverse-Polish-notation calculator, the demo project of ``supervisor run``.

``examples/demo.toml`` byte-compiles this package and runs its pytest suite as lanes jobs.
"""

from __future__ import annotations

from ._rpn import CalcError as CalcError, evaluate as evaluate, tokenize as tokenize

__all__ = ("CalcError", "evaluate", "tokenize")
