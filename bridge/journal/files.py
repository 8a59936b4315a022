"""Every change the journals make to the file system goes through one `Files`.

The writer (appends, edits, fsyncs), the archiver, recovery (cutting a torn tail,
removing work files) and the definitions file create, write, truncate, sync, rename and
remove files only through these methods, so that the order of those operations, which
docs/durability.md argues is safe against a power cut, is one list a test can record
(tests/journal/powercut.py records it while the operations run on real files, and
builds from it every disk a power cut could leave). Reads stay plain `os` calls: they
change nothing a crash could lose.
"""
import os


class Files:
    """The real file system (module docstring)."""

    def open(self, path, create=False, truncate=False):
        """A read-write descriptor of `path`; `create` makes the file when missing
        (FileNotFoundError otherwise), `truncate` empties it."""
        flags = os.O_RDWR | os.O_CLOEXEC
        if create:
            flags |= os.O_CREAT
        if truncate:
            flags |= os.O_TRUNC
        return os.open(path, flags, 0o644)

    def makedirs(self, path):
        """Make `path` and any missing parent; returns the directories made, outermost
        first (each is a new name in its parent: the parent needs a sync too)."""
        missing = []
        while not os.path.isdir(path):
            missing.append(path)
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
        made = []
        for folder in reversed(missing):
            try:
                os.mkdir(folder)
            except FileExistsError:
                continue
            made.append(folder)
        return made

    def pwrite(self, fd, data, offset):
        """All of `data` at `offset`."""
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, offset)
            view = view[n:]
            offset += n

    def ftruncate(self, fd, size):
        os.ftruncate(fd, size)

    def fdatasync(self, fd):
        os.fdatasync(fd)

    def fsync(self, fd):
        os.fsync(fd)

    def close(self, fd):
        os.close(fd)

    def rename(self, source, target):
        os.rename(source, target)

    def unlink(self, path):
        os.unlink(path)

    def sync_directory(self, path):
        """fsync a directory: a name created, renamed or removed in it is then on disk."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def parents_of(made):
    """The directories whose entries `Files.makedirs` changed: the parent of each one
    it made (the innermost one's own entries are its caller's business)."""
    return [os.path.dirname(folder) for folder in made]
