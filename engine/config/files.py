"""Broker configuration files: Artemis ``broker.xml`` and TOML (``Broker.open(config=PATH)``,
``mqstore config check PATH``).

Both say the same things in the same words (Artemis's element names):

- ``addresses``: each address with its ``anycast`` and ``multicast`` queues (``name``,
  ``max-consumers``, ``exclusive``, ``last-value``, ``last-value-key``, ``non-destructive``,
  ``ring-size``, ``durable``, ``filter``); created at open when missing, as Artemis deploys
  the addresses of its ``broker.xml`` at start (Artemis addressing §4.2-4.11);
- ``address-settings``: an entry per match pattern, each element an ``AddressSettings`` field
  (Artemis addressing §4.17; journaled at open when it differs from the stored one);
- ``wildcard-addresses`` (``delimiter``, ``any-words``, ``single-word``),
  ``global-max-size`` (bytes; Artemis's notation: ``100MB``, ``1GiB``, 1024-based) and
  ``persist-delivery-count-before-delivery`` (``Broker.open``'s argument of that name).

The TOML form::

    global-max-size = "1GiB"
    [wildcard-addresses]
    delimiter = "."
    [address-settings."ring.#"]
    default-ring-size = 3
    [addresses.myRing]
    anycast = [{ name = "myRing", ring-size = 3 }]

A file is read and checked whole before the store is touched: a bad value or an unknown
element is a ``ConfigError`` naming the file and where in it; what Artemis has and an embedded
store does not apply is listed in ``BrokerConfig.notes`` (logged at open), never silently
dropped.
"""

from __future__ import annotations

import logging
import re
import tomllib
from dataclasses import dataclass
from typing import (Any, Dict, Iterable, List, Mapping, Optional, Tuple, get_args,
                    get_type_hints)

from . import brokerxml
from ..errors import InvalidArgumentError, InvalidNameError, MqStoreError
from ..model import QueueConfig, RoutingType
from ..addressing.names import MULTICAST_PREFIX, PREFIXES, check_name
from .settings import (UNLIMITED, AddressFullPolicy, AddressSettings, check_global_max_size,
                       check_match, check_queue_config, checked_settings)
from ..values import nesting_depth
from ..addressing.wildcards import DEFAULT_SYNTAX, WildcardSyntax

log = logging.getLogger("mqstore.engine")

SETTING_ELEMENTS = brokerxml.SETTING_ELEMENTS
_TYPES = {name: next(t for t in get_args(hint) if t is not type(None))
          for name, hint in get_type_hints(AddressSettings).items()}
# matched against stripped text of at most _MAX_NUMBER characters, with one run of blanks:
# linear (two adjacent optional runs of blanks made "1" + 30,000 spaces + "x" take seconds)
_BYTES = re.compile(r"(\d+)[ \t]*(k|ki|m|mi|g|gi)?(b)?", re.IGNORECASE)
_MAX_NUMBER = 64
MAX_NESTING = 32
"""Levels a configuration file's values may nest (a broker.xml or TOML file needs under 10);
deeper is refused with ``ConfigError`` before any is used."""
_UNITS = {None: 1, "k": 1 << 10, "ki": 1 << 10, "m": 1 << 20, "mi": 1 << 20, "g": 1 << 30,
          "gi": 1 << 30}
# a queue's attribute -> (``QueueConfig`` field, kind)
QUEUE_FIELDS = {"max-consumers": ("max_consumers", int), "exclusive": ("exclusive", bool),
                "last-value": ("last_value", bool), "last-value-key": ("last_value_key", str),
                "non-destructive": ("non_destructive", bool), "ring-size": ("ring_size", int),
                "durable": ("durable", bool), "filter": ("filter", str)}


class ConfigError(InvalidArgumentError):
    """A configuration file that cannot be applied: unreadable, not well-formed, an unknown
    element, a bad value. Names the file and where in it; raised before the store is
    touched.

    Attributes:
        source: the file. where: the place in it (an element path or a TOML key path).
    """

    def __init__(self, source: str, where: str, why: str) -> None:
        self.source = source
        self.where = where
        super().__init__(f"configuration {source}", f"{where}: {why}" if where else why)


@dataclass(frozen=True)
class AddressConfig:
    """One configured address: its name, routing types and queues."""

    name: str
    routing_types: Tuple[RoutingType, ...]
    queues: Tuple[QueueConfig, ...]


