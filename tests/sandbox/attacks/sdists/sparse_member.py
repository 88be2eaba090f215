# A PAX (GNU 1.0) sparse member declaring 1 GiB in a few hundred bytes: tarfile fills its hole with zeros on reading,
# so reading it whole takes 1 GiB of the reader's memory.
# refused: a sparse file
import tarfile

from tests.sandbox.sdists import TOP, member, tar_gz

REAL_SIZE = 1 << 30


def sdist() -> bytes:
    sparse_map = f"1\n{REAL_SIZE - 1}\n1\n".encode().ljust(tarfile.BLOCKSIZE, b"\0")
    return tar_gz([member(f"{TOP}/GNUSparseFile.0/pkg/big.py", sparse_map + b"x", pax_headers={
        "GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": f"{TOP}/pkg/big.py",
        "GNU.sparse.realsize": str(REAL_SIZE)})])
