"""Artemis filter expressions (issue 15): the JMS selector grammar over message properties and
headers, parsed with lark, never evaluated as Python; three-valued logic as JMS 1.1 §3.8.1."""

from __future__ import annotations

import pytest

from mqstore.engine import FilterSyntaxError, InvalidArgumentError, Message
from mqstore.engine.filters.expression import parse_filter

MSG = Message(b"body!", {"color": "red", "weight": 12, "ratio": 2.5, "urgent": True,
                         "name": "it's", "under_score": "x", "dollar$": 1, "blob": b"\x00",
                         "none": None, "order-id": "A-1", "_AMQ_GROUP_ID": "g1"},
              priority=7, expiration=5000, timestamp=1000)
MSG.address = "orders.eu"


def match(text: str, msg: Message = MSG) -> bool:
    flt = parse_filter(text)
    assert flt is not None
    return flt.matches(msg)


@pytest.mark.parametrize("text", [
    "color = 'red'", "color <> 'blue'", "weight > 10 AND weight <= 12", "weight = 12.0",
    "ratio * 2 = 5", "weight / 5 = 2", "-weight = -12", "weight - -1 = 13", "(weight + 3) * 2 = 30",
    "weight BETWEEN 12 AND 20", "weight NOT BETWEEN 1 AND 11", "color IN ('red', 'green')",
    "color NOT IN ('blue')", "color LIKE 'r%'", "color LIKE '_ed'", "name LIKE 'it''s'",
    "under_score LIKE 'x'", "order-id IS NULL", "hyphenated_props:order-id = 'A-1'",
    "missing IS NULL", "none IS NULL", "color IS NOT NULL", "urgent", "urgent = TRUE",
    "NOT urgent = FALSE", "missing = 1 OR urgent", "dollar$ = 1",
    "color = 'red' and weight > 1 or false", "AMQPriority = 7", "JMSPriority > 5",
    "AMQExpiration = 5000", "AMQTimestamp = 1000", "JMSTimestamp < 2000",
    "AMQDurable = 'DURABLE'", "JMSDeliveryMode = 'PERSISTENT'", "AMQAddress LIKE 'orders.%'",
    "AMQSize = 5", "AMQGroupID = 'g1'", "weight = 0xC", "weight = 014", "weight = 12L",
    "ratio = 2.5F", "ratio = 25e-1", "ratio > .5",
])
def test_true(text: str) -> None:
    assert match(text)


@pytest.mark.parametrize("text", [
    "color = 'blue'", "weight < 12", "color = 12", "weight = '12'",  # kinds differ: unknown
    "missing = 1", "missing <> 1", "NOT missing = 1",  # NULL: unknown, NOT unknown: unknown
    "missing > 1 OR missing < 1", "missing BETWEEN 1 AND 2", "missing NOT BETWEEN 1 AND 2",
    "missing IN ('a')", "missing NOT IN ('a')", "missing LIKE '%'", "weight LIKE '1%'",
    "blob IS NOT NULL",  # bytes are not selectable: NULL to a selector
    "color LIKE 'R%'",  # values are case-sensitive
    "weight / 0 = 1", "NOT (weight / 0 = 1)", "urgent AND missing = 1", "weight",
    "color = 'red' AND NOT urgent", "AMQDurable = 'NON_DURABLE'", "Color = 'red'",
])
def test_false_or_unknown(text: str) -> None:
    assert not match(text)


def test_like_escape_and_integer_division() -> None:
    msg = Message(b"", {"code": "50%_off", "n": -7})
    assert match(r"code LIKE '50\%\_off' ESCAPE '\'", msg)
    assert not match(r"code LIKE '50\%\_of' ESCAPE '\'", msg)
    assert match("code LIKE '50!%%' ESCAPE '!'", msg)
    assert match("n / 2 = -3", msg)  # Java long division truncates toward zero
    assert not match("n / 2 = -4", msg)


def test_non_durable_headers() -> None:
    msg = Message(b"", durable=False)
    assert match("AMQDurable = 'NON_DURABLE'", msg)
    assert match("JMSDeliveryMode = 'NON_PERSISTENT'", msg)
    assert match("AMQUserID IS NULL", msg)  # no id before the broker gives one


@pytest.mark.parametrize("text", [
    "color = ", "color === 'x'", "__import__('os').system('true')", "color = 'red",
    "AND", "weight IN (1, 2)", "weight < 'x'", "TRUE > FALSE", "x LIKE y",
    "x LIKE 'a' ESCAPE 'ab'", "NULL = 1", "a b", "(a = 1", "a = 1)", "a == 1",
    "color = \"red\"",
])
def test_bad_expressions_are_refused_with_a_typed_error(text: str) -> None:
    with pytest.raises(FilterSyntaxError) as exc:
        parse_filter(text)
    assert isinstance(exc.value, InvalidArgumentError)
    assert repr(text) in str(exc.value)


