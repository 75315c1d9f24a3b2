"""Random prompts of a given length in the server's own tokens, the workload of
``vllm bench serve --dataset-name random``: every request gets a different prompt (so no
request rides on another's prefix cache) of ``input_len`` prompt tokens as the server counts
them (special tokens such as BOS included), and asks for exactly ``output_len`` tokens.

halo has no tokenizer of its own: it draws common English words (one token each in most
vocabularies) and asks the server how many tokens a text is — vLLM's ``POST /tokenize`` —
adding or dropping words until the count is right. A server without ``/tokenize`` is asked
through a one-token completion's ``usage.prompt_tokens``, once, and that word count is used for
every prompt; a server that reports neither gets one word per token.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

# Common, short, lower-case words: a single token (with its leading space) in the GPT-2, Llama
# and Qwen vocabularies, so a prompt of N words is close to N tokens before any correction.
_WORD_LIST = (
    "the of and to in is that for it as was with be by on not he this are or his from at "
    "which but have an had they you were their one all we can her has there been if more when "
    "will would who so no out up into do than time only could new them man some these then two "
    "first may any like now my such make over our even most me state after also made many did "
    "must before back see through way where get much go well your know should down work year "
    "because come people just say each those take day good how long own too little use us very "
    "great still men here life both between old under last never place same another think house "
    "while high right might came off find states since used give against three himself look few "
    "general hand school part small american home during number again water city world team "
    "light door road tree river music food paper money table window field game story stone"
)
WORDS = tuple(_WORD_LIST.split())

TokenCounter = Callable[[str], Optional[int]]  # evaluated: no X | Y (Python 3.9)


@dataclass(frozen=True)
class Prompt:
    text: str
    words: int
    tokens: int | None  # as the server counted them; None when it was not asked


def random_text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def next_word_count(words: int, tokens: int, target: int) -> int:
    """The next guess: scale by target/tokens, moving at least one word the right way."""
    if tokens == target or tokens <= 0:
        return words
    guess = max(1, round(words * target / tokens))
    if guess == words:
        guess = words + (1 if tokens < target else -1)
    return max(1, guess)


def fit(
    rng: random.Random, target: int, count: TokenCounter, words: int | None = None, tries: int = 6
) -> Prompt:
    """A random prompt whose token count is ``target`` (else the closest one found): words
    first, then short pieces that add a token or two where a word adds too many."""
    picks = [rng.choice(WORDS) for _ in range(words or target)]
    best: Prompt | None = None
    for _ in range(tries):
        text = " ".join(picks)
        tokens = count(text)
        if tokens is None:
            return best or Prompt(text, len(picks), None)
        if best is None or best.tokens is None or abs(tokens - target) < abs(best.tokens - target):
            best = Prompt(text, len(picks), tokens)
        if tokens == target:
            return best
        wanted = next_word_count(len(picks), tokens, target)
        picks = picks[:wanted] + [rng.choice(WORDS) for _ in range(wanted - len(picks))]
    assert best is not None
    return _pad(_trim(best, target, count), target, count)


# Appended to close the last gap: each one token, or two, in the vocabularies we know.
PIECES = (".", ",", " a", "1", " I")


def _trim(prompt: Prompt, target: int, count: TokenCounter) -> Prompt:
    """Drop words from the end until the prompt is not over ``target``."""
    words = prompt.text.split(" ")
    while prompt.tokens is not None and prompt.tokens > target and len(words) > 1:
        words.pop()
        text = " ".join(words)
        prompt = Prompt(text, len(words), count(text))
    return prompt


def _pad(prompt: Prompt, target: int, count: TokenCounter, tries: int = 8) -> Prompt:
    """Append pieces while one still fits under ``target``."""
    for _ in range(tries):
        if prompt.tokens is None or prompt.tokens >= target:
            break
        for piece in PIECES:
            tokens = count(prompt.text + piece)
            if tokens is not None and prompt.tokens < tokens <= target:
                prompt = Prompt(prompt.text + piece, prompt.words, tokens)
                break
        else:
            break
    return prompt


def workload(
    rng: random.Random,
    prompts: int,
    target: int,
    tokenize: TokenCounter | None,
    probe: TokenCounter | None,
) -> tuple[list[Prompt], str]:
    """``prompts`` random prompts of ``target`` tokens, and how they were fitted:
    ``tokenize`` (each prompt counted by the server), ``usage`` (one probe request gave the
    words per token for all), or ``words`` (one word per token, nothing to ask)."""
    if tokenize is not None:
        first = fit(rng, target, tokenize)
        if first.tokens is not None:
            rest = [fit(rng, target, tokenize, first.words) for _ in range(prompts - 1)]
            return [first, *rest], "tokenize"
    if probe is not None:
        # The probe prompt is not one of the workload's, so no timed request finds it cached.
        calibrated = _calibrate(rng, target, probe)
        if calibrated.tokens is not None:
            return [
                Prompt(random_text(rng, calibrated.words), calibrated.words, None)
                for _ in range(prompts)
            ], "usage"
    return [Prompt(random_text(rng, target), target, None) for _ in range(prompts)], "words"


def _calibrate(rng: random.Random, target: int, probe: TokenCounter) -> Prompt:
    """Words only (each count is a request): the word count for ``target`` tokens."""
    picks = target
    best = Prompt("", picks, None)
    for _ in range(3):
        text = random_text(rng, picks)
        tokens = probe(text)
        if tokens is None:
            break
        best = Prompt(text, picks, tokens)
        if tokens == target:
            break
        picks = next_word_count(picks, tokens, target)
    return best
