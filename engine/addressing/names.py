"""Address and queue names: the naming rules, fully qualified queue names and routing prefixes.

Seed 004 §4.1: names contain no spaces, none of ``& :: , ? >``, and the wildcard characters
(``#`` and ``*``, or the broker's own, ``engine.addressing.wildcards``) are reserved for wildcard
expressions: they stand as whole words in the name of an address a consumer, subscription or
queue is bound to (``news.#``), never inside a word and never where a message is sent.
§4.7: a fully qualified queue name is ``address::queue``. §4.13: the prefixes
``anycast://`` and ``multicast://`` restrict a send or a consumer to one routing type.
§4.9.2, §4.9.6.2, §4.11.1: destination parameters after ``?`` configure the queue created
for that destination (``orders?last-value-key=sym&non-destructive=true``).
"""

from __future__ import annotations

import functools

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple
from urllib.parse import parse_qsl

from ..errors import InvalidArgumentError, InvalidNameError
from ..model import RoutingType
from .wildcards import DEFAULT_SYNTAX, WildcardSyntax

FQQN_SEPARATOR = "::"
RING_PREFIX = "$.artemis.internal.retroactive."  # + address: a retroactive address's ring
MULTICAST_PREFIX = "multicast://"
PREFIXES = {"anycast://": RoutingType.ANYCAST, MULTICAST_PREFIX: RoutingType.MULTICAST}
FORBIDDEN = ("&", "::", ",", "?", ">")
RESERVED = ("#", "*")  # wildcard characters: in names only as wildcard words
MAX_NAME = 255


def check_name(name: str, syntax: WildcardSyntax = DEFAULT_SYNTAX, wildcards: bool = False
               ) -> str:
    """Return ``name`` if it is a valid address or queue name.

    Args:
        syntax: the broker's wildcard characters; its delimiter is allowed even if it is one
            of the forbidden characters (the seed's example configures ``,``).
        wildcards: whether the name may be a wildcard expression (its any-words and
            single-word characters as whole words: ``news.#``, ``news.*.sport``), as the
            address of a consumer, a subscription or a queue may.

    Raises:
        InvalidNameError: empty, too long (over 255 characters), whitespace, a forbidden
            character, or a wildcard character inside a word or where none may be (Artemis
            addressing §4.1).
    """
    if not isinstance(name, str) or not name:
        raise InvalidNameError(repr(name), "a name is a non-empty string")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidNameError(repr(name), "not valid Unicode (a lone surrogate)") from None
    if len(name) > MAX_NAME:
        raise InvalidNameError(name, f"longer than {MAX_NAME} characters")
    if any(ch.isspace() for ch in name):
        raise InvalidNameError(name, "names contain no spaces")
    for bad in FORBIDDEN:
        if bad in name and bad != syntax.delimiter:
            raise InvalidNameError(name, f"{bad!r} is not allowed")
    wild = (syntax.any_words, syntax.single_word)
    for ch in set(RESERVED + wild):
        if ch not in name:
            continue
        if not wildcards or ch not in wild:
            raise InvalidNameError(name, f"{ch!r} is reserved for wildcard expressions, "
                                         f"which name only what consumers and queues bind to")
        if any(ch in word and word != ch for word in name.split(syntax.delimiter)):
            raise InvalidNameError(name, f"{ch!r} stands for a whole word between "
                                         f"{syntax.delimiter!r} delimiters")
    return name


# destination parameters (Artemis queue attributes) -> the ``QueueConfig`` field and its kind
PARAMETERS = {"last-value-key": ("last_value_key", str), "last-value": ("last_value", bool),
              "non-destructive": ("non_destructive", bool), "exclusive": ("exclusive", bool),
              "max-consumers": ("max_consumers", int), "ring-size": ("ring_size", int)}


@dataclass(frozen=True)
class Destination:
    """A parsed destination: the address, an optional queue (FQQN), an optional routing type
    (from a prefix), and the queue settings its parameters give (``QueueConfig`` field ->
    value), for a queue created for it."""

    address: str
    queue: Optional[str] = None
    routing_type: Optional[RoutingType] = None
    params: Tuple[Tuple[str, Any], ...] = ()

    def queue_settings(self) -> Dict[str, Any]:
        """The ``QueueConfig`` fields the parameters set."""
        return dict(self.params)


