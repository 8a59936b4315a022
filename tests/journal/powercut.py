"""Power cuts, simulated: what a disk may hold after one, given every change made to it.

`Recording` is the journal's file layer (bridge.journal.files) doing each operation on
the real files and writing it down, relative to a root directory. `Disk` replays such a
log over a starting tree and keeps, per file and per directory, what is on disk (synced)
apart from what is not yet. `Disk.image(into, choose)` writes out a disk a power cut at
that point could leave:

- a file holds what its last fsync/fdatasync made durable, plus any prefix of the writes
  and truncates made since (`choose(n)` picks how many of the n), the next one perhaps
  torn (a prefix of its bytes);
- a directory holds the names its last fsync made durable, plus any prefix of the
  creations, renames and removals made in it since: an unsynced new file or directory,
  or an unsynced rename, may vanish (a rename across directories is a removal in one and
  a creation in the other, each kept or lost on its own side).

This is harsher than LazyFS, which keeps every directory change. `Disk.page_cache(into)`
writes out what a kill -9 leaves instead (everything, synced or not), and `copy()` lets
the replay go on from there: the killed broker's unsynced bytes stay at risk of a later
power cut.
"""
import copy
import os

from mqksbridge.bridge.journal.files import Files


class Recording(Files):
    """The real file layer, writing each change down in `log` (module docstring)."""

    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.log = []
        self.paths = {}                 # fd -> path relative to the root (None: outside)

    def _relative(self, path):
        relative = os.path.relpath(os.path.abspath(path), self.root)
        return None if relative.startswith("..") else relative

    def _note(self, *op):
        if op[1] is not None:
            self.log.append(op)

    def open(self, path, create=False, truncate=False):
        existed = os.path.exists(path)
        fd = super().open(path, create, truncate)
        relative = self.paths[fd] = self._relative(path)
        if not existed:
            self._note("create", relative)
        elif truncate:
            self._note("truncate", relative, 0)
        return fd

    def makedirs(self, path):
        made = super().makedirs(path)
        for folder in made:
            self._note("mkdir", self._relative(folder))
        return made

    def pwrite(self, fd, data, offset):
        super().pwrite(fd, data, offset)
        self._note("write", self.paths[fd], offset, bytes(data))

    def ftruncate(self, fd, size):
        super().ftruncate(fd, size)
        self._note("truncate", self.paths[fd], size)

    def fdatasync(self, fd):
        super().fdatasync(fd)
        self._note("sync", self.paths[fd])

    def fsync(self, fd):
        super().fsync(fd)
        self._note("sync", self.paths[fd])

    def close(self, fd):
        super().close(fd)
        del self.paths[fd]

    def rename(self, source, target):
        assert os.path.abspath(source) not in {
            os.path.join(self.root, p) for p in self.paths.values() if p}, "renamed while open"
        super().rename(source, target)
        self._note("rename", self._relative(source), self._relative(target))

    def unlink(self, path):
        super().unlink(path)
        self._note("unlink", self._relative(path))

    def sync_directory(self, path):
        super().sync_directory(path)
        self._note("syncdir", self._relative(path))


class Node:
    """A file (`data`: bytes) or a directory (`data`: {name: Node}) as synced, and the
    changes made to it since (`pending`)."""

    def __init__(self, data):
        self.data = data
        self.pending = []

    @property
    def is_dir(self):
        return isinstance(self.data, dict)

    def synced(self):
        self.data = self.current()
        self.pending = []

    def current(self, n=None, torn=None):
        """Its state with the first `n` pending changes (all by default), the next one
        cut to `torn` bytes when it is a write."""
        pending = self.pending if n is None else self.pending[:n]
        state = dict(self.data) if self.is_dir else bytearray(self.data)
        for change in pending:
            _apply(state, change)
        if torn is not None and n is not None and n < len(self.pending):
            change = self.pending[n]
            if change[0] == "write" and torn < len(change[2]):
                _apply(state, ("write", change[1], change[2][:torn]))
        return state


def _apply(state, change):
    kind = change[0]
    if kind == "write":
        _, offset, data = change
        if len(state) < offset:
            state.extend(bytes(offset - len(state)))
        state[offset:offset + len(data)] = data
    elif kind == "truncate":
        del state[change[1]:]
    elif kind == "link":
        state[change[1]] = change[2]
    elif kind == "unlink":
        state.pop(change[1], None)
    elif kind == "rename":
        state[change[2]] = state.pop(change[1])


class Disk:
    """A directory tree as a power cut sees it (module docstring)."""

    def __init__(self, root):
        self.root = self._read(root)

    def _read(self, path):
        if os.path.isdir(path):
            return Node({name: self._read(os.path.join(path, name))
                         for name in sorted(os.listdir(path))})
        with open(path, "rb") as f:
            return Node(f.read())

    def copy(self):
        return copy.deepcopy(self)

    def _node(self, relative):
        node = self.root
        for part in _parts(relative):
            node = node.current()[part]
        return node

    def replay(self, log):
        for op in log:
            self.apply(op)

    def apply(self, op):
        kind, relative = op[0], op[1]
        if kind in ("write", "truncate"):
            self._node(relative).pending.append((kind, *op[2:]))
        elif kind in ("sync", "syncdir"):
            self._node(relative).synced()
        elif kind in ("create", "mkdir"):
            parent, name = os.path.split(relative)
            self._node(parent).pending.append(
                ("link", name, Node({} if kind == "mkdir" else b"")))
        elif kind == "unlink":
            parent, name = os.path.split(relative)
            self._node(parent).pending.append(("unlink", name))
        elif kind == "rename":
            target = op[2]
            (source_dir, source), (target_dir, name) = (os.path.split(relative),
                                                        os.path.split(target))
            if source_dir == target_dir:
                self._node(source_dir).pending.append(("rename", source, name))
            else:
                node = self._node(relative)
                self._node(source_dir).pending.append(("unlink", source))
                self._node(target_dir).pending.append(("link", name, node))
        else:
            raise AssertionError(f"unknown operation {op!r}")

    def image(self, into, choose):
        """Write out a disk a power cut now could leave (module docstring). `choose(n)`
        returns how many of n unsynced changes a file or directory kept, and
        `choose.torn(size)` how many bytes of the next write (None: none)."""
        kept = {}                     # id(node) -> its state: one choice per node
        self._write(self.root, into, choose, kept)

    def page_cache(self, into):
        """Write out what a kill -9 leaves: every change, synced or not."""
        self._write(self.root, into, None, {})

    def _write(self, node, path, choose, kept):
        state = kept.get(id(node))
        if state is None:
            if choose is None:
                state = node.current()
            else:
                n = choose(len(node.pending))
                torn = None
                if not node.is_dir and n < len(node.pending) and \
                        node.pending[n][0] == "write":
                    torn = choose.torn(len(node.pending[n][2]))
                state = node.current(n, torn)
            kept[id(node)] = state
        if node.is_dir:
            os.makedirs(path, exist_ok=True)
            for name, child in state.items():
                self._write(child, os.path.join(path, name), choose, kept)
        else:
            with open(path, "wb") as f:
                f.write(state)


def _parts(relative):
    return [] if relative in ("", ".") else relative.split(os.sep)
