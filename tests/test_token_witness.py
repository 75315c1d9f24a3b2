"""The token witness (halo_cluster.witness.tokens): a layout's greedy answers against the
one-node reference, on steps shaped as the engines give them (the recorded llama-server
answer's near ties: the lab's random model picks between tokens 0.02 nats apart), compared
against complete expected verdicts; any answers are compared without a crash (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from halo_cluster.wire.answers import TokenAnswer, TokenStep
from halo_cluster.witness.tokens import PromptVerdict, compare, compare_prompt

A, B, C = "#2335", "#1919", "#1267"


def step(token_id: int, logprob: float, *top: tuple[str, float]) -> TokenStep:
    return TokenStep(f"t{token_id}", token_id, logprob, ((f"#{token_id}", logprob), *top))


# llama-server's answer to "Question: what is 17 times 3?" (tests/fixtures/outputs/tokens)
REF = TokenAnswer(
    "t2335t2335t2335",
    (
        step(2335, -7.054, (B, -7.278)),
        step(2335, -7.202, (B, -7.241)),
        step(2335, -7.219, (B, -7.236)),
    ),
)


def test_the_same_answer_agrees_everywhere() -> None:
    assert compare_prompt(0, REF, REF) == PromptVerdict(
        prompt=0, compared=3, agreed=3, first_diverging=None, drift_nats=0.0, drift_at=0
    )


def test_a_near_tie_that_flips_passes_and_stops_the_comparison() -> None:
    """The third step's two tokens were 0.017 nats apart: another order of additions may
    pick the other; what follows it is another text, not compared."""
    flipped = step(1919, -7.219, (A, -7.236))
    got = TokenAnswer("", (*REF.steps[:2], flipped, step(5, -1.0)))
    assert compare_prompt(0, REF, got) == PromptVerdict(
        prompt=0,
        compared=3,
        agreed=2,
        first_diverging=2,
        reference_token="t2335",
        layout_token="t1919",
        gap_nats=0.017,
        drift_nats=0.017,
        drift_at=2,
    )


def test_other_weights_move_the_log_probabilities_before_any_choice_flips() -> None:
    """The same greedy tokens, but every probability moved by a nat: another model."""
    got = TokenAnswer(REF.text, tuple(step(2335, s.logprob - 1.0, (B, -9.0)) for s in REF.steps))  # type: ignore[operator]
    verdict = compare("vllm tp2 on node1+node2", "vllm tp1 on node1", [REF], [got])
    assert verdict.prompts == [
        PromptVerdict(
            prompt=0,
            compared=3,
            agreed=3,
            first_diverging=None,
            drift_nats=1.0,
            drift_at=0,
            ok=False,
            why="the reference's token's log-probability moved 1 nats (tolerance 0.1)",
        )
    ]
    assert verdict.problems == [
        "vllm tp2 on node1+node2: prompt 1 differs from the one-node reference "
        "(vllm tp1 on node1) at token 0: the reference's token's log-probability moved 1 nats "
        "(tolerance 0.1)"
    ]
    assert (verdict.ok, verdict.agreement) == (False, 1.0)


def test_a_choice_far_from_the_references_fails_at_its_position() -> None:
    """The layout's first token was not among the reference's likeliest at all."""
    got = TokenAnswer("", (step(3000, -2.0, (A, -7.054)), *REF.steps[1:]))
    verdict = compare("llama.cpp on node1+node2", "llama.cpp on node1", [REF, REF], [REF, got])
    assert verdict.prompts[1] == PromptVerdict(
        prompt=1,
        compared=3,
        agreed=0,
        first_diverging=0,
        reference_token="t2335",
        layout_token="t3000",
        gap_nats=None,
        drift_nats=0.0,
        drift_at=0,
        ok=False,
        why="not a near tie: the two tokens were beyond the likeliest tokens (tolerance 0.1)",
    )
    assert verdict.problems == [
        "llama.cpp on node1+node2: prompt 2 differs from the one-node reference "
        "(llama.cpp on node1) at token 0: 't2335' in the reference, 't3000' here; not a near "
        "tie: the two tokens were beyond the likeliest tokens (tolerance 0.1)"
    ]
    assert verdict.to_dict()["agreement"] == 0.5


def test_a_wide_gap_fails_even_when_both_tokens_are_listed() -> None:
    ref = TokenAnswer("", (step(1, -0.1, ("#2", -3.0)),))
    got = TokenAnswer("", (step(2, -0.1, ("#1", -3.0)),))
    found = compare_prompt(0, ref, got)
    assert (found.ok, found.gap_nats, found.first_diverging) == (False, 2.9, 0)


def test_a_short_answer_fails() -> None:
    got = TokenAnswer("", REF.steps[:2])
    found = compare_prompt(0, REF, got)
    assert (found.ok, found.agreed, found.first_diverging, found.why) == (
        False,
        2,
        2,
        "the answer has fewer tokens than the reference's",
    )


def test_without_log_probabilities_the_texts_are_compared_exactly() -> None:
    same = compare_prompt(0, TokenAnswer("abc", ()), TokenAnswer("abc", ()))
    assert same == PromptVerdict(0, 3, 3, None, unit="characters")
    other = compare_prompt(0, TokenAnswer("abcdef", ()), TokenAnswer("abXdef", ()))
    assert other == PromptVerdict(
        0,
        6,
        2,
        2,
        "cdef",
        "Xdef",
        unit="characters",
        ok=False,
        why="the texts differ (the engine gave no log-probabilities)",
    )


def test_no_answers_is_a_problem() -> None:
    assert compare("x", "y", [REF], []).problems == ["x: no answers to compare with the reference"]


KEYS = st.sampled_from(["#1", "#2", "#3", "a", "b"])
STEPS = st.builds(
    TokenStep,
    st.text(max_size=3),
    st.none() | st.integers(1, 3),
    st.none() | st.floats(-30, 0),
    st.lists(st.tuples(KEYS, st.floats(-30, 0)), max_size=3).map(tuple),
)
ANSWERS = st.builds(TokenAnswer, st.text(max_size=6), st.lists(STEPS, max_size=5).map(tuple))


@settings(deadline=None)
@given(ref=st.lists(ANSWERS, max_size=3), got=st.lists(ANSWERS, max_size=3))
def test_any_answers_are_compared(ref: list[TokenAnswer], got: list[TokenAnswer]) -> None:
    verdict = compare("l", "r", ref, got)
    assert 0.0 <= verdict.agreement <= 1.0
    every = bool(verdict.prompts) and all(p.ok for p in verdict.prompts)
    assert verdict.ok == every and (verdict.ok or verdict.problems)
    assert all("\n" not in p for p in verdict.problems)


@settings(deadline=None)
@given(answers=st.lists(ANSWERS, min_size=1, max_size=3))
def test_an_answer_always_agrees_with_itself(answers: list[TokenAnswer]) -> None:
    verdict = compare("l", "r", answers, answers)
    assert verdict.ok and verdict.agreement == 1.0
