# Binds an abstract unix socket, which every unit sharing the network namespace could connect to,
# then connects to it as a concurrent unit would: a channel between units that no file layer sees.
# The audit layer forbids it; without it, socket() fails (EPERM) under the seccomp filter.
# expect: forbidden
# expect-without-audit: error
import socket


def solve():
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0flawforge-channel")
    server.listen(1)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect("\0flawforge-channel")
    return True
