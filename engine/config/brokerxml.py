"""Artemis ``broker.xml``: read into the configuration's plain form, and written back.

Reading (``parse``) uses defusedxml (no DTDs, no entities: a configuration file is input, not
code). It accepts a whole ``broker.xml`` (namespaces are dropped) and the fragments the Artemis
manual and the seeds show: a bare ``<addresses>``, ``<address>``, ``<address-settings>`` or
``<address-setting>`` (several side by side too), ``...`` lines, ``<configuration ...>`` and the
manual's callout numbers after a tag. What it reads:

- ``<addresses>``/``<address name>`` with ``<anycast>``/``<multicast>`` and their ``<queue>``s
  (attributes ``max-consumers``, ``exclusive``, ``last-value``, ``last-value-key``,
  ``non-destructive``, ``ring-size``; children ``<durable>``, ``<filter string>``), Artemis
  addressing §4.2-4.11;
- ``<address-settings>``/``<address-setting match>`` (every ``AddressSettings`` field, in
  Artemis's element names), Artemis addressing §4.17;
- ``<wildcard-addresses>`` (Artemis addressing §4.17), ``<global-max-size>``,
  ``<persist-delivery-count-before-delivery>``, and the routing
  prefixes of ``<acceptor>`` URLs (Artemis addressing §4.13: mqstore's are always ``anycast://`` and
  ``multicast://``).

Everything else in ``<core>`` (journal, cluster, security, acceptors...) has no counterpart in
an embedded store: it is listed in the notes, never silently dropped. An element mqstore does
not know inside an address, a queue, an address-setting or ``<wildcard-addresses>`` is an error
(most often a typo), unless Artemis has it and mqstore does not apply it: a note then.
"""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any, Dict, List, Tuple
from urllib.parse import parse_qsl
from xml.etree import ElementTree

import defusedxml.ElementTree as SafeTree
from defusedxml import DefusedXmlException

from .settings import AddressSettings
from ..values import nesting_depth

Raw = Dict[str, Any]

# an address-setting element -> the ``AddressSettings`` field it sets (Artemis's names;
# ``last-value-queue`` is Artemis's older name of ``default-last-value-queue``)
SETTING_ELEMENTS = {f.name.replace("_", "-"): f.name for f in fields(AddressSettings)}
SETTING_ELEMENTS["last-value-queue"] = "default_last_value_queue"

# Artemis address-setting elements mqstore does not apply (reported as notes)
NOT_APPLIED_SETTINGS = frozenset("""
page-size-bytes page-max-cache-size page-limit-bytes page-limit-messages page-full-policy
max-read-page-bytes max-read-page-messages prefetch-page-bytes prefetch-page-messages
message-counter-history-day-limit redistribution-delay send-to-dla-on-no-route
slow-consumer-threshold slow-consumer-policy slow-consumer-check-period
slow-consumer-threshold-measurement-unit auto-create-jms-queues auto-delete-jms-queues
auto-create-jms-topics auto-delete-jms-topics config-delete-queues config-delete-addresses
config-delete-diverts management-browse-page-size management-message-attribute-size-limit
default-purge-on-no-consumers default-max-consumers default-queue-routing-type
default-consumers-before-dispatch default-delay-before-dispatch default-group-rebalance
default-group-rebalance-pause-dispatch default-group-buckets default-group-first-key
default-consumer-window-size auto-delete-queues-delay auto-delete-queues-message-count
auto-delete-addresses-delay auto-delete-created-queues enable-metrics max-expiry-delay
min-expiry-delay no-expiry enable-ingress-timestamp auto-create-dead-letter-resources
auto-create-expiry-resources dead-letter-queue-prefix dead-letter-queue-suffix
expiry-queue-prefix expiry-queue-suffix retroactive-message-count-policy
""".split())
# Artemis queue attributes and children mqstore does not apply
NOT_APPLIED_QUEUE = frozenset("""
purge-on-no-consumers group-rebalance group-rebalance-pause-dispatch group-buckets
group-first-key consumers-before-dispatch delay-before-dispatch enabled user auto-delete
auto-delete-delay auto-delete-message-count internal
""".split())
QUEUE_ATTRIBUTES = ("name", "max-consumers", "exclusive", "last-value", "last-value-key",
                    "non-destructive", "ring-size")
