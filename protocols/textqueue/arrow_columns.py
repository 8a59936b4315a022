"""The columns of a block of journal records in bulk: numpy and pyarrow over the buffer.

`columns.decode_columns` still runs Python code per record and field; here a column
of a whole block (tens of thousands of records) costs a few passes in C: the buffer's
lines are indexed once (where each starts and ends, which record it belongs to,
whether it is a variable or a continuation line), a variable's value in every record
is the first line that starts with `\\name=` (what `record.value_of` finds), and
values become Arrow arrays by slicing the buffer (an array whose offsets alternate
value starts and ends, of which every other element is taken), numbers by digit
arithmetic, settle stamps by byte tests.

The rules here cover the layout the broker writes. A row they do not cover is marked
slow, and the caller (the data pipeline's batches.py) decodes it with
`columns.decode_columns`, the codec's own bulk decoder: values with '%' or bytes beyond
ASCII, records with a CR, a continuation line after a variable or a control character
beyond ASCII, numbers that are not plain digits (or are too long to add up in 64 bits),
settle stamps of another form, base64 bodies that are not canonical, headers with a key
twice or a pair without '=', variables the broker does not write or written twice. So
every value keeps one definition and every error is the codec's (the codec's shared
property, tests/textqueue/test_textqueue_fast_paths.py, and the examples in
tests/pipeline/test_bulk.py hold the two paths equal). Canonical base64 bodies are
decoded in bulk too (a lookup table over all of a block's bodies at once).

numpy and pyarrow come with the `pipeline` extra: this module is imported by the data
pipeline only, never by the package's `__init__`.
"""
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mqksbridge.protocols.textqueue.record import BASE64URL, DOOR_LETTERS, NAMES, SETTLE_CODES, STATUSES

_NL, _SPACE, _BACKSLASH, _CR, _PCT = 10, 32, 92, 13, 37
_NONE = np.zeros(0, np.int64)
_STATUS_NAMES = pa.array(list(STATUSES.values()))
_STATUS_INDEX = np.full(256, -1, np.int8)
for _i, _c in enumerate(STATUSES):
    _STATUS_INDEX[ord(_c)] = _i

_CODES = list(SETTLE_CODES)                        # a d x r m
_REASONS = pa.array([SETTLE_CODES[c][0] for c in _CODES])
_CODE_INDEX = np.full(256, -1, np.int8)
for _i, _c in enumerate(_CODES):
    _CODE_INDEX[ord(_c)] = _i
_LETTERS = list(DOOR_LETTERS)                      # K M T Q
_DOORS = pa.array([DOOR_LETTERS[c] for c in _LETTERS])
_LETTER_INDEX = np.full(256, -1, np.int8)
for _i, _c in enumerate(_LETTERS):
    _LETTER_INDEX[ord(_c)] = _i

_MAX_BASE = 1 << 52            # time bases beyond this are left to the codec (64-bit sums)
_T_DIGITS, _SETTLE_DIGITS = 15, 12
_B64 = "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"
_ONE_FRAME = f"^{_B64}$"
_FRAMES = f"^{_B64}(?: {_B64})*$"

_URLSAFE = np.frombuffer(BASE64URL, np.uint8)
_SIXES = np.zeros(256, np.uint8)                   # a base64 character's 6 bits ('=': 0)
_SIXES[np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
                     np.uint8)] = np.arange(64, dtype=np.uint8)
_EQ = 61
_CHECKSUM_STATES = pa.array(["ok", "edited", "missing", "mismatch"])
# The variables the broker writes (journal.encode_message): the map column is bulk for these.
_NAMES_WRITTEN = pa.array(NAMES)


def status_array(data, starts):
    """(status names, rows whose control character is not one of - = ! #)."""
    index = _STATUS_INDEX[data[starts]]
    slow = index < 0
    indices = pa.array(np.where(slow, 0, index), pa.int8())
    return pa.DictionaryArray.from_arrays(indices, _STATUS_NAMES).cast(pa.string()), slow


