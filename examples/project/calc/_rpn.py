"""Reverse Polish notation: ``"2 3 + 4 *"`` is ``(2 + 3) * 4``.

Numbers are Python ``Fraction`` values so that ``1 3 /`` stays exact.
"""

from __future__ import annotations

import operator
from fractions import Fraction
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ("CalcError", "evaluate", "tokenize")

_OPERATORS: Final[dict[str, Callable[[Fraction, Fraction], Fraction]]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
}


class CalcError(ValueError):
    """The expression is malformed: an unknown token, a missing operand, or leftovers."""


def tokenize(expression: str) -> list[str]:
    """Split an expression on whitespace.

    Args:
        expression: e.g. ``"2 3 +"``.

    Returns:
        The tokens, e.g. ``["2", "3", "+"]``.
    """
    return expression.split()


def evaluate(expression: str) -> Fraction:
    """Evaluate a reverse-Polish expression.

    Args:
        expression: numbers (integers, decimals or ``a/b`` fractions) and operators
            ``+ - * /`` separated by whitespace.

    Returns:
        The exact value.

    Raises:
        CalcError: unknown token, too few operands, division by zero, or not exactly one
            value left at the end.
    """
    stack: list[Fraction] = []
    for token in tokenize(expression):
        op = _OPERATORS.get(token)
        if op is None:
            try:
                stack.append(Fraction(token))
            except (ValueError, ZeroDivisionError):
                raise CalcError(f"unknown token {token!r}") from None
            continue
        if len(stack) < 2:
            raise CalcError(f"operator {token!r} needs two operands")
        right = stack.pop()
        left = stack.pop()
        try:
            stack.append(op(left, right))
        except ZeroDivisionError:
            raise CalcError("division by zero") from None
    if len(stack) != 1:
        raise CalcError(f"expected one value at the end, got {len(stack)}")
    return stack[0]
