"""Checks of the plain values callers hand in, before anything is written.

Everything a record will hold is checked here at the moment it is journaled (or frozen into a
private copy then), so a record that cannot be read back can never be written: ints fit the
journal's msgpack encoding, strings are valid Unicode (no lone surrogates), property values are
of the types a JMS/AMQP message property can hold. Every failure is an ``InvalidArgumentError``.
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple, Type, TypeVar

import msgpack

from .errors import InvalidArgumentError

INT_MIN = -(1 << 63)          # msgpack's signed range
UINT_MAX = (1 << 64) - 1      # msgpack's unsigned range
TIME_MAX = (1 << 63) - 1      # ms since the epoch, and other counts that are never negative

E = TypeVar("E", bound=enum.Enum)


def check_int(field: str, value: Any, lo: int, hi: int) -> int:
    """``value`` if it is an ``int`` (not a bool) in ``lo..hi``, else InvalidArgumentError."""
    if value.__class__ is bool or not isinstance(value, int):
        raise InvalidArgumentError(field, f"an integer is needed, not {value!r}")
    if not lo <= value <= hi:
        raise InvalidArgumentError(field, f"{value} is not in {lo}..{hi}")
    return int(value)


def check_bool(field: str, value: Any) -> bool:
    """``value`` if it is a bool, else InvalidArgumentError."""
    if not isinstance(value, bool):
        raise InvalidArgumentError(field, f"True or False is needed, not {value!r}")
    return value


def check_choice(field: str, value: Any, choices: Type[E]) -> E:
    """``value`` as a member of the str enum ``choices`` (a member or its value), else
    InvalidArgumentError naming the values."""
    try:
        return choices(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(field, f"{value!r}: one of "
                                   f"{', '.join(str(c.value) for c in choices)}") from None


def nesting_depth(root: Any, children: Callable[[Any], Iterable[Any]], limit: int) -> int:
    """How deep ``root`` nests (1: it has no children), walked with a list, not the stack, so
    any depth is measured safely; counting stops once past ``limit``. For input that is
    refused past a depth (filters, configuration files) before a recursive step reads it."""
    deepest = 0
    stack = [(root, 1)]
    while stack and deepest <= limit:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children(node))
    return deepest


MAX_SETTING_CHARS = 65536
"""The longest text a configuration value may be (a last-value key, a default one), in
characters: configuration records stay far below a journal record's size (16 MiB by default),
so a value is refused here, typed, before anything is written."""


def check_text(field: str, value: Any, optional: bool = False,
               max_chars: Optional[int] = None) -> Optional[str]:
    """``value`` if it is a str that encodes as UTF-8 (``None`` too when ``optional``), of at
    most ``max_chars`` characters when given.

    Raises:
        InvalidArgumentError: not a str, not valid Unicode, or too long.
    """
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError(field, f"a string is needed, not {value!r:.80}")
    if max_chars is not None and len(value) > max_chars:
        raise InvalidArgumentError(field, f"{len(value):,} characters; at most {max_chars:,} "
                                          f"are accepted")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(field, "the string is not valid Unicode "
                                          "(a lone surrogate)") from None
    return str(value)


def check_body(value: Any) -> bytes:
    """The body as bytes: bytes-like, or a str encoded as UTF-8."""
    if isinstance(value, str):
        return check_text("body", value).encode("utf-8")  # type: ignore[union-attr]
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError("body", f"bytes or str is needed, not "
                                           f"{type(value).__name__}")
    return bytes(value)


_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})
_STR = frozenset({str})


def _plain(value: Any) -> bool:
    """Whether ``value`` is a dict of str keys and plain values (one C-speed test)."""
    return value.__class__ is dict and set(map(type, value)) <= _STR and \
        set(map(type, value.values())) <= _PLAIN


def packed_properties(value: Any) -> Tuple[Dict[str, Any], int]:
    """``check_properties``, and the size in bytes of the map as msgpack packs it. The common
    case (a plain dict of plain values) is checked by packing it once: msgpack refuses lone
    surrogates and ints outside its range; anything else takes the entry-by-entry path, which
    names what is wrong."""
    if _plain(value):
        try:
            return dict(value), len(msgpack.packb(value, use_bin_type=True))
        except (ValueError, OverflowError, TypeError):
            pass  # the entry-by-entry path says which entry
    checked = _check_each(value)
    return checked, len(msgpack.packb(checked, use_bin_type=True))


def check_properties(value: Any, deep: bool = True) -> Dict[str, Any]:
    """A private copy of a property map: str keys; values None, bool, int (msgpack range),
    float, str or bytes (the types of JMS/AMQP application properties). ``deep=False`` checks
    the types only (a message being built); strings and int ranges are checked at the send."""
    if not deep and _plain(value):
        return dict(value)
    return packed_properties(value)[0]


def _check_each(value: Any) -> Dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidArgumentError("properties", f"a dict is needed, not "
                                                 f"{type(value).__name__}")
    out: Dict[str, Any] = {}
    for key, item in value.items():
        check_text("property name", key)
        where = f"properties[{key!r}]"
        if item is None or isinstance(item, (bool, float)):
            out[key] = item
        elif isinstance(item, int):
            out[key] = check_int(where, item, INT_MIN, UINT_MAX)
        elif isinstance(item, str):
            out[key] = check_text(where, item)
        elif isinstance(item, (bytes, bytearray, memoryview)):
            out[key] = bytes(item)
        else:
            raise InvalidArgumentError(where, f"values are str, int, float, bool, bytes or "
                                              f"None, not {type(item).__name__}")
    return out


def check_timeout(value: Any) -> Optional[float]:
    """A wait in seconds: ``None`` (forever) or a number >= 0 (not NaN)."""
    if value is None:
        return None
    if value.__class__ is bool or not isinstance(value, (int, float)) or not value >= 0:
        raise InvalidArgumentError("timeout", f"None or seconds >= 0, not {value!r}")
    return float(value)
