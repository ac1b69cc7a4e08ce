"""A tiny, safe expression language for computed patch values.

Rules are data written by many hands, so their expressions are parsed with ``ast`` and only a
whitelist of nodes is evaluated: no attribute access, no subscripts, no comprehensions, no calls
but the helpers below. Names resolve through a ``Scope`` (captures, then facts, then config).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import regex


class Missing(Exception):
    """A name the expression needs is in neither the log nor the config."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class ExprError(Exception):
    pass


_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def _pow2_at_least(n: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1.0, float(n)))))


def _ceil_div(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def _gcd(a: int, b: int) -> int:
    return math.gcd(int(a), int(b))


def _lcm(a: int, b: int) -> int:
    return math.lcm(int(a), int(b))


def _upper(s: object) -> str:
    return str(s).upper()


_FUNCS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "int": int,
    "float": float,
    "str": str,
    "len": len,
    "round": round,
    "ceil_div": _ceil_div,
    "pow2_at_least": _pow2_at_least,
    "gcd": _gcd,
    "lcm": _lcm,
    "upper": _upper,
}


@dataclass
class Scope:
    captures: Mapping[str, Any] = field(default_factory=dict)
    facts: Mapping[str, Any] = field(default_factory=dict)
    config: Any = None  # a ConfigView (patches.py) or None

    def lookup(self, name: str) -> Any:
        for source in (self.captures, self.facts):
            if name in source:
                return _coerce(source[name])
        if self.config is not None:
            found = self.config.find_leaf(name)
            if found is not None:
                return found
        raise Missing(name)

    def has(self, name: str) -> bool:
        try:
            self.lookup(name)
        except Missing:
            return False
        return True

    def cfg(self, path: str, *default: Any) -> Any:
        if self.config is not None:
            value = self.config.get_path(path.split("."))
            if value is not None:
                return value
        if default:
            return default[0]
        raise Missing(path)


_NUMBER = regex.compile(r"[+-]?\d+")
_FLOAT = regex.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")


def _coerce(v: Any) -> Any:
    """Captured text that is a number behaves as one in arithmetic."""
    if isinstance(v, str):
        s = v.strip()
        if _NUMBER.fullmatch(s):
            return int(s)
        if _FLOAT.fullmatch(s):
            return float(s)
        if s in ("True", "true"):
            return True
        if s in ("False", "false"):
            return False
    return v


@lru_cache(maxsize=4096)
def _parse(source: str) -> ast.expr:
    """Parsed once per expression text: a library has a few hundred, and every finding of every
    log evaluates its rule's. The tree is only read, so sharing it is safe."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"cannot parse {source!r}: {exc.msg}") from None
    return tree.body


def holds(condition: str | None, scope: Scope) -> bool:
    """Whether a rule's `when:` holds: no condition holds; one that names a value the log does
    not state does not (the step or patch is left out). ExprError for one that cannot be
    evaluated (a string compared with a number), so the caller can say so."""
    if not condition:
        return True
    try:
        if "{" in condition or "}" in condition:
            return bool(render_template("{" + condition + "}", scope))
        return bool(evaluate(condition.strip(), scope))  # what the template would do, unwrapped
    except Missing:
        return False
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise ExprError(str(exc)) from exc


def parse_expression(source: str) -> None:
    """Raise ExprError when `source` is not an expression (a rule's `when:` or `valid:`)."""
    _parse(source)


def evaluate(source: str, scope: Scope) -> Any:
    try:
        return _eval(_parse(source), scope)
    except (OverflowError, RecursionError) as exc:
        # a number no log really prints (an OOM "asking" for 10^400 GiB): no value, not a crash
        raise ExprError(f"{source!r}: a value is out of range ({exc})") from None


def _eval(node: ast.AST, scope: Scope) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        return scope.lookup(node.id)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval(node.left, scope), _eval(node.right, scope))
    if isinstance(node, ast.UnaryOp):
        val = _eval(node.operand, scope)
        if isinstance(node.op, ast.USub):
            return -val
        if isinstance(node.op, ast.Not):
            return not val
        if isinstance(node.op, ast.UAdd):
            return +val
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            result: Any = True
            for v in node.values:
                result = _eval(v, scope)
                if not result:
                    return result
            return result
        for v in node.values:
            result = _eval(v, scope)
            if result:
                return result
        return result
    if isinstance(node, ast.Compare):
        left = _eval(node.left, scope)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            if type(op) not in _CMPOPS:
                raise ExprError(f"operator {type(op).__name__} is not allowed")
            right = _eval(comp, scope)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, scope) if _eval(node.test, scope) else _eval(node.orelse, scope)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        name = node.func.id
        if name == "has":
            return all(scope.has(_literal_str(a)) for a in node.args)
        if name == "cfg":
            return scope.cfg(*[_eval(a, scope) for a in node.args])
        if name in _FUNCS:
            return _FUNCS[name](*[_eval(a, scope) for a in node.args])
        raise ExprError(f"function {name}() is not allowed")
    if isinstance(node, ast.List | ast.Tuple):
        return [_eval(e, scope) for e in node.elts]
    raise ExprError(f"{type(node).__name__} is not allowed in rule expressions")


@lru_cache(maxsize=4096)
def required_names(source: str) -> frozenset[str]:
    """The names `evaluate(source, ...)` looks up whatever their values: where one is missing,
    the expression cannot give a value (it raises Missing, or an error met before it). Operands
    evaluated only on some paths (an `if`'s branches, the `and`/`or` operands after the first,
    comparisons after the first, `has()`'s arguments) are not counted. A library's derived facts
    are ~200 expressions tried on every analysis; most need a fact the log lacks, and this lets
    them be skipped without evaluating them (ExprError when `source` is not an expression)."""
    out: set[str] = set()

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            if node.id not in ("True", "False", "None"):
                out.add(node.id)
        elif isinstance(node, ast.BinOp):
            walk(node.left)
            walk(node.right)
        elif isinstance(node, ast.UnaryOp):
            walk(node.operand)
        elif isinstance(node, ast.BoolOp):
            walk(node.values[0])
        elif isinstance(node, ast.Compare):
            walk(node.left)
            walk(node.comparators[0])
        elif isinstance(node, ast.IfExp):
            walk(node.test)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id != "has":
                for arg in node.args:
                    walk(arg)
        elif isinstance(node, ast.List | ast.Tuple):
            for e in node.elts:
                walk(e)

    walk(_parse(source))
    return frozenset(out)


def _literal_str(node: ast.AST) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    raise ExprError("has() takes string literals")


_BRACES = regex.compile(r"\{([^{}]+)\}")


def render_template(template: str, scope: Scope) -> Any:
    """``'{expr}'`` alone yields the typed value; braces inside text are interpolated."""
    whole = _BRACES.fullmatch(template.strip())
    if whole:
        return evaluate(whole.group(1), scope)
    return _BRACES.sub(lambda m: str(evaluate(m.group(1), scope)), template)


def names_in(template: str) -> set[str]:
    """The bare names an expression template refers to (for lint)."""
    out: set[str] = set()
    for m in _BRACES.finditer(template):
        try:
            tree = ast.parse(m.group(1).strip(), mode="eval")
        except SyntaxError:
            continue
        out.update(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in _FUNCS)
    out.discard("cfg")
    out.discard("has")
    return out
