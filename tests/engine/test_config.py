"""Configuration files (issue 17): every broker.xml example of seeds 000 and 004, copied as the
seeds print them, loads through ``Broker.open(config=...)`` and behaves as the seed says; TOML
says the same; a file that cannot be applied is refused before the store is touched, naming
the file and the place; what an embedded store does not apply is reported."""

from __future__ import annotations

import logging
from pathlib import Path
from xml.sax.saxutils import escape
from typing import Callable, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.engine import Broker, Message, QueueConfig, ResourceLimitError, RoutingType
from mqstore.engine.config.files import (ConfigError, from_mapping, load_config, parse_toml,
                                         parse_xml)

Check = Callable[[Broker], None]


def bodies(b: Broker, queue: str) -> List[bytes]:
    with b.session() as s:
        return [m.message.body for m in s.create_browser(queue)]


def send(b: Broker, address: str, *items: bytes, **props: object) -> None:
    with b.session() as s:
        for body in items:
            s.send(address, Message(body, dict(props)))


def ring_of_3(b: Broker) -> None:  # seed 000/001: myRing keeps the last 3
    send(b, "myRing", b"1", b"2", b"3", b"4", b"5")
    assert bodies(b, "myRing") == [b"3", b"4", b"5"]


def ring_default(b: Broker) -> None:  # default-ring-size for queues created on ring.#
    b.create_address("ring.x")
    b.create_queue(QueueConfig("ring.x", "ring.x"))
    assert b.queue_info("ring.x").ring_size == 3


def durable_anycast(b: Broker) -> None:
    info = b.queue_info("durable")
    assert (info.address, info.routing_type, info.durable) == \
        ("durable", RoutingType.ANYCAST, True)


def topic_without_queues(b: Broker) -> None:
    assert b.address_info("topic.foo").routing_types == (RoutingType.MULTICAST,)
    assert b.address_info("topic.foo").queues == ()


def two_subscribers(b: Broker) -> None:
    send(b, "topic.foo", b"m")
    assert bodies(b, "client123.topic.foo") == bodies(b, "client456.topic.foo") == [b"m"]


def round_robin(address: str, queues: List[str]) -> Check:
    def check(b: Broker) -> None:
        send(b, address, *[b"%d" % i for i in range(len(queues) * 2)])
        assert [len(bodies(b, q)) for q in queues] == [2] * len(queues)
    return check


def both_types(b: Broker) -> None:
    assert set(b.address_info("foo.orders").routing_types) == \
        {RoutingType.ANYCAST, RoutingType.MULTICAST}
    assert b.queue_info("orders").routing_type == RoutingType.ANYCAST


def durable_multicast(*names: str, max_consumers: int = -1) -> Check:
    def check(b: Broker) -> None:
        for name in names:
            info = b.queue_info(name)
            assert (info.durable, info.routing_type, info.max_consumers) == \
                (True, RoutingType.MULTICAST, max_consumers)
    return check


def sharded_empty(b: Broker) -> None:
    assert b.address_info("sharded").queues == ()


def last_value(key: str) -> Check:
    def check(b: Broker) -> None:
        send(b, "my.address", b"a", **{key: "ACME"})
        send(b, "my.address", b"b", **{key: "ACME"})
        assert bodies(b, "prices1") == [b"b"]
    return check


def default_last_value(non_destructive: bool) -> Check:
    def check(b: Broker) -> None:
        b.create_address("lastValueQueue")
        b.create_queue(QueueConfig("lastValueQueue", "lastValueQueue"))
        info = b.queue_info("lastValueQueue")
        assert (info.last_value_key, info.non_destructive) == ("stock_ticker", non_destructive)
    return check


def lvq_non_destructive(b: Broker) -> None:
    info = b.queue_info("orders1")
    assert (info.last_value_key, info.non_destructive) == ("stock_ticker", True)


def expiry_delay(b: Broker) -> None:
    b.create_address("exampleQueue")
    b.create_queue(QueueConfig("exampleQueue", "exampleQueue"))
    send(b, "exampleQueue", b"x")
    with b.session() as s:
        m = next(iter(s.create_browser("exampleQueue")))
        assert 0 < m.message.expiration - m.message.timestamp <= 10


def max_consumers(n: int) -> Check:
    def check(b: Broker) -> None:
        assert b.queue_info("q3").max_consumers == n
        with b.session() as s:
            for _ in range(n if n > 0 else 3):
                s.create_consumer("q3")
            if n > 0:
                with pytest.raises(ResourceLimitError):
                    s.create_consumer("q3")
    return check


