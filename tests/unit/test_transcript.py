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


def test_a_final_that_extends_the_interims_is_not_revised() -> None:
    a = UtteranceAssembler("s")
    a.add(" go", 0, 300)
    a.add(" forward", 300, 700)
    a.revise([(" go", 0, 310), (" forward", 310, 700), (" ten", 800, 1000)])  # the engine's own, extending it
    final = a.finalize()
    assert final and final.text == "go forward ten" and not final.revised
    assert [(w.word, w.start_ms) for w in final.words] == [("go", 0), ("forward", 310), ("ten", 800)]


def test_a_revision_replaces_the_interim_text_and_is_flagged() -> None:
    a = UtteranceAssembler("s")
    interims = [a.add(" the", 0, 200), a.add(" spread", 200, 600), a.add(" of", 600, 700)]
    assert [r.text for r in interims if r] == ["the", "the spread", "the spread of"]
    a.revise([(" spring", 250, 600), (" of", 600, 700), (" hope", 700, 1100)])
    final = a.finalize()
    assert final and final.is_final and final.revised and final.delta == ""
    assert final.text == "spring of hope" and [w.word for w in final.words] == ["spring", "of", "hope"]
    assert (final.start_ms, final.end_ms, final.result_id) == (250, 1100, "s-0")
    a.add(" next", 2000, 2200)  # the next utterance starts afresh: nothing shown, nothing to revise
    second = a.finalize()
    assert second and second.text == "next" and not second.revised and second.utterance_index == 1


def test_a_revision_to_nothing_still_ends_the_shown_utterance_with_an_empty_final() -> None:
    a = UtteranceAssembler("s")
    a.add(" uh", 0, 200)
    a.revise([])
    final = a.finalize()
    assert final and final.revised and final.text == "" and final.words == ()
    assert a.finalize() is None


def test_a_revision_of_an_utterance_no_interim_showed_is_its_plain_final() -> None:
    a = UtteranceAssembler("s")
    a.revise([(" hello", 0, 400)])
    final = a.finalize()
    assert final and final.text == "hello" and not final.revised
    a.revise([])
    assert a.finalize() is None
