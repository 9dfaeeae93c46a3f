"""Fixtures shared by the jobs' tests in more than one folder."""

import socket
import threading

import pytest


@pytest.fixture
def raw_server():
    """Start a socket server answering its connections, in turn, with these exact bytes."""
    listeners = []

    def start(*replies: bytes) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)

        def serve():
            for answer in replies:
                try:
                    connection, _ = listener.accept()
                except OSError:
                    return
                with connection:
                    while b"\r\n\r\n" not in connection.recv(65536):
                        pass
                    connection.sendall(answer)

        threading.Thread(target=serve, daemon=True).start()
        return f"http://127.0.0.1:{listener.getsockname()[1]}/data"

    yield start
    for listener in listeners:
        listener.close()
