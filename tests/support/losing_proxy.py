"""A TCP proxy in front of the PostgreSQL server that can lose the answer to one ``COMMIT``: it
forwards the ``COMMIT`` to the server, waits until the server has answered it (so the transaction
did commit), and then cuts the client's connection instead of passing the answer on. What the client
sees is what it sees when the server restarts just as it commits: a connection gone, with no word
on whether the transaction committed."""

from __future__ import annotations

import socket
import threading
from types import TracebackType

COMMIT = b"COMMIT\x00"  # the statement's text in a Parse or Query message, and the server's tag


class LosingProxy:
    def __init__(self, port: int) -> None:
        self._target = ("127.0.0.1", port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._armed = threading.Event()
        self.lost = threading.Event()  # an answer was lost (the armed drop happened)
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}?sslmode=disable"

    def lose_next_commit_answer(self) -> None:
        self.lost.clear()
        self._armed.set()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            self._sockets += [client, server]
            cut = threading.Event()  # this connection's answer to a COMMIT is to be lost
            threading.Thread(target=self._upstream, args=(client, server, cut), daemon=True).start()
            threading.Thread(target=self._downstream, args=(server, client, cut), daemon=True).start()

    def _upstream(self, client: socket.socket, server: socket.socket, cut: threading.Event) -> None:
        tail = b""
        try:
            while data := client.recv(65536):
                if self._armed.is_set() and COMMIT in tail + data:
                    self._armed.clear()
                    cut.set()
                tail = data[-len(COMMIT) :]
                server.sendall(data)
        except OSError:
            pass

    def _downstream(self, server: socket.socket, client: socket.socket, cut: threading.Event) -> None:
        held = b""
        try:
            while data := server.recv(65536):
                if not cut.is_set():
                    client.sendall(data)
                    continue
                held += data
                if b"C" + (4 + len(COMMIT)).to_bytes(4, "big") + COMMIT in held:
                    break  # the server committed: the client never hears of it
        except OSError:
            pass
        for sock in (client, server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if cut.is_set():
            self.lost.set()

    def close(self) -> None:
        self._closing.set()
        self._listener.close()
        for sock in self._sockets:
            try:
                sock.close()
            except OSError:
                pass

    def __enter__(self) -> LosingProxy:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
