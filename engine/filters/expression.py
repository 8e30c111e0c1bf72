"""Filter expressions: Artemis's filter language (the JMS selector grammar, a subset of SQL 92)
over message properties and headers, for queue filters and consumer selectors.

The text is parsed once, with lark (an LALR grammar, never ``eval``), into a tree of small
functions; ``Filter.matches(message)`` then costs one call per node. The semantics are the
JMS 1.1 specification's (§3.8.1), which Artemis follows:

- Identifiers name message properties, except Artemis's header identifiers ``AMQPriority``
  (0-9), ``AMQExpiration`` and ``AMQTimestamp`` (ms since the epoch), ``AMQDurable``
  (``'DURABLE'`` or ``'NON_DURABLE'``), ``AMQAddress`` (the address it was sent to),
  ``AMQGroupID`` (its ``_AMQ_GROUP_ID`` property, or ``JMSXGroupID``), ``AMQSize`` (body bytes)
  and ``AMQUserID`` (its message id; NULL in a queue filter, which runs before the id is
  given), and the JMS headers an Artemis JMS client translates to those: ``JMSPriority``,
  ``JMSTimestamp``, ``JMSExpiration``, ``JMSDeliveryMode`` (``'PERSISTENT'`` or
  ``'NON_PERSISTENT'``). A property name with characters an identifier cannot hold (a
  hyphen) is written ``hyphenated_props:name`` as in Artemis.
- An absent property is NULL; comparisons and arithmetic with NULL, or between a string and a
  number, are *unknown*; ``AND``, ``OR`` and ``NOT`` follow three-valued logic; a message
  matches only when the whole expression is true.
- Strings and booleans compare with ``=`` and ``<>`` only; integers and floats mix.
  ``BETWEEN``, ``IN`` (string literals), ``LIKE`` (``%`` any run, ``_`` one character,
  optional ``ESCAPE``), ``IS [NOT] NULL``, ``+ - * /``. Keywords are case-insensitive,
  identifiers are not.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any, Callable, Iterator, Optional, Tuple

from lark import Lark, Token, Transformer_NonRecursive, Tree, v_args
from lark.exceptions import LarkError, UnexpectedInput, VisitError

from ..errors import InvalidArgumentError
from ..values import nesting_depth

__all__ = ["Filter", "FilterSyntaxError", "MAX_FILTER_CHARS", "MAX_NESTING", "UnusableFilter",
           "parse_filter", "stored_filter"]

_log = logging.getLogger("mqstore.engine")

Value = Any  # str, int, float, bool or None (unknown)
Node = Callable[[Any], Value]

_GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr | and_expr (_OR and_expr)+ -> or_
?and_expr: not_expr | not_expr (_AND not_expr)+ -> and_
?not_expr: _NOT not_expr -> not_ | predicate
?predicate: sum
    | sum COMPARE sum -> compare
    | sum _BETWEEN sum _AND sum -> between
    | sum _NOT _BETWEEN sum _AND sum -> not_between
    | sum _IN "(" STRING ("," STRING)* ")" -> in_
    | sum _NOT _IN "(" STRING ("," STRING)* ")" -> not_in
    | sum _LIKE STRING [_ESCAPE STRING] -> like
    | sum _NOT _LIKE STRING [_ESCAPE STRING] -> not_like
    | sum _IS _NULL -> is_null
    | sum _IS _NOT _NULL -> is_not_null
?sum: product | product ((PLUS | MINUS) product)+ -> arith
?product: unary | unary (MUL unary)+ -> arith
?unary: atom | MINUS unary -> neg | PLUS unary -> pos
?atom: STRING -> string | NUMBER -> number | _TRUE -> true | _FALSE -> false
    | IDENT -> ident | HYPHENATED -> hyphenated | "(" or_expr ")"

COMPARE: "<>" | "<=" | ">=" | "=" | "<" | ">"
PLUS: "+"
MINUS: "-"
MUL: "*" | "/"
STRING: /'(?:[^']|'')*'/
NUMBER: /(?:0[xX][0-9a-fA-F]+|(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?)[lLfFdD]?/
HYPHENATED.3: /hyphenated_props:[^\s()=<>,']+/
_OR.2: /OR\b/i
_AND.2: /AND\b/i
_NOT.2: /NOT\b/i
_BETWEEN.2: /BETWEEN\b/i
_IN.2: /IN\b/i
_LIKE.2: /LIKE\b/i
_ESCAPE.2: /ESCAPE\b/i
_IS.2: /IS\b/i
_NULL.2: /NULL\b/i
_TRUE.2: /TRUE\b/i
_FALSE.2: /FALSE\b/i
IDENT: /[A-Za-z_$][A-Za-z0-9_$]*/
%ignore /\s+/
"""


