"""Stop conditions and streamed text (scheduler/stops.py), with a toy byte-level tokenizer."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import Request, RequestResult, RequestStatus, Scheduler, SchedulerConfig, StepResult
from scheduler.stops import check_chunk, held_back

# id -> bytes; "é" is split over ids 6 and 7 (b"\xc3", b"\xa9").
# id 12 is EOS, which decodes to nothing.
VOCAB = [b"Hello", b" wor", b"ld", b"!", b" ST", b"OP", b"\xc3", b"\xa9", b"x", b"OP!", b"S", b"T"]
VOCAB.append(b"")
HELLO, WOR, LD, BANG, ST_, OP, E1, E2, X, OPBANG, S, T, EOS = range(13)


def detok(ids: Sequence[int]) -> str:
    return b"".join(VOCAB[i] for i in ids).decode("utf-8", errors="replace")


def feed(request: Request, chunks: list[list[int]]) -> list[tuple[list[int], str, str | None]]:
    """Feed chunks until the request stops; (kept ids, streamed text, reason) per chunk."""
    out = []
    for chunk in chunks:
        o = check_chunk(request.text, request.criteria, len(request.output_ids), chunk, detok)
        request.output_ids.extend(o.token_ids)
        out.append((o.token_ids, o.text, o.reason))
        if o.reason:
            break
    return out


def make(**kw) -> Request:
    return Request("r", [HELLO], **{"max_tokens": 50, **kw})


def test_stop_string_split_across_tokens_in_one_chunk_ends_at_completing_token():
    r = make(stop=(" STOP",))
    [(kept, text, reason)] = feed(r, [[WOR, LD, ST_, OP, BANG, X]])
    assert kept == [WOR, LD, ST_, OP]  # BANG and X come after the completing token
    assert reason == "stop"
    assert text == " world" == r.output_text  # stop string excluded (OpenAI semantics)


def test_stop_string_split_across_chunks_is_held_back_then_cut():
    r = make(stop=(" STOP",))
    steps = feed(r, [[WOR, LD, ST_], [OP, X]])
    assert steps[0] == ([WOR, LD, ST_], " world", None)  # " ST" might start " STOP": held
    assert steps[1] == ([OP], "", "stop")
    assert r.output_text == " world"


def test_held_back_text_is_released_when_the_stop_string_does_not_complete():
    r = make(stop=(" STOP",))
    steps = feed(r, [[WOR, ST_], [X], [LD]])
    assert [t for _, t, _ in steps] == [" wor", " STx", "ld"]


def test_stop_string_inside_a_token_with_trailing_text():
    r = make(stop=("OP",))
    [(kept, text, reason)] = feed(r, [[ST_, OPBANG, X]])
    assert (kept, text, reason) == ([ST_, OPBANG], " ST", "stop")


def test_stop_string_across_single_character_tokens_and_chunks():
    r = make(stop=("ST",))
    steps = feed(r, [[X, S], [T, X]])
    assert steps == [([X, S], "x", None), ([T], "", "stop")]


def test_partial_utf8_is_held_back_until_complete():
    r = make()
    steps = feed(r, [[WOR, E1], [E2, X]])
    assert [t for _, t, _ in steps] == [" wor", "éx"]
    assert "\ufffd" not in r.output_text


def test_partial_utf8_at_finish_is_flushed():
    r = make(max_tokens=2)
    [(_, text, reason)] = feed(r, [[X, E1]])
    assert (text, reason) == ("x\ufffd", "length")


def test_stop_token_mid_chunk_drops_what_follows_and_is_not_text():
    r = make(stop_token_ids=(BANG,))
    [(kept, text, reason)] = feed(r, [[WOR, BANG, LD, X]])
    assert (kept, text, reason) == ([WOR, BANG], " wor", "stop")


def test_eos_stops_unless_ignore_eos():
    r = make(eos_token_ids=(EOS,))
    assert feed(r, [[X, EOS, X]])[0] == ([X, EOS], "x", "stop")
    r = make(eos_token_ids=(EOS,), ignore_eos=True, max_tokens=3)
    assert feed(r, [[X, EOS, X, X]])[0] == ([X, EOS, X], "xx", "length")


def test_max_tokens_exactly_with_a_multi_token_chunk():
    r = make(max_tokens=5)
    steps = feed(r, [[X, X, X], [X, X, X, X]])
    assert steps[1] == ([X, X], "xx", "length")
    assert len(r.output_ids) == 5


def test_held_back_is_the_longest_suffix_that_prefixes_a_stop():
    assert held_back("abc STO", (" STOP", "Oz")) == 4
    assert held_back("abc", (" STOP",)) == 0
    assert held_back("ab", ("abc", "b")) == 2


def test_scheduler_streams_the_same_text_as_the_stop_checker():
    """The stop handling reaches the engine through commit() events."""
    sched = Scheduler(SchedulerConfig(max_slots=1, max_seq_len=32, k_max=3), detok)
    req = Request("a", [HELLO], max_tokens=20, stop=(" STOP",))
    sched.add(req)
    emitted = [[WOR], [LD, ST_], [OP, BANG]]  # prefill emits 1, then chunks of 2
    events = []
    for chunk in emitted:
        plan = sched.schedule()
        k = plan.decodes[0].k if plan.decodes else 0
        assert len(chunk) <= k + 1
        drafted = k if plan.decodes else 0
        res = RequestResult(chunk, drafted=drafted, accepted=len(chunk) - 1)
        events += sched.commit(StepResult({"a": res})).events
    assert "".join(e.text for e in events) == " world"
    assert events[-1].finish_reason == "stop" and events[-1].status is RequestStatus.FINISHED
    assert [t for e in events for t in e.token_ids] == [WOR, LD, ST_, OP]


STOPS = (" STOP", "é!", "ldld")


@settings(max_examples=200, deadline=None)
@given(
    ids=st.lists(st.integers(0, len(VOCAB) - 1), min_size=1, max_size=30),
    cuts=st.lists(st.integers(1, 5), min_size=30, max_size=30),
)
def test_chunking_never_changes_the_outcome_and_the_stream_adds_up(ids, cuts):
    """Any split of the same tokens into chunks gives the same kept ids and the same final
    text: the reference (decode everything, cut at the first stop string); the streamed
    pieces, never retracted, concatenate to exactly that text at the finish."""
    ref = make(stop=STOPS, max_tokens=len(ids))
    feed(ref, [[i] for i in ids])
    chunks = [ids[sum(cuts[:n]) : sum(cuts[: n + 1])] for n in range(len(cuts))]
    got = make(stop=STOPS, max_tokens=len(ids))
    steps = feed(got, [c for c in chunks if c])
    assert steps[-1][2] in ("stop", "length")
    assert got.output_ids == ref.output_ids
    full = detok(got.output_ids)
    first = min((i for i in (full.find(s) for s in STOPS) if i >= 0), default=None)
    assert got.output_text == ref.output_text == full[:first]
    assert "".join(text for _, text, _ in steps) == got.output_text
