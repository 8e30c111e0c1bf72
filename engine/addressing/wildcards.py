"""Artemis wildcard syntax for address settings (Artemis addressing §4.17).

Words are separated by the delimiter (``.``); ``#`` matches any sequence of zero or more words,
``*`` exactly one word. Matching works on whole words: ``my`` does not match ``myqueue``. When
several patterns match, settings are overlaid from the least specific to the most specific:
a pattern with ``#`` is less specific than one with ``*`` (and no ``#``), which is less specific
than a literal (the seed's rule). Among patterns of the same kind, Artemis's ordering decides:
the one whose first literal word comes earliest is more specific (``orders.*.eu`` over
``*.books.eu`` for ``orders.books.eu``: a wildcard later in the name narrows less); then more
literal words, then more words. All three characters can be replaced
(``<wildcard-addresses>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Sequence, Set, Tuple

from ..errors import InvalidArgumentError


@dataclass(frozen=True)
class WildcardSyntax:
    """The delimiter, any-words and single-word characters (defaults ``.``, ``#``, ``*``).

    Raises:
        InvalidArgumentError: the three are not distinct single characters (also a
            ValueError).
    """

    delimiter: str = "."
    any_words: str = "#"
    single_word: str = "*"

    def __post_init__(self) -> None:
        chars = (self.delimiter, self.any_words, self.single_word)
        if any(not isinstance(c, str) or len(c) != 1 for c in chars) or len(set(chars)) != 3:
            raise InvalidArgumentError("wildcard syntax", "the delimiter, any-words and "
                                       "single-word characters must be three different single "
                                       f"characters (got {chars!r}; Artemis's are '.', '#', "
                                       "'*')")


DEFAULT_SYNTAX = WildcardSyntax()


def is_wild(name: str, syntax: WildcardSyntax = DEFAULT_SYNTAX) -> bool:
    """Whether ``name`` is a wildcard expression (a word is the any-words or single-word
    character): an address a consumer, a subscription or a queue may be bound to, which takes
    what is sent to every address it matches, and which no message is sent to."""
    if syntax.any_words not in name and syntax.single_word not in name:
        return False
    return any(w in (syntax.any_words, syntax.single_word) for w in name.split(syntax.delimiter))


def matches(pattern: str, address: str, syntax: WildcardSyntax = DEFAULT_SYNTAX) -> bool:
    """Whether ``address`` matches the wildcard ``pattern``."""
    return _match(tuple(pattern.split(syntax.delimiter)), tuple(address.split(syntax.delimiter)),
                  syntax.any_words, syntax.single_word)


@lru_cache(maxsize=4096)
def _match(pat: Tuple[str, ...], words: Tuple[str, ...], any_words: str, single: str) -> bool:
    if not pat:
        return not words
    head, rest = pat[0], pat[1:]
    if head == any_words:
        return any(_match(rest, words[i:], any_words, single) for i in range(len(words) + 1))
    if not words:
        return False
    if head == single or head == words[0]:
        return _match(rest, words[1:], any_words, single)
    return False


def specificity(pattern: str, syntax: WildcardSyntax = DEFAULT_SYNTAX
                ) -> Tuple[int, int, int, int]:
    """A sort key, ascending from least to most specific: the kind (``#``, ``*``, literal),
    how early the first literal word comes, how many literal words, how many words."""
    words = pattern.split(syntax.delimiter)
    wild = (syntax.any_words, syntax.single_word)
    klass = 0 if syntax.any_words in words else 1 if syntax.single_word in words else 2
    first = next((i for i, w in enumerate(words) if w not in wild), len(words))
    literal = sum(1 for w in words if w not in wild)
    return (klass, -first, literal, len(words))


def matching(patterns: Sequence[str], address: str,
             syntax: WildcardSyntax = DEFAULT_SYNTAX) -> List[str]:
    """The patterns matching ``address``, least specific first."""
    return sorted((p for p in patterns if matches(p, address, syntax)),
                  key=lambda p: specificity(p, syntax))


class WildcardIndex:
    """A broker's wildcard addresses and, per address sent to, those that match it (Artemis
    addressing §4.17, "when creating consumers"; Artemis's ``WildcardAddressManager``): a queue
    bound to ``news.#`` takes what is sent to ``news.europe`` as if it were bound there too. Guarded
    by the broker lock; the cache is dropped whenever a wildcard address comes or goes.

    Args:
        syntax: the broker's wildcard characters (``<wildcard-addresses>``).
    """

    def __init__(self, syntax: WildcardSyntax = DEFAULT_SYNTAX) -> None:
        self.syntax = syntax
        self.names: Set[str] = set()
        self._cache: Dict[str, Tuple[str, ...]] = {}

    def is_wild(self, name: str) -> bool:
        """Whether ``name`` is a wildcard expression in this broker's syntax."""
        return is_wild(name, self.syntax)

    def added(self, name: str) -> None:
        """Address ``name`` was created (or loaded at open)."""
        if self.is_wild(name):
            self.names.add(name)
            self._cache.clear()

    def removed(self, name: str) -> None:
        """Address ``name`` was deleted."""
        if name in self.names:
            self.names.discard(name)
            self._cache.clear()
        else:
            self._cache.pop(name, None)

    def matching(self, address: str) -> Tuple[str, ...]:
        """The wildcard addresses matching ``address`` (a plain address), in name order."""
        if not self.names:
            return ()
        found = self._cache.get(address)
        if found is None:
            found = tuple(sorted(w for w in self.names if matches(w, address, self.syntax)))
            self._cache[address] = found
        return found
