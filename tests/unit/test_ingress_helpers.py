"""Pure helpers of the HTTP layer: admission chunks, LoCoMo-style times, validation messages."""

from __future__ import annotations

from datetime import datetime

import numpy as np
from fastapi.exceptions import RequestValidationError

from cores.tenant_episodes import TurnRecord
from inference.admission import ChunkStream
from pipeline.write_path import admission_chunks, format_date_time
from serve.errors import validation_message
from tests.doubles import HashingEncoder


def test_admission_chunks_match_the_training_chunk_stream_across_requests():
    """The service builds chunks from the router's context + the batch; training used ChunkStream over
    the whole conversation. Split the same turns into requests of uneven sizes: the chunks must agree."""
    enc = HashingEncoder(dim=16)
    turns = [TurnRecord(f"D1:{i}", "Ann", f"turn {i} about topic {i % 3}", "1:56 pm on 8 May, 2023",
                        datetime(2023, 5, 8, 13, 56)) for i in range(11)]
    expected = ChunkStream(enc, max_turns=5).push(turns)
    vectors = enc.encode([t.line for t in turns])
    got, context = [], []
    for start, stop in ((0, 1), (1, 4), (4, 10), (10, 11)):
        batch = vectors[start:stop]
        got.extend(admission_chunks(context, batch, 5))
        context = [*context, *batch][-4:]  # what the router keeps: the last max_turns - 1 vectors
    assert [len(g) for g in got] == [1, 2, 3, 4, 5, 5, 5, 5, 5, 5, 5]
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-6)


def test_format_date_time_is_locomo_style():
    assert format_date_time(datetime(2023, 5, 8, 13, 56)) == "1:56 pm on 8 May, 2023"
    assert format_date_time(datetime(2023, 5, 8, 0, 5)) == "12:05 am on 8 May, 2023"
    assert format_date_time(datetime(2023, 12, 31, 12, 0)) == "12:00 pm on 31 December, 2023"


def test_validation_message_names_the_field_even_when_it_is_called_query():
    exc = RequestValidationError([{"loc": ("body", "query"), "msg": "String should have at least 1 character",
                                   "type": "string_too_short"}])
    assert validation_message(exc) == ("query: String should have at least 1 character", "query")
    exc = RequestValidationError([{"loc": ("body", "turns", 0, "text"), "msg": "too long", "type": "x"},
                                  {"loc": ("query", "k"), "msg": "bad", "type": "x"}])
    assert validation_message(exc) == ("turns.0.text: too long (and 1 more)", "turns.0.text")
