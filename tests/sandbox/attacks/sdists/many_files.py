# 5,000 empty top-level test files in a small archive: more members than a unit's work dir has inodes, and, read
# with a layout check quadratic in top-level test files, seconds of CPU (12,000 took 27.8 s).
# refused: more than 4,096 members
from tests.sandbox.sdists import TOP, member, tar_gz


def sdist() -> bytes:
    return tar_gz([member(f"{TOP}/test_{number}.py") for number in range(5000)])
