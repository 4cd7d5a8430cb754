"""The login lockout's client address behind a reverse proxy (ERRORTRACK_TRUSTED_PROXIES).

The throttle keyed on the socket peer: behind a proxy every client has the proxy's
address, so five wrong passwords from anyone locked the real user out. X-Forwarded-For is
now believed from the proxies the operator names, and only from them.
"""

from __future__ import annotations

import dataclasses

import falcon.testing
import pytest

from errortrack.api.client_ip import (
    ProxyAddress,
    client_address,
    client_key,
    parse_trusted_proxies,
    resolve,
)
from errortrack.auth.throttle import ADDRESS_FREE_FAILURES
from errortrack.config import Settings, SettingsError
from errortrack.server import create_server_app
from errortrack.state import AppState
from tests.access_world import PASSWORD, build_world
from tests.support import errortrack, server_env

PROXY = "10.0.0.5"
EMAIL = "viewer@example.com"


def _login(client, password=PASSWORD, *, peer, xff=None):
    headers = {"X-Forwarded-For": xff} if xff is not None else {}
    return client.simulate_post(
        "/auth/login",
        json={"email": EMAIL, "password": password},
        remote_addr=peer,
        headers=headers,
    )


@pytest.fixture
def behind_proxy(state, client):
    """The served app (management API behind a2wsgi, as gunicorn runs it) on the test's
    stores, with ERRORTRACK_TRUSTED_PROXIES naming the proxy's network."""
    build_world(state, client)  # the users, in the test's stores
    trusted = Settings.from_env({"ERRORTRACK_TRUSTED_PROXIES": "10.0.0.0/24"}).trusted_proxies
    other = AppState.build(
        dataclasses.replace(state.settings, trusted_proxies=trusted),
        engine=state.engine,
        clickhouse=state.clickhouse,
        clock=state.clock,
    )
    yield falcon.testing.TestClient(create_server_app(state=other))
    other.ingest.writer.spool.close()
    state.ingest.writer.spool.close()


def _lock_out(client, **where):
    for _ in range(5):
        assert _login(client, "wrong password", **where).status_code == 401
    assert _login(client, **where).status_code == 429


def test_without_trusted_proxies_a_spoofed_forwarded_for_cannot_dodge_the_lockout(state, client):
    build_world(state, client)
    try:
        _lock_out(client, peer="198.51.100.9", xff="203.0.113.1")
        # Another X-Forwarded-For from the same peer is the same client: still locked.
        resp = _login(client, peer="198.51.100.9", xff="203.0.113.2")
        assert resp.status_code == 429
        # Other peers are other clients.
        assert _login(client, peer="198.51.100.10").status_code == 200
    finally:
        state.ingest.writer.spool.close()


def test_clients_behind_a_trusted_proxy_are_throttled_separately(behind_proxy):
    # The attacker's proxy appends its client's address; whatever the attacker put in the
    # header itself stays to the left of it.
    _lock_out(behind_proxy, peer=PROXY, xff="192.0.2.50, 203.0.113.66")
    # The real user, through the same proxy, from another address: not locked out (this
    # was a 429: every client shared the proxy's address).
    assert _login(behind_proxy, peer=PROXY, xff="198.51.100.7").status_code == 200
    # The attacker naming the user's address in its own header gets its own key, which
    # is locked already: the rightmost untrusted hop is what the proxy saw.
    assert _login(behind_proxy, peer=PROXY, xff="198.51.100.7, 203.0.113.66").status_code == 429


def test_two_trusted_hops_are_walked_through(behind_proxy):
    # client -> edge proxy 10.0.0.7 -> proxy 10.0.0.5 -> errortrack
    _lock_out(behind_proxy, peer=PROXY, xff="203.0.113.66, 10.0.0.7")
    assert _login(behind_proxy, peer=PROXY, xff="198.51.100.7, 10.0.0.7").status_code == 200


