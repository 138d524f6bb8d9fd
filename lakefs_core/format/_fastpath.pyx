# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Compiled per-record paths: the table writer's and the warm point lookup (optional; pure Python
is the reference).

:class:`TableCore` is the base class of :class:`~lakefs_core.format.sstable.writer.TableWriter`
when this extension is built. It holds the open data block's state in typed fields and implements
the two per-record methods in C:

- :meth:`TableCore.add`: the same contract and the same bytes as the pure ``_PyTableCore.add``
  in ``writer.py``;
- :meth:`TableCore.add_record`: a range record from its parts. The value is the lakeFS envelope
  ``varint(len(identity)) identity varint(len(data)) data`` (never materialised as an object),
  and the record's table-id input (``len(key) key | len(value) value |``, spec section 4) is
  appended to the caller's buffer, which is handed to ``update`` (a SHA-256's ``update``) each
  time it passes 64 KiB, so the digest is computed over large chunks;
- :meth:`TableCore.add_record_split` and :meth:`TableCore.add_value_split` (a ``ValueRecord``
  tuple whole): ``add_record`` plus the range split decision of ``splitter.SplitPolicy`` (its three
  numbers set once per range), the one call per record of a bulk metarange write.

Everything else (the flush rule, blocks, the index, properties, the footer) stays in Python: it
runs once per ~4 KiB block, not per record. The flush rule is checked here too (it runs for
every record near a block's end); the Python methods ``_index_block`` and ``_refuse`` of the
subclass are called back to flush a full block and to refuse a key, exactly where the pure path
does. ``tests/format/test_fastpath.py`` checks both paths byte for byte on generated
records and ``tests/format/test_writer_bytes.py`` pins the bytes of either.

Why compiled code: the per-record cost of writing ranges was ~3.7 us in tuned pure Python, of
which the block encoding, the id input and the envelope (all byte shuffling) were most; the issue's
target (0.4x of RocksDB's own writer) needs ~2 us in all. The pattern (an optional extension with
a pure-Python twin, both tested) is pyiceberg's ``decoder_fast.pyx``.

The read side (end of this module): :func:`record_from_sst` builds a ``ValueRecord`` from a key
and its envelope (``records.pure_record_from_sst`` is its twin and takes whatever is off its path),
and :class:`MetaRangeCore`, the
base class of ``committed.metarange.MetaRange``, does a warm ``get_cached`` (range bisect, the
table's dict of cached records, the envelope) in one call, with ``PureMetaRange.get_cached`` as its
twin and its fallback for anything off that path; ``tests/committed/test_fast_lookup.py`` holds both
to the same answers and errors. Issue 38 asked 2.0x RocksDB's warm ``get`` for this path; five
Python frames made it ~1.4x.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport (
    PyBytes_AS_STRING, PyBytes_Check, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
)
from cpython.dict cimport PyDict_CheckExact, PyDict_GetItemWithError
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject, PyTypeObject
from cpython.tuple cimport PyTuple_Check, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.string cimport memcmp, memcpy

import cramjam
import google_crc32c

# footer.py's constants (spec section 2). This module imports nothing of the project: the writer
# module that loads it is still being imported then.
DEF _SNAPPY = 1
DEF _TRAILER_SIZE = 5

cdef object _snappy = cramjam.snappy.compress_raw
cdef object _crc_value = google_crc32c.value
cdef object _crc_extend = google_crc32c.extend

DEF TRAILER_LEN = 8
# Chunks of the table-id input handed to SHA-256 at once (large enough to amortise the call).
DEF HASH_CHUNK = 65536

cdef extern from "Python.h":
    ctypedef struct PyByteArrayObject:
        Py_ssize_t ob_alloc


cdef unsigned char SET_TRAILER[8]
SET_TRAILER[:] = [1, 0, 0, 0, 0, 0, 0, 0]


cdef inline unsigned char* _extend(bytearray buf, Py_ssize_t extra) except NULL:
    """Grow ``buf`` by ``extra`` bytes; return a pointer to the first new byte.

    CPython grows a bytearray by 1/8 at a time, which reallocates a block's buffer dozens of times
    while it fills. Here the allocation grows by half first; the resize down to the wanted size
    then keeps it (CPython shrinks an allocation only below half), so appends cost amortised
    O(1) copies."""
    cdef Py_ssize_t old = PyByteArray_GET_SIZE(buf)
    cdef Py_ssize_t want = old + extra
    if want + 1 > (<PyByteArrayObject*>buf).ob_alloc:
        PyByteArray_Resize(buf, want + (want >> 1) + 256)
    PyByteArray_Resize(buf, want)
    return <unsigned char*>PyByteArray_AS_STRING(buf) + old


cdef inline Py_ssize_t _uvarint(unsigned char* out, unsigned long long v) noexcept:
    cdef Py_ssize_t n = 0
    while v >= 0x80:
        out[n] = <unsigned char>((v & 0x7F) | 0x80)
        v >>= 7
        n += 1
    out[n] = <unsigned char>v
    return n + 1


cdef inline Py_ssize_t _decimal(unsigned char* out, Py_ssize_t v) noexcept:
    """ASCII decimal of ``v >= 0`` (as Go's strconv.Itoa and Python's ``b"%d"``)."""
    cdef unsigned char tmp[24]
    cdef Py_ssize_t n = 0, i
    if v == 0:
        out[0] = 48
        return 1
    while v > 0:
        tmp[n] = <unsigned char>(48 + v % 10)
        v //= 10
        n += 1
    for i in range(n):
        out[i] = tmp[n - 1 - i]
    return n


cdef inline unsigned char _ikey_at(const unsigned char* key, Py_ssize_t n, Py_ssize_t i) noexcept:
    # Byte i of the internal key key || SET_TRAILER.
    return key[i] if i < n else SET_TRAILER[i - n]


cdef Py_ssize_t _shared(const unsigned char* a, Py_ssize_t na,
                        const unsigned char* b, Py_ssize_t nb) noexcept:
    """Common prefix length of the internal keys ``a || T`` and ``b || T`` (T = SET trailer).

    Equal to the pure path's ``_shared_prefix``; never more than ``nb`` when ``a < b`` (see there)."""
    cdef Py_ssize_t n = na if na < nb else nb
    cdef Py_ssize_t i = 0
    while i < n and a[i] == b[i]:
        i += 1
    if i < n:
        return i
    cdef Py_ssize_t la = na + TRAILER_LEN, lb = nb + TRAILER_LEN
    cdef Py_ssize_t end = la if la < lb else lb
    while i < end and _ikey_at(a, na, i) == _ikey_at(b, nb, i):
        i += 1
    return i


cdef inline Py_ssize_t _zigzag_len(Py_ssize_t n, unsigned char* out) noexcept:
    # Go binary.PutVarint of a length n >= 0: the uvarint of 2n.
    return _uvarint(out, (<unsigned long long>n) << 1)


cdef class TableCore:
    """The open data block and the per-record counters of a table writer (see the module doc)."""

    cdef public bytearray _buf
    cdef public list _restarts
    cdef public bytes _last_key
    cdef public bytes _first_key
    cdef public Py_ssize_t _counter
    cdef public Py_ssize_t _interval
    cdef public Py_ssize_t _entries
    cdef public Py_ssize_t _raw_key_size
    cdef public Py_ssize_t _raw_value_size
    cdef public Py_ssize_t _base
    cdef public Py_ssize_t _room
    cdef public Py_ssize_t _block_size
    cdef public Py_ssize_t _threshold
    cdef public bint _finished
    cdef public list _chunks
    cdef public Py_ssize_t _offset
    cdef public Py_ssize_t _data_blocks
    cdef public int _compression
    cdef public bytearray _id_input
    cdef public object _id_update
    # The range split policy for add_record_split (splitter.SplitPolicy's three numbers).
    cdef public Py_ssize_t _split_min
    cdef public Py_ssize_t _split_max
    cdef public unsigned long long _split_every

    def __cinit__(self, *args, **kwargs):
        self._buf = bytearray()
        self._restarts = [0]
        self._last_key = b""
        self._first_key = b""
        self._interval = 16
        self._split_max = 1
        self._split_every = 1

    cdef inline bytearray _prepare(self, bytes user_key, Py_ssize_t klen, Py_ssize_t vlen):
        """The order check and the flush rule (both in Python when they fire)."""
        cdef bytes last = self._last_key
        cdef Py_ssize_t nl = PyBytes_GET_SIZE(last), nk = PyBytes_GET_SIZE(user_key)
        cdef Py_ssize_t n = nl if nl < nk else nk
        cdef const unsigned char* a = <const unsigned char*>PyBytes_AS_STRING(last)
        cdef const unsigned char* b = <const unsigned char*>PyBytes_AS_STRING(user_key)
        cdef Py_ssize_t i = 0
        while i < n and a[i] == b[i]:
            i += 1
        # user_key <= last, bytewise
        if (i < n and b[i] < a[i]) or (i == n and nk <= nl):
            if self._entries or self._finished:
                self._refuse(user_key)
        if PyByteArray_GET_SIZE(self._buf) > self._room:  # rare: the block is near full
            if self._finished:
                self._refuse(user_key)
            if self._counter and self._must_flush(klen, vlen):
                self._flush_block(user_key)
        return self._buf

    cdef int _flush_block(self, bytes next_key) except -1:
        """The pure ``_cut_block`` for a data block: restart array, Snappy when it saves 1/8,
        the trailer's masked CRC32C (footer.compress_block and block_trailer), then the index
        entry (in Python, once per block)."""
        cdef list restarts = self._restarts
        cdef Py_ssize_t nr = len(restarts), i
        cdef unsigned int r
        cdef unsigned char* out = _extend(self._buf, 4 * (nr + 1))
        for i in range(nr + 1):
            r = <unsigned int>(<Py_ssize_t>restarts[i] if i < nr else nr)
            out[4 * i] = r & 0xFF
            out[4 * i + 1] = (r >> 8) & 0xFF
            out[4 * i + 2] = (r >> 16) & 0xFF
            out[4 * i + 3] = r >> 24
        cdef bytes payload = PyBytes_FromStringAndSize(PyByteArray_AS_STRING(self._buf),
                                                       PyByteArray_GET_SIZE(self._buf))
        cdef Py_ssize_t raw_len = PyBytes_GET_SIZE(payload)
        cdef int ctype = 0
        cdef bytes compressed
        if self._compression == _SNAPPY:
            compressed = bytes(_snappy(payload))
            if PyBytes_GET_SIZE(compressed) < raw_len - raw_len // 8:
                payload = compressed
                ctype = _SNAPPY
        cdef bytes type_byte = bytes((ctype,))
        cdef unsigned long long c = _crc_extend(_crc_value(payload), type_byte)
        c = ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
        cdef unsigned char trailer[5]
        trailer[0] = <unsigned char>ctype
        trailer[1] = c & 0xFF
        trailer[2] = (c >> 8) & 0xFF
        trailer[3] = (c >> 16) & 0xFF
        trailer[4] = (c >> 24) & 0xFF
        self._chunks.append(payload)
        self._chunks.append(PyBytes_FromStringAndSize(<char*>trailer, 5))
        cdef Py_ssize_t offset = self._offset
        self._offset += PyBytes_GET_SIZE(payload) + _TRAILER_SIZE
        self._buf = bytearray()
        self._restarts = [0]
        self._counter = 0
        self._data_blocks += 1
        self._index_block(next_key, offset, PyBytes_GET_SIZE(payload))
        return 0

    cdef inline bint _must_flush(self, Py_ssize_t klen, Py_ssize_t vlen):
        """pebble's flush rule, as the pure ``_make_room``: flush before this entry once the block
        is full, or past the 90% threshold with the entry pushing it over the target."""
        cdef unsigned char scratch[10]
        cdef Py_ssize_t size = PyByteArray_GET_SIZE(self._buf) + 4 * len(self._restarts) + 4
        if size >= self._block_size:
            return True
        if size <= self._threshold:
            return False
        size += klen + vlen + 4 + _uvarint(scratch, <unsigned long long>klen)
        size += _uvarint(scratch, <unsigned long long>vlen)
        if self._counter >= self._interval:
            size += 4
        return size > self._block_size

    cdef inline Py_ssize_t _header(self, bytes user_key, Py_ssize_t klen, Py_ssize_t vlen,
                                   unsigned char* hdr, Py_ssize_t* shared_out) except -1:
        """The entry header (three uvarints) into ``hdr``; its length. Records a restart."""
        cdef Py_ssize_t counter = self._counter, shared = 0
        cdef bytes last
        if counter and counter < self._interval:
            last = self._last_key
            shared = _shared(<const unsigned char*>PyBytes_AS_STRING(last), PyBytes_GET_SIZE(last),
                             <const unsigned char*>PyBytes_AS_STRING(user_key),
                             PyBytes_GET_SIZE(user_key))
        elif counter:
            self._restarts.append(PyByteArray_GET_SIZE(self._buf))
            self._base += 4
            self._room -= 4
            self._counter = 0
        shared_out[0] = shared
        cdef Py_ssize_t h = _uvarint(hdr, <unsigned long long>shared)
        h += _uvarint(hdr + h, <unsigned long long>(klen - shared))
        h += _uvarint(hdr + h, <unsigned long long>vlen)
        return h

    cdef inline void _account(self, bytes user_key, Py_ssize_t klen, Py_ssize_t vlen):
        if not self._entries:
            self._first_key = user_key
        self._counter += 1
        self._last_key = user_key
        self._entries += 1
        self._raw_key_size += klen
        self._raw_value_size += vlen

    cdef unsigned char* _entry(self, bytes user_key, Py_ssize_t nv) except NULL:
        """Checks, then the entry's header, key delta and trailer appended to the open block;
        returns where its ``nv`` value bytes go (the caller fills them, then calls _account)."""
        cdef Py_ssize_t nk = PyBytes_GET_SIZE(user_key)
        cdef Py_ssize_t klen = nk + TRAILER_LEN
        cdef bytearray buf = self._prepare(user_key, klen, nv)
        cdef unsigned char hdr[30]
        cdef Py_ssize_t shared
        cdef Py_ssize_t h = self._header(user_key, klen, nv, hdr, &shared)
        cdef Py_ssize_t tail = nk - shared
        cdef unsigned char* out = _extend(buf, h + tail + TRAILER_LEN + nv)
        memcpy(out, hdr, h)
        out += h
        memcpy(out, PyBytes_AS_STRING(user_key) + shared, tail)
        out += tail
        memcpy(out, SET_TRAILER, TRAILER_LEN)
        return out + TRAILER_LEN

    def add(self, bytes user_key not None, bytes value not None):
        """Append a record (the pure ``add``'s contract): return the estimated size after it."""
        cdef Py_ssize_t nv = PyBytes_GET_SIZE(value)
        memcpy(self._entry(user_key, nv), PyBytes_AS_STRING(value), nv)
        self._account(user_key, PyBytes_GET_SIZE(user_key) + TRAILER_LEN, nv)
        return self._base + PyByteArray_GET_SIZE(self._buf)

    def add_record(self, bytes user_key not None, bytes identity not None, bytes data not None):
        """Append a range record built from ``identity`` and ``data`` (see the module doc); feed its
        table-id input to ``_id_input``/``_id_update``. Return the estimated size after it."""
        return self._add_record(user_key, identity, data)

    cdef Py_ssize_t _add_record(self, bytes user_key, bytes identity, bytes data) except -1:
        cdef bytearray id_input = self._id_input
        if id_input is None:
            raise TypeError("add_record needs an id sink (TableWriter.set_id_sink)")
        cdef Py_ssize_t nk = PyBytes_GET_SIZE(user_key)
        cdef Py_ssize_t ni = PyBytes_GET_SIZE(identity), nd = PyBytes_GET_SIZE(data)
        cdef unsigned char p1[10]
        cdef unsigned char p2[10]
        cdef Py_ssize_t l1 = _zigzag_len(ni, p1), l2 = _zigzag_len(nd, p2)
        cdef Py_ssize_t nv = l1 + ni + l2 + nd
        cdef unsigned char* out = self._entry(user_key, nv)
        cdef unsigned char* value = out
        memcpy(out, p1, l1)
        memcpy(out + l1, PyBytes_AS_STRING(identity), ni)
        out += l1 + ni
        memcpy(out, p2, l2)
        memcpy(out + l2, PyBytes_AS_STRING(data), nd)
        # The record's table-id input: decimal len(key), key, "|", decimal len(value), value, "|".
        cdef Py_ssize_t base = PyByteArray_GET_SIZE(id_input)
        cdef unsigned char* hp = _extend(id_input, nk + nv + 2 + 40)
        # ``value`` points into the block buffer, which growing id_input does not move.
        cdef Py_ssize_t w = _decimal(hp, nk)
        memcpy(hp + w, PyBytes_AS_STRING(user_key), nk)
        w += nk
        hp[w] = 124  # "|"
        w += 1
        w += _decimal(hp + w, nv)
        memcpy(hp + w, value, nv)
        w += nv
        hp[w] = 124
        w += 1
        PyByteArray_Resize(id_input, base + w)
        self._account(user_key, nk + TRAILER_LEN, nv)
        cdef Py_ssize_t estimate = self._base + PyByteArray_GET_SIZE(self._buf)
        if base + w >= HASH_CHUNK:  # as the pure path: the record is in, then the chunk is hashed
            self._id_update(id_input)
            PyByteArray_Resize(id_input, 0)
        return estimate

    def add_record_split(self, bytes user_key not None, bytes identity not None, bytes data not None):
        """:meth:`add_record`, then the split decision of ``splitter.SplitPolicy.should_break`` for
        the estimate after it (policy from ``set_split_policy``): True when the range ends here."""
        return self._add_split(user_key, identity, data)

    def add_value_split(self, record):
        """:meth:`add_record_split` of a ``ValueRecord`` (a ``(key, identity, data)`` tuple): the
        bulk write path's one call per record."""
        if not PyTuple_Check(record) or PyTuple_GET_SIZE(record) != 3:
            raise TypeError("a record is a (key, identity, data) tuple")
        cdef object key = <object>PyTuple_GET_ITEM(record, 0)
        cdef object identity = <object>PyTuple_GET_ITEM(record, 1)
        cdef object data = <object>PyTuple_GET_ITEM(record, 2)
        if not (PyBytes_Check(key) and PyBytes_Check(identity) and PyBytes_Check(data)):
            raise TypeError("a record's key, identity and data must be bytes")
        return self._add_split(<bytes>key, <bytes>identity, <bytes>data)

    cdef bint _add_split(self, bytes user_key, bytes identity, bytes data) except -1:
        cdef Py_ssize_t estimate = self._add_record(user_key, identity, data)
        if estimate < self._split_min:
            return False
        if estimate >= self._split_max:
            return True
        return _fnv(<const unsigned char*>PyBytes_AS_STRING(user_key),
                    PyBytes_GET_SIZE(user_key)) % self._split_every == 0

    # _refuse and _index_block are PureTableWriter's (after this class in TableWriter's bases).


cdef inline unsigned long long _fnv(const unsigned char* p, Py_ssize_t n) noexcept:
    cdef unsigned long long h = 0xCBF29CE484222325ULL
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ p[i]) * 0x100000001B3ULL
    return h


def fnv1a64(bytes data not None):
    """64-bit FNV-1a (Go's hash/fnv New64a), as ``splitter.fnv1a64``: the split decision's hash,
    exposed so tests compare it with fnv-c directly."""
    return _fnv(<const unsigned char*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))


