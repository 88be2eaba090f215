# A member with an absolute name: unpacked as named, it would land anywhere on the host.
# refused: an absolute name
from tests.sandbox.sdists import member, tar_gz


def sdist() -> bytes:
    return tar_gz([member("/tmp/flawforge-absolute-member.py", b'{"forged": true}\n')])
