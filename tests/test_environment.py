"""The environment area: CUDA/NCCL variables -> the target's, and what the report says."""

import os

import transfer


def test_nccl_socket_ifname_becomes_the_targets_and_is_reported(install_cpu):
    info = install_cpu(NCCL_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME=None)
    assert info["environment"] == {"GLOO_SOCKET_IFNAME": "lo"}
    assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"
    transfer.uninstall()
    assert "GLOO_SOCKET_IFNAME" not in os.environ


def test_a_translation_inherited_from_the_launcher_is_reported_too(install_cpu):
    """torchrun's launcher (TRANSFER_DEVICE set) translated the variable; its workers inherit
    the result, and their report must still show the setting in effect."""
    info = install_cpu(NCCL_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="lo")  # as the launcher left it
    assert info["environment"] == {"GLOO_SOCKET_IFNAME": "lo"}
    transfer.uninstall()
    assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"  # not ours to remove


def test_a_users_own_vendor_setting_wins_and_is_not_claimed(install_cpu):
    assert install_cpu(NCCL_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="eth1")["environment"] == {}
    assert os.environ["GLOO_SOCKET_IFNAME"] == "eth1"
    transfer.uninstall()