# --- the reader's warm point lookup -------------------------------------------------------------
#
# A warm lookup through a metarange in pure Python runs five frames (get_cached, the range bisect,
# TableReader.get, the envelope decoder and ValueRecord's generated __new__) around two memory-bound
# steps (the dict probe and the read of the value): about 2 us. Here it is one C call.

cdef extern from *:
    """
    /* tuple.__new__(tp, (a, b, c)) without the argument tuple, as CPython's tuple_subtype_new
       builds it: what a NamedTuple's generated __new__(cls, a, b, c) returns. */
    static PyObject* lakefs_tuple3(PyTypeObject* tp, PyObject* a, PyObject* b, PyObject* c) {
        PyObject* t = tp->tp_alloc(tp, 3);
        if (t == NULL) return NULL;
        Py_INCREF(a); PyTuple_SET_ITEM(t, 0, a);
        Py_INCREF(b); PyTuple_SET_ITEM(t, 1, b);
        Py_INCREF(c); PyTuple_SET_ITEM(t, 2, c);
        return t;
    }
    """
    object lakefs_tuple3(PyTypeObject* tp, object a, object b, object c)

# Bound once by graveler/metarange.py (this module imports nothing of the project): the ValueRecord
# class and records.pure_record_from_sst, the twin, which also takes every value off the fast path.
cdef type _record_type = None
cdef object _pure_record = None


