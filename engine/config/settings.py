"""Address settings (Artemis addressing §4.17): per-address defaults and behaviours matched by
wildcard.

``AddressSettings`` holds optional values; ``None`` means "not set here". The repository resolves an
address by overlaying every matching entry from the least to the most specific, then filling what is
still unset with the defaults below. Entries are journaled (SETTINGS records), so they survive
reopening, and can be changed at run time. The address-full settings (max-size-bytes,
max-size-messages, address-full-policy; Artemis ring queues §4, Artemis "Paging") bound what an
address holds: ``engine.paging.addressfull`` applies them.

Defaults are Artemis's, except the auto-create/auto-delete switches, which are off unless a
setting turns them on: Artemis ships a ``#`` setting that turns them on, an embedded store starts
strict so that a typo in an address is an error, not a new address.
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Dict, Mapping, Optional

from ..errors import InvalidArgumentError
from ..filters.expression import parse_filter
from ..model import PolicyType, QpidLvq, QueueConfig, RoutingType
from ..addressing.names import check_name
from ..values import (MAX_SETTING_CHARS, TIME_MAX, check_bool, check_choice, check_int,
                     check_text)
from ..addressing.wildcards import DEFAULT_SYNTAX, WildcardSyntax, matching

UNLIMITED = -1


def check_global_max_size(value: Any, field: str = "global_max_size") -> int:
    """``value`` if it is a global-max-size: bytes, an int in -1 (``UNLIMITED``)..2**63-1.
    The one check for ``Broker.open``'s argument and a configuration file's value.

    Raises:
        InvalidArgumentError: not an int in that range.
    """
    return check_int(field, value, UNLIMITED, TIME_MAX)


DEFAULT_LVQ_KEY = "_AMQ_LVQ_NAME"


class AddressFullPolicy(str, enum.Enum):
    """What a send to a full address does (Artemis ``address-full-policy``).

    PAGE: the message is stored and routed, but kept on disk only until the address drains
    (Artemis's default). DROP: the message is dropped and counted; the send returns. FAIL: the
    send raises ``AddressFullError``; nothing of it is stored. BLOCK: the send waits until the
    address has room (a thread waits, asyncio awaits).
    """

    PAGE = "PAGE"
    DROP = "DROP"
    BLOCK = "BLOCK"
    FAIL = "FAIL"


@dataclass(frozen=True)
class AddressSettings:
    """One address-setting entry; every field optional (``None`` = inherit).

    Attributes:
        default_ring_size: ring size of queues created without one (-1 = no limit).
        default_last_value_key: last-value key of queues created without one.
        default_last_value_queue: make created queues last-value with the default key.
        default_non_destructive: make created queues non-destructive.
        default_exclusive_queue: make created queues exclusive.
        default_address_routing_type: routing type of auto-created addresses (MULTICAST).
        auto_create_addresses, auto_create_queues: create what a client sends to or consumes
            from when it is missing (Artemis addressing §4.18).
        auto_delete_addresses: delete an auto-created address when it has no queues.
        auto_delete_queues: delete an auto-created queue with no consumers and no messages.
        max_delivery_attempts: deliveries before a message is dead-lettered (10).
        redelivery_delay: ms a message that comes back unsettled (a cancel, rollback,
            session recover or ``Delivery.release``) waits in its queue's scheduled buffer
            before it is delivered again (0: it goes back to the head at once).
        redelivery_delay_multiplier: each further delivery multiplies that delay by this
            (Artemis: delay = redelivery_delay * multiplier ** (delivery count - 1)); 1.0.
        max_redelivery_delay: ms the delay never exceeds (-1: 10 x redelivery_delay, as
            Artemis).
        dead_letter_address: where such messages go (dropped and counted when unset).
        expiry_address: where expired messages go (dropped and counted when unset).
        expiry_delay: ms; expiration given to messages without one (-1 = off; 004 §4.9.6.4).
        max_size_bytes: bytes of message bodies the address holds before it is full (-1 = no
            limit). Artemis counts its own per-message memory estimate; mqstore counts body
            bytes, each message once however many queues of the address hold it, and a message
            in delivery until it is acked.
        max_size_messages: messages the address holds before it is full (-1 = no limit).
        retroactive_message_count: keep the last this many messages sent to the address in
            an internal ring queue, for queues created later (Artemis addressing §4.14,
            ``engine.routing.retroactive``); 0: none.
        address_full_policy: what a send to a full address does (``AddressFullPolicy``;
            PAGE). The address is full when it already holds the limit or more (so the message
            that crosses the limit is accepted, as in Artemis), or the broker's
            ``global_max_size`` is reached.
    """

    default_ring_size: Optional[int] = None
    default_last_value_key: Optional[str] = None
    default_last_value_queue: Optional[bool] = None
    default_non_destructive: Optional[bool] = None
    default_exclusive_queue: Optional[bool] = None
    default_address_routing_type: Optional[RoutingType] = None
    auto_create_addresses: Optional[bool] = None
    auto_create_queues: Optional[bool] = None
    auto_delete_addresses: Optional[bool] = None
    auto_delete_queues: Optional[bool] = None
    max_delivery_attempts: Optional[int] = None
    redelivery_delay: Optional[int] = None
    redelivery_delay_multiplier: Optional[float] = None
    max_redelivery_delay: Optional[int] = None
    dead_letter_address: Optional[str] = None
    expiry_address: Optional[str] = None
    expiry_delay: Optional[int] = None
    max_size_bytes: Optional[int] = None
    max_size_messages: Optional[int] = None
    address_full_policy: Optional[AddressFullPolicy] = None
    retroactive_message_count: Optional[int] = None

    def overlay(self, other: "AddressSettings") -> "AddressSettings":
        """These settings with every field ``other`` sets replaced by ``other``'s."""
        return replace(self, **{f.name: getattr(other, f.name) for f in fields(other)
                                if getattr(other, f.name) is not None})

    def to_record(self) -> Dict[str, Any]:
        """The fields that are set, JSON/msgpack-friendly."""
        out = {k: v for k, v in asdict(self).items() if v is not None}
        if "default_address_routing_type" in out:
            out["default_address_routing_type"] = RoutingType(
                out["default_address_routing_type"]).value
        if "address_full_policy" in out:
            out["address_full_policy"] = AddressFullPolicy(out["address_full_policy"]).value
        return out

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> "AddressSettings":
        """Rebuild from ``to_record`` output (unknown keys are ignored).

        Raises:
            InvalidArgumentError: a value of the wrong type.
        """
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if "default_address_routing_type" in values:
            try:
                values["default_address_routing_type"] = RoutingType(
                    values["default_address_routing_type"])
            except ValueError:
                raise InvalidArgumentError("default_address_routing_type", "anycast or "
                                           "multicast") from None
        if "address_full_policy" in values:
            values["address_full_policy"] = _policy(values["address_full_policy"])
        return cls(**values).validated()

    def validated(self) -> "AddressSettings":
        """Check every value's type and range.

        Raises:
            InvalidArgumentError: ints out of range (default_ring_size, max_delivery_attempts,
                expiry_delay, max_redelivery_delay: -1..2**63-1; redelivery_delay,
                retroactive_message_count: 0..2**63-1), a redelivery_delay_multiplier that
                is not a finite number > 0, flags that are not bools, an address name that
                breaks Artemis addressing §4.1, a routing type that is not a ``RoutingType``.
        """
        for name in ("default_ring_size", "max_delivery_attempts", "expiry_delay",
                     "max_size_bytes", "max_size_messages", "max_redelivery_delay"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), -1, TIME_MAX)
        for name in ("redelivery_delay", "retroactive_message_count"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 0, TIME_MAX)
        m = self.redelivery_delay_multiplier
        if m is not None and (type(m) not in (int, float) or not math.isfinite(m) or m <= 0):
            raise InvalidArgumentError("redelivery_delay_multiplier",
                                       f"{m!r}: a finite number > 0 is needed (1.0: no growth)")
        for name in ("default_last_value_queue", "default_non_destructive",
                     "default_exclusive_queue", "auto_create_addresses", "auto_create_queues",
                     "auto_delete_addresses", "auto_delete_queues"):
            if getattr(self, name) is not None:
                check_bool(name, getattr(self, name))
        if self.default_last_value_key is not None and not check_text(
                "default_last_value_key", self.default_last_value_key,
                max_chars=MAX_SETTING_CHARS):
            raise InvalidArgumentError("default_last_value_key", "a non-empty name is needed")
        for name in ("dead_letter_address", "expiry_address"):
            if getattr(self, name) is not None:
                check_name(getattr(self, name))
        rt = self.default_address_routing_type
        if rt is not None and not isinstance(rt, RoutingType):
            raise InvalidArgumentError("default_address_routing_type",
                                       f"{rt!r} is not RoutingType.ANYCAST or MULTICAST")
        policy = self.address_full_policy
        if policy is not None and not isinstance(policy, AddressFullPolicy):
            raise InvalidArgumentError("address_full_policy", f"{policy!r} is not "
                                       f"AddressFullPolicy.PAGE, DROP, BLOCK or FAIL")
        return self


