"""facts/links.py: the host's view of its routed fabric, as the gather's host script prints
it (cluster/gather.fabric_script): a table of real-looking answers with the complete
FabricView each gives, garbage as ParseError, and never another exception."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halo_cluster.errors import ParseError
from halo_cluster.facts.links import FabricView, LinkState, parse_fabric_view, parse_route_get

# node1 of a 3-node USB4 mesh, everything as halo setup leaves it
HEALTHY = """\
link thunderbolt0 1 9000 0 0
link thunderbolt1 1 9000 0 0
forward 0
identity halo0
route node2 thunderbolt0
route node3 thunderbolt1
"""

SAMPLES: list[tuple[str, str, FabricView]] = [
    (
        "healthy",
        HEALTHY,
        FabricView(
            links={
                "thunderbolt0": LinkState("thunderbolt0", True, True, 9000, 0, 0),
                "thunderbolt1": LinkState("thunderbolt1", True, True, 9000, 0, 0),
            },
            forwarding=False,
            identity_iface="halo0",
            routes={"node2": "thunderbolt0", "node3": "thunderbolt1"},
        ),
    ),
    (
        # a ring's node: one cable unplugged (no carrier), the other taken down (carrier
        # unreadable: EINVAL), a third port without its cable, errors counted
        "ring-node-in-trouble",
        "link thunderbolt0 0 9000 12 3\n"
        "link thunderbolt1 - 1500 0 0\n"
        "link thunderbolt2 missing\n"
        "forward 1\n"
        "identity -\n"
        "route node2 eno1\n"
        "route node3 -\n"
        "route node4 thunderbolt0\n",
        FabricView(
            links={
                "thunderbolt0": LinkState("thunderbolt0", True, False, 9000, 12, 3),
                "thunderbolt1": LinkState("thunderbolt1", True, None, 1500, 0, 0),
                "thunderbolt2": LinkState("thunderbolt2", False),
            },
            forwarding=True,
            identity_iface=None,
            routes={"node2": "eno1", "node3": None, "node4": "thunderbolt0"},
        ),
    ),
    (
        # every file unreadable: '-' in each field, forwarding unreadable
        "unreadable",
        "link thunderbolt0 - - - -\nforward -\nidentity -\n",
        FabricView(
            links={"thunderbolt0": LinkState("thunderbolt0", True, None, None, None, None)},
            forwarding=None,
            identity_iface=None,
            routes={},
        ),
    ),
    ("nothing", "", FabricView()),
    ("blank-lines", "\n  \n\t\n", FabricView()),
    (
        # the identity on another interface (a leftover address on the management NIC)
        "identity-elsewhere",
        "forward 1\nidentity eno1\nroute node2 thunderbolt0\n",
        FabricView({}, True, "eno1", {"node2": "thunderbolt0"}),
    ),
    (
        # CRLF and extra spaces between fields are fine; a later line for the same
        # interface or peer wins
        "spacing-and-repeats",
        "link  thunderbolt0\t1 9000 0 0\r\nlink thunderbolt0 0 9000 1 0\r\n"
        "route node2 thunderbolt0\r\nroute node2 thunderbolt1\r\n",
        FabricView(
            {"thunderbolt0": LinkState("thunderbolt0", True, False, 9000, 1, 0)},
            None,
            None,
            {"node2": "thunderbolt1"},
        ),
    ),
    (
        # a carrier other than 0/1 is unknown; a counter that is not a plain number of
        # fewer than 20 digits is unknown
        "odd-values",
        "link tb0 2 +9000 -1 18446744073709551615\nforward 2\n",
        FabricView({"tb0": LinkState("tb0", True, None, None, None, None)}, None, None, {}),
    ),
    (
        "large-counters",
        "link tb0 1 65520 9999999999999999999 0\n",
        FabricView({"tb0": LinkState("tb0", True, True, 65520, 9999999999999999999, 0)}),
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [s[1:] for s in SAMPLES], ids=[s[0] for s in SAMPLES]
)
def test_samples(text: str, expected: FabricView) -> None:
    assert parse_fabric_view(text) == expected


GARBAGE = [
    "link",
    "link thunderbolt0",
    "link thunderbolt0 gone",
    "link thunderbolt0 missing now",
    "link thunderbolt0 1 9000 0",
    "link thunderbolt0 1 9000 0 0 0",
    "forward",
    "forward 1 1",
    "identity",
    "identity halo0 eno1",
    "route",
    "route node2",
    "route node2 thunderbolt0 extra",
    "--- fabric",
    "0 0",
    "LINK thunderbolt0 1 9000 0 0",
    "ping: socket: Operation not permitted",
    "bash: line 3: ip: command not found",
]


@pytest.mark.parametrize("line", GARBAGE)
def test_a_line_of_no_known_shape_is_garbage(line: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_fabric_view(HEALTHY + line + "\n")
    assert caught.value.reason == "the host's view of the fabric: a line of no known shape"
    assert caught.value.text == line


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_a_view_or_a_parse_error(text: str) -> None:
    try:
        view = parse_fabric_view(text)
    except ParseError:
        return
    assert isinstance(view, FabricView)


words = st.sampled_from(["link", "forward", "identity", "route", "missing", "-", "0", "1", "9000"])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(words | st.text(min_size=1, max_size=6), max_size=7), max_size=8))
def test_lines_of_the_scripts_words_are_a_view_or_a_parse_error(lines: list[list[str]]) -> None:
    text = "\n".join(" ".join(parts) for parts in lines)
    try:
        view = parse_fabric_view(text)
    except ParseError:
        return
    for name, state in view.links.items():
        assert state.name == name
        assert state.present or (state.carrier, state.mtu) == (None, None)
        assert all(n is None or n >= 0 for n in (state.mtu, state.rx_errors, state.tx_errors))


names = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=15
)
counters = st.none() | st.integers(0, 10**19 - 1)
states = st.builds(
    LinkState,
    names,
    st.just(True),
    st.none() | st.booleans(),
    counters,
    counters,
    counters,
) | st.builds(LinkState, names, st.just(False))


def _shown(value: int | bool | None) -> str:
    if value is None:
        return "-"
    return str(int(value))


def _script_output(view: FabricView) -> str:
    """What the host script prints for ``view``."""
    lines = []
    for state in view.links.values():
        if not state.present:
            lines.append(f"link {state.name} missing")
        else:
            fields = (state.carrier, state.mtu, state.rx_errors, state.tx_errors)
            lines.append(f"link {state.name} " + " ".join(_shown(v) for v in fields))
    lines.append(f"forward {_shown(view.forwarding)}")
    lines.append(f"identity {view.identity_iface or '-'}")
    lines += [f"route {peer} {dev or '-'}" for peer, dev in view.routes.items()]
    return "\n".join(lines) + "\n"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(states, max_size=4, unique_by=lambda s: s.name),
    st.none() | st.booleans(),
    st.none() | names.filter(lambda n: n != "-"),
    st.dictionaries(names, st.none() | names.filter(lambda n: n != "-"), max_size=4),
)
def test_what_the_script_prints_reads_back(
    links: list[LinkState],
    forwarding: bool | None,
    identity: str | None,
    routes: dict[str, str | None],
) -> None:
    view = FabricView({s.name: s for s in links}, forwarding, identity, routes)
    assert parse_fabric_view(_script_output(view)) == view


# What `ip -force -o -batch -` printed for `route get` of three identities on a ring's node
# (captured in a lab node): two routed over the cables, one missing (the lookup's error
# went to stderr: no line), and what a local or unreachable answer looks like.
ROUTE_GET = (
    "198.19.1.12 via 198.19.1.129 dev thunderbolt0 src 198.19.1.11 uid 0 \\    cache \n"
    "198.19.1.14 via 198.19.1.131 dev thunderbolt1 src 198.19.1.11 uid 0 \\    cache \n"
    "local 198.19.1.11 dev lo src 198.19.1.11 uid 0 \\    cache <local> \n"
    "unreachable 198.19.1.99 dev eno1 uid 0 \\    cache \n"
    "10.9.9.9 via 192.0.2.1 dev eth0 src 192.0.2.2 uid 0 \\    cache \n"
)


def test_route_get_lines() -> None:
    assert parse_route_get(ROUTE_GET) == {
        "198.19.1.12": "thunderbolt0",
        "198.19.1.14": "thunderbolt1",
        "10.9.9.9": "eth0",
    }
    assert parse_route_get("") == {}
    assert parse_route_get("198.19.1.12 via 198.19.1.129\ngarbage\n dev\n") == {}


@settings(deadline=None, max_examples=100)
@given(st.text(max_size=400))
def test_route_get_never_fails(text: str) -> None:
    found = parse_route_get(text)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in found.items())
