"""The engine's own limits (issue 47, item 1): a node's answer to limits_script as recorded
on this machine (Debian, a cgroup v1 hybrid, a login session), and cgroup v2 answers of the
same format for a system unit, a user unit and a container; who set them and the fix for
that owner; what falls short of the plan."""

from __future__ import annotations

import pytest

from halo_cluster.checks.engine_limits import (
    EngineLimits,
    Owner,
    limit_findings,
    owner_of,
    parse_limits_answer,
)
from halo_cluster.errors import WireError
from tests.conftest import OUTPUTS

RECORDED = (OUTPUTS / "engine-limits" / "debian-session-v1.txt").read_text()
LIMITS = RECORDED.split("== limits\n", 1)[1].split("== cgroup", 1)[0]


def answer(limits: str, cgroup: str, memory_max: str | None) -> str:
    tail = "" if memory_max is None else f"== memory.max\n{memory_max}\n"
    return f"alive=1\npid=4242\n== limits\n{limits}== cgroup\n{cgroup}\n{tail}"


def test_the_recorded_answer_reads_as_a_login_session_with_8_mib_locked() -> None:
    found = parse_limits_answer("node1", RECORDED)
    assert found is not None
    assert (found.memlock_bytes, found.nofile, found.memory_max_bytes) == (8388608, 20000, None)
    assert found.cgroup == "/" and found.owner == Owner("login session", "")
    assert found.to_dict()["owner"] == "login session"


def test_an_engine_that_does_not_run_has_no_limits() -> None:
    assert parse_limits_answer("node1", "alive=0\n") is None


@pytest.mark.parametrize(
    "garbage",
    [
        "alive=1\n",
        "alive=1\npid=x\n== limits\n",
        "alive=1\npid=1\n== limits\nMax open files  a  b\n",
    ],
)
def test_garbage_is_one_line(garbage: str) -> None:
    with pytest.raises(WireError) as err:
        parse_limits_answer("node2", garbage)
    assert str(err.value).startswith("node2: ") and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("cgroup", "owner"),
    [
        ("/system.slice/halo-serve.service", Owner("system unit", "halo-serve.service")),
        (
            "/user.slice/user-1000.slice/user@1000.service/app.slice/halo-vllm.service",
            Owner("user unit", "halo-vllm.service"),
        ),
        (
            "/system.slice/docker-3f1c2b4a5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f70.scope",
            Owner("container", "docker 3f1c2b4a5d6e"),
        ),
        (
            "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-0a1b2c3d4e5f67.scope/container",
            Owner("container", "podman 0a1b2c3d4e5f"),
        ),
        ("/user.slice/user-1000.slice/session-7.scope", Owner("login session", "session-7.scope")),
        ("/", Owner("login session", "")),
        ("/docker/" + "3f1c2b4a5d6e" + "0" * 52, Owner("container", "docker 3f1c2b4a5d6e")),
    ],
)
def test_the_owner_is_read_from_the_cgroup(cgroup: str, owner: Owner) -> None:
    assert owner_of(cgroup) == owner


def test_a_unit_that_set_no_memlock_fails_an_rdma_plan_with_its_fix() -> None:
    text = answer(LIMITS, "0::/system.slice/halo-serve.service", "34359738368")
    found = parse_limits_answer("node2", text)
    assert found is not None and found.memory_max_bytes == 32 * 2**30
    problems, notes, fix = limit_findings(found, rdma=True, need_bytes=40 * 2**30)
    assert problems == [
        "node2: the engine (pid 4242, system unit halo-serve.service) may lock only 8 MiB of "
        "memory: RDMA memory registration fails (ENOMEM) and NCCL/RCCL stop or fall back to "
        "sockets",
        "node2: the engine (pid 4242, system unit halo-serve.service) is held to 32.0 GiB by "
        "its cgroup (memory.max); the model needs 40.0 GiB there",
    ]
    assert notes[0].endswith("may open 20000 files, fewer than the 65535 vLLM raises its own "
                             "limit to where it may (many connections or shards fail with 'Too "
                             "many open files')")  # fmt: skip
    assert fix == [
        "sudo systemctl edit halo-serve.service   # [Service] LimitMEMLOCK=infinity",
        "sudo systemctl restart halo-serve.service",
        "sudo systemctl edit halo-serve.service   # [Service] MemoryMax=infinity",
    ]


def test_sockets_need_no_locked_memory_and_unlimited_is_fine() -> None:
    found = parse_limits_answer("node1", RECORDED)
    assert found is not None
    assert limit_findings(found, rdma=False, need_bytes=None)[0] == []
    roomy = EngineLimits("node1", 1, None, 1048576, "/", None)
    assert limit_findings(roomy, rdma=True, need_bytes=120 * 2**30) == ([], [], [])


def test_the_fix_follows_the_owner() -> None:
    user = EngineLimits("n", 1, 8 << 20, None, "/user.slice/user-1000.slice/user@1000.service/"
                        "app.slice/halo.service", None)  # fmt: skip
    assert limit_findings(user, True, None)[2][0] == (
        "systemctl --user edit halo.service   # [Service] LimitMEMLOCK=infinity"
    )
    boxed = EngineLimits("n", 1, 65536, None, "/system.slice/docker-" + "ab" * 32 + ".scope", None)
    assert limit_findings(boxed, True, None)[2] == [
        "# container docker abababababab: start it with --ulimit memlock=-1:-1 "
        "(compose: ulimits: memlock: -1)"
    ]


def test_a_process_with_cap_ipc_lock_is_not_bound_by_its_memlock_limit() -> None:
    """Root, or a container given IPC_LOCK, registers RDMA memory past RLIMIT_MEMLOCK."""
    base = answer(LIMITS, "0::/system.slice/halo-serve.service", None)
    capped = base.replace("pid=4242\n", "pid=4242\ncap_eff=0000000000004000\n")
    found = parse_limits_answer("node2", capped)
    assert found is not None and found.ipc_lock and found.to_dict()["ipc_lock"] is True
    assert limit_findings(found, rdma=True, need_bytes=None)[0] == []
    plain = parse_limits_answer("node2", base.replace("pid=4242\n", "pid=4242\ncap_eff=zz\n"))
    assert plain is not None and not plain.ipc_lock
    with pytest.raises(WireError):  # '²' is a digit to str.isdigit, not to int()
        parse_limits_answer("node2", base.replace("pid=4242", "pid=²"))


def test_on_ray_the_ranks_worker_is_read_not_halos_process() -> None:
    """Under Ray the ranks run in Ray's workers, children of the raylet 'halo up' started:
    the script reads the node's oldest rank worker, for real here (a process named as Ray
    names them, in a PID namespace of its own: the host may run lab nodes' Ray), and
    nothing where there is none."""
    import os
    import subprocess

    from halo_cluster.engines.scripts import limits_script
    from tests.conftest import require

    require(os.geteuid() == 0, "a PID namespace of its own needs root")

    def run(script: str) -> str:
        return subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "bash", "-s"], input=script,
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip

    assert run(limits_script("lab", ray=True)).startswith("alive=0")
    started = (  # the worker is there once its name is (the test's timeout bounds the wait)
        "(exec -a ray::RayWorkerWrapper sleep 60) &\necho w=$!\n"
        "until pgrep -f RayWorkerWrapper >/dev/null; do sleep 0.05; done\n"
    )
    said = run(started + limits_script("lab", ray=True))
    worker, _, rest = said.partition("\n")
    found = parse_limits_answer("node1", rest)
    assert found is not None and f"w={found.pid}" == worker
