"""What the lab and engine tiers need from the machine, one session fixture each: the only way
a test gets root, the lab's tools, an engine environment or the llama.cpp build, so that the
tier check (tests/tiers.py) sees from a test's fixtures what it starts. Outside CI a missing
prerequisite skips with its reason; under CI=true it is a failure (conftest.require)."""

from __future__ import annotations

import os
import shutil

import pytest

from halo_cluster.config import default_engine, default_llama_cpp
from tests.conftest import require

LAB_TOOLS = ("ip", "unshare", "nsenter", "ssh-keygen", "ssh", "ping")
SSHD = "/usr/sbin/sshd"


@pytest.fixture(scope="session")
def lab_host() -> None:
    """Root and the tools 'halo lab' and the lab tests use (iproute2, util-linux, OpenSSH)."""
    require(os.geteuid() == 0, "halo lab needs root")
    for tool in LAB_TOOLS:
        require(shutil.which(tool) is not None, f"{tool} missing")
    require(os.path.exists(SSHD), "openssh-server missing")


def _built(found: str | None, reason: str) -> str:
    require(found is not None, reason)
    assert found is not None
    return found


@pytest.fixture(scope="session")
def vllm_engine() -> str:
    """The engine environment (vLLM's CPU build, Ray): its directory."""
    return _built(default_engine(), "no engine environment (make engine builds .venv-engine)")


@pytest.fixture(scope="session")
def llama_cpp() -> str:
    """The llama.cpp build (ggml-rpc-server, llama-server, llama-bench): its directory."""
    return _built(default_llama_cpp(), "no llama.cpp build (make llama-cpp builds .llama-cpp)")
