"""The third witness: a layout computes the same tokens as one node (pure).

The same engine and model answer fixed prompts greedily (temperature 0), once on one node
(the reference, ``serving/reference.py``) and once in the layout under test. Per prompt the
two answers are walked token by token:

- ``agreed``: the tokens before the first that differs (all of them when none does);
- ``drift``: the largest difference between the log-probabilities the two sides gave the
  reference's token, over the agreed tokens and the first differing one (a node with
  other weights, or an all-reduce that drops a part, moves them at once, long before the
  greedy choice flips; on a model whose choices are close calls, such as the lab's random
  one, drift catches what the choices alone would not);
- at the first differing position, the ``gap``: how much likelier the reference found its
  own token than the layout's (in nats). A near tie (``gap`` within the tolerance, on both
  sides where both are known) may flip on a different order of additions; after it the two
  answers continue from different texts and are not compared further.

A prompt passes when its drift and its gap are within ``TOLERANCE_NATS``; a layout passes
when every prompt does. Without log-probabilities only the texts are compared, exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from halo_cluster.jsonout import JsonObject
from halo_cluster.printable import printable
from halo_cluster.wire.answers import TokenAnswer, TokenStep

# 0.1 nats: a 10 % change in a token's probability. Two layouts that compute the same sums
# in another order stay far inside it (on these machines they agree exactly); other weights
# on one node move every log-probability by whole nats.
TOLERANCE_NATS = 0.1


@dataclass(frozen=True)
class PromptVerdict:
    """One prompt's comparison (positions count tokens, or characters when no tokens came)."""

    prompt: int
    compared: int  # the reference's tokens (or characters)
    agreed: int
    first_diverging: int | None
    reference_token: str | None = None
    layout_token: str | None = None
    gap_nats: float | None = None  # the reference's log-prob of its token minus of the layout's
    drift_nats: float | None = None
    drift_at: int | None = None  # where the drift was largest
    unit: str = "tokens"
    ok: bool = True
    why: str | None = None


@dataclass(frozen=True)
class TokenVerdict:
    """Every prompt's verdict, the agreement over all of them, and the problems."""

    layout: str
    reference: str  # the layout the reference was recorded on
    prompts: list[PromptVerdict]
    tolerance_nats: float = TOLERANCE_NATS
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def agreement(self) -> float:
        compared = sum(p.compared for p in self.prompts)
        return round(sum(p.agreed for p in self.prompts) / compared, 4) if compared else 1.0

    @property
    def drift_nats(self) -> float | None:
        """The largest drift over every prompt (None: no log-probabilities to compare)."""
        found = [p.drift_nats for p in self.prompts if p.drift_nats is not None]
        return max(found) if found else None

    @property
    def near_ties(self) -> int:
        """Prompts whose answers parted at a near tie (within the tolerance)."""
        return sum(1 for p in self.prompts if p.ok and p.first_diverging is not None)

    def to_dict(self) -> JsonObject:
        return {
            "layout": self.layout,
            "reference": self.reference,
            "ok": self.ok,
            "agreement": self.agreement,
            "drift_nats": self.drift_nats,
            "near_ties": self.near_ties,
            "tolerance_nats": self.tolerance_nats,
            "prompts": [asdict(p) for p in self.prompts],
            "problems": list(self.problems),
        }


def _lookup(step: TokenStep, key: str) -> float | None:
    """The log-probability ``step`` gave the token ``key``: its own, or one of its top."""
    if key == step.key:
        return step.logprob
    return next((lp for k, lp in step.top if k == key), None)


def _gap(ref: TokenStep, got: TokenStep) -> float | None:
    """How much likelier each side found its own token than the other's, the larger of the
    two where both are known (None: a side's own token was not among the other's top)."""
    gaps = []
    for side, own, other in ((ref, ref, got), (got, got, ref)):
        mine, theirs = own.logprob, _lookup(side, other.key)
        if mine is None:
            continue
        if theirs is None:
            return None  # the other token is not even among this side's likeliest
        gaps.append(mine - theirs)
    return round(max(gaps), 4) if gaps else None


def _drift(
    ref: Sequence[TokenStep], got: Sequence[TokenStep], upto: int
) -> tuple[float | None, int | None]:
    """The largest difference between the log-probabilities the two sides gave the
    reference's token, over the positions up to and including ``upto`` where the layout's
    answer names it, and where it was."""
    diffs = []
    for i, (a, b) in enumerate(zip(ref[: upto + 1], got[: upto + 1])):
        theirs = _lookup(b, a.key)
        if a.logprob is not None and theirs is not None:
            diffs.append((round(abs(a.logprob - theirs), 4), i))
    if not diffs:
        return None, None
    most, at = max(diffs, key=lambda d: (d[0], -d[1]))  # the first of equal ones
    return most, at