def exclusive(b: Broker) -> None:
    assert b.queue_info("orders1").exclusive


def default_exclusive(b: Broker) -> None:
    b.create_address("myQueue")
    b.create_queue(QueueConfig("myQueue", "myQueue"))
    assert b.queue_info("myQueue").exclusive


def ring_of_5(b: Broker) -> None:  # seed 004 §4.12: the queue's ring-size beats the default
    assert b.queue_info("myRing").ring_size == 5


def prefixes(b: Broker) -> None:  # the prefixes are always on
    b.create_address("p", {RoutingType.ANYCAST, RoutingType.MULTICAST})
    b.create_queue(QueueConfig("pa", "p", RoutingType.ANYCAST))
    b.create_queue(QueueConfig("pm", "p", RoutingType.MULTICAST))
    send(b, "anycast://p", b"a")
    send(b, "multicast://p", b"m")
    assert (bodies(b, "pa"), bodies(b, "pm")) == ([b"a"], [b"m"])


def retroactive(b: Broker) -> None:
    b.create_address("orders", {RoutingType.MULTICAST})
    send(b, "orders", b"early")
    b.create_queue(QueueConfig("late", "orders", RoutingType.MULTICAST))
    assert bodies(b, "late") == [b"early"]


def overlay(b: Broker) -> None:  # seed 004 §4.17: my.queue over my.*
    st = b.settings.resolve("my.queue")
    assert (st.max_delivery_attempts, st.default_last_value_queue) == (3, False)
    assert b.settings.resolve("my.other").default_last_value_queue is True


def custom_wildcards(b: Broker) -> None:
    with b.session() as s:
        b.create_address("news,@", {RoutingType.MULTICAST})
        b.create_queue(QueueConfig("all", "news,@", RoutingType.MULTICAST))
        b.create_address("news,eu", {RoutingType.MULTICAST})
        s.send("news,eu", Message(b"eu"))
    assert bodies(b, "all") == [b"eu"]


def auto_create(b: Broker) -> None:
    with b.session() as s:
        s.send("activemq.x", Message(b"m"))  # address and anycast queue created
        assert bodies(b, "activemq.x") == [b"m"]
        assert b.address_info("activemq.x").routing_types == (RoutingType.ANYCAST,)


