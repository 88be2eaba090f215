"""A project's sdist, read the same safe way on the host and inside the sandbox's suite unit.

Yields the regular files of a tar (gzip-compressed or plain) by project-relative path, its single top folder
stripped. Every header is checked before any file's content is read: only regular files and folders, with plain
relative names (no absolute name, '..', '.' or empty part, backslash or NUL), no sparse member (tarfile would
materialise its holes: a 275-byte archive can declare gigabytes), no link, device or FIFO; the number of members,
each file's size and their total are bounded. The decompressed stream is bounded as well, so the headers tarfile
keeps in memory (PAX records, GNU long names, sparse maps) stay small.

Standard library only: the sandbox ships this file to a bare interpreter (see __init__.MODULES).
"""
import io
import tarfile
import zlib

MAX_MEMBERS = 4096  # a unit's work dir holds 4,096 inodes: a project with more files cannot be unpacked there
MAX_MEMBER_BYTES = 16 << 20  # the suites' file size limit
MAX_TOTAL_BYTES = 64 << 20  # the suites' work dir
HEADER_BYTES = 4096  # what a member's headers (ustar, PAX record, long name) and padding may add to the stream
GZIP_MAGIC = b"\x1f\x8b"
MAX_GZIP_MEMBERS = 64  # an sdist's gzip stream has one


class ArchiveRefused(ValueError):
    """An archive this reader will not unpack; the message names the member and the rule it breaks."""


class _BoundedStream:
    """The decompressed tar stream, refused as soon as a read would go past `cap` bytes."""

    def __init__(self, raw, cap: int):
        self.raw, self.cap = raw, cap

    def read(self, size: int = -1) -> bytes:
        left = self.cap - self.raw.tell()
        if size is None or size < 0 or size > left:
            data = self.raw.read(max(left, 0) + 1)
            if len(data) > left:
                raise ArchiveRefused(f"the archive unpacks to more than {self.cap:,} bytes")
            return data
        return self.raw.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()


def folders_above(path: str):
    """'a/b/c.py' -> 'a', 'a/b': one step per folder, so that checks against a set of folders stay linear."""
    index = path.find("/")
    while index != -1:
        yield path[:index]
        index = path.find("/", index + 1)


def name_problem(name: str) -> str | None:
    """Why `name` is not a plain relative path inside its folder, or None (also the host's rule for names from
    data: flawforge.inputs.plain_name)."""
    if "\x00" in name:
        return "a NUL in its name"
    if "\\" in name:
        return "a backslash in its name"
    if name.startswith("/"):
        return "an absolute name"
    parts = name.split("/")
    if ".." in parts:
        return "a '..' part in its name"
    if any(part in ("", ".") for part in parts):
        return "an empty or '.' part in its name"
    return None


def _kind(member: tarfile.TarInfo) -> str:
    if member.issparse():
        return "a sparse file"
    if member.issym():
        return f"a symbolic link (to {member.linkname!r})"
    if member.islnk():
        return f"a hard link (to {member.linkname!r})"
    if member.ischr() or member.isblk():
        return "a device"
    if member.isfifo():
        return "a FIFO"
    return f"of tar type {member.type!r}"


def _checked_files(tar: tarfile.TarFile, max_members: int, max_member_bytes: int,
                   max_total_bytes: int) -> list[tarfile.TarInfo]:
    """The archive's regular files, every header read and checked; nothing of their contents read yet."""
    files, names, folders, total, count = [], set(), set(), 0, 0
    while (member := tar.next()) is not None:
        count += 1
        if count > max_members:
            raise ArchiveRefused(f"member {member.name!r}: the archive has more than {max_members:,} members")
        problem = name_problem(member.name)
        if problem is not None:
            raise ArchiveRefused(f"member {member.name!r}: {problem}")
        if member.isdir():
            continue
        if not member.isreg() or member.issparse():
            raise ArchiveRefused(f"member {member.name!r} is {_kind(member)}; only regular files and folders "
                                 f"are unpacked")
        if member.size > max_member_bytes:
            raise ArchiveRefused(f"member {member.name!r}: {member.size:,} bytes, over the {max_member_bytes:,} "
                                 f"bytes a file may have")
        total += member.size
        if total > max_total_bytes:
            raise ArchiveRefused(f"member {member.name!r}: the files come to over {max_total_bytes:,} bytes")
        above = list(folders_above(member.name))
        if member.name in names or member.name in folders or any(folder in names for folder in above):
            raise ArchiveRefused(f"member {member.name!r}: another member has its name (as a file or a folder)")
        folders.update(above)
        names.add(member.name)
        files.append(member)
    return files


def _gunzipped(data: bytes, cap: int) -> bytes:
    """The gzip stream (of one member or several) decompressed in memory, refused past `cap` bytes. Reading the
    headers first and the contents after would otherwise decompress a gzip file twice (a backward seek starts it over):
    half of a suite unit's unpacking time. Members are bounded too: each one's rest of the stream is a copy."""
    parts, size = [], 0
    while data:
        if len(parts) == MAX_GZIP_MEMBERS:
            raise ArchiveRefused(f"the archive has more than {MAX_GZIP_MEMBERS} gzip members")
        inflater = zlib.decompressobj(wbits=31)
        part = inflater.decompress(data, cap - size + 1)
        size += len(part)
        if size > cap:
            raise ArchiveRefused(f"the archive unpacks to more than {cap:,} bytes")
        if not inflater.eof:
            raise EOFError("the gzip stream ends early")
        parts.append(part)
        data = inflater.unused_data.lstrip(b"\x00")  # gzip allows zero padding after a member
    return b"".join(parts)


def project_members(data: bytes, *, max_members: int = MAX_MEMBERS, max_member_bytes: int = MAX_MEMBER_BYTES,
                    max_total_bytes: int = MAX_TOTAL_BYTES):
    """(project-relative path, content) of each regular file of the archive, in archive order; ArchiveRefused,
    before any content is read, for an archive that breaks a rule above (or is no readable tar)."""
    cap = max_total_bytes + max_members * HEADER_BYTES
    try:
        stream = _BoundedStream(io.BytesIO(_gunzipped(data, cap) if data[:2] == GZIP_MAGIC else data), cap)
        with tarfile.open(fileobj=stream, mode="r:") as tar:
            files = _checked_files(tar, max_members, max_member_bytes, max_total_bytes)
        tops = {m.name.split("/", 1)[0] for m in files}
        strip = len(tops) == 1 and all("/" in m.name for m in files)
        for member in files:
            stream.seek(member.offset_data)
            content = stream.read(member.size)
            if len(content) != member.size:
                raise ArchiveRefused(f"member {member.name!r}: the archive ends inside it")
            yield (member.name.partition("/")[2] if strip else member.name), content
    except ArchiveRefused:
        raise
    except (tarfile.TarError, OSError, EOFError, ValueError, zlib.error) as exc:
        raise ArchiveRefused(f"not a readable tar archive: {exc}") from None