@dataclass(frozen=True)
class BrokerConfig:
    """A configuration file, checked.

    Attributes:
        source: the file it came from. address_settings: entries by match pattern.
        addresses: the addresses and queues to have. wildcard_syntax: ``None`` when not set.
        global_max_size: bytes, ``None`` when not set. persist_delivery_count: Artemis's
            persist-delivery-count-before-delivery, ``None`` when not set. notes: what it
            says that mqstore does not apply (an element, where, why).
    """

    source: str
    address_settings: Dict[str, AddressSettings]
    addresses: Tuple[AddressConfig, ...]
    wildcard_syntax: Optional[WildcardSyntax]
    global_max_size: Optional[int]
    notes: Tuple[str, ...]
    persist_delivery_count: Optional[bool] = None


def load_config(path: str) -> BrokerConfig:
    """Read and check ``path``: TOML when it ends in ``.toml``, else ``broker.xml``.

    Raises:
        ConfigError: unreadable, malformed, or a value or element mqstore refuses.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, "", f"cannot be read: {exc}") from None
    if path.endswith(".toml"):
        return parse_toml(text, path)
    return parse_xml(text, path)


def parse_xml(text: str, source: str = "broker.xml") -> BrokerConfig:
    """A ``broker.xml`` (or a fragment of one, as the Artemis manual shows) checked
    (``engine.config.brokerxml``). Raises ConfigError."""
    try:
        raw, notes = brokerxml.parse(text)
    except brokerxml.XmlConfigError as exc:
        raise ConfigError(source, exc.where, exc.why) from None
    return _build(raw, notes, source)


def parse_toml(text: str, source: str = "mqstore.toml") -> BrokerConfig:
    """A TOML configuration checked (the module docstring shows its form). Raises
    ConfigError."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, "", f"not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise ConfigError(source, "", f"refused: values nest deeper than {MAX_NESTING} "
                          f"levels") from None
    return from_mapping(data, source)


def from_mapping(data: Mapping[str, Any], source: str = "configuration") -> BrokerConfig:
    """A configuration given as nested dicts and lists in the TOML form (the module
    docstring), checked. Raises ConfigError."""
    if not isinstance(data, Mapping):
        raise ConfigError(source, "", "a table of sections is needed")
    if nesting_depth(data, _members, MAX_NESTING) > MAX_NESTING:
        raise ConfigError(source, "", f"refused: values nest deeper than {MAX_NESTING} levels")
    known = ("global-max-size", "persist-delivery-count-before-delivery",
             "wildcard-addresses", "address-settings", "addresses")
    for key in data:
        if key not in known:
            raise ConfigError(source, str(key), f"unknown key (known: {', '.join(known)})")
    return _build(data, [], source)


def _members(value: Any) -> Iterable[Any]:
    """What a TOML table or array holds (nothing for a plain value)."""
    if isinstance(value, Mapping):
        return value.values()
    return value if isinstance(value, (list, tuple)) else ()


def _build(raw: Mapping[str, Any], notes: List[str], source: str) -> BrokerConfig:
    syntax = _syntax(raw.get("wildcard-addresses"), source)
    checked = syntax or DEFAULT_SYNTAX
    settings: Dict[str, AddressSettings] = {}
    for match, values in _table(raw, "address-settings", source).items():
        where = f"address-settings[{match!r}]"
        try:
            settings[check_match(match, checked)] = checked_settings(
                AddressSettings(**_setting_values(values, where, source)))
        except ConfigError:
            raise
        except (InvalidArgumentError, InvalidNameError) as exc:
            raise ConfigError(source, where, str(exc)) from None
    addresses = tuple(_address(name, entry, checked, source)
                      for name, entry in _table(raw, "addresses", source).items())
    gms = raw.get("global-max-size")
    pdc = raw.get("persist-delivery-count-before-delivery")
    for key, (value, where) in raw.get("prefixes", {}).items():
        ours = MULTICAST_PREFIX if key == "multicastPrefix" else \
            next(p for p, rt in PREFIXES.items() if rt == RoutingType.ANYCAST)
        if value != ours:
            raise ConfigError(source, where, f"{key}={value!r}: mqstore's routing prefixes "
                              f"are always {', '.join(PREFIXES)} (Artemis addressing §4.13)")
    if gms is not None:
        gms = _number(gms, int, "global-max-size", source, True)
        try:
            check_global_max_size(gms, "global-max-size")
        except InvalidArgumentError as exc:
            raise ConfigError(source, "global-max-size", str(exc)) from None
    return BrokerConfig(source, settings, addresses, syntax, gms,
                        tuple(notes), None if pdc is None else _bool(
                            pdc, "persist-delivery-count-before-delivery", source))


def _table(raw: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, Mapping):
        raise ConfigError(source, key, "a table of entries by name is needed")
    return value