# (seed and line, the example exactly as the seed prints it, what it must do)
EXAMPLES = [
    ("000:39", """<addresses>
<address name="myRing">
<anycast>
<queue name="myRing" ring-size="3" />
</anycast>
</address>
</addresses>""", ring_of_3),
    ("000:53", """<address-settings>
<address-setting match="ring.#">
<default-ring-size>3</default-ring-size>
</address-setting>
</address-settings>""", ring_default),
    ("004:60", """    <configuration ...>
      <core ...>
        ...
        <address name="durable">
          <anycast>
            <queue name="durable"/>
          </anycast>
        </address>
      </core>
    </configuration>""", durable_anycast),
    ("004:84", """    <configuration ...>
      <core ...>
        ...
        <address name="topic.foo">
          <multicast/>
        </address>
      </core>
    </configuration>""", topic_without_queues),
    ("004:94", """    <configuration ...>
      <core ...>
        ...
        <address name="topic.foo">
          <multicast>
            <queue name="client123.topic.foo"/>
            <queue name="client456.topic.foo"/>
          </multicast>
        </address>
      </core>
    </configuration>""", two_subscribers),
    ("004:122", """    <configuration ...>
      <core ...>
        ...
        <address name="address.foo">
          <anycast>
            <queue name="q1"/>
            <queue name="q2"/>
          </anycast>
        </address>
      </core>
    </configuration>""", round_robin("address.foo", ["q1", "q2"])),
    ("004:149", """<configuration ...>
  <core ...>
    ...
    <address name="foo.orders">
      <anycast>
        <queue name="orders"/>
      </anycast>
      <multicast/>
    </address>
  </core>
</configuration>""", both_types),
    ("004:174", """    <configuration ...>
      <core ...>
        ...
        <address name="durable.foo">
          <multicast>
            <queue name="q1">
              <durable>true</durable>
            </queue>
          </multicast>
        </address>
      </core>
    </configuration>""", durable_multicast("q1")),
    ("004:196", """    <configuration ...>
      <core ...>
        ...
        <address name="non.shared.durable.foo">
          <multicast>
            <queue name="orders1">
              <durable>true</durable>
            </queue>
            <queue name="orders2">
              <durable>true</durable>
            </queue>
          </multicast>
        </address>
      </core>
    </configuration>""", durable_multicast("orders1", "orders2")),
    ("004:213", """    <configuration ...>
      <core ...>
        ...
        <address name="non.shared.durable.foo">
          <multicast>
            <queue name="orders1" max-consumers="1">
              <durable>true</durable>
            </queue>
            <queue name="orders2" max-consumers="1">
              <durable>true</durable>
            </queue>
          </multicast>
        </address>
      </core>
    </configuration>""", durable_multicast("orders1", "orders2", max_consumers=1)),
    ("004:237", """    <configuration ...>
      <core ...>
        ...
        <addresses>
           <address name="foo">
              <anycast>
                 <queue name="q1" />
                 <queue name="q2" />
              </anycast>
           </address>
        </addresses>
      </core>
    </configuration>""", round_robin("foo", ["q1", "q2"])),
    ("004:267", """    <configuration ...>
      <core ...>
        ...
        <addresses>
           <address name="sharded"></address>
        </addresses>
      </core>
    </configuration>""", sharded_empty),
    ("004:277", """    <configuration ...>
      <core ...>
        ...
        <addresses>
           <address name="sharded">
              <anycast>
                 <queue name="q1" />
                 <queue name="q2" />
                 <queue name="q3" />
              </anycast>
           </address>
        </addresses>
    </core>
    </configuration>""", round_robin("sharded", ["q1", "q2", "q3"])),
    ("004:321", """<address name="my.address">
<multicast>
<queue name="prices1" last-value-key="stock_ticker"/>
</multicast>
</address>""", last_value("stock_ticker")),
    ("004:329", """<address name="my.address">
<multicast>
<queue name="prices1" last-value="true"/>
</multicast>
</address>""", last_value("_AMQ_LVQ_NAME")),
    ("004:374", """<address-setting match="lastValueQueue">
   <default-last-value-key>stock_ticker</default-last-value-key>
</address-setting>""", default_last_value(False)),
    ("004:424", """<address name="my.address">
   <multicast>
      <queue name="orders1" last-value-key="stock_ticker" non-destructive="true" />
   </multicast>
</address>""", lvq_non_destructive),
    ("004:441", """<address-setting match="lastValueQueue">
   <default-last-value-key>stock_ticker </default-last-value-key>
   <default-non-destructive>true</default-non-destructive>
</address-setting>""", default_last_value(True)),
    ("004:454", """<address-setting match="exampleQueue">
   <expiry-delay>10</expiry-delay>
</address-setting>""", expiry_delay),
    ("004:472", """    <configuration ...>
      <core ...>
        ...
        <addresses>
           <address name="foo">
              <anycast>
                 <queue name="q3" max-consumers="20"/>
              </anycast>
           </address>
        </addresses>
      </core>
    </configuration>""", max_consumers(20)),
    ("004:486", """    <configuration ...>
      <core ...>
        ...
        <address name="foo">
          <anycast>
            <queue name="q3" max-consumers="1"/>
          </anycast>
        </address>
      </core>
    </configuration>""", max_consumers(1)),
    ("004:498", """    <configuration ...>
      <core ...>
        ...
        <address name="foo">
          <anycast>
             <queue name="q3" max-consumers="-1"/>
          </anycast>
        </address>
      </core>
    </configuration>""", max_consumers(-1)),
    ("004:517", """<configuration ...>
  <core ...>
    ...
    <address name="foo.bar">
      <multicast>
        <queue name="orders1" exclusive="true"/>
      </multicast>
    </address>
  </core>
</configuration>""", exclusive),
    ("004:535", """<address-setting match="myQueue">
    <default-exclusive-queue>true</default-exclusive-queue>
</address-setting>""", default_exclusive),
    ("004:556+566", """    <address-settings>
       <address-setting match="ring.#">
          <default-ring-size>3</default-ring-size>
       </address-setting>
    </address-settings>
    <addresses>
       <address name="myRing">
          <anycast>
             <queue name="myRing" ring-size="5" />
          </anycast>
       </address>
    </addresses>""", ring_of_5),
    ("004:641", """<configuration ...>
  <core ...>
    ...
      <acceptors>
         <!-- Acceptor for every supported protocol -->
         <acceptor name="artemis">tcp://0.0.0.0:61616?protocols=AMQP;anycastPrefix=anycast://</acceptor>
      </acceptors>
    ...
  </core>
</configuration>""", prefixes),
    ("004:655", """<configuration ...>
  <core ...>
    ...
      <acceptors>
         <!-- Acceptor for every supported protocol -->
         <acceptor name="artemis">tcp://0.0.0.0:61616?protocols=AMQP;multicastPrefix=multicast://</acceptor>
      </acceptors>
    ...
  </core>
</configuration>""", prefixes),
    ("004:681", """    <configuration>
      <core>
        ...
        <address-settings>
           <address-setting match="orders">
              <retroactive-message-count>100</retroactive-message-count>
           </address-setting>
        </address-settings>
    ...
      </core>
    </configuration>""", retroactive),
    ("004:755", """<address-setting match="my.*">
    <max-delivery-attempts>3</max-delivery-attempts>
    <last-value-queue>true</last-value-queue>
</address-setting>
<address-setting match="my.queue">
    <last-value-queue>false</last-value-queue>
</address-setting>""", overlay),
    ("004:791", """<configuration>
  <core>
    ...
    <wildcard-addresses> 1
      <enabled>true</enabled> 2
      <delimiter>,</delimiter> 3
      <any-words>@</any-words> 4
      <single-word>$</single-word> 5
    </wildcard-addresses>
    ...
  </core>
</configuration>""", custom_wildcards),
    ("004:852", """<configuration ...>
 <core ...>
  ...
  <address-settings>
    <address-setting match="activemq.#"> 1
      <auto-create-addresses>true</auto-create-addresses> 2
      <auto-delete-addresses>true</auto-delete-addresses> 3
      <auto-create-queues>true</auto-create-queues> 4
      <auto-delete-queues>true</auto-delete-queues> 5
      <default-address-routing-type>ANYCAST</default-address-routing-type> 6
    </address-setting>
  </address-settings>
  ...
 </core>
</configuration>""", auto_create),
]


