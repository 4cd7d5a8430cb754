"""Absolute-form request targets (RFC 9112 3.2.2: a server MUST accept them) over a
real socket to a real ``errortrack serve``: gunicorn's asgi worker hands the whole URI
over as the scope's path, and every one was a 404."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.support import Server, served_with_token

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[Server, str]]:
    with served_with_token(tmp_path_factory.mktemp("served")) as found:
        yield found


def _raw(server: Server, head: str, body: bytes = b"") -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head.encode() + b"\r\n\r\n" + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def test_absolute_form_targets_are_served_like_their_paths(served):
    server, token = served
    origin = f"http://127.0.0.1:{server.port}"
    common = f"Host: 127.0.0.1:{server.port}\r\nConnection: close"
    status, body = _raw(server, f"GET {origin}/healthz HTTP/1.1\r\n{common}")
    assert (status, body) == (200, b'{"status":"ok"}')
    status, body = _raw(server, f"GET {origin}/readyz HTTP/1.1\r\n{common}")
    assert status == 200, body
    auth = f"Authorization: Bearer {token}"
    status, body = _raw(
        server, f"GET {origin}/api/projects?per_page=1 HTTP/1.1\r\n{common}\r\n{auth}"
    )
    assert status == 400 and b'"per_page"' in body, body  # the query reached the app too
    status, body = _raw(server, f"GET {origin}/api/me HTTP/1.1\r\n{common}\r\n{auth}")
    assert status == 200 and b'"root@example.com"' in body, body
    # Ingest: a malformed key's 401 means the request reached ingest's route.
    envelope = b'{}\n{"type":"event"}\n{"message":"absolute-form"}\n'
    status, body = _raw(
        server,
        f"POST {origin}/api/1/envelope/ HTTP/1.1\r\n{common}\r\nContent-Length: {len(envelope)}",
        envelope,
    )
    assert status == 401, body
