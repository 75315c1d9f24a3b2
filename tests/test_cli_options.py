"""The option shapes of cli/options.py: what each parses, refuses and shows in --help."""

from __future__ import annotations

import click
from click.testing import CliRunner

from halo_cluster.cli.options import choice_option, range_option, root_option


@click.command()
@root_option("Read the node below DIR.")
@choice_option("--net", "network", choices=["fabric", "mgmt"], default="fabric", help="Which.")
@range_option("--mtu", default=9000, low=1280, high=65520)
@range_option("--seconds", default=5.0, low=0.5, high=600)
def show(root: str, network: str, mtu: int, seconds: float) -> None:
    click.echo(repr((root, network, mtu, seconds)))


def invoke(*args: str) -> click.testing.Result:
    return CliRunner().invoke(show, list(args))


def test_the_defaults() -> None:
    assert invoke().output == "('/', 'fabric', 9000, 5.0)\n"


def test_given_values_are_parsed_to_their_types() -> None:
    done = invoke("--root", "/srv/n1", "--net", "mgmt", "--mtu", "1500", "--seconds", "0.5")
    assert done.output == "('/srv/n1', 'mgmt', 1500, 0.5)\n"


def test_a_choice_outside_the_list_is_refused() -> None:
    done = invoke("--net", "wifi")
    assert done.exit_code == 2
    assert "'wifi' is not one of 'fabric', 'mgmt'" in done.output


def test_numbers_outside_the_range_or_not_whole_are_refused() -> None:
    assert invoke("--mtu", "65521").exit_code == 2
    assert invoke("--mtu", "1500.5").exit_code == 2
    assert invoke("--seconds", "0.4").exit_code == 2


def test_the_help_shows_defaults_ranges_and_choices() -> None:
    text = " ".join(invoke("--help").output.split())
    assert "--root DIR Read the node below DIR. [default: /]" in text
    assert "--net [fabric|mgmt] Which. [default: fabric]" in text
    assert "--mtu INTEGER RANGE [default: 9000; 1280<=x<=65520]" in text
    assert "--seconds FLOAT RANGE [default: 5.0; 0.5<=x<=600]" in text