class FilterSyntaxError(InvalidArgumentError):
    """A filter or selector that is not a valid Artemis filter expression; nothing was created
    or changed. Attributes: field ("filter" or "selector"), text, position (0-based offset of
    the first bad character, or ``None``)."""

    def __init__(self, field: str, text: str, why: str, position: Optional[int] = None) -> None:
        self.text = text
        self.position = position
        where = f" at character {position + 1}" if position is not None else ""
        shown = text if len(text) <= 120 else text[:100] + f"... ({len(text):,} characters)"
        super().__init__(field, f"{shown!r} is not an Artemis filter expression{where}: {why}")


def _is_number(v: Value) -> bool:
    return (v.__class__ is int or v.__class__ is float)


def _and(a: Value, b: Value) -> Value:
    if a is False or b is False:
        return False
    if a is True and b is True:
        return True
    return None


def _truth(v: Value) -> Value:
    """A boolean value, or unknown for anything else (a number or string as a condition)."""
    return v if v is True or v is False else None


def _compare(op: str, a: Value, b: Value) -> Value:
    if a is None or b is None:
        return None
    if _is_number(a) and _is_number(b):
        pass
    elif a.__class__ is b.__class__ and a.__class__ in (str, bool):
        if op not in ("=", "<>"):
            return None
    else:
        return None  # different kinds: unknown, as JMS says
    if op == "=":
        return a == b
    if op == "<>":
        return a != b
    if op == "<":
        return a < b
    if op == ">":
        return a > b
    if op == "<=":
        return a <= b
    return a >= b


def _arith(op: str, a: Value, b: Value) -> Value:
    if not (_is_number(a) and _is_number(b)):
        return None
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        return None  # Java would throw; the message does not match
    if a.__class__ is int and b.__class__ is int:
        q = abs(a) // abs(b)  # Java long division truncates toward zero
        return q if (a < 0) == (b < 0) else -q
    return a / b


def _like_regex(pattern: str, escape: Optional[str]) -> "re.Pattern[str]":
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if escape is not None and c == escape and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _unquote(token: str) -> str:
    return token[1:-1].replace("''", "'")


def _number(text: str) -> Value:
    t = text.rstrip("lLfFdD") if not text.lower().startswith("0x") else text.rstrip("lL")
    if t.lower().startswith("0x"):
        return int(t, 16)
    if any(c in t for c in ".eE") or text[-1] in "fFdD":
        return float(t)
    if len(t) > 1 and t.startswith("0"):
        return int(t, 8)  # Java octal literal
    return int(t)


def _header(name: str) -> Optional[Node]:
    """The reader of a header identifier, or ``None`` for a property name."""
    if name in ("AMQPriority", "JMSPriority"):
        return lambda m: m.priority
    if name in ("AMQExpiration", "JMSExpiration"):
        return lambda m: m.expiration
    if name in ("AMQTimestamp", "JMSTimestamp"):
        return lambda m: m.timestamp or None
    if name == "AMQDurable":
        return lambda m: "DURABLE" if m.durable else "NON_DURABLE"
    if name == "JMSDeliveryMode":
        return lambda m: "PERSISTENT" if m.durable else "NON_PERSISTENT"
    if name == "AMQAddress":
        return lambda m: m.address or None
    if name == "AMQUserID":
        return lambda m: (getattr(m, "mid", None) or getattr(m, "message_id", 0)) or None
    if name == "AMQSize":
        return lambda m: m.size if hasattr(m, "size") else len(m.body)
    if name == "AMQGroupID":
        return lambda m: _group_id(m.properties)
    return None


def _group_id(props: Any) -> Value:
    got = props.get("_AMQ_GROUP_ID")
    return _plain(props.get("JMSXGroupID") if got is None else got)


def _plain(v: Value) -> Value:
    """A property value as the filter sees it: bytes and other kinds are unknown."""
    return v if v is None or v.__class__ in (str, int, float, bool) else None


def _property(name: str) -> Node:
    def read(m: Any) -> Value:
        return _plain(m.properties.get(name))
    return read