_ELLIPSIS_TAG = re.compile(r"<([A-Za-z][\w.:-]*)\s+\.\.\.\s*(/?)>")
_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")


class XmlConfigError(Exception):
    """Raised by ``parse`` with where (an element path) and why; ``engine.config.files`` turns it
    into the user-facing ``ConfigError``."""

    def __init__(self, where: str, why: str) -> None:
        self.where = where
        self.why = why
        super().__init__(f"{where}: {why}")


def _tag(elem: Any) -> str:
    return str(elem.tag).rsplit("}", 1)[-1]


def parse(text: str) -> Tuple[Raw, List[str]]:
    """``broker.xml`` text (or a manual fragment) as the configuration's plain form
    (``engine.config.files``) and the notes on what is not applied.

    Raises:
        XmlConfigError: not well-formed XML, a DTD or an entity (refused), an element mqstore
            does not know where only known ones may be, a missing ``name``/``match``.
    """
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        raise XmlConfigError("document", "refused: a DTD or an entity declaration (a "
                             "configuration file needs neither)")
    body = _ELLIPSIS_TAG.sub(r"<\1\2>", _DECLARATION.sub("", text, count=1))
    try:
        root = SafeTree.fromstring(f"<fragment>\n{body}\n</fragment>")
    except ElementTree.ParseError as exc:
        line, column = exc.position
        raise XmlConfigError(f"line {max(line - 1, 1)}, column {column + 1}",
                             "not well-formed XML") from None
    except DefusedXmlException as exc:
        raise XmlConfigError("document", f"refused: {exc}") from None
    if nesting_depth(root, list, MAX_DEPTH) > MAX_DEPTH:
        raise XmlConfigError("document", f"refused: elements nest deeper than {MAX_DEPTH} "
                             f"levels (a broker.xml nests under 10)")
    raw: Raw = {}
    notes: List[str] = []
    _container(root, "", raw, notes)
    return raw, notes


MAX_DEPTH = 32
"""Levels of elements a configuration file may nest; the walk that reads it recurses."""


def _container(elem: Any, path: str, raw: Raw, notes: List[str]) -> None:
    for child in elem:
        tag = _tag(child)
        here = f"{path}/{tag}" if path else tag
        if tag in ("configuration", "core", "addresses", "address-settings", "acceptors"):
            _container(child, here, raw, notes)
        elif tag == "address":
            _address(child, here, raw, notes)
        elif tag == "address-setting":
            _setting(child, here, raw, notes)
        elif tag == "wildcard-addresses":
            raw["wildcard-addresses"] = _leaves(child, here, ("enabled", "routing-enabled",
                                                              "delimiter", "any-words",
                                                              "single-word"), set(), notes)
        elif tag in ("global-max-size", "persist-delivery-count-before-delivery"):
            raw[tag] = (child.text or "").strip()
        elif tag == "acceptor":
            _acceptor(child, here, raw, notes)
        elif isinstance(child.tag, str):  # (not a comment)
            notes.append(f"<{tag}> ({here}): not applied, an embedded store has no such part")


def _address(elem: Any, path: str, raw: Raw, notes: List[str]) -> None:
    name = elem.get("name")
    if not name:
        raise XmlConfigError(path, "an <address> needs a name attribute")
    entry = raw.setdefault("addresses", {}).setdefault(name, {})
    for child in elem:
        tag = _tag(child)
        if tag not in ("anycast", "multicast"):
            if isinstance(child.tag, str):
                raise XmlConfigError(f"{path}[@name={name!r}]", f"unknown element <{tag}> "
                                     f"(an address has <anycast> and <multicast>)")
            continue
        queues = entry.setdefault(tag, [])
        for q in child:
            if not isinstance(q.tag, str):
                continue
            if _tag(q) != "queue":
                raise XmlConfigError(f"{path}[@name={name!r}]/{tag}",
                                     f"unknown element <{_tag(q)}> (only <queue>)")
            queues.append(_queue(q, f"{path}[@name={name!r}]/{tag}/queue", notes))