def _syntax(values: Any, source: str) -> Optional[WildcardSyntax]:
    if values is None:
        return None
    if not isinstance(values, Mapping):
        raise ConfigError(source, "wildcard-addresses", "a table is needed")
    for key in ("enabled", "routing-enabled"):
        if key in values and not _bool(values[key], f"wildcard-addresses.{key}", source):
            raise ConfigError(source, f"wildcard-addresses.{key}", "mqstore always routes by "
                              "wildcard and matches settings by wildcard: turning it off is "
                              "not supported")
    unknown = set(values) - {"enabled", "routing-enabled", "delimiter", "any-words",
                             "single-word"}
    if unknown:
        raise ConfigError(source, "wildcard-addresses", f"unknown {sorted(unknown)}")
    try:
        return WildcardSyntax(values.get("delimiter", "."), values.get("any-words", "#"),
                              values.get("single-word", "*"))
    except InvalidArgumentError as exc:
        raise ConfigError(source, "wildcard-addresses", str(exc)) from None


def _setting_values(values: Any, where: str, source: str) -> Dict[str, Any]:
    if not isinstance(values, Mapping):
        raise ConfigError(source, where, "a table of settings is needed")
    out: Dict[str, Any] = {}
    for key, value in values.items():
        name = SETTING_ELEMENTS.get(key.replace("_", "-"))
        if name is None:
            raise ConfigError(source, f"{where}.{key}", f"unknown setting (known: "
                              f"{', '.join(sorted(SETTING_ELEMENTS))})")
        kind = _TYPES[name]
        here = f"{where}.{key}"
        if kind is bool:
            out[name] = _bool(value, here, source)
        elif kind in (int, float):
            out[name] = _number(value, kind, here, source, name == "max_size_bytes")
        elif kind in (RoutingType, AddressFullPolicy):
            text = str(value).strip()
            try:
                out[name] = RoutingType(text.lower()) if kind is RoutingType else \
                    AddressFullPolicy(text.upper())
            except ValueError:
                choices = [m.value.upper() for m in kind]  # type: ignore[attr-defined]
                raise ConfigError(source, here, f"{value!r} is not one of "
                                  f"{', '.join(choices)}") from None
        else:
            out[name] = str(value).strip()  # Artemis trims element text
    return out


def _address(name: Any, entry: Any, syntax: WildcardSyntax, source: str) -> AddressConfig:
    where = f"addresses[{name!r}]"
    try:
        check_name(name, syntax, wildcards=True)
    except InvalidNameError as exc:
        raise ConfigError(source, where, str(exc)) from None
    if not isinstance(entry, Mapping) or set(entry) - {"anycast", "multicast"}:
        raise ConfigError(source, where, "an address has 'anycast' and 'multicast' lists of "
                                         "queues, nothing else")
    # no routing type named: anycast, what ``create_address`` gives by default
    types = tuple(RoutingType(k) for k in ("anycast", "multicast") if k in entry) or \
        (RoutingType.ANYCAST,)
    queues = []
    for kind in ("anycast", "multicast"):
        listed = entry.get(kind, ())
        if not isinstance(listed, (list, tuple)):
            raise ConfigError(source, f"{where}.{kind}", "a list of queues is needed")
        for q in listed:
            queues.append(_queue(q, name, RoutingType(kind), syntax, f"{where}.{kind}", source))
    return AddressConfig(name, types, tuple(queues))


def _queue(values: Any, address: str, rt: RoutingType, syntax: WildcardSyntax, where: str,
           source: str) -> QueueConfig:
    if not isinstance(values, Mapping) or not values.get("name"):
        raise ConfigError(source, where, "a queue is a table with a name")
    where = f"{where}[{values['name']!r}]"
    kwargs: Dict[str, Any] = {}
    for key, value in values.items():
        if key == "name":
            continue
        field = QUEUE_FIELDS.get(key.replace("_", "-"))
        if field is None:
            raise ConfigError(source, f"{where}.{key}", f"unknown queue attribute (known: "
                              f"name, {', '.join(QUEUE_FIELDS)})")
        name, kind = field
        here = f"{where}.{key}"
        kwargs[name] = _bool(value, here, source) if kind is bool else \
            _number(value, int, here, source) if kind is int else str(value)
    config = QueueConfig(values["name"], address, rt, **kwargs)
    try:
        check_queue_config(config, syntax)
    except (InvalidArgumentError, InvalidNameError) as exc:
        raise ConfigError(source, where, str(exc)) from None
    return config