def bind_records(type record_type not None, pure_record not None):
    """Set what :func:`record_from_sst` builds and falls back to."""
    global _record_type, _pure_record
    if not issubclass(record_type, tuple):  # built as tuple.__new__(record_type, (k, i, d)) is
        raise TypeError("the record type must be a tuple subclass")
    _record_type, _pure_record = record_type, pure_record


cdef object _record(object key, object value, object file, object base):
    """``records.pure_record_from_sst``: the same records and the same errors. A ``bytes`` value
    with the usual one- or two-byte length prefixes is read here; anything else (a longer or bad
    prefix, an overrun, another buffer type) is the pure function's, which returns what a correct
    decoder returns or raises the precise error."""
    if _record_type is None:
        raise RuntimeError("graveler.metarange has not bound the record type")
    if not PyBytes_CheckExact(value):
        return _pure_record(key, value, file, base)
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(value)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(value)
    cdef Py_ssize_t u, pos, ident_start, start, stop
    if n < 1:
        return _pure_record(key, value, file, base)
    if p[0] < 0x80:
        u, pos = p[0], 1
    elif n >= 2 and p[1] < 0x80:
        u, pos = (p[0] & 0x7F) | (p[1] << 7), 2
    else:
        return _pure_record(key, value, file, base)
    if u & 1:  # a negative identity length
        return _pure_record(key, value, file, base)
    ident_start = pos
    pos += u >> 1
    if pos >= n:
        return _pure_record(key, value, file, base)
    if p[pos] < 0x80:
        u, start = p[pos], pos + 1
    elif pos + 1 < n and p[pos + 1] < 0x80:
        u, start = (p[pos] & 0x7F) | (p[pos + 1] << 7), pos + 2
    else:
        return _pure_record(key, value, file, base)
    stop = start + (u >> 1)
    if u & 1 or stop > n:
        return _pure_record(key, value, file, base)
    return lakefs_tuple3(
        <PyTypeObject*>_record_type,
        key,
        PyBytes_FromStringAndSize(<const char*>p + ident_start, pos - ident_start),
        PyBytes_FromStringAndSize(<const char*>p + start, stop - start),
    )