def _policy(value: object) -> AddressFullPolicy:
    try:
        return AddressFullPolicy(str(value).upper())
    except ValueError:
        raise InvalidArgumentError("address_full_policy", f"{value!r} is not PAGE, DROP, "
                                   f"BLOCK or FAIL") from None


def checked_settings(settings: object) -> "AddressSettings":
    """``settings`` validated, if it is an ``AddressSettings``.

    Raises:
        InvalidArgumentError: another type, or a value of the wrong type or range.
    """
    if not isinstance(settings, AddressSettings):
        raise InvalidArgumentError("address settings", f"an AddressSettings is needed, not "
                                                       f"{type(settings).__name__}")
    return settings.validated()


def check_match(match: object, syntax: WildcardSyntax = DEFAULT_SYNTAX) -> str:
    """``match`` if it is a valid address-settings pattern: a non-empty str of words, with the
    any-words character (``#``) only as the last word (Artemis addressing §4.17: "use this at the
    end of your expression") and wildcard characters only as whole words.

    Raises:
        InvalidArgumentError: nothing was changed.
    """
    text = check_text("address-settings match", match)
    assert text is not None
    words = text.split(syntax.delimiter)
    if not text or any(not w for w in words):
        raise InvalidArgumentError("address-settings match", f"{text!r} has an empty word")
    for i, word in enumerate(words):
        if (syntax.any_words in word or syntax.single_word in word) and len(word) > 1:
            raise InvalidArgumentError("address-settings match", f"{text!r}: a wildcard "
                                       f"character stands for a whole word")
        if word == syntax.any_words and i != len(words) - 1:
            raise InvalidArgumentError("address-settings match", f"{text!r}: "
                                       f"{syntax.any_words!r} goes at the end (Artemis "
                                       f"addressing §4.17)")
    return text


