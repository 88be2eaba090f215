# 12,000 empty top-level test files in a small archive: more members than a unit's work dir has inodes, and, read
# with a layout check quadratic in top-level test files, half a minute of CPU.
# refused: more than 4,096 members
from tests.sandbox.sdists import TOP, member, tar_gz


def sdist() -> bytes:
    return tar_gz([member(f"{TOP}/test_{number}.py") for number in range(12000)])
