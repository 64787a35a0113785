import numpy as np

from memory.hnsw_index import ExactIndex, HnswIndex
from tests.doubles import unit_vectors


def recall_at_k(index, reference, queries, k):
    hits = 0
    for q in queries:
        got, _ = index.search(q, k)
        want, _ = reference.search(q, k)
        hits += len(set(got.tolist()) & set(want.tolist()))
    return hits / (k * len(queries))


# The tier's own settings: M=16, ef_construction=200, ef=50, queried with k=100 (hnswlib uses max(ef, k)).
# Random Gaussian vectors are harder for HNSW than real sentence embeddings.
def test_recall_against_brute_force():
    dim, n, k = 32, 3000, 100
    vectors = unit_vectors(n, dim, 1)
    hnsw, exact = HnswIndex(dim, n, M=16, ef_construction=200, ef=50), ExactIndex(dim, n)
    slots = np.arange(n)
    hnsw.add(slots, vectors)
    exact.add(slots, vectors)
    assert recall_at_k(hnsw, exact, unit_vectors(200, dim, 2), k) >= 0.95


def test_recall_holds_after_deleting_and_reusing_slots():
    dim, n, k = 32, 2000, 100
    hnsw, exact = HnswIndex(dim, n, M=16, ef_construction=200, ef=50), ExactIndex(dim, n)
    first = unit_vectors(n, dim, 3)
    hnsw.add(np.arange(n), first)
    exact.add(np.arange(n), first)
    rng = np.random.default_rng(4)
    for round_ in range(3):  # churn: free a third of the slots, refill them with new vectors
        freed = rng.choice(n, size=n // 3, replace=False)
        hnsw.remove(freed)
        exact.remove(freed)
        fresh = unit_vectors(len(freed), dim, 10 + round_)
        hnsw.add(freed, fresh)
        exact.add(freed, fresh)
    assert len(hnsw) == n
    assert recall_at_k(hnsw, exact, unit_vectors(200, dim, 5), k) >= 0.95


def test_deleted_slots_are_not_returned_and_similarity_is_cosine():
    dim = 16
    vectors = unit_vectors(50, dim, 6)
    index = HnswIndex(dim, 50)
    index.add(np.arange(50), vectors)
    index.remove(np.array([7]))
    slots, sims = index.search(vectors[7], 50)
    assert 7 not in slots.tolist() and len(slots) == 49
    slots, sims = index.search(vectors[3], 1)
    assert slots[0] == 3 and abs(sims[0] - 1.0) < 1e-5


def test_search_on_empty_or_small_index():
    index = HnswIndex(8, 10)
    slots, sims = index.search(np.ones(8, dtype=np.float32), 5)
    assert len(slots) == 0 and len(sims) == 0
    index.add(np.array([0, 1]), unit_vectors(2, 8))
    assert len(index.search(unit_vectors(1, 8)[0], 100)[0]) == 2


def test_search_recovers_when_hnswlib_cannot_fill_k():
    index = HnswIndex(8, 20)
    vectors = unit_vectors(20, 8, 7)
    index.add(np.arange(20), vectors)

    class Flaky:
        """hnswlib's failure mode: the default beam ends with fewer than k live results."""

        def __init__(self, real):
            self.real, self.calls = real, []

        def knn_query(self, query, k):
            self.calls.append((k, self.real.ef))
            if len(self.calls) == 1:
                raise RuntimeError("Cannot return the results in a contiguous 2D array. Probably ef or M is too small")
            return self.real.knn_query(query, k=k)

        def __getattr__(self, name):
            return getattr(self.real, name)

    flaky = Flaky(index._index)
    index._index = flaky
    slots, _ = index.search(vectors[3], 20)
    assert len(slots) == 20 and slots[0] == 3
    assert flaky.calls[1][1] >= 20 and flaky.real.ef == 50  # retried with a wider beam, then restored


def test_adaptive_index_is_exact_while_small_then_hnsw_with_the_same_answers():
    from memory.hnsw_index import AdaptiveIndex, ExactIndex

    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((60, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index, exact = AdaptiveIndex(8, 64, hnsw_from=40), ExactIndex(8, 64)
    index.add(np.arange(30), vectors[:30])
    exact.add(np.arange(30), vectors[:30])
    index.remove(np.array([3]))
    exact.remove(np.array([3]))
    assert not index.promoted
    index.add(np.arange(30, 60), vectors[30:])
    exact.add(np.arange(30, 60), vectors[30:])
    assert index.promoted and len(index) == 59
    for q in vectors[:10]:
        assert index.search(q, 5)[0].tolist() == exact.search(q, 5)[0].tolist()  # 3 stays removed
