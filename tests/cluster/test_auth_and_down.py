"""Ray auth off says so once per command; halo down ends halo's shared SSH connections."""

from __future__ import annotations

from pathlib import Path

import pytest

from halo_cluster.client.node import clients_from
from halo_cluster.cluster.handle import Cluster
from halo_cluster.config import Config, NodeConfig, RayConfig
from halo_cluster.monitor.exposition import _escape, _unescape
from halo_cluster.ray import auth, lifecycle
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.result import Result

NODES = (NodeConfig("a", "root@a", None, halo="h"), NodeConfig("b", "b.lan", None, halo="h"))


def test_auth_none_warns_once_and_gives_no_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = Config(tmp_path / "halo.toml", "open", "auto", NODES, ray=RayConfig(auth="none"))
    auth._warned.discard("open")
    assert auth.ray_env(config, create=True) == {} and auth.ray_env(config) == {}
    err = capsys.readouterr().err
    assert err.count('halo: warning: [ray] auth = "none"') == 1
    assert not (tmp_path / ".halo").exists()  # no token made


def test_token_is_made_once_0600(tmp_path: Path) -> None:
    config = Config(tmp_path / "halo.toml", "c", "auto", NODES)
    assert auth.ray_token(config) is None  # never made: nothing to hand out
    first = auth.ray_env(config, create=True)
    assert auth.ray_env(config) == first and len(first["HALO_RAY_TOKEN"]) == 64
    assert (tmp_path / ".halo" / "c.ray-token").stat().st_mode & 0o777 == 0o600


def test_down_closes_the_shared_connections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[tuple[list[str], Path | None]] = []
    monkeypatch.setattr(
        lifecycle, "close_connections", lambda targets, cfg: closed.append((targets, cfg)) or []
    )
    config = Config(tmp_path / "halo.toml", "c", "auto", NODES, ssh_config=tmp_path / "sc")
    ok = Result((), 0, "", "")
    runners = {n.name: FakeRunner().on(["bash", "-s"], ok) for n in NODES}
    assert lifecycle.Lifecycle(Cluster(config, clients_from(config, runners))).down() == {
        "b": "stopped",
        "a": "stopped",
    }
    assert closed == [(["root@a", "b.lan"], tmp_path / "sc")]


def test_exporter_labels_show_control_characters_as_text() -> None:
    value = 'eth\x1b[31m0"\n\\'
    escaped = _escape(value)
    assert "\x1b" not in escaped and "\n" not in escaped
    assert _unescape(escaped) == 'eth\\x1b[31m0"\n\\'
