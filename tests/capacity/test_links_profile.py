"""Link presets and one's own link, the measured lab profile (``--hardware lab``), and the
answer to "should I add a node?"."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.capacity import catalog
from halo_cluster.capacity.engines import find_engine
from halo_cluster.capacity.estimate import Request, node_steps, rpc_stages, step_sentence
from halo_cluster.capacity.profile import (
    EngineRun,
    engine_figures,
    hardware_from_profile,
    link_from_profile,
    parse_llama_bench,
)
from halo_cluster.capacity.spec import Link
from halo_cluster.cli import main
from halo_cluster.errors import UsageError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
LLAMA = find_engine("llama.cpp")
STRIX = catalog.find_hardware("strix-halo-128")


def profile_document(**changes: Any) -> dict[str, Any]:
    run = EngineRun("llama.cpp", 1 / 1250, 1 / 490, 6_956_032, 4, 80e-6, "a test run")
    document = {
        "schema": "halo.hardware-profile/1",
        "id": "lab",
        "name": "a lab",
        "created": "2026-12-01T00:00:00+00:00",
        "memory_gib": 23.5,
        "memory_bw_gbs": 20.0,
        "shared_cores": 2,
        "cpu_only": True,
        "link": {"alpha_us": 30.0, "beta_gbps": 6.0},
        "engines": {"llama.cpp": engine_figures(run, 20.0)},
    }
    document.update(changes)
    return document


def test_every_preset_the_issue_names_is_there_with_a_source() -> None:
    links = catalog.links()
    for name in ("1gbe", "2.5gbe", "5gbe", "10gbe", "25gbe", "50gbe", "100gbe"):
        assert links[name].stack == "tcp"
    for name in ("roce-10gbe", "roce-25gbe", "roce-50gbe", "roce-100gbe", "usb4-rdma"):
        assert links[name].stack == "rdma"
    assert links["usb4-tcp"].beta_gbps == 9.4
    assert catalog.find_link("thunderbolt-net") == links["usb4-tcp"]
    assert all(link.source and link.alpha_us > 0 and link.beta_gbps > 0 for link in links.values())
    # TCP's share of a 1500-byte frame on the wire; RoCE capped by the Strix Halo's slot
    assert links["10gbe"].beta_gbps == pytest.approx(9.41)
    assert links["roce-100gbe"].beta_gbps == 50.6


def test_ones_own_link() -> None:
    assert catalog.find_link("alpha=70us,bw=5gbit") == Link(
        "alpha=70us,bw=5gbit", "your link (alpha=70us,bw=5gbit)", 70.0, 5.0, "--link", "tcp"
    )
    rdma = catalog.find_link("bw=2500mbit, alpha=0.005ms, stack=rdma")
    assert (rdma.alpha_us, rdma.beta_gbps, rdma.stack) == (5.0, 2.5, "rdma")
    assert rdma.id == "alpha=5us,bw=2.5gbit,stack=rdma"


@pytest.mark.parametrize(
    "spec",
    [
        "alpha=70us",
        "bw=5gbit",
        "alpha=70,bw=5gbit",
        "alpha=70us,bw=5gbps",
        "alpha=70us,bw=5gbit,stack=udp",
        "alpha=70us,bw=5gbit,alpha=1us",
        "alpha=-1us,bw=5gbit",
        "alpha=70us,bw=0gbit",
        "alpha=2s,bw=5gbit",
        "alpha=1e400us,bw=5gbit",
        "alpha=70us,bw=5gbit,mtu=9000",
    ],
)
def test_a_bad_link_is_one_line(spec: str) -> None:
    with pytest.raises(UsageError, match="--link"):
        catalog.find_link(spec)


KEYS = st.sampled_from(["alpha", "bw", "stack", "ALPHA", ""]) | st.text(max_size=5)
VALUES = st.from_regex(
    r"-?\d{0,4}(\.\d{0,3})?(e\d{1,3})?(ns|us|µs|ms|s|bit|kbit|mbit|gbit|tbit|gbps)?", fullmatch=True
) | st.sampled_from(["tcp", "rdma", "udp"]) | st.text(max_size=8)  # fmt: skip
SPECS = st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=4).map(
    lambda pairs: ",".join(f"{k}={v}" for k, v in pairs)
)


@given(SPECS)
def test_no_text_crashes_the_link_parser(text: str) -> None:
    try:
        link = catalog.find_link(text)
    except UsageError:
        return
    assert link.alpha_us >= 0 and link.beta_gbps > 0


def test_the_profile_becomes_hardware_and_a_link() -> None:
    document = profile_document()
    hw = hardware_from_profile(document, "lab.json")
    assert (hw.id, hw.memory_bw_gbs, hw.shared_cores, hw.cpu_only) == ("lab", 20.0, 2, True)
    tuning = LLAMA.tuning(hw)
    # the token's time beyond reading its bytes, spread over the layers
    assert tuning.per_layer_us == pytest.approx((1 / 1250 - 6_956_032 / 20e9) / 4 * 1e6, abs=0.01)
    assert tuning.stage_us("tcp") == pytest.approx((1 / 490 - 1 / 1250 - 80e-6) * 1e6, abs=0.01)
    assert tuning.dense.central == 1.0
    link = link_from_profile(document, "lab.json")
    assert (link.id, link.alpha_us, link.beta_gbps) == ("lab", 30.0, 6.0)
    # an engine the profile did not measure falls back to the profile's own efficiency
    assert find_engine("vllm").tuning(hw).per_layer_us == 0.0


@pytest.mark.parametrize(
    "change",
    [
        {"schema": "halo.bench.serve/1"},
        {"memory_bw_gbs": 0},
        {"memory_bw_gbs": "fast"},
        {"memory_gib": float("nan")},
        {"shared_cores": -1},
        {"shared_cores": 2.5},
        {"engines": []},
        {"engines": {"llama.cpp": {"per_layer_us": 1}}},
        {
            "engines": {
                "llama.cpp": {
                    **profile_document()["engines"]["llama.cpp"],
                    "per_stage_us": {"tcp": "slow"},
                }
            }
        },
    ],
)
def test_a_bad_profile_is_one_line(change: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match=r"lab\.json"):
        hardware_from_profile(profile_document(**change), "lab.json")


def test_llama_bench_output_gives_its_decode_rate() -> None:
    text = (FIXTURES / "llama_bench" / "tg32.json").read_text()
    assert parse_llama_bench(text) == 3168.76493
    for garbage in ("", "[]", "{}", "[{}]", '[{"n_gen": 32, "n_prompt": 0, "avg_ts": -1}]',
                    '[{"n_gen": 32, "n_prompt": 0, "avg_ts": true}]', "not json"):  # fmt: skip
        with pytest.raises(UsageError, match="llama-bench"):
            parse_llama_bench(garbage)


def test_adding_nodes_says_faster_or_slower_and_why() -> None:
    model = catalog.find_model("llama-3.1-8b")
    req = Request(model, STRIX, catalog.find_link("5gbe"), nodes=3, quant="Q4_K_M",
                  engine=LLAMA, batch=4, context=4096)  # fmt: skip
    steps = node_steps(req)
    assert [(s.nodes, s.layout, s.verdict) for s in steps] == [
        (1, "single", "fits"),
        (2, "RPC2", "capacity"),
        (3, "RPC3", "capacity"),
    ]
    second = steps[1]
    assert second.ratio_batch1 is not None and second.ratio_batch1 < 0.98
    added = second.decode_ms_network_batch1 - steps[0].decode_ms_network_batch1
    stage = rpc_stages(replace(req, nodes=2), 2, 1)[0] * 1e3
    assert added == pytest.approx(stage)
    assert 2.8 + 2 * 0.074 < stage < 2.8 + 2 * 0.074 + 0.1  # the fixed cost, a round trip, bytes
    line = step_sentence(second, steps[0], 4, "5gbe")
    assert line.startswith(f"the 2nd node (RPC2): decode {second.ratio_batch1:.2f}× of 1 node (")
    assert f"at batch 4), slower: it adds {stage:.2f} ms of network per token over 5gbe" in line
    assert line.endswith("worth it only for capacity")


def test_a_model_that_needs_the_nodes_says_so() -> None:
    model = catalog.find_model("llama-3.3-70b")
    req = Request(model, STRIX, catalog.find_link("roce"), nodes=2, engine=find_engine("vllm"))
    first, second = node_steps(req)
    assert (first.verdict, second.verdict) == ("does not fit", "fits")
    assert step_sentence(second, first, 1, "roce").startswith(
        "the 2nd node (TP2): the model fits only from here; "
    )


def test_nodes_that_share_cores_take_turns() -> None:
    hw = replace(hardware_from_profile(profile_document(), "lab.json"), cpu_only=True)
    model = catalog.find_model("llama-3.1-8b")
    vllm = find_engine("vllm")
    req = Request(model, hw, catalog.find_link("roce"), nodes=4, engine=vllm, context=256)
    rows = {r.layout: r for r in (evaluate_layout(req, tp) for tp in (1, 2, 4))}
    # TP2 halves each rank's work on two cores; TP4 puts two ranks on each core
    assert rows["TP2"].decode_ms_compute == pytest.approx(rows["TP4"].decode_ms_compute, rel=0.02)


def evaluate_layout(req: Request, tp: int) -> Any:
    from halo_cluster.capacity.estimate import evaluate

    return evaluate(replace(req, nodes=tp), tp, 1)


def run_plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(["plan", *args])
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_with_the_lab_profile(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    code, _, err = run_plan(capsys, "llama-3.1-8b", "--hardware", "lab")
    assert code == 2 and "no lab profile measured on this machine: run 'halo lab profile'" in err
    hardware = tmp_path / "halo" / "hardware"
    hardware.mkdir(parents=True)
    (hardware / "lab.json").write_text(json.dumps(profile_document()))
    code, out, err = run_plan(
        capsys,
        "llama-3.1-8b",
        "--engine",
        "llama.cpp",
        "--quant",
        "Q4_K_M",
        "--hardware",
        "lab",
        "--link",
        "lab",
        "--link",
        "alpha=30us,bw=1gbit",
        "--nodes",
        "3",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["hardware"] == "lab"
    shown = [(r["layout"], r["link"]) for r in data["rows"]]
    assert shown == [("RPC3", "lab"), ("3 x single", "lab"), ("RPC3", "alpha=30us,bw=1gbit")]
    added = data["nodes_added"]
    assert added["link"] == "lab" and len(added["lines"]) == 2
    assert [s["nodes"] for s in added["steps"]["alpha=30us,bw=1gbit"]] == [1, 2, 3]
    # the same profile as a file
    code, out, _ = run_plan(capsys, "llama-3.1-8b", "--hardware", str(hardware / "lab.json"),
                            "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["hardware"] == "lab"


def test_plan_list_shows_the_links_with_their_sources(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_plan(capsys, "--list", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["links"]["usb4-rdma"]["stack"] == "rdma"
    assert "kyuz0/amd-strix-halo-vllm-toolboxes#70" in data["links"]["usb4-rdma"]["source"]
    assert data["link_aliases"]["tb"] == "usb4-tcp"
    code, out, _ = run_plan(capsys, "--list")
    assert code == 0 and "alpha=70us,bw=5gbit" in out and "roce-25gbe" in out


def test_a_measured_collective_cost_is_paid_per_all_reduce_and_rank() -> None:
    figures = profile_document()["engines"]["llama.cpp"]
    document = profile_document(engines={"vllm": {**figures, "per_collective_us": 900.0}})
    hw = hardware_from_profile(document, "lab.json")
    model = catalog.find_model("llama-3.1-8b")
    link = catalog.find_link("alpha=30us,bw=10gbit")
    req = Request(model, hw, link, nodes=4, engine=find_engine("vllm"), context=256)
    from halo_cluster.capacity.estimate import allreduce_s, step_seconds

    payload = model.hidden * 2
    for tp in (2, 4):
        network = step_seconds(replace(req, nodes=tp), tp, 1, 1)[1]
        per = allreduce_s(payload, tp, link) + (tp - 1) * 900e-6
        assert network == pytest.approx((2 * model.layers + 2) * per)


def test_in_the_lab_a_worker_on_the_heads_core_costs_its_own_stage() -> None:
    run = EngineRun("llama.cpp", 1 / 120, 1 / 90, 100e6, 8, 100e-6, "a run", 1 / 95)
    figures = engine_figures(run, 17.0)
    assert figures["per_stage_shared_core_us"] == round((1 / 95 - 1 / 120 - 100e-6) * 1e6, 2)
    hw = hardware_from_profile(profile_document(engines={"llama.cpp": figures}), "lab.json")
    model = catalog.find_model("llama-3.1-8b")
    req = Request(model, hw, catalog.find_link("alpha=30us,bw=10gbit"), nodes=4,
                  quant="Q4_K_M", engine=LLAMA, context=128)  # fmt: skip
    second, third, fourth = rpc_stages(req, 4, 1)
    other = figures["per_stage_us"]["tcp"] * 1e-6
    shared = figures["per_stage_shared_core_us"] * 1e-6
    # node2 and node4 on the other core, node3 on the head's (two cores)
    assert third - shared == pytest.approx(second - other)
    assert fourth - other > second - other  # the last returns the logits


def test_the_tp2_run_gives_the_collective_cost_that_predicts_it_back() -> None:
    """The profile's vLLM TP=2 run (its multi-node executor on one machine) becomes the fixed
    cost per collective; the planner then predicts that same TP=2 step, and TP=4 pays three
    times the fixed cost per collective (one per further rank)."""
    from halo_cluster.capacity.estimate import (
        allreduce_s,
        one_node_parts,
        step_seconds,
        tp2_collective_s,
    )

    model = catalog.find_model("llama-3.1-8b")
    link = catalog.find_link("alpha=36us,bw=16gbit")
    bare = hardware_from_profile(profile_document(memory_bw_gbs=22.8, engines={}), "lab.json")
    req = Request(model, bare, link, nodes=1, engine=find_engine("vllm"), context=128)
    read, _ = one_node_parts(req)
    token_s = read / 22.8e9 + 0.004  # 4 ms beyond its bytes
    tp2_s = 3 * token_s
    run = EngineRun("vllm", token_s, None, read, model.layers, 0.0, "a run")
    fixed = tp2_collective_s(token_s, tp2_s, read, req)
    assert fixed > 0
    figures = {**engine_figures(run, 22.8), "per_collective_us": fixed * 1e6}
    hw = hardware_from_profile(
        profile_document(memory_bw_gbs=22.8, engines={"vllm": figures}), "lab.json"
    )
    assert sum(step_seconds(replace(req, hardware=hw), 1, 1, 1)) == pytest.approx(token_s)
    two = step_seconds(replace(req, hardware=hw, nodes=2), 2, 1, 1)
    assert sum(two) == pytest.approx(tp2_s, rel=0.01)
    four = step_seconds(replace(req, hardware=hw, nodes=4), 4, 1, 1)
    per = allreduce_s(model.hidden * 2, 4, link) + 3 * fixed
    assert four[1] == pytest.approx((2 * model.layers + 2) * per)


def test_on_shared_cores_the_measured_wait_of_n_ranks_replaces_the_per_rank_scaling() -> None:
    """Lab nodes share the machine's cores: the two-rank collective cost is split into the
    bare all-reduce's wait at two ranks and the engine's own work; at n ranks the engine's
    work is paid once per further rank and the wait is the one measured at n ranks
    (interpolated between the rank counts measured, along the last two beyond them)."""
    from halo_cluster.capacity.estimate import allreduce_s, collective_fixed_s, step_seconds

    figures = profile_document()["engines"]["llama.cpp"]
    waits = {"2": 300.0, "4": 3200.0, "8": 9000.0}
    vllm = {**figures, "per_collective_us": 1400.0, "shared_core_allreduce_us": waits}
    hw = hardware_from_profile(profile_document(engines={"vllm": vllm}), "lab.json")
    model = catalog.find_model("llama-3.1-8b")
    link = catalog.find_link("alpha=30us,bw=10gbit")
    req = Request(model, hw, link, nodes=8, engine=find_engine("vllm"), context=256)
    own = 1400.0 - 300.0
    expected = {2: 1400.0, 3: 2 * own + 1750.0, 4: 3 * own + 3200.0, 6: 5 * own + 6100.0,
                8: 7 * own + 9000.0, 16: 15 * own + 20600.0}  # fmt: skip
    for ranks, us in expected.items():
        assert collective_fixed_s(req, ranks) == pytest.approx(us * 1e-6), ranks
    network = step_seconds(replace(req, nodes=4), 4, 1, 1)[1]
    per = allreduce_s(model.hidden * 2, 4, link) + expected[4] * 1e-6
    assert network == pytest.approx((2 * model.layers + 2) * per)
    # without shared cores (a profile of real hosts) the figures are not used
    separate = replace(req, hardware=replace(hw, shared_cores=0))
    assert collective_fixed_s(separate, 4) == pytest.approx(3 * 1400e-6)


@pytest.mark.parametrize(
    ("waits", "message"),
    [
        ([300.0], "must map a rank count"),
        ({"1": 300.0}, "'1' is not a rank count"),
        ({"02": 300.0}, "'02' is not a rank count"),
        ({"²": 300.0}, "is not a rank count"),
        ({"two": 300.0}, "'two' is not a rank count"),
        ({"2": -1.0}, "out of range"),
        ({"2": "fast"}, "must be a finite number"),
        ({"2": float("nan")}, "must be a finite number"),
    ],
)
def test_a_profile_with_bad_shared_core_waits_is_refused(waits: object, message: str) -> None:
    figures = profile_document()["engines"]["llama.cpp"]
    vllm = {**figures, "per_collective_us": 1400.0, "shared_core_allreduce_us": waits}
    with pytest.raises(UsageError, match=message):
        hardware_from_profile(profile_document(engines={"vllm": vllm}), "lab.json")
