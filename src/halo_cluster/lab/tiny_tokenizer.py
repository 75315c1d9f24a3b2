"""The lab's tiny model's tokenizer: a byte-level BPE trained here on a built-in English
corpus, so no hub is needed. tokenizers is imported inside ``train_tokenizer``."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import TYPE_CHECKING

from halo_cluster.lab.tiny_spec import BOS_ID, SPECIAL_TOKENS

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# The corpus: a few sentences and word lists; numbers give the BPE trainer enough distinct
# words to reach large vocabularies (a merge needs a pair that still occurs somewhere).


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


TEXT = """\
The cluster has two nodes linked by a fast fabric. Each node runs one part of the model.
A token is generated when every layer has done its work and the results are shared.
The river ran past the old mill, and the children watched the boats go by in the sun.
She opened the window, heard the rain on the roof and went back to her book.
Good morning! How are you today? I am fine, thank you, and I hope you are well too.
Numbers such as 3, 14, 159 and 2026 appear in tables, dates, prices and measurements.
"""
NOUNS = _words("""time year people way day man thing woman life child world school state family
student group country problem hand part place case week company system program question work
number night point home water room mother area money story fact month right study book eye job
word business issue side kind head house service friend father power hour game line end member
law car city community name team minute idea body information back parent face level office door
health person art history party result change morning reason research girl moment air teacher
force education cluster node network fabric model token river mountain garden window kitchen
letter music picture paper table engine signal memory cable switch machine server light field
forest ocean island bridge road train street market bread apple orange summer winter""")
VERBS = _words("""run walk see read write build carry send open close learn teach move start
stop watch find keep bring hold turn show play help call ask talk""")
ADJECTIVES = _words("""small large quiet bright dark old new fast slow warm cold green blue red
happy busy simple careful strong gentle early late""")


def corpus(vocab: int) -> Iterator[str]:
    """Deterministic English-like text, enough of it to train a BPE of ``vocab`` tokens."""
    draw = random.Random(0)
    for _ in range(8):
        yield TEXT
    for _ in range(2 * vocab):
        adjective, verb = draw.choice(ADJECTIVES), draw.choice(VERBS)
        subject, thing = draw.choice(NOUNS), draw.choice(NOUNS)
        number = draw.randint(1, 999_999)
        yield f"The {adjective} {subject} {verb}s the {thing} in {number}.\n"


def train_tokenizer(vocab: int) -> Tokenizer:
    """A byte-level BPE of exactly ``vocab`` tokens; encoding adds <s> like Llama's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(vocab), trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", BOS_ID)]
    )
    return tokenizer