@pytest.mark.parametrize("where,xml,check", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_each_seed_example_loads_as_printed_and_does_what_the_seed_says(
        tmp_path: Path, where: str, xml: str, check: Check) -> None:
    path = tmp_path / "broker.xml"
    path.write_text(xml)
    with Broker.open(str(tmp_path / "s"), config=str(path)) as b:
        check(b)
    with Broker.open(str(tmp_path / "s"), config=str(path)) as b:  # again: nothing doubled
        assert len(b.queue_names()) == len(set(b.queue_names()))


def test_toml_says_the_same(tmp_path: Path) -> None:
    path = tmp_path / "mqstore.toml"
    path.write_text("""
global-max-size = "1MiB"
[wildcard-addresses]
delimiter = "."
[address-settings."ring.#"]
default-ring-size = 3
[address-settings."my.*"]
max-delivery-attempts = 3
last-value-queue = true
[addresses.myRing]
anycast = [{ name = "myRing", ring-size = 3 }]
[addresses."topic.foo"]
multicast = [{ name = "client123.topic.foo" }, { name = "client456.topic.foo", durable = false }]
""")
    with Broker.open(str(tmp_path / "s"), config=str(path)) as b:
        ring_of_3(b)
        ring_default(b)
        two_subscribers(b)
        assert not b.queue_info("client456.topic.foo").durable
        assert b.settings.resolve("my.x").max_delivery_attempts == 3
        assert b.sizes.global_max_size == 1 << 20


def test_a_changed_ring_size_is_applied_at_the_next_open(tmp_path: Path) -> None:
    path = tmp_path / "broker.xml"
    path.write_text('<address name="r"><anycast><queue name="r" ring-size="5"/></anycast>'
                    '</address>')
    Broker.open(str(tmp_path / "s"), config=str(path)).close()
    path.write_text(path.read_text().replace('"5"', '"2"'))
    with Broker.open(str(tmp_path / "s"), config=str(path)) as b:
        assert b.queue_info("r").ring_size == 2


@pytest.mark.parametrize("xml,where,why", [
    ('<address-setting match="#"><max-delivery-atempts>3</max-delivery-atempts>'
     '</address-setting>', "address-setting[@match='#']", "unknown element"),
    ('<address-setting match="#"><max-delivery-attempts>three</max-delivery-attempts>'
     '</address-setting>', "max-delivery-attempts", "not a number"),
    ('<address-setting match="#"><address-full-policy>PAUSE</address-full-policy>'
     '</address-setting>', "address-full-policy", "PAGE"),
    ('<address name="a"><anycast><queue name="q" ring-sise="3"/></anycast></address>',
     "queue[@name='q']", "unknown attribute"),
    ('<address name="a b"><anycast/></address>', "addresses['a b']", "no spaces"),
    ('<address name="a"><anycast><queue name="q"></anycast></address>', "line 1",
     "not well-formed"),
    ('<!DOCTYPE x [<!ENTITY e "boom">]><address name="&e;"/>', "document", "refused"),
    ('<wildcard-addresses><enabled>false</enabled></wildcard-addresses>', "enabled",
     "not supported"),
    ('<acceptor name="a">tcp://h:1?anycastPrefix=queue://</acceptor>', "acceptor",
     "always anycast://"),
])
def test_a_file_that_cannot_be_applied_is_refused_before_the_store_is_touched(
        tmp_path: Path, xml: str, where: str, why: str) -> None:
    path = tmp_path / "broker.xml"
    path.write_text(xml)
    with pytest.raises(ConfigError) as got:
        Broker.open(str(tmp_path / "s"), config=str(path))
    text = str(got.value)
    assert str(path) in text and where in text and why in text, text
    assert not (tmp_path / "s").exists()


def test_toml_errors_name_the_key(tmp_path: Path) -> None:
    for text, where in (('[address-settings."#"]\nmax-size-bytes = "ten"', "max-size-bytes"),
                        ('[adresses.a]\nanycast = []', "adresses"),
                        ('[addresses.a]\nanycast = [{ name = "q", ring = 1 }]', "ring"),
                        ("addresses = 3", "addresses")):
        with pytest.raises(ConfigError, match=where):
            parse_toml(text, "f.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse_toml("a = ", "f.toml")
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config("/nonexistent/broker.xml")


def test_what_is_not_applied_is_reported_and_logged(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    xml = """<?xml version="1.0"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <journal-directory>data/journal</journal-directory>
  <address-settings><address-setting match="#">
    <page-size-bytes>10M</page-size-bytes><max-size-bytes>10MB</max-size-bytes>
  </address-setting></address-settings>
  <addresses><address name="a"><anycast>
    <queue name="a" purge-on-no-consumers="true"/></anycast></address></addresses>
</core></configuration>"""
    cfg = parse_xml(xml, "b.xml")
    assert cfg.address_settings["#"].max_size_bytes == 10 << 20
    assert [n.split(" ")[0] for n in cfg.notes] == \
        ["<journal-directory>", "<page-size-bytes>", "queue"]
    path = tmp_path / "broker.xml"
    path.write_text(xml)
    with caplog.at_level(logging.WARNING, "mqstore.engine"):
        Broker.open(str(tmp_path / "s"), config=str(path)).close()
    assert sum("not applied" in r.getMessage() for r in caplog.records) == 3


def test_open_arguments_and_the_file_must_agree(tmp_path: Path) -> None:
    from mqstore.engine.addressing.wildcards import WildcardSyntax
    path = tmp_path / "broker.xml"
    path.write_text("<global-max-size>100</global-max-size>")
    with pytest.raises(ConfigError, match="global_max_size"):
        Broker.open(str(tmp_path / "s"), config=str(path), global_max_size=5)
    path.write_text("<wildcard-addresses><delimiter>/</delimiter></wildcard-addresses>")
    with pytest.raises(ConfigError, match="wildcard_syntax"):
        Broker.open(str(tmp_path / "s"), config=str(path),
                    wildcard_syntax=WildcardSyntax(delimiter=","))


def test_a_queue_the_stores_address_cannot_take_is_refused_before_anything_is_made(
        tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("orders", {RoutingType.MULTICAST})
    path = tmp_path / "broker.xml"
    path.write_text('<address name="new"><anycast/></address>'
                    '<address name="orders"><anycast><queue name="o"/></anycast></address>')
    with pytest.raises(ConfigError, match="queue 'o' is anycast"):
        Broker.open(str(tmp_path / "s"), config=str(path))
    with Broker.open(str(tmp_path / "s")) as b:
        assert b.address_names() == ["orders"]


# any file, made of the vocabulary a broker.xml uses and random values: a BrokerConfig or a
# ConfigError, never another exception
_TAGS = ["configuration", "core", "addresses", "address", "anycast", "multicast", "queue",
         "address-settings", "address-setting", "wildcard-addresses", "delimiter", "any-words",
         "single-word", "enabled", "global-max-size", "durable", "filter", "acceptors",
         "acceptor", "max-size-bytes", "default-ring-size", "address-full-policy",
         "default-address-routing-type", "redelivery-delay-multiplier", "dead-letter-address",
         "page-size-bytes", "bogus"]
_ATTRS = ["name", "match", "ring-size", "max-consumers", "exclusive", "string", "last-value",
          "purge-on-no-consumers", "odd"]
_VALUES = st.one_of(st.sampled_from(["", "-1", "0", "3", "10MB", "1GiB", "true", "false",
                                     "TRUE", "PAGE", "ANYCAST", "a.#", "#", "a b", "a#b", ",",
                                     "1.5", "nan", "x" * 300, "tcp://h:1?anycastPrefix=q://"]),
                    st.text(max_size=8))


@st.composite
def _element(draw: st.DrawFn, depth: int = 0) -> str:
    tag = draw(st.sampled_from(_TAGS))
    attrs = draw(st.dictionaries(st.sampled_from(_ATTRS), _VALUES, max_size=3))
    text = "".join(f' {k}="{escape(v, {chr(34): "&quot;"})}"' for k, v in attrs.items())
    children = draw(st.lists(_element(depth + 1), max_size=3)) if depth < 3 else []
    body = "".join(children) or escape(draw(_VALUES))
    return f"<{tag}{text}>{body}</{tag}>"


@settings(max_examples=300, deadline=None)
@given(xml=st.lists(_element(), min_size=1, max_size=3).map("".join))
def test_any_broker_xml_is_a_config_or_a_config_error(xml: str) -> None:
    try:
        parse_xml(xml, "f.xml")
    except ConfigError:
        pass


_TOML_VALUES = st.recursive(
    st.one_of(st.booleans(), st.integers(-5, 2**70), st.floats(allow_nan=True),
              st.sampled_from(["", "3", "10MB", "true", "PAGE", "a.#", "a b", "#"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(_TAGS + _ATTRS + ["anycast"]),
                                            inner, max_size=3)), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(data=st.dictionaries(st.sampled_from(["global-max-size", "wildcard-addresses",
                                             "address-settings", "addresses", "other"]),
                            _TOML_VALUES, max_size=4))
def test_any_toml_table_is_a_config_or_a_config_error(data: dict) -> None:
    try:
        from_mapping(data, "f.toml")
    except ConfigError:
        pass


# -- issue 36 item 8: hostile configuration files get a ConfigError, quickly ---------------------

@pytest.mark.parametrize("name,text", [
    ("broker.xml", "<configuration>" + "<x>" * 50_000 + "</x>" * 50_000 + "</configuration>"),
    ("broker.xml", "<configuration><core>" + "<core>" * 50_000 + "</core>" * 50_000 +
     "</core></configuration>"),
    ("mqstore.toml", "a = " + "[" * 5_000 + "]" * 5_000),
    ("mqstore.toml", "a = " + "{b=" * 3_000 + "1" + "}" * 3_000),
    ("mqstore.toml", "[addresses.a]\nanycast = " + "[" * 200 + "]" * 200),
], ids=["xml-unknown", "xml-containers", "toml-arrays", "toml-tables", "toml-in-a-queue"])
def test_deep_nesting_is_a_config_error_not_a_recursion_error(
        tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match="nest deeper than"):
        load_config(str(path))
    with pytest.raises(ConfigError):
        Broker.open(str(tmp_path / "s"), config=str(path))
    assert not (tmp_path / "s").exists()  # refused before the store is touched


def test_a_size_value_with_a_long_run_of_blanks_is_refused_at_once() -> None:
    """Two adjacent optional runs of blanks in the size pattern backtracked quadratically: "1",
    30,000 spaces and "x" took 10-31 s. A number's text is bounded (64 characters) before any
    pattern sees it, and the pattern has one run of blanks."""
    with pytest.raises(ConfigError, match=r"30,002 characters\) is not a number"):
        parse_toml('global-max-size = "1' + " " * 30_000 + 'x"')
    with pytest.raises(ConfigError, match="is not a number"):
        parse_xml("<core><global-max-size>1" + " " * 50 + "x</global-max-size></core>")
    assert parse_toml('global-max-size = "100 MiB"').global_max_size == 100 << 20
    assert parse_xml("<core><global-max-size> 2 kb </global-max-size></core>"
                     ).global_max_size == 2048


@pytest.mark.parametrize("value", ["1000000000000000000000000000000", "-2", '"9223372036854775808"'])
def test_global_max_size_is_checked_once_for_the_file_and_for_open(value: str) -> None:
    """A global-max-size that ``Broker.open`` refuses is refused by the file's own check (and
    so by ``mqstore config check``), with the same bounds."""
    with pytest.raises(ConfigError, match="global-max-size"):
        parse_toml(f"global-max-size = {value}")
