"""A node's answers about its store (modelstore/answers.py): each read back from what the
node wrote, anything else one ModelError of one line."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.errors import ModelError
from halo_cluster.modelstore.answers import (
    Differs,
    Listing,
    Removed,
    StoredModel,
    Verified,
    parse_listing,
    parse_removed,
    parse_verified,
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
LISTING = Listing("/s", (
    StoredModel("tiny", "/s/tiny", True, "d" * 64, 99, 2, "/src", "m.gguf", ("w",)),
    StoredModel("half", "/s/half", False),
))  # fmt: skip
VERIFIED = Verified("tiny", "d" * 64, 2, (Differs("w", "sha256 abc…, 3 B"),))
PARSERS = ((parse_listing, LISTING), (parse_verified, VERIFIED),
           (parse_removed, Removed("tiny", True)))  # fmt: skip


def test_each_answer_reads_back() -> None:
    for parse, value in PARSERS:
        assert parse(json.loads(json.dumps(value.to_dict()))) == value


@given(JSON)
def test_anything_else_is_one_modelerror(value: Any) -> None:
    for parse, good in PARSERS:
        for document in (value, {**good.to_dict(), **value} if isinstance(value, dict) else value):
            try:
                parse(document)
            except ModelError as err:
                assert "\n" not in str(err)
