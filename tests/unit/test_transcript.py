from service.transcript import UtteranceAssembler


def test_text_is_append_only_and_words_follow_spaces() -> None:
    a = UtteranceAssembler("s")
    r1 = a.add(" hel", 100, 180)
    r2 = a.add("lo", 180, 260)
    r3 = a.add(" world", 300, 500)
    assert r1 and r2 and r3
    assert [r.text for r in (r1, r2, r3)] == ["hel", "hello", "hello world"]
    assert [r.delta for r in (r1, r2, r3)] == ["hel", "lo", " world"]
    assert [(w.word, w.start_ms, w.end_ms) for w in r3.words] == [("hello", 100, 260), ("world", 300, 500)]
    assert (r3.start_ms, r3.end_ms, r3.is_final) == (100, 500, False)


def test_finalize_closes_the_utterance_and_numbers_the_next() -> None:
    a = UtteranceAssembler("s")
    a.add(" one", 0, 100)
    final = a.finalize()
    assert final and final.is_final and final.text == "one" and final.result_id == "s-0"
    assert a.finalize() is None  # nothing new: no empty final
    a.add(" two", 200, 300)
    second = a.finalize()
    assert second and (second.utterance_index, second.result_id, second.text) == (1, "s-1", "two")


def test_blank_deltas_make_no_result() -> None:
    a = UtteranceAssembler("s")
    assert a.add("", 0, 80) is None
    assert a.add("   ", 0, 80) is None
    assert a.finalize() is None
