"""The environment area: CUDA/NCCL variables -> the target's, and what the report says."""

import os

import transfer


def test_nccl_socket_ifname_becomes_the_targets_and_is_reported(monkeypatch):
    transfer.uninstall()
    monkeypatch.setenv("TRANSFER_QUIET", "1")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    try:
        assert transfer.install("cpu")["environment"] == {"GLOO_SOCKET_IFNAME": "lo"}
        assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"
    finally:
        transfer.uninstall()
    assert "GLOO_SOCKET_IFNAME" not in os.environ


def test_a_translation_inherited_from_the_launcher_is_reported_too(monkeypatch):
    """torchrun's launcher (TRANSFER_DEVICE set) translated the variable; its workers inherit
    the result, and their report must still show the setting in effect."""
    transfer.uninstall()
    monkeypatch.setenv("TRANSFER_QUIET", "1")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")  # as the launcher left it
    try:
        assert transfer.install("cpu")["environment"] == {"GLOO_SOCKET_IFNAME": "lo"}
    finally:
        transfer.uninstall()
    assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"  # not ours to remove


def test_a_users_own_vendor_setting_wins_and_is_not_claimed(monkeypatch):
    transfer.uninstall()
    monkeypatch.setenv("TRANSFER_QUIET", "1")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth1")
    try:
        assert transfer.install("cpu")["environment"] == {}
        assert os.environ["GLOO_SOCKET_IFNAME"] == "eth1"
    finally:
        transfer.uninstall()
