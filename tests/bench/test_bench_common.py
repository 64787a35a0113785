"""bench.common.read_jsonl: the tolerant reader of the benchmarks' append-only caches."""

from bench.common import read_jsonl


def test_rows_in_order_and_a_line_cut_short_is_skipped(tmp_path):
    path = tmp_path / "cache.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n\n{"a": 3, "b": [1, 2\n', encoding="utf-8")
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]


def test_a_missing_file_has_no_rows(tmp_path):
    assert read_jsonl(tmp_path / "absent.jsonl") == []
