"""Where outbound webhooks may go (billing.worker.targets): public addresses only by default."""

import pytest

from billing.worker.targets import BlockedAddress, check_target, is_public


@pytest.mark.parametrize("address", ["127.0.0.1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254",
                                     "100.64.0.1", "0.0.0.0", "::1", "fe80::1", "fc00::1", "::ffff:127.0.0.1",
                                     "224.0.0.1", "240.0.0.1"])
def test_non_public_addresses(address):
    assert not is_public(address)


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses(address):
    assert is_public(address)


@pytest.mark.parametrize("url", ["http://127.0.0.1/x", "https://[::1]:8443/x", "http://10.1.2.3/",
                                 "http://localhost/x", "http://api.localhost/x", "http://169.254.169.254/latest"])
def test_private_targets_are_refused_unless_allowed(url):
    with pytest.raises(BlockedAddress):
        check_target(url, allow_private=False)
    check_target(url, allow_private=True)


@pytest.mark.parametrize("url", ["ftp://example.com/x", "https://user:pw@example.com/x", "https:///nohost", "example.com"])
def test_malformed_targets(url):
    with pytest.raises(ValueError):
        check_target(url, allow_private=True)


def test_names_pass_until_they_resolve():
    check_target("https://hooks.example.com/billing", allow_private=False)
