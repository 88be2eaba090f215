# Connects to an address on the internet.
# expect: forbidden
# expect-without-audit: error
import socket


def solve():
    with socket.create_connection(("1.1.1.1", 53), timeout=2) as conn:
        return conn.getpeername()
