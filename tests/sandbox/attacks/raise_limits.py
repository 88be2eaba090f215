# Lifts its own CPU limit.
# expect: forbidden
# expect-without-audit: error
import resource


def solve():
    resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
