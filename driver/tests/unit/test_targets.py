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


# -- issue 27, finding 5: every numeric and IPv6-embedded IPv4 form, resolved and pinned ----------

import asyncio  # noqa: E402

from billing.netguard import parse_ip, pin, refusal  # noqa: E402

LOOPBACK_FORMS = ["2130706433", "127.1", "0", "017700000001", "0177.0.0.1", "0x7f000001", "0x7f.1", "127.0.0.1.",
                  "127.000.000.001", "0.0.0.0", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::127.0.0.1]",
                  "[::ffff:0:127.0.0.1]", "[64:ff9b::7f00:1]", "[64:ff9b::127.0.0.1]", "[64:ff9b:1::a00:1]",
                  "[2002:7f00:1::]", "[2002:0808:0808::1]", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]", "[fe80::1%25eth0]",
                  "169.254.169.254", "0251.0376.0251.0376", "2852039166", "[::ffff:a9fe:a9fe]", "100.64.1.1",
                  "[ff02::1]", "224.0.0.251", "[fd00::1]", "[::]"]


@pytest.mark.parametrize("host", LOOPBACK_FORMS)
def test_every_non_public_form_is_refused_at_registration(host):
    with pytest.raises(BlockedAddress):
        check_target(f"http://{host}:8080/hook", allow_private=False)


@pytest.mark.parametrize("host", ["2130706433", "127.1", "0", "017700000001", "0x7f.1"])
def test_numeric_forms_are_read_as_the_socket_library_reads_them(host):
    ip, canonical = parse_ip(host)
    assert not canonical and (str(ip) == "127.0.0.1" or (host == "0" and str(ip) == "0.0.0.0"))


def test_a_public_address_in_a_numeric_form_is_refused_too():
    assert refusal(parse_ip("134744072")[0]) is None  # 8.8.8.8, public...
    with pytest.raises(BlockedAddress, match="dotted quad"):  # ...but parsers disagree on such forms
        check_target("http://134744072/hook", allow_private=False)
    check_target("http://8.8.8.8/hook", allow_private=False)


def resolver(*answers):
    async def resolve(host, port):
        return list(answers)
    return resolve


@pytest.mark.parametrize("answers", [("127.0.0.1",), ("10.0.0.7",), ("93.184.216.34", "127.0.0.1"),
                                     ("::1",), ("64:ff9b::7f00:1",), ("2002:7f00:1::",), ("::ffff:127.0.0.1",)])
def test_a_name_resolving_to_any_non_public_address_is_refused_at_delivery(answers):
    with pytest.raises(BlockedAddress):
        asyncio.run(pin("https://hooks.example.com/x", allow_private=False, resolve=resolver(*answers)))


def test_a_name_is_pinned_to_the_address_checked():
    target = asyncio.run(pin("https://hooks.example.com:8443/billing?a=1", allow_private=False,
                             resolve=resolver("93.184.216.34", "93.184.216.35")))
    assert target.url == "https://93.184.216.34:8443/billing?a=1" and target.address == "93.184.216.34"
    assert target.host_header == "hooks.example.com:8443" and target.server_hostname == "hooks.example.com"
    v6 = asyncio.run(pin("http://hooks.example.com/", allow_private=False, resolve=resolver("2606:4700:4700::1111")))
    assert v6.url == "http://[2606:4700:4700::1111]/" and v6.host_header == "hooks.example.com" and v6.server_hostname is None
    with pytest.raises(BlockedAddress):
        asyncio.run(pin("http://2130706433/", allow_private=False, resolve=resolver("93.184.216.34")))