def test_ipv6_clients_are_throttled_by_their_64_network(client, behind_proxy):
    # An IPv6 host holds a whole /64: keyed on the full address, 100 wrong guesses from
    # 20 of its addresses were all 401s, and the right password from a 21st got in
    # (security review, thirtieth session). The /64 is one client, directly or behind a
    # trusted proxy; another /64 (and IPv4) is another.
    for i in range(5):
        resp = _login(client, "wrong password", peer=f"2001:db8:0:1::{i + 1:x}")
        assert resp.status_code == 401
    assert _login(client, peer="2001:db8:0:1:ffff::99").status_code == 429
    assert _login(client, peer="2001:db8:0:2::1").status_code == 200
    for i in range(5):
        resp = _login(behind_proxy, "wrong password", peer=PROXY, xff=f"2001:db8:9::{i}")
        assert resp.status_code == 401
    assert _login(behind_proxy, peer=PROXY, xff="[2001:db8:9::abcd]:443").status_code == 429
    assert _login(behind_proxy, peer=PROXY, xff="2001:db8:a::1").status_code == 200


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("2001:db8:0:1::1", "2001:db8:0:1::/64"),
        ("[2001:db8:0:1::1]:443", "2001:db8:0:1::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        ("::ffff:192.0.2.1", "192.0.2.1"),
        # An IPv4 client through NAT64 is that IPv4 client, not the translator's /64.
        ("64:ff9b::198.51.100.7", "198.51.100.7"),
        ("64:ff9b:1::c633:6407", "64:ff9b:1::c633:6407"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001:0:4136:e378:8000:63bf:3fff:fdd2"),
        ("::1", "::1"),
        ("192.0.2.1", "192.0.2.1"),
        ("", ""),
        ("unix:/run/x.sock", "unix:/run/x.sock"),
    ],
)
def test_the_throttle_key_of_an_address(address, key):
    assert client_key(address) == key


def test_an_untrusted_peers_forwarded_for_is_ignored(behind_proxy):
    # Not a trusted proxy: its header could say anything, and a fresh one per try would
    # have been a fresh lockout key.
    for i in range(5):
        resp = _login(behind_proxy, "wrong password", peer="203.0.113.66", xff=f"192.0.2.{i}")
        assert resp.status_code == 401
    assert _login(behind_proxy, peer="203.0.113.66", xff="192.0.2.99").status_code == 429


@pytest.mark.parametrize(
    ("peer", "xff", "client"),
    [
        ("203.0.113.9", "1.2.3.4", "203.0.113.9"),  # untrusted peer: header ignored
        ("10.0.0.5", None, "10.0.0.5"),  # trusted, no header: the proxy itself
        ("10.0.0.5", "", "10.0.0.5"),
        ("10.0.0.5", "1.2.3.4", "1.2.3.4"),
        ("10.0.0.5", "9.9.9.9, 1.2.3.4", "1.2.3.4"),  # rightmost untrusted
        ("10.0.0.5", "1.2.3.4, 10.0.0.9", "1.2.3.4"),  # through two trusted proxies
        ("10.0.0.5", "10.0.0.8, 10.0.0.9", "10.0.0.8"),  # all trusted: the furthest one
        ("10.0.0.5", "1.2.3.4:5678", "1.2.3.4"),  # a port appended
        ("10.0.0.5", "[2001:db8::1]:443", "2001:db8::1"),
        ("10.0.0.5", "2001:db8::1", "2001:db8::1"),
        ("::ffff:10.0.0.5", "1.2.3.4", "1.2.3.4"),  # dual-stack socket
        ("10.0.0.5", "1.2.3.4, unknown", "10.0.0.5"),  # junk from a trusted hop: stop
        ("10.0.0.5", "1.2.3.4, junk, 10.0.0.9", "10.0.0.9"),
        ("", "1.2.3.4", ""),  # no peer address (unix socket)
    ],
)
def test_resolve(peer, xff, client):
    assert resolve(peer, xff, parse_trusted_proxies("10.0.0.0/24")) == client


@pytest.mark.parametrize(
    "value",
    [
        "proxy.example.com",
        "10.0.0.1/8",  # host bits: a typo for 10.0.0.0/8 or 10.0.0.1
        "10.0.0.0/33",
        "10.0.0.1,,10.0.0.2",
        "10.0.0.1;10.0.0.2",
        "0.0.0.0/0",  # would let every client choose its address
        "::/0",
    ],
)
def test_a_malformed_setting_is_refused_in_one_line(value):
    with pytest.raises(SettingsError, match="invalid value for ERRORTRACK_TRUSTED_PROXIES") as e:
        Settings.from_env({"ERRORTRACK_TRUSTED_PROXIES": value})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("entry", "network"),
    [("::ffff:10.0.0.5", "10.0.0.5/32"), ("::ffff:10.0.0.0/104", "10.0.0.0/8")],
)
def test_an_ipv4_mapped_entry_is_its_ipv4_form(entry, network):
    # How a dual-stack socket (and its logs) show an IPv4 peer; peers are compared in
    # their IPv4 form, so the entry was taken at start-up and then matched nothing.
    trusted = parse_trusted_proxies(entry)
    assert [str(n) for n in trusted] == [network]
    assert resolve("::ffff:10.0.0.5", "203.0.113.7", trusted) == "203.0.113.7"
    assert resolve("10.0.0.5", "203.0.113.7", trusted) == "203.0.113.7"


def test_accepted_values():
    s = Settings.from_env({"ERRORTRACK_TRUSTED_PROXIES": " 10.0.0.0/8 , 192.0.2.7,2001:db8::/32"})
    assert [str(n) for n in s.trusted_proxies] == ["10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32"]
    assert Settings.from_env({}).trusted_proxies == ()
    assert Settings.from_env({"ERRORTRACK_TRUSTED_PROXIES": ""}).trusted_proxies == ()