def _bool(value: Any, where: str, source: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(source, where, f"{value!r} is not true or false")
    return text == "true"


def _number(value: Any, kind: type, where: str, source: str, size: bool = False) -> Any:
    """An int (``size``: Artemis's byte notation too, ``10MB`` = 10 * 2**20) or a float."""
    if isinstance(value, bool):
        raise ConfigError(source, where, f"{value!r} is not a number")
    if isinstance(value, (int, float)) and (kind is float or isinstance(value, int)):
        return kind(value)
    text = str(value).strip()
    if len(text) > _MAX_NUMBER:
        raise ConfigError(source, where, f"{text[:20]!r}... ({len(text):,} characters) is not "
                          f"a number")
    got = _BYTES.fullmatch(text) if size else None
    if got is not None:
        return int(got.group(1)) * _UNITS[(got.group(2) or "").lower() or None]
    try:
        return kind(text)
    except ValueError:
        unit = " (or bytes as 100MB, 1GiB)" if size else ""
        raise ConfigError(source, where, f"{value!r} is not a number{unit}") from None


def open_arguments(config: BrokerConfig, address_settings: Optional[Mapping[str, Any]],
                   syntax: WildcardSyntax, global_max_size: int,
                   persist_delivery_count: Optional[bool] = None
                   ) -> Tuple[Dict[str, Any], WildcardSyntax, int, bool]:
    """What ``Broker.open`` uses with ``config`` and its own arguments: the file's settings
    overlaid by ``address_settings`` entries of the same match, the file's syntax,
    ``global-max-size`` and ``persist-delivery-count-before-delivery`` unless the arguments
    set others (``persist_delivery_count``: ``None`` when the caller did not say; the
    default is False, Artemis's).

    Raises:
        ConfigError: the arguments set a wildcard syntax, global-max-size or
            persist-delivery-count-before-delivery other than the file's.
    """
    settings: Dict[str, Any] = {**config.address_settings, **(address_settings or {})}
    if config.wildcard_syntax is not None:
        if syntax not in (DEFAULT_SYNTAX, config.wildcard_syntax):
            raise ConfigError(config.source, "wildcard-addresses", "Broker.open was given "
                              "another wildcard_syntax")
        syntax = config.wildcard_syntax
    if config.global_max_size is not None:
        if global_max_size not in (UNLIMITED, config.global_max_size):
            raise ConfigError(config.source, "global-max-size", "Broker.open was given "
                              "another global_max_size")
        global_max_size = config.global_max_size
    if config.persist_delivery_count is not None:
        if persist_delivery_count not in (None, config.persist_delivery_count):
            raise ConfigError(config.source, "persist-delivery-count-before-delivery",
                              "Broker.open was given another "
                              "persist_delivery_count_before_delivery")
        persist_delivery_count = config.persist_delivery_count
    return settings, syntax, global_max_size, \
        False if persist_delivery_count is None else persist_delivery_count


def deploy(broker: Any, config: BrokerConfig) -> List[str]:
    """Create the configured addresses and queues the store lacks (journaled), and give an
    existing queue the configured ring size, as Artemis applies its ``broker.xml`` at start;
    log the notes. A queue that exists with other attributes is left as it is (logged):
    deleting it would drop messages. Returns what was done, one line each.

    Raises:
        ConfigError: a queue to create on an existing address that lacks its routing type
            (nothing created then). As ``Broker.create_address``/``create_queue``/
            ``set_ring_size``.
    """
    for note in config.notes:
        log.warning("%s: %s", config.source, note)
    names = set(broker.queue_names())
    for a in config.addresses:  # refused before anything is created
        if a.name not in broker.address_names():
            continue
        have = set(broker.address_info(a.name).routing_types)
        for q in a.queues:
            if q.name not in names and q.routing_type not in have:
                raise ConfigError(config.source, f"addresses[{a.name!r}]", f"queue {q.name!r} "
                                  f"is {q.routing_type.value}, but the store's address "
                                  f"{a.name!r} is {', '.join(sorted(r.value for r in have))}")
    done: List[str] = []
    for a in config.addresses:
        if a.name not in broker.address_names():
            broker.create_address(a.name, a.routing_types)
            done.append(f"created address {a.name!r}")
        for q in a.queues:
            try:
                info = broker.queue_info(q.name)
            except MqStoreError:
                broker.create_queue(q)
                done.append(f"created queue {q.name!r} on {a.name!r}")
                continue
            if q.ring_size is not None and info.ring_size != q.ring_size:
                broker.set_ring_size(q.name, q.ring_size)
                done.append(f"ring size of {q.name!r} set to {q.ring_size}")
            elif info.address != a.name or info.routing_type != q.routing_type:
                log.warning("%s: queue %r exists on %r (%s); left as it is", config.source,
                            q.name, info.address, info.routing_type.value)
    return done
