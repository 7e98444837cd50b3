"""The calc suite that ``examples/demo.toml`` runs as its ``test`` job."""

from __future__ import annotations

from fractions import Fraction

import pytest
from calc import CalcError, evaluate, tokenize


def test_tokenize_splits_on_any_whitespace() -> None:
    assert tokenize(" 2\t3\n+ ") == ["2", "3", "+"]


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("2 3 +", Fraction(5)),
        ("2 3 + 4 *", Fraction(20)),
        ("10 4 -", Fraction(6)),
        ("1 3 /", Fraction(1, 3)),
        ("1/2 0.25 +", Fraction(3, 4)),
        ("-7", Fraction(-7)),
    ],
)
def test_evaluate(expression: str, value: Fraction) -> None:
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("2 x +", "unknown token 'x'"),
        ("2 +", "needs two operands"),
        ("1 0 /", "division by zero"),
        ("1 2", "expected one value"),
        ("", "expected one value"),
    ],
)
def test_evaluate_rejects(expression: str, message: str) -> None:
    with pytest.raises(CalcError, match=message):
        evaluate(expression)