DEFAULTS = AddressSettings(default_ring_size=-1, default_last_value_key=None,
                           default_last_value_queue=False, default_non_destructive=False,
                           default_exclusive_queue=False,
                           default_address_routing_type=RoutingType.MULTICAST,
                           auto_create_addresses=False, auto_create_queues=False,
                           auto_delete_addresses=False, auto_delete_queues=False,
                           max_delivery_attempts=10, redelivery_delay=0,
                           redelivery_delay_multiplier=1.0, max_redelivery_delay=-1,
                           dead_letter_address=None,
                           expiry_address=None, expiry_delay=-1, max_size_bytes=-1,
                           max_size_messages=-1,
                           address_full_policy=AddressFullPolicy.PAGE,
                           retroactive_message_count=0)


class SettingsRepository:
    """Address settings by match pattern, resolved per address (cached)."""

    def __init__(self, syntax: WildcardSyntax = DEFAULT_SYNTAX) -> None:
        self.syntax = syntax
        self.entries: Dict[str, AddressSettings] = {}
        self._cache: Dict[str, AddressSettings] = {}

    def set(self, match: str, settings: Optional[AddressSettings]) -> None:
        """Add, replace (``settings``) or remove (``None``) the entry for ``match``."""
        if settings is None:
            self.entries.pop(match, None)
        else:
            self.entries[match] = settings
        self._cache.clear()

    def resolve(self, address: str) -> AddressSettings:
        """The effective settings of ``address``: defaults, then matches least to most
        specific."""
        cache = self._cache
        if address in cache:  # (every send asks: a test, not a call)
            return cache[address]
        got = cache.get(address)
        if got is None:
            got = DEFAULTS
            for pattern in matching(list(self.entries), address, self.syntax):
                got = got.overlay(self.entries[pattern])
            self._cache[address] = got
        return got

    def sources(self, address: str) -> Dict[str, Optional[str]]:
        """For each setting, the match pattern whose entry gives ``address`` its effective
        value (the most specific one that sets it), ``None`` for a default (Artemis merges
        address-settings the same way, most specific match last)."""
        out: Dict[str, Optional[str]] = {f.name: None for f in fields(AddressSettings)}
        for pattern in matching(list(self.entries), address, self.syntax):
            entry = self.entries[pattern]
            for f in fields(entry):
                if getattr(entry, f.name) is not None:
                    out[f.name] = pattern
        return out