@v_args(inline=True)
class _Compiler(Transformer_NonRecursive):
    """Parse tree -> closure tree. Literal checks JMS makes at parse time raise ValueError."""

    def string(self, tok: Token) -> Node:
        value = _unquote(tok)
        return functools.partial(_const, value)

    def number(self, tok: Token) -> Node:
        return functools.partial(_const, _number(tok))

    def true(self) -> Node:
        return functools.partial(_const, True)

    def false(self) -> Node:
        return functools.partial(_const, False)

    def ident(self, tok: Token) -> Node:
        return _header(str(tok)) or _property(str(tok))

    def hyphenated(self, tok: Token) -> Node:
        return _property(str(tok)[len("hyphenated_props:"):])

    def neg(self, _sign: Token, a: Node) -> Node:
        return lambda m: _arith("-", 0, a(m))

    def pos(self, _sign: Token, a: Node) -> Node:
        return lambda m: _arith("+", 0, a(m))

    def arith(self, first: Node, *rest: Any) -> Node:
        """A chain ``a op b op c ...`` of one precedence level, evaluated left to right in one
        loop (not a nested closure per operator: a chain's length costs no stack depth)."""
        steps = [(str(rest[i]), rest[i + 1]) for i in range(0, len(rest), 2)]
        if len(steps) == 1:
            o, b = steps[0]
            return lambda m: _arith(o, first(m), b(m))

        def chain(m: Any) -> Value:
            v = first(m)
            for o, node in steps:
                v = _arith(o, v, node(m))
            return v
        return chain

    def compare(self, a: Node, op: Token, b: Node) -> Node:
        o = str(op)
        if o not in ("=", "<>"):
            for side in (a, b):
                const = _literal(side)
                if const is not _NOT_CONST and not _is_number(const):
                    raise ValueError(f"{const!r} cannot be compared with {o}: strings and "
                                     f"booleans compare with = and <> only")
        return lambda m: _compare(o, a(m), b(m))

    def between(self, a: Node, lo: Node, hi: Node) -> Node:
        return lambda m: _and(_compare(">=", a(m), lo(m)), _compare("<=", a(m), hi(m)))

    def not_between(self, a: Node, lo: Node, hi: Node) -> Node:
        inner = self.between(a, lo, hi)
        return lambda m: _not(inner(m))

    def in_(self, a: Node, *items: Token) -> Node:
        values = frozenset(_unquote(t) for t in items)

        def test(m: Any) -> Value:
            v = a(m)
            return None if v.__class__ is not str else v in values
        return test

    def not_in(self, a: Node, *items: Token) -> Node:
        inner = self.in_(a, *items)
        return lambda m: _not(inner(m))

    def like(self, a: Node, pattern: Token, escape: Optional[Token] = None) -> Node:
        esc = None if escape is None else _unquote(escape)
        if esc is not None and len(esc) != 1:
            raise ValueError(f"ESCAPE takes one character, not {esc!r}")
        regex = _like_regex(_unquote(pattern), esc)

        def test(m: Any) -> Value:
            v = a(m)
            return None if v.__class__ is not str else regex.fullmatch(v) is not None
        return test

    def not_like(self, a: Node, pattern: Token, escape: Optional[Token] = None) -> Node:
        inner = self.like(a, pattern, escape)
        return lambda m: _not(inner(m))

    def is_null(self, a: Node) -> Node:
        return lambda m: a(m) is None

    def is_not_null(self, a: Node) -> Node:
        return lambda m: a(m) is not None

    def not_(self, a: Node) -> Node:
        return lambda m: _not(_truth(a(m)))

    def and_(self, *terms: Node) -> Node:
        return _junction(terms, False)

    def or_(self, *terms: Node) -> Node:
        return _junction(terms, True)


def _junction(terms: Tuple[Node, ...], decisive: bool) -> Node:
    """``a AND b AND ...`` (``decisive`` False) or ``a OR b OR ...`` (True) in one loop, in
    three-valued logic: ``decisive`` as soon as a term is, else unknown if one is, else the
    other truth value. One loop whatever the chain's length: no stack depth per term."""
    def test(m: Any) -> Value:
        result: Value = not decisive
        for term in terms:
            v = _truth(term(m))
            if v is decisive:
                return decisive
            if v is None:
                result = None
        return result
    return test


_NOT_CONST = object()


def _const(value: Value, _m: Any) -> Value:
    return value


def _literal(node: Node) -> Value:
    """The constant a node stands for, or ``_NOT_CONST``."""
    if isinstance(node, functools.partial) and node.func is _const:
        return node.args[0]
    return _NOT_CONST


def _not(v: Value) -> Value:
    return None if v is None else not v


_PARSER = Lark(_GRAMMAR, parser="lalr", lexer="basic", maybe_placeholders=True)


