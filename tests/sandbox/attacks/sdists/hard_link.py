# A module that is a hard link to a host file: extracted, it would name the host's file.
# refused: a hard link
import tarfile

from tests.sandbox.sdists import TOP, member, tar_gz


def sdist() -> bytes:
    return tar_gz([member(f"{TOP}/pkg/settings.py", type=tarfile.LNKTYPE, linkname="/etc/passwd")])
