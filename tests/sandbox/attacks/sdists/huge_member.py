# A member whose header declares 1 TiB (its content is not there): the size alone must refuse it.
# refused: over the 16,777,216 bytes a file may have
import tarfile

from tests.sandbox.sdists import TOP, gzipped, member


def sdist() -> bytes:
    info, _ = member(f"{TOP}/pkg/huge.py")
    info.size = 1 << 40
    return gzipped(info.tobuf(tarfile.GNU_FORMAT) + b"\0" * (2 * tarfile.BLOCKSIZE))