class Filter:
    """A compiled filter expression.

    Attributes:
        text: the expression as given.
    """

    __slots__ = ("text", "_test")

    def __init__(self, text: str, test: Node) -> None:
        self.text = text
        self._test = test

    def matches(self, message: Any) -> bool:
        """Whether ``message`` (a ``Message``, a received one, or a stored one: anything with
        ``properties``, ``priority``, ``expiration``, ``timestamp``, ``durable`` and
        ``address``) satisfies the expression: true, not false or unknown."""
        return _truth(self._test(message)) is True

    def __repr__(self) -> str:
        return f"Filter({self.text!r})"


MAX_NESTING = 64
"""Levels a filter may nest (parentheses, ``NOT``, signs and the operators inside one another);
a chain of ``AND``, ``OR``, ``+`` or ``*`` of any length is one level. A deeper expression is
refused with ``FilterSyntaxError`` wherever it is given, so a filter that was accepted and
journaled compiles again at every open, however deep the stack it is compiled from."""

MAX_FILTER_CHARS = 65536
"""The longest filter or selector text accepted, in characters (its parse costs time in
proportion; Artemis has no such bound, but a filter of this size is no hand-written one)."""


@functools.lru_cache(maxsize=256)
def _compiled(text: str) -> Tuple[Optional[Node], str, Optional[int]]:
    if len(text) > MAX_FILTER_CHARS:
        return None, (f"it is {len(text):,} characters long; a filter may have at most "
                      f"{MAX_FILTER_CHARS:,}"), None
    try:
        tree = _PARSER.parse(text)
        if nesting_depth(tree, _subtrees, MAX_NESTING) > MAX_NESTING:
            return None, (f"it nests deeper than {MAX_NESTING} levels (parentheses, NOT and "
                          f"operators inside one another); a chain of AND or OR terms counts "
                          f"as one level"), None
        return _Compiler().transform(tree), "", None
    except UnexpectedInput as exc:
        return None, _unexpected(exc), exc.pos_in_stream
    except VisitError as exc:
        return None, str(exc.orig_exc), None
    except LarkError as exc:
        return None, str(exc).splitlines()[0], None


def _subtrees(tree: Tree) -> Iterator[Tree]:
    return (c for c in tree.children if isinstance(c, Tree))


def _unexpected(exc: UnexpectedInput) -> str:
    token = getattr(exc, "token", None)
    if token is not None and getattr(token, "type", "") == "$END":
        return "it ends too early"
    if token is not None:
        return f"unexpected {str(token)!r}"
    char = getattr(exc, "char", None)
    return f"unexpected {char!r}" if char is not None else "unexpected input"


class UnusableFilter(Filter):
    """A journaled queue filter that does not compile at open (written by a version that
    accepted what this one refuses, or damaged): it matches no message, so the queue is routed
    nothing new, while what it holds stays consumable (move it with ``QueueControl`` and
    re-create the queue). The open goes on; ``RecoveryReport.warnings`` names the queue.

    Attributes:
        text: the expression as journaled. why: the ``FilterSyntaxError`` text.
    """

    __slots__ = ("why",)

    def __init__(self, text: str, why: str) -> None:
        super().__init__(text, _matches_nothing)  # never true: nothing enters the queue
        self.why = why


def _matches_nothing(_m: Any) -> Value:
    return False


def warn_unusable_filter(report: Any, queue: str, flt: UnusableFilter) -> None:
    """Log at WARNING, and add to ``report.warnings`` (a ``RecoveryReport``), that ``queue``'s
    journaled filter is unusable and what that means for it."""
    text = (f"queue {queue!r}: its journaled filter does not compile in this version, so the "
            f"queue is routed no new message until it is re-created ({flt.why})")
    report.warnings.append(text)
    _log.warning("%s", text)


def stored_filter(text: Optional[str]) -> Optional[Filter]:
    """A journaled queue filter, compiled as ``parse_filter`` compiles a new one, but never
    raising: one that does not compile is an ``UnusableFilter`` (recovery must open a store
    whatever its records say, and refuse only damage it can locate)."""
    try:
        return parse_filter(text)
    except InvalidArgumentError as exc:
        return UnusableFilter(str(text), str(exc))


def parse_filter(text: Optional[str], field: str = "filter") -> Optional[Filter]:
    """Compile ``text`` (Artemis filter syntax); ``None`` or blank text is no filter.

    Raises:
        FilterSyntaxError: not a valid expression (``field`` names the argument, "filter"
            for a queue's, "selector" for a consumer's or browser's).
        InvalidArgumentError: ``text`` not a str.
    """
    if text is None:
        return None
    if not isinstance(text, str):
        raise InvalidArgumentError(field, f"{text!r} is not a str")
    if not text.strip():
        return None
    test, why, pos = _compiled(text)
    if test is None:
        raise FilterSyntaxError(field, text, why, pos)
    return Filter(text, test)

