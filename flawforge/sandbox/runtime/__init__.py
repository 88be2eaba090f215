"""Code that runs inside the sandbox: the fork server (zygote) and what each unit runs.

Only the standard library is used here, and these modules never import the rest of
Flawforge: the service ships their source to a bare interpreter that cannot see the
service's files, so a unit has nothing of the service to read.
"""

# Shipped in this order (a module may import only the ones before it).
MODULES = ("wire", "instrument", "policy", "sharing", "archive", "probes", "suite", "unit", "seccomp", "zygote")
