"""A lean HTTP/1.1 client for the ingest benchmarks: each request prebuilt as bytes, one
keep-alive socket per connection, the response read just far enough to know its status.

The client shares the 2 cores with the server it measures; ``http.client`` spent ~185 us
of CPU per 84 KB envelope (0.10 of the 2 cores at full load, bench/RESULTS.md seventh
session), CPU a real deployment's server would have had.
"""

from __future__ import annotations

import socket


def request(path: str, headers: dict[str, str], body: bytes) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
    head += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


class Connection:
    def __init__(self, port: int, timeout: float = 30) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""

    def send(self, raw_request: bytes) -> int:
        """Send one prebuilt request; its response's status code."""
        self.sock.sendall(raw_request)
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            self._fill()
        head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(self.buffer) < length:
            self._fill()
        self.buffer = self.buffer[length:]
        return int(head[9:12])

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk

    def close(self) -> None:
        self.sock.close()
