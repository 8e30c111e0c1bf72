"""Address and queue names: the naming rules, fully qualified queue names and routing prefixes.

Seed 004 §4.1: names contain no spaces, none of ``& :: , ? >``, and not the wildcard characters
``#`` and ``*``. §4.7: a fully qualified queue name is ``address::queue``. §4.13: the prefixes
``anycast://`` and ``multicast://`` restrict a send or a consumer to one routing type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from engine.errors import InvalidNameError
from engine.model import RoutingType

FQQN_SEPARATOR = "::"
PREFIXES = {"anycast://": RoutingType.ANYCAST, "multicast://": RoutingType.MULTICAST}
FORBIDDEN = ("&", "::", ",", "?", ">", "#", "*")
MAX_NAME = 255


def check_name(name: str) -> str:
    """Return ``name`` if it is a valid address or queue name.

    Raises:
        InvalidNameError: empty, too long (over 255 characters), whitespace, or a forbidden
            character (seed 004 §4.1).
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
        if bad in name:
            raise InvalidNameError(name, f"{bad!r} is not allowed")
    return name


@dataclass(frozen=True)
class Destination:
    """A parsed destination: the address, an optional queue (FQQN), an optional routing type
    (from a prefix)."""

    address: str
    queue: Optional[str] = None
    routing_type: Optional[RoutingType] = None


def queue_reference(text: str) -> Tuple[Optional[str], str]:
    """The queue ``text`` names for management, consumers and browsers: ``queue``,
    ``address::queue`` (seed 004 §4.7: the queue must be on that address) or ``::queue``
    (no address given: the queue of that name, as the Artemis CLI's ``--queue ::name``).

    Returns:
        ``(address or None, queue name)``.

    Raises:
        InvalidNameError: a part breaks the naming rules.
    """
    if isinstance(text, str) and text.startswith(FQQN_SEPARATOR):
        return None, check_name(text[len(FQQN_SEPARATOR):])
    dest = parse_destination(text)
    return (dest.address, dest.queue) if dest.queue is not None else (None, dest.address)


def parse_destination(text: str) -> Destination:
    """Parse ``[anycast://|multicast://]address[::queue]``.

    Raises:
        InvalidNameError: a part breaks the naming rules.
    """
    routing: Optional[RoutingType] = None
    for prefix, rt in PREFIXES.items():
        if isinstance(text, str) and text.startswith(prefix):
            routing, text = rt, text[len(prefix):]
            break
    if isinstance(text, str) and FQQN_SEPARATOR in text:
        address, _sep, queue = text.partition(FQQN_SEPARATOR)
        return Destination(check_name(address), check_name(queue), routing)
    return Destination(check_name(text), None, routing)
