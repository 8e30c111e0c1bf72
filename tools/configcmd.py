"""``mqstore config check PATH`` and ``mqstore config export DIR``: broker configuration files
(Artemis ``broker.xml`` or TOML, ``engine.config.files``) checked without a store, and a store's
addresses, queues and address settings written back as ``broker.xml``."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

import click
from rich.table import Table

from mqstore.journal import MqStoreError
from .commands import STORE, console as out, fail

# ``QueueConfig`` fields broker.xml has no place for (Qpid's, and mqstore's own)
_NOT_IN_XML = ("persist_last_node", "auto_delete", "no_local", "auto_delete_delay_ms",
               "max_count", "max_size", "policy_type", "qpid_lvq", "alternate_address")


def register_config(main: click.Group) -> None:
    """Add the ``config`` group to the ``mqstore`` group."""

    @main.group("config")
    def config() -> None:
        """Broker configuration files: Artemis broker.xml or TOML (Broker.open(config=...))."""

    @config.command("check")
    @click.argument("path", type=click.Path(dir_okay=False))
    def check(path: str) -> None:
        """Read and check PATH (.toml: TOML, else broker.xml) and show what it configures
        and what it says that mqstore does not apply. Exit 1 when it cannot be applied."""
        from mqstore.engine.config.files import load_config

        try:
            cfg = load_config(path)
        except MqStoreError as exc:
            fail(exc)
        table = Table(title=f"addresses in {path}")
        for col in ("address", "routing types", "queue", "queue routing", "attributes"):
            table.add_column(col, overflow="fold")
        for a in cfg.addresses:
            types = ",".join(rt.value for rt in a.routing_types)
            if not a.queues:
                table.add_row(a.name, types, "", "", "")
            for q in a.queues:
                table.add_row(a.name, types, q.name, q.routing_type.value, _attributes(q))
        out.print(table)
        table = Table(title="address settings")
        for col in ("match", "settings"):
            table.add_column(col, overflow="fold")
        for match, st in cfg.address_settings.items():
            table.add_row(match, ", ".join(f"{k}={v}" for k, v in st.to_record().items()))
        out.print(table)
        if cfg.wildcard_syntax is not None:  # plain lines: whole in a pipe, at any width
            s = cfg.wildcard_syntax
            click.echo(f"wildcard syntax: delimiter {s.delimiter!r}, any-words "
                       f"{s.any_words!r}, single-word {s.single_word!r}")
        if cfg.global_max_size is not None:
            click.echo(f"global-max-size: {cfg.global_max_size:,} bytes")
        if cfg.persist_delivery_count is not None:
            click.echo("persist-delivery-count-before-delivery: "
                       f"{str(cfg.persist_delivery_count).lower()}")
        for note in cfg.notes:
            click.echo(f"not applied: {note}", err=True)
        click.echo(f"{path}: ok ({len(cfg.addresses)} addresses, "
                  f"{sum(len(a.queues) for a in cfg.addresses)} queues, "
                  f"{len(cfg.address_settings)} address settings, {len(cfg.notes)} notes)")

    @config.command("export")
    @STORE
    @click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
                  help="Write to this file (refused if it exists); default: standard output.")
    def export(directory: str, out_path: Optional[str]) -> None:
        """Write the addresses, queues and address settings of the store in DIRECTORY as an
        Artemis broker.xml (read-only: the store is not changed)."""
        if out_path is not None and os.path.exists(out_path):
            fail(MqStoreError(f"{out_path} exists; mqstore does not overwrite it"))
        try:
            text, skipped = store_as_xml(directory)
        except MqStoreError as exc:
            fail(exc)
        for line in skipped:
            click.echo(f"not in broker.xml: {line}", err=True)
        if out_path is None:
            click.echo(text, nl=False)
        else:
            with open(out_path, "x", encoding="utf-8") as f:
                f.write(text)


def _attributes(q: Any) -> str:
    parts = [f"{k}={v}" for k, v in _queue_xml(q).items() if k not in ("name", "routing-type")]
    return ", ".join(parts)


def _queue_xml(q: Any) -> Dict[str, str]:
    """A ``QueueConfig`` as broker.xml queue attributes (``routing-type``, ``durable`` and
    ``filter`` included, for ``engine.config.brokerxml.write``)."""
    attrs = {"name": q.name, "routing-type": q.routing_type.value,
             "durable": "true" if q.durable else "false"}
    if q.max_consumers != -1:
        attrs["max-consumers"] = str(q.max_consumers)
    for key, value in (("exclusive", q.exclusive), ("last-value", q.last_value),
                       ("non-destructive", q.non_destructive)):
        if value:
            attrs[key] = "true"
    if q.last_value_key:
        attrs["last-value-key"] = q.last_value_key
    if q.ring_size is not None and q.ring_size != -1:
        attrs["ring-size"] = str(q.ring_size)
    if q.filter:
        attrs["filter"] = q.filter
    return attrs


def store_as_xml(directory: str) -> Tuple[str, List[str]]:
    """The store's addresses, queues (not a retroactive address's internal ring) and address
    settings as broker.xml text, and what broker.xml cannot say (a queue's Qpid attributes)."""
    from mqstore.engine.config.brokerxml import write
    from mqstore.engine.model import QueueConfig
    from mqstore.engine.addressing.names import RING_PREFIX
    from .offline import OfflineStore

    skipped: List[str] = []
    plain = QueueConfig("q", "a")
    with OfflineStore(directory) as store:
        image = store.image
        queues: Dict[str, List[Dict[str, str]]] = {}
        for qi in image.queues.values():
            if qi.name.startswith(RING_PREFIX):
                continue
            q = QueueConfig.from_record(qi.name, qi.address, qi.routing_type, qi.config)
            queues.setdefault(qi.address, []).append(_queue_xml(q))
            lost = [f for f in _NOT_IN_XML if getattr(q, f) != getattr(plain, f)]
            if lost:
                skipped.append(f"queue {q.name!r}: {', '.join(lost)}")
        addresses = [(a.name, sorted(a.routing_types), queues.get(a.name, []))
                     for a in sorted(image.addresses.values(), key=lambda a: a.name)]
        settings = {match: {k.replace("_", "-"): _text(v) for k, v in values.items()}
                    for match, (values, _loc) in sorted(image.settings.items())}
    return write(addresses, settings, (".", "#", "*")), skipped


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value in ("anycast", "multicast"):
        return value.upper()
    return str(value)
