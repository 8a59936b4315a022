"""The few file operations the TextQueue door makes, each bounded and non-blocking.

Reads are `pread`s of at most a chunk (the door reads a large file a chunk per reactor
turn); writes are in-place edits (`pwrite`, merged by `merge_edits` into one write per run
of records) and appends; locks are `flock` tried without blocking, so a writer holding
the lock is waited for by retrying later, never by blocking the reactor.
"""
import array
import errno
import fcntl
import hashlib
import os
from typing import NamedTuple

CHUNK = 256 << 10            # bytes read per file per reactor turn
_GETVERSION = 0x80087601     # FS_IOC_GETVERSION: the inode's generation (ext4, xfs, btrfs)


class Identity(NamedTuple):
    """Which file an open descriptor or a path is: a file replaced by an editor (`sed -i`,
    a rename over it) has another inode; a deleted inode reused has another generation."""
    dev: int
    ino: int
    gen: int


def identity(fd) -> Identity:
    st = os.fstat(fd)
    buf = array.array("l", [0])
    try:
        fcntl.ioctl(fd, _GETVERSION, buf)
    except OSError:
        buf[0] = 0                      # not every file system numbers generations
    return Identity(st.st_dev, st.st_ino, buf[0])


def same_file(path, ident: Identity):
    """True when `path` is still the file `ident` names, False when another file took
    its place, None when nothing is there any more."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino) == ident[:2]


def tag(ident: Identity, first_line: bytes) -> str:
    """A short name for one file incarnation (its inode and first line), the stem of the
    ids the door gives records that carry none: the same after a restart, another for a
    file truncated and written anew, or a new file on a reused inode."""
    digest = hashlib.blake2b(b"%d:%d:%d:" % ident + first_line[:256], digest_size=5)
    return digest.hexdigest()


def try_lock(fd) -> bool:
    """Take the file's advisory lock if nobody holds it (a writer may, with flock(1))."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise


def unlock(fd):
    fcntl.flock(fd, fcntl.LOCK_UN)


def write_edits(fd, edits):
    """Each edit's bytes at its offset (short writes finished)."""
    for offset, data in edits:
        view = memoryview(data)
        while view:
            done = os.pwrite(fd, view, offset)
            view, offset = view[done:], offset + done


def append(fd, data) -> int:
    """Append `data` (the descriptor is O_APPEND) and return the offset it starts at."""
    view = memoryview(data)
    while view:
        done = os.write(fd, view)
        view = view[done:]
    return os.lseek(fd, 0, os.SEEK_CUR) - len(data)


class Directory:
    """What inbox and outbox directories share: their files by name, told of changes
    (a file not known yet is looked at through the subclass's `found`), closed together."""

    def changed(self, name, closed):
        file = self.files.get(name) or self.found(name)
        if file is not None:
            file.changed(closed)

    def close(self):
        for file in list(self.files.values()):
            file.goodbye()
        self.files.clear()