class Fields:
    """The fields of one block's records, each found once and shared by the columns
    that need it. `column(name, type)` gives (array, slow): the Arrow array of a
    textqueue column (schema.COLUMNS) and the rows (a boolean array, or None for none)
    whose value in it is a placeholder, to be decoded the codec's way. `block` holds the
    records in one buffer: `buffer`, and numpy arrays `starts` and `ends` (each record's
    bytes, without the LF that ends it) and `newlines` (LF positions, or None), as
    pipeline.blocks.Block has them."""

    def __init__(self, block, base_ms):
        self.block = block
        self.base_ms = base_ms
        self.n = len(block)
        self.data = np.frombuffer(block.buffer, np.uint8)
        self.size = len(block.buffer)
        if self.size >= 1 << 31:
            raise ValueError("a block is at most 2 GiB")       # int32 Arrow offsets
        self.arrow_buffer = pa.py_buffer(block.buffer)
        self.starts = block.starts
        self.ends = block.ends
        self._cache = {}

    def _get(self, key, make):
        cache = self._cache
        if key not in cache:
            cache[key] = make()
        return cache[key]

    # -- the buffer --------------------------------------------------------------------

    def _positions(self, byte):
        """Sorted positions of a byte in the buffer (none: no pass over it)."""
        def make():
            if self.block.buffer.find(bytes((byte,))) < 0:
                return _NONE
            return np.flatnonzero(self.data == byte)
        return self._get(("at", byte), make)

    def _high(self):
        """Positions of bytes beyond ASCII."""
        def make():
            if self.block.buffer.isascii():
                return _NONE
            return np.flatnonzero(self.data >= 0x80)
        return self._get("high", make)

    @staticmethod
    def _has(positions, lo, hi):
        """Rows with one of the positions in [lo, hi)."""
        if not len(positions):
            return np.zeros(len(lo), bool)
        return np.searchsorted(positions, hi) > np.searchsorted(positions, lo)

    def _special(self, lo, hi):
        """Rows whose bytes [lo, hi) hold a '%' or a byte beyond ASCII."""
        return self._has(self._positions(_PCT), lo, hi) | self._has(self._high(), lo, hi)

    def _slices(self, lo, hi):
        """A binary array of buffer[lo[i]:hi[i]] per row (lo[i] <= hi[i] <= lo[i + 1])."""
        n = len(lo)
        if not n:
            return pa.array([], pa.binary())
        offsets = np.empty(2 * n, np.int32)
        offsets[0::2] = lo
        offsets[1::2] = hi
        spread = pa.Array.from_buffers(pa.binary(), 2 * n - 1,
                                       [None, pa.py_buffer(offsets), self.arrow_buffer])
        return spread.take(pa.array(np.arange(0, 2 * n - 1, 2, dtype=np.int32)))

    def _digits(self, lo, hi, limit):
        """(value, ok): the integer of bytes [lo, hi) where they are 1 to `limit` ASCII
        digits (ok), else 0. The digits are checked on the values' bytes, then Arrow
        parses them."""
        values = self._slices(lo, hi)
        offsets, data = _offsets_and_data(values)
        length = np.diff(offsets)
        not_digit = np.zeros(len(data) + 1, np.int64)
        np.cumsum((data - 48) > 9, out=not_digit[1:])
        ok = (length >= 1) & (length <= limit) & (not_digit[offsets[1:]] == not_digit[offsets[:-1]])
        if not ok.all():
            values = pc.if_else(pa.array(ok), values, pa.scalar(b"0", pa.binary()))
        return pc.cast(values, pa.int64()).to_numpy(), ok

    def _rstrip(self, lo, hi):
        """(hi without trailing spaces, ok): ok False for a value beyond ASCII (left
        to the codec)."""
        high = self._has(self._high(), lo, hi)
        text = self._slices(lo, np.where(high, lo, hi)).cast(pa.string())
        length = pc.binary_length(pc.utf8_rtrim(text, " ")).to_numpy()
        return lo + length, ~high

    # -- records and lines -------------------------------------------------------------

    def _lines(self):
        """(line starts, line ends, record of each) for every line of a record but its
        first (the control line): variable and continuation lines."""
        def make():
            block, size = self.block, self.size
            newlines = block.newlines if block.newlines is not None else np.flatnonzero(self.data == _NL)
            if len(newlines) and newlines[-1] == size - 1:
                newlines = newlines[:-1]
            starts = newlines + 1
            ends = np.empty_like(starts)
            ends[:-1] = newlines[1:]
            ends[-1:] = size
            first = np.searchsorted(starts, self.starts, "right")   # each record's first line
            skip = int(first[0]) if self.n else len(starts)
            record = np.repeat(np.arange(self.n), np.diff(first, append=len(starts)))
            starts, ends = starts[skip:], ends[skip:]
            mine = starts < self.ends[record]
            return starts[mine], ends[mine], record[mine]
        return self._get("lines", make)

    def _variable_lines(self):
        """(starts, ends, records, keys) of the variable lines; a key is the two bytes
        after the backslash (0 where the line is shorter)."""
        def make():
            starts, ends, record = self._lines()
            var = self.data[starts] == _BACKSLASH
            starts, ends, record = starts[var], ends[var], record[var]
            last = self.size - 1
            one = self.data[np.minimum(starts + 1, last)].astype(np.uint16)
            two = self.data[np.minimum(starts + 2, last)].astype(np.uint16)
            keys = np.where(starts + 2 < ends, one | (two << 8), 0)
            return starts, ends, record, keys
        return self._get("variable lines", make)

    def _per_record(self, record, values, first=True, fill=-1):
        """values[i] placed at record[i] (records sorted), the first (or last) of each."""
        out = np.full(self.n, fill, np.int64)
        if len(record):
            keep = np.ones(len(record), bool)
            if first:
                keep[1:] = record[1:] != record[:-1]
            else:
                keep[:-1] = record[:-1] != record[1:]
            out[record[keep]] = values[keep]
        return out

    def _heads(self):
        """(body start, body end, continuation lines, plain): a record is plain when its
        control character is ASCII, it has no CR, and no continuation line follows a
        variable line (then the body is the control line and its continuations)."""
        def make():
            starts, ends, record = self._lines()
            vstarts, _, vrecord, _ = self._variable_lines()
            first_var = self._per_record(vrecord, vstarts)
            cont = self.data[starts] == _SPACE
            crecord = record[cont]
            last_cont = self._per_record(crecord, starts[cont], first=False)
            continuations = np.bincount(crecord, minlength=self.n)
            plain = (self.data[self.starts] < 0x80) & ~self._has(self._positions(_CR), self.starts, self.ends)
            plain &= (first_var < 0) | (last_cont < first_var)
            body_end = np.where(first_var >= 0, first_var - 1, self.ends)
            return self.starts + 1, body_end, continuations, plain
        return self._get("heads", make)

    def _plain(self):
        return self._heads()[3]

    def _variable(self, name: bytes):
        """(value starts, value ends, present) of the first `\\name=` line per record."""
        def make():
            vstarts, vends, vrecord, keys = self._variable_lines()
            data = self.data
            pattern = name + b"="
            wanted = np.flatnonzero(keys == pattern[0] | (pattern[1] << 8))
            for k in range(2, len(pattern)):
                at = vstarts[wanted] + 1 + k
                ok = at < vends[wanted]
                ok[ok] = data[at[ok]] == pattern[k]
                wanted = wanted[ok]
            lo = self._per_record(vrecord[wanted], vstarts[wanted] + len(pattern) + 1)
            hi = self._per_record(vrecord[wanted], vends[wanted])
            present = lo >= 0
            return np.where(present, lo, self.starts), np.where(present, hi, self.starts), present
        return self._get(("variable", name), make)

    # -- fields ------------------------------------------------------------------------

    def _text(self, lo, hi):
        """(string array, slow) of values as text."""
        special = self._special(lo, hi)
        array = self._slices(lo, np.where(special, lo, hi)).cast(pa.string())
        return array, special | ~self._plain()

    def _origin_sender(self):
        def make():
            lo, hi, _ = self._variable(b"f")
            special = self._special(lo, hi)
            hi = np.where(special, lo, hi)
            colon = pc.find_substring(self._slices(lo, hi), ":").to_numpy()
            cut = np.where(colon >= 0, lo + colon, hi)
            origin = self._slices(lo, cut).cast(pa.string())
            sender = self._slices(np.where(colon >= 0, cut + 1, hi), hi).cast(pa.string())
            return origin, sender, special | ~self._plain()
        return self._get("origin sender", make)

    def _created(self):
        """(created ms, fast)."""
        def make():
            lo, hi, present = self._variable(b"t")
            t, ok = self._digits(lo, hi, _T_DIGITS)
            fast = self._plain() & (ok | ~present) & (abs(self.base_ms) < _MAX_BASE)
            return np.where(present, t + (self.base_ms if fast.any() else 0), 0), fast
        return self._get("created", make)

    def _expires(self):
        lo, hi, present = self._variable(b"ttl")
        ttl, ok = self._digits(lo, hi, _T_DIGITS)
        created, fast = self._created()
        return created + ttl, present, fast & (ok | ~present)

    def _retry(self):
        lo, hi, present = self._variable(b"r")
        hi, stripped = self._rstrip(lo, hi)
        retry, ok = self._digits(lo, hi, 9)
        empty = hi == lo
        return retry, self._plain() & stripped & (ok | empty | ~present)

    def _settles(self):
        """(reason index, door index, settled ms, settled, fast): indices into _CODES and
        _LETTERS (-1: none)."""
        def make():
            data = self.data
            lo, hi, present = self._variable(b"e")
            hi, ascii_ = self._rstrip(lo, hi)
            settled = present & (hi > lo)
            code = np.where(settled, _CODE_INDEX[data[lo]], -1)
            letter = np.where(settled & (lo + 1 < hi), _LETTER_INDEX[data[np.minimum(lo + 1, self.size - 1)]], -1)
            last = data[np.maximum(hi - 1, 0)]
            unit = np.where(settled & (last == ord("s")), 1000,
                            np.where(settled & (last == ord("h")), 3_600_000, 1))
            digits_hi = np.maximum(hi - (unit > 1), lo)
            digits_lo = np.minimum(lo + 1 + (letter >= 0), digits_hi)
            after, ok = self._digits(digits_lo, digits_hi, _SETTLE_DIGITS)
            created, fast = self._created()
            fast = fast & ascii_ & (~settled | ((code >= 0) & ok))
            return code, letter, created + after * unit, settled, fast
        return self._get("settles", make)

    def _body(self):
        """(stored body as binary, with continuation spaces removed)."""
        def make():
            start, end, _, plain = self._heads()
            return pc.replace_substring(self._slices(start, np.where(plain, end, start)), "\n ", "\n")
        return self._get("body", make)

    def _encoding(self):
        """(base64: bool, fast, frame count, size) of the bodies."""
        def make():
            start, end, continuations, plain = self._heads()
            enc_lo, enc_hi, enc = self._variable(b"enc")
            f_lo, f_hi, has_count = self._variable(b"frames")
            count, count_ok = self._digits(f_lo, f_hi, 9)
            size = end - start - continuations
            frames = np.ones(self.n, np.int64)
            fast = plain.copy()
            if enc.any():
                is_b64 = enc & (enc_hi - enc_lo == 6)
                for k, byte in enumerate(b"base64"):
                    is_b64[is_b64] = self.data[enc_lo[is_b64] + k] == byte
                rows = np.flatnonzero(enc & plain & is_b64)
                bodies = self._slices(start[rows], end[rows])
                spaces = pc.count_substring(bodies, " ").to_numpy()
                pads = pc.count_substring(bodies, "=").to_numpy()
                one = pc.match_substring_regex(bodies, _ONE_FRAME).to_numpy(zero_copy_only=False)
                many = pc.match_substring_regex(bodies, _FRAMES).to_numpy(zero_copy_only=False)
                n = count[rows]
                empty = end[rows] == start[rows]
                counted = has_count[rows]
                good = np.where(counted, count_ok[rows] & ((n == 0) & empty | (n >= 1) & many
                                                            & (spaces + 1 == n)), one)
                fast[enc] = False
                fast[rows] = good
                size[rows] = ((end[rows] - start[rows] - spaces) // 4) * 3 - pads
                frames[rows] = np.where(counted, n, 1)
            return enc, fast, frames, size
        return self._get("encoding", make)

    def _decoded(self):
        """(bodies, frames) as stored bytes: a binary array of every row's body and a
        list array of its frames, base64 ones decoded where `_encoding` found them
        canonical. Then every frame is whole groups of four characters, so the frames of
        all those rows, spaces dropped, decode as one run of groups (a group's '=' drop
        the bytes they stand for), and the spaces and row ends cut that run into frames."""
        def make():
            enc, fast, count, size = self._encoding()
            rows = np.flatnonzero(enc & fast)
            body = self._body()
            single = pa.ListArray.from_arrays(pa.array(np.arange(self.n + 1, dtype=np.int32)), body)
            if not len(rows):
                return body, single
            start, end, _, _ = self._heads()
            offsets, data = _offsets_and_data(self._slices(start[rows], end[rows]))
            text = data[offsets[0]:offsets[-1]]
            offsets = offsets - offsets[0]
            space = text == _SPACE
            groups = text[~space].reshape(-1, 4)
            six = _SIXES[groups]
            out = np.empty(groups.shape[:1] + (3,), np.uint8)
            out[:, 0] = (six[:, 0] << 2) | (six[:, 1] >> 4)
            out[:, 1] = (six[:, 1] << 4) | (six[:, 2] >> 2)
            out[:, 2] = (six[:, 2] << 6) | six[:, 3]
            keep = np.ones(out.shape, bool)
            keep[:, 1] = groups[:, 2] != _EQ
            keep[:, 2] = groups[:, 3] != _EQ
            decoded = pa.py_buffer(out[keep])
            bounds = np.zeros(len(rows) + 1, np.int32)
            np.cumsum(size[rows], out=bounds[1:])
            bodies = pa.Array.from_buffers(pa.binary(), len(rows), [None, pa.py_buffer(bounds), decoded])
            # Frames: cut the text at its spaces and row ends; a frame of n characters
            # with p '=' holds n / 4 * 3 - p bytes. A row of no frames (`\frames=0`,
            # empty) gives an empty piece, dropped.
            spaces = np.flatnonzero(space)
            lo = np.sort(np.concatenate([offsets[:-1], spaces + 1]))
            hi = np.sort(np.concatenate([spaces, offsets[1:]]))
            pads = np.zeros(len(text) + 1, np.int64)
            np.cumsum(text == _EQ, out=pads[1:])
            length = (hi - lo) // 4 * 3 - (pads[hi] - pads[lo])
            per_row = 1 + np.diff(np.searchsorted(spaces, offsets))
            counts = count[rows]
            pieces = np.where(counts == 0, 0, per_row)
            wanted = np.repeat(counts != 0, per_row)
            frame_bounds = np.zeros(int(wanted.sum()) + 1, np.int32)
            np.cumsum(length[wanted], out=frame_bounds[1:])
            values = pa.Array.from_buffers(pa.binary(), len(frame_bounds) - 1,
                                           [None, pa.py_buffer(frame_bounds), decoded])
            list_bounds = np.zeros(len(rows) + 1, np.int32)
            np.cumsum(pieces, out=list_bounds[1:])
            frames = pa.ListArray.from_arrays(pa.array(list_bounds), values)
            order = np.arange(self.n)
            order[rows] = self.n + np.arange(len(rows))
            order = pa.array(order)
            return (pa.concat_arrays([body, bodies]).take(order),
                    pa.concat_arrays([single, frames]).take(order))
        return self._get("decoded", make)

    # -- columns -----------------------------------------------------------------------

    def column(self, name, type_):
        """(array of type `type_`, slow rows or None) of textqueue column `name`."""
        array, slow = getattr(self, "_column_" + name)(type_)
        if array.type != type_:
            array = array.cast(type_)
        return array, (slow if slow is not None and slow.any() else None)

    def _column_status(self, type_):
        return status_array(self.data, self.starts)

    def _column_id(self, type_):
        return self._text(*self._variable(b"i")[:2])

    def _column_subject(self, type_):
        return self._text(*self._variable(b"s")[:2])

    def _column_tracker(self, type_):
        return self._text(*self._variable(b"tracker")[:2])

    def _column_origin(self, type_):
        origin, _, slow = self._origin_sender()
        return origin, slow

    def _column_sender(self, type_):
        _, sender, slow = self._origin_sender()
        return sender, slow

    def _column_priority(self, type_):
        lo, hi, present = self._variable(b"priority")
        one = present & (hi - lo == 1)
        one[one] = self.data[lo[one]] == ord("1")
        return pa.array(one), ~self._plain()

    def _column_created(self, type_):
        created, fast = self._created()
        return _timestamps(created, None, fast, type_), ~fast

    def _column_expires(self, type_):
        expires, present, fast = self._expires()
        return _timestamps(expires, present, fast, type_), ~fast

    def _column_settled(self, type_):
        _, _, at, settled, fast = self._settles()
        return _timestamps(at, settled, fast, type_), ~fast

    def _column_settle_reason(self, type_):
        code, _, _, settled, fast = self._settles()
        indices = pa.array(np.maximum(code, 0).astype(np.int8), mask=~settled)
        return pa.DictionaryArray.from_arrays(indices, _REASONS).cast(pa.string()), ~fast

    def _column_consumer(self, type_):
        _, letter, _, settled, fast = self._settles()
        door = settled & (letter >= 0)
        indices = pa.array(np.where(door, letter, 0).astype(np.int8), mask=~door)
        return pa.DictionaryArray.from_arrays(indices, _DOORS).cast(pa.string()), ~fast

    def _column_retry(self, type_):
        retry, fast = self._retry()
        return pa.array(retry.astype(np.int32)), ~fast

    def _column_size(self, type_):
        _, fast, _, size = self._encoding()
        return pa.array(size), ~fast

    def _column_frame_count(self, type_):
        _, fast, frames, _ = self._encoding()
        return pa.array(frames.astype(np.int32)), ~fast

    def _column_body(self, type_):
        start, end, _, plain = self._heads()
        body = self._body()
        high = self._has(self._high(), start, end)
        if high.any():
            body = pc.if_else(pa.array(high), pa.scalar(b"", pa.binary()), body)
        return body.cast(pa.string()), high | ~plain

    def _column_body_bytes(self, type_):
        return self._decoded()[0], ~self._encoding()[1]

    def _column_frames(self, type_):
        return self._decoded()[1], ~self._encoding()[1]

    def _column_checksum(self, type_):
        """journal.checksum_state: the CRC-32 of the record from after its control
        character to its `\\r=` line, as six URL-safe base64 characters in `\\c=`.
        zlib computes each record's CRC (one C call per record, no parsing); the
        encoding and the comparison are array operations."""
        data = self.data
        lo, hi, present = self._variable(b"c")
        hi, ascii_ = self._rstrip(lo, hi)
        mutable, _, has_mutable = self._variable(b"r")
        mutable = mutable - 3                           # the backslash of the `\\r=` line
        edited = present & (hi - lo == 1)
        edited[edited] = data[lo[edited]] == ord("-")
        state = np.where(present, np.where(edited, 1, 3), 2).astype(np.int8)
        rows = np.flatnonzero(present & ~edited & has_mutable & (hi - lo == 6))
        if len(rows):
            view = memoryview(self.block.buffer)
            crcs = np.fromiter(map(zlib.crc32, map(view.__getitem__, map(
                slice, (self.starts[rows] + 1).tolist(), mutable[rows].tolist()))), np.int64, len(rows))
            shifts = np.array([26, 20, 14, 8, 2], np.int64)
            sextets = np.empty((len(rows), 6), np.int64)
            sextets[:, :5] = (crcs[:, None] >> shifts) & 63
            sextets[:, 5] = (crcs & 3) << 4
            stored = data[lo[rows, None] + np.arange(6)]
            state[rows[(stored == _URLSAFE[sextets]).all(axis=1)]] = 0
        array = pa.DictionaryArray.from_arrays(pa.array(state), _CHECKSUM_STATES).cast(pa.string())
        return array, ~self._plain() | (present & ~ascii_)

    def _column_variables(self, type_):
        """Record.variables as a map, the codec's way: a name's first value wins, and
        the entries come in reverse file order (the codec builds its dict from the last
        line up). Records with a name the broker does not write, a name twice, or a
        byte beyond ASCII in a variable line are left to it."""
        starts, ends, record, _ = self._variable_lines()
        equals = self._positions(ord("="))
        eq = equals[np.minimum(np.searchsorted(equals, starts), max(len(equals) - 1, 0))] \
            if len(equals) else np.full(len(starts), -1)
        named = (eq > starts) & (eq < ends)
        key_end = np.where(named, eq, ends)
        keys = self._slices(starts + 1, key_end)
        code = pc.index_in(keys, value_set=_NAMES_WRITTEN).fill_null(-1).to_numpy()
        odd = (code < 0) | ~named | self._has(self._high(), starts, ends)
        slow = ~self._plain()
        slow[record[odd]] = True
        counts = np.bincount(record * len(_NAMES_WRITTEN) + np.maximum(code, 0),
                             minlength=self.n * len(_NAMES_WRITTEN))
        slow |= (counts.reshape(self.n, len(_NAMES_WRITTEN)) > 1).any(axis=1)
        value_lo = np.where(named, key_end + 1, ends)
        value_hi, _ = self._rstrip(value_lo, ends)
        order = np.lexsort((-starts, record))
        order = order[~slow[record[order]]]
        offsets = np.zeros(self.n + 1, np.int32)
        np.cumsum(np.bincount(record[order], minlength=self.n), out=offsets[1:])
        take = pa.array(order.astype(np.int64))
        values = self._slices(value_lo, np.maximum(value_hi, value_lo))
        entries = pa.MapArray.from_arrays(pa.array(offsets), keys.take(take).cast(pa.string()),
                                          values.take(take).cast(pa.string()))
        return entries, slow

    def _column_headers(self, type_):
        """`\\headers=k=v&k=v` as a map: split on '&', each pair on its first '='.
        Values with '%' or bytes beyond ASCII, pairs without '=' (the codec's error) and
        a key twice are left to the codec."""
        lo, hi, present = self._variable(b"headers")
        slow = ~self._plain()
        rows = np.flatnonzero(present)
        offsets = np.zeros(self.n + 1, np.int32)
        if not len(rows):
            return pa.MapArray.from_arrays(pa.array(offsets), pa.array([], pa.string()),
                                           pa.array([], pa.string()), mask=pa.array(~present)), slow
        bad = self._special(lo[rows], hi[rows])
        texts = self._slices(lo[rows], np.where(bad, lo[rows], hi[rows])).cast(pa.string())
        pairs = pc.split_pattern(texts, "&")
        per_row = np.diff(pairs.offsets.to_numpy())
        pair_row = np.repeat(np.arange(len(rows)), per_row)
        flat = pairs.flatten()
        has_eq = pc.match_substring(flat, "=").to_numpy(zero_copy_only=False)
        bad[pair_row[~has_eq]] = True
        kv = pc.split_pattern(pc.if_else(pa.array(has_eq), flat, pa.scalar("=")), "=", max_splits=1)
        keys, values = pc.list_element(kv, 0), pc.list_element(kv, 1)
        counts = pa.table({"r": pair_row, "k": keys}).group_by(["r", "k"]).aggregate([("r", "count")])
        bad[counts.filter(pc.greater(counts["r_count"], 1))["r"].to_numpy()] = True
        slow[rows[bad]] = True
        keep = pa.array(~bad[pair_row])
        counts = np.zeros(self.n, np.int64)
        counts[rows[~bad]] = per_row[~bad]
        np.cumsum(counts, out=offsets[1:])
        return pa.MapArray.from_arrays(pa.array(offsets), keys.filter(keep), values.filter(keep),
                                       mask=pa.array(~present)), slow

    def times(self, name):
        """(ms, present, fast) of "created" or "settled", for row selection."""
        if name == "created":
            created, fast = self._created()
            return created, np.ones(self.n, bool), fast
        _, _, at, settled, fast = self._settles()
        return at, settled, fast


def _timestamps(ms, present, fast, type_):
    """Milliseconds to the pipeline's timestamps, as its batches.py makes them (same casts, same
    out-of-range errors); slow rows hold 0 until the codec's values replace them."""
    array = pa.array(np.where(fast, ms, 0), pa.int64(), mask=None if present is None else ~present)
    return array.cast(pa.timestamp("ms", tz="UTC")).cast(type_)


def _offsets_and_data(array):
    """(int64 offsets, uint8 bytes) of a binary array."""
    offsets = np.frombuffer(array.buffers()[1], np.int32)[array.offset:array.offset + len(array) + 1]
    data = array.buffers()[2]
    return offsets.astype(np.int64), (np.frombuffer(data, np.uint8) if data is not None
                                      else np.zeros(0, np.uint8))