def resolve_queue_config(st: AddressSettings, config: "QueueConfig") -> "QueueConfig":
    """Fill a queue configuration's unset fields from the address's effective settings (seed
    000 default-ring-size; 004 §4.9.4 default-last-value-key/-queue, §4.9.6.3
    default-non-destructive, §4.11.2 default-exclusive-queue)."""
    key = config.last_value_key
    if key is None and (config.last_value or st.default_last_value_queue):
        key = st.default_last_value_key or DEFAULT_LVQ_KEY
    if key is None and st.default_last_value_key:
        key = st.default_last_value_key
    if config.qpid_lvq is not None:  # a Qpid last-value queue: Artemis's defaults do not apply
        key = None
    return replace(config,
                   ring_size=st.default_ring_size if config.ring_size is None
                   else config.ring_size,
                   last_value_key=key, last_value=key is not None,
                   non_destructive=st.default_non_destructive
                   if config.non_destructive is None else config.non_destructive,
                   exclusive=st.default_exclusive_queue if config.exclusive is None
                   else config.exclusive,
                   policy_type=None if config.policy_type is None
                   else PolicyType(config.policy_type),
                   qpid_lvq=None if config.qpid_lvq is None else QpidLvq(config.qpid_lvq))


def check_queue_config(config: QueueConfig, syntax: WildcardSyntax = DEFAULT_SYNTAX) -> None:
    """Validate a queue configuration (in the broker's wildcard ``syntax``: the address, and
    the queue's name, may be wildcard expressions; the alternate address, sent to, not).

    Raises:
        InvalidNameError: bad names (queue, address, alternate address).
        InvalidArgumentError: a value of the wrong type or out of range (max_consumers
            -1..2**63-1, ring_size, max_count and max_size -1..2**63-1, flags bools,
            last_value_key a non-empty str, policy_type not a ``PolicyType`` or its value,
            qpid_lvq not a ``QpidLvq``, a filter that is not an Artemis filter expression:
            ``engine.filters.expression.FilterSyntaxError``), persist_last_node on a non-durable
            queue, a Qpid and an Artemis last-value key together, size limits on a last-value queue.
    """
    check_name(config.name, syntax, wildcards=True)
    check_name(config.address, syntax, wildcards=True)
    if config.alternate_address is not None:
        check_name(config.alternate_address, syntax)
    if not isinstance(config.routing_type, RoutingType):
        raise InvalidArgumentError("routing_type", f"{config.routing_type!r} is not "
                                                   f"RoutingType.ANYCAST or MULTICAST")
    check_int("max_consumers", config.max_consumers, -1, TIME_MAX)
    if config.ring_size is not None:
        check_int("ring_size", config.ring_size, -1, TIME_MAX)
    for name in ("durable", "auto_created", "last_value", "persist_last_node", "auto_delete",
                 "no_local"):
        check_bool(name, getattr(config, name))
    check_int("auto_delete_delay_ms", config.auto_delete_delay_ms, 0, TIME_MAX)
    check_int("max_count", config.max_count, -1, TIME_MAX)
    check_int("max_size", config.max_size, -1, TIME_MAX)
    if config.policy_type is not None:
        check_choice("policy_type", config.policy_type, PolicyType)
    if config.persist_last_node and not config.durable:
        raise InvalidArgumentError("persist_last_node", f"queue {config.name!r} is not durable: "
                                   f"only a durable queue can be made to store its non-durable "
                                   f"messages on the last node (Qpid --cluster-durable)")
    for name in ("exclusive", "non_destructive"):
        if getattr(config, name) is not None:
            check_bool(name, getattr(config, name))
    if config.qpid_lvq is not None:
        check_choice("qpid_lvq", config.qpid_lvq, QpidLvq)
        if config.last_value_key is not None or config.last_value:
            raise InvalidArgumentError("qpid_lvq", "a queue is a Qpid last-value queue "
                                       "(qpid.LVQ_key) or an Artemis one (last_value_key), "
                                       "not both")
    if (config.max_count > 0 or config.max_size > 0) and \
            (config.qpid_lvq is not None or config.last_value_key or config.last_value):
        raise InvalidArgumentError("max_count", "size limits on a last-value queue are not "
                                   "supported: declare the limits or the last-value key")
    parse_filter(config.filter, "filter")
    if config.last_value_key is not None and not check_text(
            "last_value_key", config.last_value_key, max_chars=MAX_SETTING_CHARS):
        raise InvalidArgumentError("last_value_key", "a non-empty property name is needed")
