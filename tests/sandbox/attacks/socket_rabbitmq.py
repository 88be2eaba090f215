# Connects to the message broker on the host's loopback interface.
# expect: forbidden
# expect-without-audit: error
import socket


def solve():
    with socket.create_connection(("127.0.0.1", 5672), timeout=2) as conn:
        conn.sendall(b"AMQP\x00\x00\x09\x01")
        return conn.recv(64)