def parse_parameters(text: str, query: str) -> Tuple[Tuple[str, Any], ...]:
    """``last-value-key=k&non-destructive=true`` as ``QueueConfig`` fields and values.

    Raises:
        InvalidArgumentError: not ``key=value`` pairs, an unknown key, a key twice, a value
            of the wrong kind (booleans are ``true``/``false``, numbers decimal).
    """
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise InvalidArgumentError("destination", f"{text!r}: the part after '?' is not "
                                   f"key=value pairs joined by '&'") from None
    out: Dict[str, Any] = {}
    for key, raw in pairs:
        if key not in PARAMETERS:
            raise InvalidArgumentError("destination", f"{text!r}: unknown parameter {key!r} "
                                       f"(known: {', '.join(sorted(PARAMETERS))})")
        field, kind = PARAMETERS[key]
        if field in out:
            raise InvalidArgumentError("destination", f"{text!r}: {key!r} given twice")
        out[field] = _value(text, key, raw, kind)
    return tuple(out.items())


def _value(text: str, key: str, raw: str, kind: type) -> Any:
    if kind is bool:
        if raw.lower() not in ("true", "false"):
            raise InvalidArgumentError("destination", f"{text!r}: {key} is true or false, "
                                       f"not {raw!r}")
        return raw.lower() == "true"
    if kind is int:
        try:
            value = int(raw, 10)
        except ValueError:
            value = -2
        if not -1 <= value < 1 << 63:
            raise InvalidArgumentError("destination", f"{text!r}: {key} is -1 (no limit) or "
                                       f"a whole number >= 0, not {raw!r}")
        return value
    if not raw:
        raise InvalidArgumentError("destination", f"{text!r}: {key} needs a value")
    return raw


def queue_reference(text: str, syntax: WildcardSyntax = DEFAULT_SYNTAX
                    ) -> Tuple[Optional[str], str]:
    """The queue ``text`` names for management, consumers and browsers: ``queue``,
    ``address::queue`` (Artemis addressing §4.7: the queue must be on that address) or ``::queue``
    (no address given: the queue of that name, as the Artemis CLI's ``--queue ::name``).

    Returns:
        ``(address or None, queue name)``.

    Raises:
        InvalidNameError: a part breaks the naming rules.
    """
    if isinstance(text, str) and text.startswith(FQQN_SEPARATOR):
        return None, check_name(text[len(FQQN_SEPARATOR):], syntax, True)
    dest = parse_destination(text, syntax)
    if dest.params:
        raise InvalidArgumentError("queue", f"{text!r}: parameters configure a queue created "
                                   f"for a consumer or a send, not one named here")
    return (dest.address, dest.queue) if dest.queue is not None else (None, dest.address)


def parse_destination(text: str, syntax: WildcardSyntax = DEFAULT_SYNTAX) -> Destination:
    """Parse ``[anycast://|multicast://]address[::queue][?key=value&...]``; the address may be
    a wildcard expression in ``syntax`` (a consumer's; a send refuses it). The last 1,024
    destinations parsed are remembered (a ``Destination`` is immutable): an application sends
    to a few names over and over.

    Raises:
        InvalidNameError: a part breaks the naming rules.
        InvalidArgumentError: bad destination parameters (``parse_parameters``).
    """
    if type(text) is str:
        return _parse_remembered(text, syntax)
    return _parse(text, syntax)  # refused with the naming rules' own error


@functools.lru_cache(maxsize=1024)
def _parse_remembered(text: str, syntax: WildcardSyntax) -> Destination:
    return _parse(text, syntax)  # errors are raised each time, never remembered


def _parse(text: str, syntax: WildcardSyntax) -> Destination:
    params: Tuple[Tuple[str, Any], ...] = ()
    if isinstance(text, str) and "?" in text:
        whole = text
        text, _q, query = text.partition("?")
        params = parse_parameters(whole, query)
    routing: Optional[RoutingType] = None
    for prefix, rt in PREFIXES.items():
        if isinstance(text, str) and text.startswith(prefix):
            routing, text = rt, text[len(prefix):]
            break
    if isinstance(text, str) and FQQN_SEPARATOR in text:
        address, _sep, queue = text.partition(FQQN_SEPARATOR)
        return Destination(check_name(address, syntax, True), check_name(queue, syntax, True),
                           routing, params)
    return Destination(check_name(text, syntax, True), None, routing, params)
