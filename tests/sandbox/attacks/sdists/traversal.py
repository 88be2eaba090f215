# A member named to climb out of the project onto the job's own output: kept, it would replace instances.jsonl.
# refused: a '..' part
from tests.sandbox.sdists import TOP, member, tar_gz


def sdist() -> bytes:
    return tar_gz([member(f"{TOP}/../../instances.jsonl", b'{"forged": true}\n')])
