"""The commands that fix a finding, per distribution family, exactly as a person types them."""

from __future__ import annotations

import shlex

from halo_cluster.printable import printable

FEDORA_LIKE = {"fedora", "rhel", "centos", "rocky", "almalinux", "nobara", "bazzite"}
DEBIAN_LIKE = {"ubuntu", "debian", "pop", "linuxmint"}


def family(os_id: str | None) -> str:
    if os_id in FEDORA_LIKE:
        return "fedora"
    if os_id in DEBIAN_LIKE:
        return "debian"
    return "other"


def q(value: str) -> str:
    return shlex.quote(value)


def c(value: str) -> str:
    """A value inside a ``#`` comment: quoted, with newlines and other control characters
    shown escaped, so nothing from a node can end the comment and become a command."""
    return shlex.quote(printable(value))


def set_mtu(fam: str, iface: str, mtu: int = 9000) -> list[str]:
    if fam == "fedora":
        return [
            f"sudo nmcli connection modify {q(iface)} ethernet.mtu {mtu}",
            f"sudo nmcli connection up {q(iface)}",
        ]
    if fam == "debian":
        return [
            f"# set 'mtu: {mtu}' for {c(iface)} in /etc/netplan/*.yaml, then:",
            "sudo netplan apply",
        ]
    return [f"sudo ip link set dev {q(iface)} mtu {mtu}"]


def set_address(fam: str, iface: str, cidr: str) -> list[str]:
    if fam == "fedora":
        return [
            f"sudo nmcli connection modify {q(iface)} ipv4.method manual ipv4.addresses {q(cidr)}",
            f"sudo nmcli connection up {q(iface)}",
        ]
    if fam == "debian":
        return [
            f"# add {c(cidr)} under {c(iface)}: addresses: in /etc/netplan/*.yaml, then:",
            "sudo netplan apply",
        ]
    return [f"sudo ip addr add {q(cidr)} dev {q(iface)}"]


def link_up(fam: str, iface: str) -> list[str]:
    if fam == "fedora":
        return [f"sudo nmcli connection up {q(iface)}", "# check the cable and the peer's port"]
    return [f"sudo ip link set dev {q(iface)} up", "# check the cable and the peer's port"]


def kernel_args(fam: str, add: list[str], remove: list[str]) -> list[str]:
    if fam == "fedora":
        parts = []
        if add:
            parts.append(f"--args={q(' '.join(add))}")
        if remove:
            parts.append(f"--remove-args={q(' '.join(remove))}")
        return [f"sudo grubby --update-kernel=ALL {' '.join(parts)}", "sudo reboot"]
    steps = []
    if add:
        steps.append(f"# add {c(' '.join(add))} to GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub")
    if remove:
        steps.append(
            f"# remove {c(' '.join(remove))} from GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub"
        )
    tool = "sudo update-grub" if fam == "debian" else "sudo grub2-mkconfig -o /boot/grub2/grub.cfg"
    return [*steps, tool, "sudo reboot"]


def module_overrides(fam: str) -> list[str]:
    """Where a module parameter the kernel command line sets is overridden: modprobe.d
    files, then the initramfs built with the old value, then a reboot."""
    initramfs = {
        "fedora": "sudo dracut --force",
        "debian": "sudo update-initramfs -u",
    }.get(fam, "# rebuild the initramfs (dracut --force, or mkinitcpio -P)")
    return [
        "grep -rs 'ttm\\|amdgpu' /etc/modprobe.d /usr/lib/modprobe.d"
        "   # a line 'options ttm ...' there wins: remove it",
        initramfs,
        "sudo reboot",
    ]


def trust_interface_argv(fam: str, backend: str | None, iface: str) -> list[list[str]]:
    if backend == "ufw" or (backend is None and fam == "debian"):
        return [["ufw", "allow", "in", "on", iface]]
    return [
        ["firewall-cmd", "--permanent", "--zone=trusted", f"--change-interface={iface}"],
        ["firewall-cmd", "--reload"],
    ]


def trust_interface(fam: str, backend: str | None, iface: str) -> list[str]:
    return sudo(trust_interface_argv(fam, backend, iface))


def sudo(commands: list[list[str]]) -> list[str]:
    return ["sudo " + shlex.join(argv) for argv in commands]


def install(fam: str, *packages: str) -> list[str]:
    names = " ".join(q(p) for p in packages)
    if fam == "fedora":
        return [f"sudo dnf install -y {names}"]
    if fam == "debian":
        return [f"sudo apt install -y {names}"]
    return [f"# install {names} with your distribution's package manager"]


def memlock_unlimited() -> list[str]:
    return [
        "printf '* soft memlock unlimited\\n* hard memlock unlimited\\n' | "
        "sudo tee /etc/security/limits.d/90-halo-memlock.conf",
        "# containers: add --ulimit memlock=-1; systemd services: LimitMEMLOCK=infinity",
        "# then log in again",
    ]