def _text_verdict(index: int, ref: str, got: str) -> PromptVerdict:
    pairs = enumerate(zip(ref, got))
    agreed = next((i for i, (a, b) in pairs if a != b), min(len(ref), len(got)))
    same = ref == got
    return PromptVerdict(
        prompt=index,
        compared=len(ref),
        agreed=len(ref) if same else agreed,
        first_diverging=None if same else agreed,
        reference_token=None if same else ref[agreed : agreed + 8],
        layout_token=None if same else got[agreed : agreed + 8],
        unit="characters",
        ok=same,
        why=None if same else "the texts differ (the engine gave no log-probabilities)",
    )


def compare_prompt(
    index: int, ref: TokenAnswer, got: TokenAnswer, tolerance: float = TOLERANCE_NATS
) -> PromptVerdict:
    """One prompt's answers compared (the module's docstring says how)."""
    if not ref.steps or not got.steps:
        return _text_verdict(index, ref.text, got.text)
    keys = zip((s.key for s in ref.steps), (s.key for s in got.steps))
    agreed = next((i for i, (a, b) in enumerate(keys) if a != b), None)
    short = len(got.steps) < len(ref.steps)
    upto = agreed if agreed is not None else min(len(ref.steps), len(got.steps))
    drift, drift_at = _drift(ref.steps, got.steps, upto)  # the diverging step's too
    drifted = drift is not None and drift > tolerance
    if agreed is None:
        why = "drift" if drifted else "short" if short else None
        return PromptVerdict(
            index,
            len(ref.steps),
            upto,
            upto if short else None,
            drift_nats=drift,
            drift_at=drift_at,
            ok=why is None,
            why=_why(why, drift, None, tolerance),
        )
    gap = _gap(ref.steps[agreed], got.steps[agreed])
    tie = gap is not None and gap <= tolerance
    why = "drift" if drifted else None if tie else "gap"
    return PromptVerdict(
        index,
        len(ref.steps),
        agreed,
        agreed,
        printable(ref.steps[agreed].token, limit=40),
        printable(got.steps[agreed].token, limit=40),
        gap,
        drift,
        drift_at,
        ok=why is None,
        why=_why(why, drift, gap, tolerance),
    )


def _why(kind: str | None, drift: float | None, gap: float | None, tolerance: float) -> str | None:
    if kind == "drift":
        return (
            f"the reference's token's log-probability moved {drift:g} nats "
            f"(tolerance {tolerance:g})"
        )
    if kind == "short":
        return "the answer has fewer tokens than the reference's"
    if kind == "gap":
        said = "beyond the likeliest tokens" if gap is None else f"{gap:g} nats apart"
        return f"not a near tie: the two tokens were {said} (tolerance {tolerance:g})"
    return None


def compare(
    layout: str,
    reference_layout: str,
    reference: Sequence[TokenAnswer],
    answers: Sequence[TokenAnswer],
    tolerance: float = TOLERANCE_NATS,
) -> TokenVerdict:
    """Each prompt's answer in ``layout`` against the reference's (same prompts, in order;
    ``answers`` may cover only the first few: the short form)."""
    prompts = [
        compare_prompt(i, ref, got, tolerance)
        for i, (ref, got) in enumerate(zip(reference, answers))
    ]
    problems = [_problem(layout, reference_layout, p) for p in prompts if not p.ok]
    if not prompts:
        problems.append(f"{layout}: no answers to compare with the reference")
    return TokenVerdict(layout, reference_layout, prompts, tolerance, problems)


def _problem(layout: str, reference_layout: str, p: PromptVerdict) -> str:
    """One line: the layout, the prompt, the position, what differs and why it counts."""
    drifted = p.why is not None and p.why.startswith("the reference's token")
    at = p.drift_at if drifted else p.first_diverging
    where = f"{p.unit[:-1]} {at if at is not None else p.agreed}"
    tokens = (
        f"{p.reference_token!r} in the reference, {p.layout_token!r} here; "
        if p.reference_token is not None and not drifted
        else ""
    )
    return (
        f"{layout}: prompt {p.prompt + 1} differs from the one-node reference "
        f"({reference_layout}) at {where}: {tokens}{p.why}"
    )


def tokens_word(tokens: Mapping[str, Any] | None) -> str | None:
    """A layout's token witness in one word, as a tune row keeps it: "reference" (recorded
    there), "same", "different", or None (not compared)."""
    found = tokens or {}
    if found.get("recorded"):
        return "reference"
    ok = found.get("ok")
    return None if ok is None else "same" if ok else "different"
