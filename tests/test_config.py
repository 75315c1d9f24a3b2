"""halo.toml: a valid file, and every bad field named with its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from halo_cluster.config import Config, ConfigError, NodeConfig, find_config, load_config

GOOD = """\
[cluster]
name = "strix"
transport = "roce"

[[node]]
name = "strix1"
ssh = "root@192.168.1.51"
fabric_address = "192.168.100.1"
exec_prefix = "toolbox run -c vllm --"

[[node]]
name = "strix2"
ssh = "strix2.lan"
fabric_address = "192.168.100.2"
halo = "/opt/halo/bin/halo"
gpus = 0
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "halo.toml"
    path.write_text(text)
    return path


def test_valid_config(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    assert load_config(path) == Config(
        path=path,
        name="strix",
        transport="roce",
        nodes=(
            NodeConfig(
                "strix1",
                "root@192.168.1.51",
                "192.168.100.1",
                ("toolbox", "run", "-c", "vllm", "--"),
            ),
            NodeConfig("strix2", "strix2.lan", "192.168.100.2", (), "/opt/halo/bin/halo", 0),
        ),
    )
    assert load_config(path).nodes[0].host == "192.168.1.51"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'transport = "roce"',
            'transport = "carrier"',
            r"halo.toml:3: cluster.transport must be one of",
        ),
        (
            'fabric_address = "192.168.100.2"',
            'fabric_address = "192.168.100.300"',
            r"halo.toml:14: node\[1\].fabric_address",
        ),
        ("gpus = 0", "gpus = -1", r"halo.toml:16: node\[1\].gpus must be a whole number"),
        ("gpus = 0", "gpu = 0", r"halo.toml:16: unknown field node\[1\].gpu"),
        ('name = "strix2"', 'name = "strix1"', r"node name 'strix1' appears twice"),
        ('name = "strix2"', 'name = "bad name!"', r"halo.toml:12: node\[1\].name 'bad name!'"),
        ('ssh = "strix2.lan"', "ssh = 7", r"halo.toml:13: node\[1\].ssh must be a string"),
        ("[cluster]", "[clutser]", r"halo.toml:1: unknown section \[clutser\]"),
        (
            'exec_prefix = "toolbox run -c vllm --"',
            "exec_prefix = 3",
            r"halo.toml:9: node\[0\].exec_prefix",
        ),
        ('name = "strix"', 'name = "strix', r"not valid TOML"),
    ],
)
def test_bad_fields_are_named_with_their_line(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, GOOD.replace(old, new, 1)))


def test_no_nodes(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no \\[\\[node\\]\\] entries"):
        load_config(write(tmp_path, "[cluster]\nname = 'x'\n"))


def test_find_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert find_config(None) is None
    (tmp_path / "xdg" / "halo").mkdir(parents=True)
    (tmp_path / "xdg" / "halo" / "halo.toml").write_text(GOOD)
    assert find_config(None) == tmp_path / "xdg" / "halo" / "halo.toml"
    write(tmp_path, GOOD)
    assert find_config(None) == Path("halo.toml")
    with pytest.raises(ConfigError.__mro__[1], match="does not exist"):
        find_config(str(tmp_path / "missing.toml"))


def test_the_model_store_of_the_nodes(tmp_path: Path) -> None:
    node = '[[node]]\nname = "n1"\nssh = "n1"\n'
    assert load_config(write(tmp_path, node)).models.dir == "/var/lib/halo/models"
    custom = load_config(write(tmp_path, '[models]\ndir = "/data/models/"\n' + node))
    assert custom.models.dir == "/data/models"
    for text, said in (
        ('[models]\ndir = "models"\n', "halo.toml:2: models.dir 'models' must be an absolute path"),
        ("[models]\nsize = 1\n", "halo.toml:2: unknown field models.size (known: dir)"),
        ("models = 1\n", "halo.toml:1: [models] must be a table"),
    ):
        with pytest.raises(ConfigError) as caught:
            load_config(write(tmp_path, text + node))
        assert str(caught.value).startswith(f"{tmp_path}/{said}")
