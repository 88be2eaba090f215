# A module that is a symbolic link to a host file: followed, the host's file would be read as the library's.
# refused: a symbolic link
import tarfile

from tests.sandbox.sdists import TOP, member, tar_gz


def sdist() -> bytes:
    return tar_gz([member(f"{TOP}/pkg/settings.py", type=tarfile.SYMTYPE, linkname="/etc/passwd")])
