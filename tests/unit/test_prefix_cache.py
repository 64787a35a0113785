"""PrefixCache: longest-prefix lookup, copies handed out, LRU eviction (a list stands in for a KV cache)."""

from __future__ import annotations

import pytest

from serve.prefix_cache import PrefixCache, common_prefix


class FakeKV(list):
    """A 'cache' of one entry per position; crop(-n) drops the last n, as transformers' DynamicCache."""

    def get_seq_length(self) -> int:
        return len(self)

    def crop(self, n: int) -> None:
        assert n < 0
        del self[n:]


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([5], [1]) == 0


def test_lookup_cuts_a_copy_to_the_longest_common_prefix_and_leaves_a_token_to_read() -> None:
    cache = PrefixCache(entries=4, min_tokens=2)
    stored = FakeKV(range(10))
    cache.store(list(range(10)), stored)
    k, kv = cache.lookup([0, 1, 2, 3, 9, 9])
    assert (k, kv) == (4, list(range(4)))
    kv.append("mine")  # a copy: the stored cache is untouched
    assert cache.lookup(list(range(10)))[0] == 9  # the same prompt again: one token left to read
    assert stored == list(range(10))
    assert (cache.hits, cache.tokens_reused) == (2, 13)


def test_short_prefixes_miss_and_short_prompts_are_not_kept() -> None:
    cache = PrefixCache(entries=4, min_tokens=3)
    cache.store([1, 2, 3, 4], FakeKV("abcd"))
    assert cache.lookup([1, 2, 9]) == (0, None)
    cache.store([7, 8], FakeKV("xy"))
    assert len(cache) == 1 and cache.misses == 1


def test_store_cuts_what_was_generated_after_the_prompt_and_evicts_the_least_recent() -> None:
    cache = PrefixCache(entries=2, min_tokens=1)
    generated = FakeKV("abcdef")  # the prompt's 4 positions and 2 generated
    cache.store([1, 2, 3, 4], generated)
    assert generated == list("abcd")
    cache.store([5, 6], FakeKV("ef"))
    cache.lookup([1, 2, 3, 4, 5])  # the first is now the most recent
    cache.store([7, 8], FakeKV("gh"))
    assert cache.lookup([5, 6, 0]) == (0, None)  # evicted
    assert cache.lookup([1, 2, 3, 0])[0] == 3


def test_off_and_bad_settings() -> None:
    off = PrefixCache(entries=0, min_tokens=1)
    off.store([1, 2, 3], FakeKV("abc"))
    assert len(off) == 0 and off.lookup([1, 2, 3]) == (0, None)
    with pytest.raises(ValueError):
        PrefixCache(entries=-1, min_tokens=1)
    with pytest.raises(ValueError):
        PrefixCache(entries=1, min_tokens=0)