def record_from_sst(key, value, file=None, base=0):
    """``records.pure_record_from_sst(key, value, file, base)`` in C (see ``_record``)."""
    return _record(key, value, file, base)


cdef inline bint _bytes_lt(bytes a, bytes b) noexcept:
    """``a < b`` as Python compares bytes: bytewise, then the shorter first."""
    cdef Py_ssize_t na = PyBytes_GET_SIZE(a), nb = PyBytes_GET_SIZE(b)
    cdef int c = memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), na if na < nb else nb)
    return c < 0 or (c == 0 and na < nb)


cdef class MetaRangeCore:
    """The ranges' keys and open tables of a metarange, and its warm point lookup in C.

    The base class of ``MetaRange`` when this extension is built (``graveler/metarange.py``; its
    pure twin is ``PureMetaRange``, whose ``__init__`` fills these lists). :meth:`get_cached` gives
    the pure method's answers and errors: for a ``bytes`` key over lists of ``bytes`` and an open
    table it does the work itself, reading the table's dict of cached records
    (``TableReader._records``) and calling ``TableReader.get`` on a miss; anything else (another
    key type, a range whose table is not attached yet, lists not as ``__init__`` left them) is the
    pure method's, ``_get_cached_pure``.
    """

    cdef public list _max_keys
    cdef public list _min_keys
    cdef public list _readers
    cdef public list _names

    def get_cached(self, key):
        cdef list max_keys = self._max_keys, min_keys = self._min_keys
        cdef list readers = self._readers, names = self._names
        cdef Py_ssize_t lo = 0, hi, mid, n
        cdef object item, reader, name, records, value
        cdef PyObject* found
        if (
            not PyBytes_CheckExact(key) or max_keys is None or min_keys is None or readers is None
            or names is None
        ):
            return self._get_cached_pure(key)
        n = PyList_GET_SIZE(max_keys)
        if PyList_GET_SIZE(min_keys) != n or PyList_GET_SIZE(readers) != n or PyList_GET_SIZE(names) != n:
            return self._get_cached_pure(key)
        hi = n
        while lo < hi:  # bisect_left(max_keys, key)
            mid = (lo + hi) >> 1
            item = <object>PyList_GET_ITEM(max_keys, mid)
            if not PyBytes_CheckExact(item):
                return self._get_cached_pure(key)
            if _bytes_lt(<bytes>item, <bytes>key):
                lo = mid + 1
            else:
                hi = mid
        if lo == n:
            return None
        # All three taken before any Python code runs (another thread may change the lists then).
        item = <object>PyList_GET_ITEM(min_keys, lo)
        reader = <object>PyList_GET_ITEM(readers, lo)
        name = <object>PyList_GET_ITEM(names, lo)
        if not PyBytes_CheckExact(item) or reader is None:
            return self._get_cached_pure(key)
        if _bytes_lt(<bytes>key, <bytes>item):
            return None
        records = getattr(reader, "_records", None)
        value = None
        if PyDict_CheckExact(records):
            found = PyDict_GetItemWithError(records, key)
            if found != NULL:
                value = <object>found
        if value is None:
            value = reader.get(key)
            if value is None:
                return None
        return _record(key, value, name, 0)
