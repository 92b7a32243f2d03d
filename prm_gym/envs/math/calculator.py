"""A safe arithmetic evaluator for agent-written expressions (never ``eval``/``exec``).

The expression is parsed with :mod:`ast` and only numbers, ``+ - * / // % **``, parentheses,
the constants ``pi`` and ``e`` and a few functions are evaluated.

Every operation is bounded *before* it runs, so a call always ends, in a result or a
:class:`ToolError`, within :data:`DEADLINE_S` of CPU time whatever the agent writes (a huge
integer power holds CPython's GIL, so a thread deadline could not stop it once started):

* the text is at most :data:`MAX_EXPRESSION_CHARS` characters, which bounds every literal and the
  number of operations;
* every value, literal or intermediate, is at most :data:`MAX_MAGNITUDE` in absolute value;
* ``a ** b`` is refused before it is computed when ``|b| > MAX_EXPONENT`` or when the integer
  result would have more than :data:`MAX_RESULT_BITS` bits;
* ``round(x, n)`` takes an integer ``n`` with ``|n| <= MAX_ROUND_DIGITS`` (``round(5, -10**8)``
  would compute ``10**(10**8)``);
* shifts, bitwise operators, comparisons, names other than ``pi``/``e`` and calls other than the
  listed functions are not evaluated at all.

With those bounds no single operation touches an integer of more than a few thousand bits, and
the measured worst case is far below the deadline (docs/reliability.md).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from prm_gym.core.errors import ToolError

MAX_EXPRESSION_CHARS = 500
MAX_MAGNITUDE = 1e100
MAX_EXPONENT = 1000
#: An integer power whose result would need more bits than this is refused before it runs
#: (``MAX_MAGNITUDE`` needs 333; the margin keeps the estimate conservative).
MAX_RESULT_BITS = 400
#: ``round(x, n)`` accepts ``|n|`` up to this (a float has no digits past 10**-324).
MAX_ROUND_DIGITS = 400
#: The stated bound on one call's CPU time (the property test asserts it on hostile expressions).
DEADLINE_S = 0.05

_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_FUNCS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "floor": math.floor,
    "ceil": math.ceil,
    "log": math.log,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
}
_CONSTS = {"pi": math.pi, "e": math.e}


def _check(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolError("only numbers are supported")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("the result is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise ToolError("the result is too large")
    return value


def _bound_pow(base: Any, exponent: Any) -> None:
    """Refuse ``base ** exponent`` before it runs when it could be slow or huge."""
    if abs(exponent) > MAX_EXPONENT:
        raise ToolError(f"exponents above {MAX_EXPONENT} are not supported")
    whole = isinstance(base, int) and isinstance(exponent, int) and exponent > 0
    if whole and (abs(base).bit_length() - 1) * exponent > MAX_RESULT_BITS:  # 2**k has k+1 bits
        raise ToolError("the result is too large")


def _bound_call(name: str, args: list[Any]) -> None:
    """Refuse a function call before it runs when an argument would make it slow."""
    if name == "round" and len(args) == 2:
        digits = args[1]
        if not isinstance(digits, int):
            raise ToolError("round: the number of digits must be an integer")
        if abs(digits) > MAX_ROUND_DIGITS:
            raise ToolError(f"round: at most {MAX_ROUND_DIGITS} digits either side of the point")


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return _check(node.value)
    if isinstance(node, ast.Name) and node.id in _CONSTS:
        return _CONSTS[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        val = _eval(node.operand)
        return val if isinstance(node.op, ast.UAdd) else -val
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            _bound_pow(left, right)
        try:
            return _check(_BINOPS[type(node.op)](left, right))
        except ZeroDivisionError:
            raise ToolError("division by zero") from None
        except OverflowError:
            raise ToolError("the result is too large") from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
        if node.keywords:
            raise ToolError("keyword arguments are not supported")
        args = [_eval(a) for a in node.args]
        _bound_call(node.func.id, args)
        try:
            return _check(_FUNCS[node.func.id](*args))
        except ZeroDivisionError:  # log(1, 1)
            raise ToolError(f"{node.func.id}: division by zero") from None
        except (ValueError, TypeError, OverflowError) as exc:
            raise ToolError(f"{node.func.id}: {exc}") from None
    raise ToolError(f"unsupported syntax: {type(node).__name__}")


def format_number(value: float | int) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.12g}"
    return str(value)


def evaluate(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result as text.

    Every call ends within :data:`DEADLINE_S` of CPU time (see the module docstring).

    Raises:
        ToolError: the expression is too long, malformed, unsupported or out of range.
    """
    if not isinstance(expression, str) or not expression.strip():
        raise ToolError("give a non-empty expression such as '12 * (3 + 4)'")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    text = expression.replace("^", "**").replace("×", "*").replace("÷", "/")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ToolError(f"cannot parse the expression {expression[:80]!r}") from None
    try:
        return format_number(_eval(tree))
    except RecursionError:
        raise ToolError("the expression is nested too deeply") from None