def test_serve_refuses_a_malformed_setting_at_start_up(tmp_path):
    env = server_env(
        tmp_path / "data",
        f"sqlite:///{tmp_path / 'x.sqlite3'}",
        ERRORTRACK_TRUSTED_PROXIES="10.0.0.1/8",
    )
    done = errortrack("serve", "--port", "0", env=env, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "Error: invalid value for ERRORTRACK_TRUSTED_PROXIES: 10.0.0.1/8 has host bits set: "
        "write the network (10.0.0.0/8) or the address"
    ]
    assert not (tmp_path / "data").exists()  # refused before anything was created


def _fail_many_emails(client, n, **where):
    for i in range(n):
        body = {"email": f"junk{i}@example.com", "password": "guess-guess"}
        headers = {"X-Forwarded-For": where["xff"]} if where.get("xff") is not None else {}
        resp = client.simulate_post(
            "/auth/login", json=body, remote_addr=where["peer"], headers=headers
        )
        assert resp.status_code == 401, resp.text


def test_an_address_failing_for_many_emails_is_locked_out_for_every_email(state, client):
    # A new email each time met no lockout (it counts per email and address): an address
    # has a budget of failures across emails; past it even the right password waits.
    build_world(state, client)
    try:
        _fail_many_emails(client, ADDRESS_FREE_FAILURES, peer="198.51.100.9")
        locked = _login(client, peer="198.51.100.9")
        assert locked.status_code == 429 and locked.headers["Retry-After"] == "60"
        assert _login(client, peer="198.51.100.10").status_code == 200
    finally:
        state.ingest.writer.spool.close()


def test_a_proxy_without_trusted_proxies_has_no_address_budget(state, client):
    # Every client behind it shares its address: one attacker's 20 failures would lock
    # everyone's logins out. A forwarding header is how a proxy shows itself.
    build_world(state, client)
    try:
        _fail_many_emails(client, 2 * ADDRESS_FREE_FAILURES, peer=PROXY, xff="203.0.113.66")
        assert _login(client, peer=PROXY, xff="198.51.100.7").status_code == 200
        # Without the header the same peer is a client like any other.
        _fail_many_emails(client, ADDRESS_FREE_FAILURES, peer="198.51.100.9")
        assert _login(client, peer="198.51.100.9").status_code == 429
    finally:
        state.ingest.writer.spool.close()


def test_behind_a_trusted_proxy_each_client_has_its_budget(behind_proxy):
    _fail_many_emails(behind_proxy, ADDRESS_FREE_FAILURES, peer=PROXY, xff="203.0.113.66")
    assert _login(behind_proxy, peer=PROXY, xff="203.0.113.66").status_code == 429
    assert _login(behind_proxy, peer=PROXY, xff="198.51.100.7").status_code == 200
    # The proxy's own address (no client named) stands for everyone: no budget.
    _fail_many_emails(behind_proxy, ADDRESS_FREE_FAILURES, peer=PROXY)
    assert _login(behind_proxy, peer=PROXY).status_code == 200


@pytest.mark.parametrize(
    ("peer", "headers", "key", "proxy"),
    [
        ("203.0.113.9", {}, "203.0.113.9", False),
        ("203.0.113.9", {"X-Forwarded-For": "1.2.3.4"}, "203.0.113.9", True),
        ("203.0.113.9", {"X-Real-IP": "1.2.3.4"}, "203.0.113.9", True),
        ("203.0.113.9", {"Forwarded": "for=1.2.3.4"}, "203.0.113.9", True),
        ("10.0.0.5", {}, "10.0.0.5", True),  # a trusted proxy naming no client
        ("10.0.0.5", {"X-Forwarded-For": "1.2.3.4"}, "1.2.3.4", False),
        ("10.0.0.5", {"X-Forwarded-For": "10.0.0.8"}, "10.0.0.8", True),  # all trusted
        ("10.0.0.5", {"X-Forwarded-For": "1.2.3.4, junk"}, "10.0.0.5", True),
        ("10.0.0.5", {"X-Forwarded-For": "2001:db8:0:1::5"}, "2001:db8:0:1::/64", False),
        ("", {}, "", True),  # a Unix socket: only a local proxy connects there
    ],
)
def test_which_client_addresses_stand_for_a_proxy(peer, headers, key, proxy):
    req = falcon.testing.create_req(remote_addr=peer or None, headers=headers)
    if not peer:
        req.env["REMOTE_ADDR"] = ""
    found = client_address(req, parse_trusted_proxies("10.0.0.0/24"))
    assert found == key
    assert isinstance(found, ProxyAddress) is proxy