def test_error_names_the_position_and_the_argument() -> None:
    with pytest.raises(FilterSyntaxError) as exc:
        parse_filter("color = 'red' AND AND", "selector")
    assert exc.value.position == 18
    assert exc.value.field == "selector"
    assert "at character 19" in str(exc.value)


def test_no_filter_and_wrong_types() -> None:
    assert parse_filter(None) is None
    assert parse_filter("   ") is None
    with pytest.raises(InvalidArgumentError):
        parse_filter(12)  # type: ignore[arg-type]


# -- issue 36 item 1: an accepted filter compiles again at every open, at any stack depth --------

def _with_little_stack(frames_left: int, fn):  # type: ignore[no-untyped-def]
    """Call ``fn()`` with only ``frames_left`` frames of Python stack above this one (as a
    filter compiled deep inside recovery, or a message matched deep inside a send, has)."""
    import inspect
    import sys
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + frames_left)
    try:
        return fn()
    finally:
        sys.setrecursionlimit(old)


@pytest.mark.parametrize("text", [
    " AND ".join(f"p{i} = 1" for i in range(3000)),
    " OR ".join(f"p{i} = 1" for i in range(3000)) + " OR color = 'red'",
    " + ".join(["weight"] * 3000) + " = 36000",
    " * ".join(["1"] * 3000) + " = 1",
    "(" * 3000 + "color = 'red'" + ")" * 3000,
    "NOT " * 40 + "color = 'red'",
])
def test_an_accepted_filter_compiles_and_matches_with_a_shallow_stack(text: str) -> None:
    """A chain of AND, OR, + or * terms of any length is one level: it compiles and evaluates
    in a loop, so whatever is accepted compiles again and matches with 150 frames of stack
    (before: a chain of ~490 terms needed over 1,000, and recovery compiles deeper in the stack
    than ``create_queue``: the store would not open again)."""
    flt = parse_filter(text)
    assert flt is not None
    parse_filter.__globals__["_compiled"].cache_clear()
    got = _with_little_stack(150, lambda: parse_filter(text).matches(MSG))  # type: ignore[union-attr]
    assert got == flt.matches(MSG)
    assert got is (not text.startswith(" AND ") and "p0 = 1 AND" not in text)


@pytest.mark.parametrize("text", [
    "NOT " * 1000 + "color = 'red'",
    "-" * 1000 + "weight = 12",
    "(" * 1000 + "NOT " * 1000 + "color = 'red'" + ")" * 1000,
])
def test_nesting_past_the_bound_is_refused_with_a_typed_error(text: str) -> None:
    from mqstore.engine.filters.expression import MAX_NESTING
    with pytest.raises(FilterSyntaxError, match=f"nests deeper than {MAX_NESTING} levels"):
        _with_little_stack(150, lambda: parse_filter(text))


def test_a_text_past_the_length_bound_is_refused_and_the_message_is_short() -> None:
    from mqstore.engine.filters.expression import MAX_FILTER_CHARS
    text = "color = '" + "x" * MAX_FILTER_CHARS + "'"
    with pytest.raises(FilterSyntaxError) as err:
        parse_filter(text)
    assert "characters long" in str(err.value) and len(str(err.value)) < 400


def test_a_journaled_filter_that_no_longer_compiles_does_not_make_the_store_unopenable(
        tmp_path, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    """A store written by a version that accepted a filter this one refuses opens: the queue
    is routed nothing new, keeps what it holds, and the open says so (report and log)."""
    from mqstore import Broker, QueueConfig, RoutingType
    from mqstore.engine.filters import expression as filters
    deep = "NOT " * 10 + "color = 'red'"
    b = Broker.open(str(tmp_path))
    b.create_address("a", routing_types={RoutingType.ANYCAST})
    b.create_queue(QueueConfig(name="deep", address="a", routing_type=RoutingType.ANYCAST,
                               filter=deep))
    b.create_queue(QueueConfig(name="all", address="a", routing_type=RoutingType.ANYCAST))
    with b.session() as s:
        s.send("a", Message(b"1", {"color": "red"}))
    assert b.queue_info("deep").message_count + b.queue_info("all").message_count == 1
    held = b.queue_info("deep").message_count
    b.close()
    monkeypatch.setattr(filters, "MAX_NESTING", 5)
    filters._compiled.cache_clear()
    sent = 1
    for rebuild in (False, True):
        b = Broker.open(str(tmp_path), rebuild_index=rebuild)
        try:
            assert any("'deep'" in w for w in b.recovery_report.warnings)
            assert "queue 'deep'" in caplog.text
            assert b.queue_info("deep").message_count == held
            with b.session() as s:
                for _ in range(4):
                    s.send("a", Message(b"2", {"color": "red"}))  # "deep" would match
            sent += 4
            assert b.queue_info("deep").message_count == held  # routed nothing new
            assert b.queue_info("all").message_count == sent - held
        finally:
            b.close()