def _queue(elem: Any, path: str, notes: List[str]) -> Raw:
    out: Raw = {}
    where = f"{path}[@name={elem.get('name')!r}]"
    for key, value in elem.attrib.items():
        if key in QUEUE_ATTRIBUTES:
            out[key] = value
        elif key in NOT_APPLIED_QUEUE:
            notes.append(f"queue attribute {key}={value!r} ({where}): not applied")
        else:
            raise XmlConfigError(where, f"unknown attribute {key!r} (known: "
                                 f"{', '.join(QUEUE_ATTRIBUTES)})")
    for child in elem:
        tag = _tag(child)
        if not isinstance(child.tag, str):
            continue
        if tag == "durable":
            out["durable"] = (child.text or "").strip()
        elif tag == "filter":
            out["filter"] = child.get("string", "")
        elif tag in NOT_APPLIED_QUEUE:
            notes.append(f"queue element <{tag}> ({where}): not applied")
        else:
            raise XmlConfigError(where, f"unknown element <{tag}> (known: <durable>, <filter>)")
    if not out.get("name"):
        raise XmlConfigError(path, "a <queue> needs a name attribute")
    return out


def _setting(elem: Any, path: str, raw: Raw, notes: List[str]) -> None:
    match = elem.get("match")
    if match is None:
        raise XmlConfigError(path, "an <address-setting> needs a match attribute")
    where = f"{path}[@match={match!r}]"
    raw.setdefault("address-settings", {})[match] = _leaves(
        elem, where, tuple(SETTING_ELEMENTS), NOT_APPLIED_SETTINGS, notes)


def _leaves(elem: Any, where: str, known: Tuple[str, ...], not_applied: Any,
            notes: List[str]) -> Raw:
    """The text of each child element of ``elem`` by tag."""
    out: Raw = {}
    for child in elem:
        if not isinstance(child.tag, str):
            continue
        tag = _tag(child)
        if tag in known:
            out[tag] = (child.text or "").strip()
        elif tag in not_applied:
            notes.append(f"<{tag}> ({where}): not applied by mqstore")
        else:
            raise XmlConfigError(where, f"unknown element <{tag}>")
    return out


def _acceptor(elem: Any, path: str, raw: Raw, notes: List[str]) -> None:
    """An acceptor is a network listener (none in an embedded store); its routing prefixes
    must be mqstore's own, which are always on."""
    url = (elem.text or "").strip()
    query = url.partition("?")[2]
    for key, value in parse_qsl(query.replace(";", "&")):
        if key in ("anycastPrefix", "multicastPrefix"):
            raw.setdefault("prefixes", {})[key] = (value, path)
    notes.append(f"<acceptor name={elem.get('name')!r}> ({path}): no network listener in an "
                 f"embedded store; its routing prefixes are checked")


def write(addresses: List[Tuple[str, List[str], List[Raw]]],
          settings: Dict[str, Dict[str, str]], syntax: Tuple[str, str, str]) -> str:
    """A ``broker.xml`` (``<configuration><core>``) with ``addresses`` (name, routing types,
    queues as ``{attribute: text}`` with ``routing-type``, ``durable`` and ``filter``), the
    address ``settings`` (match -> element -> text) and the wildcard ``syntax`` (delimiter,
    any-words, single-word)."""
    root = ElementTree.Element("configuration", {"xmlns": "urn:activemq"})
    core = ElementTree.SubElement(root, "core", {"xmlns": "urn:activemq:core"})
    if syntax != (".", "#", "*"):
        wild = ElementTree.SubElement(core, "wildcard-addresses")
        for tag, value in zip(("delimiter", "any-words", "single-word"), syntax):
            ElementTree.SubElement(wild, tag).text = value
    block = ElementTree.SubElement(core, "address-settings")
    for match, values in settings.items():
        entry = ElementTree.SubElement(block, "address-setting", {"match": match})
        for tag, text in values.items():
            ElementTree.SubElement(entry, tag).text = text
    block = ElementTree.SubElement(core, "addresses")
    for name, routing_types, queues in addresses:
        address = ElementTree.SubElement(block, "address", {"name": name})
        for rt in routing_types:
            kind = ElementTree.SubElement(address, rt)
            for q in queues:
                if q["routing-type"] != rt:
                    continue
                attrs = {k: v for k, v in q.items()
                         if k not in ("routing-type", "durable", "filter")}
                queue = ElementTree.SubElement(kind, "queue", attrs)
                ElementTree.SubElement(queue, "durable").text = q["durable"]
                if q.get("filter"):
                    ElementTree.SubElement(queue, "filter", {"string": q["filter"]})
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode") + "\n"
