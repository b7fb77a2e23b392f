"""Which hosts are this machine (kldtui.this_host), and what an attached server's URL says."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kldtui import this_host
from kldtui.servers.attach import KIND as ATTACH
from kldtui.servers.attach import AttachConfig


def _attached(url: str) -> bool:
    return ATTACH.is_local(AttachConfig(url=url, server_capture_dir=Path("c")))


@pytest.fixture
def fresh(monkeypatch):
    this_host.addresses.cache_clear()
    yield
    this_host.addresses.cache_clear()


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://127.0.0.2:1", "http://localhost:8000",
                                 "http://[::1]:8000", "http://0.0.0.0:8000", "http://[::ffff:127.0.0.1]:9"])
def test_loopback_is_this_host(url):
    assert _attached(url)


def test_the_hosts_own_interface_address_is_this_host(fresh, monkeypatch):
    """Before issue 21 an attached server at the host's IP counted as remote (its GPUs free to take)."""
    monkeypatch.setattr(this_host, "_interface_ipv4", lambda: {"203.0.113.7"})
    assert _attached("http://203.0.113.7:8000")
    assert not _attached("http://203.0.113.8:8000")


def test_every_address_the_machine_reports_is_this_host(fresh):
    """The real interfaces: each address `hostname -I` lists (where it exists) is found."""
    assert "127.0.0.1" in this_host.addresses()
    if shutil.which("hostname") is None:
        return
    listed = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout.split()
    for address in listed:
        assert this_host.is_this_host(address), (address, sorted(this_host.addresses()))
        assert _attached(f"http://{address}:8000" if ":" not in address else f"http://[{address}]:8000")


def test_the_fully_qualified_name_is_this_host(fresh, monkeypatch):
    monkeypatch.setattr(this_host.socket, "getfqdn", lambda *a: "gpu-node-7.cluster.example.org")
    monkeypatch.setattr(this_host, "_resolve", lambda name: set())
    assert _attached("http://gpu-node-7.cluster.example.org:8000")
    assert _attached("http://GPU-node-7.cluster.example.org.:8000")
    assert not _attached("http://gpu-node-8.cluster.example.org:8000")


def test_a_name_resolving_to_an_own_address_is_this_host(fresh, monkeypatch):
    monkeypatch.setattr(this_host, "_interface_ipv4", lambda: {"198.51.100.4"})
    real = this_host._resolve
    monkeypatch.setattr(this_host, "_resolve",
                        lambda name: {"198.51.100.4"} if name == "alias.example" else real(name))
    assert _attached("http://alias.example:8000")


def test_other_hosts_are_not(fresh):
    assert not _attached("http://192.0.2.250:8000") or "192.0.2.250" in this_host.addresses()
    assert not this_host.is_this_host("")
