"""The wildcard table of seed 004 §4.17, and the ordering of matches."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqstore.engine import AddressSettings, Broker
from mqstore.engine.errors import InvalidArgumentError, MqStoreError
from mqstore.engine.addressing.wildcards import WildcardSyntax, matches, matching

TABLE = [
    ("#", "news.europe.sport", True),
    ("news.europe.#", "news.europe", True),
    ("news.europe.#", "news.europe.sport", True),
    ("news.europe.#", "news.europe.politics.fr", True),
    ("news.europe.#", "news.usa", False),
    ("news.europe.#", "europe", False),
    ("news.*", "news.europe", True),
    ("news.*", "news.usa", True),
    ("news.*", "news.europe.sport", False),
    ("news.*.sport", "news.europe.sport", True),
    ("news.*.sport", "news.usa.sport", True),
    ("news.*.sport", "news.europe.fr.sport", False),
    ("my", "myqueue", False),  # matching is by words, not characters
]


@pytest.mark.parametrize("pattern,address,expected", TABLE)
def test_wildcard_table(pattern: str, address: str, expected: bool) -> None:
    assert matches(pattern, address) is expected


def test_least_specific_first() -> None:
    assert matching(["my.queue", "#", "my.*", "my.#"], "my.queue") == \
        ["#", "my.#", "my.*", "my.queue"]


def test_equal_kinds_the_earliest_literal_word_wins() -> None:
    """Artemis's ordering among patterns of one kind: the earlier the first literal word,
    the more specific (overlaid later); then more literal words."""
    assert matching(["*.books.eu", "orders.*.eu", "*.*.eu", "orders.*.*"],
                    "orders.books.eu") == ["*.*.eu", "*.books.eu", "orders.*.*", "orders.*.eu"]
    assert matching(["#.eu", "orders.#", "orders.books.#"], "orders.books.eu") == \
        ["#.eu", "orders.#", "orders.books.#"]


def test_equal_kinds_decide_the_effective_settings(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s"), address_settings={
            "*.books.eu": AddressSettings(max_delivery_attempts=2, expiry_delay=100),
            "orders.*.eu": AddressSettings(max_delivery_attempts=7)}) as b:
        got = b.address_settings("orders.books.eu")
        assert (got.max_delivery_attempts, got.expiry_delay) == (7, 100)


def test_custom_syntax() -> None:
    syntax = WildcardSyntax(delimiter=",", any_words="@", single_word="$")
    assert matches("news,@", "news,europe,sport", syntax)
    assert matches("news,$,sport", "news,usa,sport", syntax)
    assert not matches("news,$", "news,europe,sport", syntax)
    assert not matches("news.#", "news,europe", syntax)
    with pytest.raises(InvalidArgumentError) as err:
        WildcardSyntax(delimiter=".", any_words=".", single_word="*")
    assert isinstance(err.value, MqStoreError) and isinstance(err.value, ValueError)
