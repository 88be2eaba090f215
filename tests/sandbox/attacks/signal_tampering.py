# Ignores and blocks every signal it can, then spins.
# expect: timeout
# expect-without-audit: timeout
# timeout: 0.5
import signal


def solve():
    for sig in (signal.SIGTERM, signal.SIGXCPU, signal.SIGALRM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP})
    while True:
        pass
