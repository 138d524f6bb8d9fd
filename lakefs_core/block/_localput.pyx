# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Compiled file operations of the local store's batched small puts (optional; see ``local_batch``).

:func:`put_files` writes a hop of small objects with the GIL released for all of its system
calls: per object, read the source file (or take the bytes given), create the temporary file,
write, ``fstat``, close, move it into place (``link`` + ``unlink`` for create-only puts,
``rename`` otherwise) and probe for a sidecar. The pure-Python path does the same calls one
``os`` function at a time, and each of them gives the GIL up and takes it back: with the event
loop busy on the other core (encoding entries, journaling), every take-back waits for the loop,
so the writer threads crawled. Here a hop of 32 objects takes the GIL back once.

A create-only put (every upload's) uses an unnamed file where the system has them (Linux's
``O_TMPFILE``, on ext4, XFS, Btrfs, tmpfs): written, then linked to its target name, so the
object appears whole as with a temporary name. That makes one directory entry per object
instead of making two and removing one, and every such change takes the directory's lock:
with all objects of an upload in one slice directory, 8 writer threads in C put 5,000 files
in 0.09 s this way against 0.17 s through temporary names (``bench/RESULTS.md``). A system
without them (another filesystem, no ``/proc`` to link through) is noticed on the first object
and the named temporary file is used from then on.

The contract is deliberately narrow. Anything but the plain success path (a missing directory, a
source of another size than expected, an existing target, a full disk, any other error before
the object is in place) undoes what this call did for that object (its temporary file) and
reports ``FALLBACK``; the caller then writes that object again through the pure-Python path,
which makes directories, retries and raises the one typed error the store promises. Only a
failure after the object is in place (unlinking the temporary name of a create-only put) is
reported as ``UNLINK_FAILED`` with its errno, as the pure path raises then. (An unnamed file
whose descriptor fails to close after it was linked is unlinked again, the name this call just
made, and reported ``FALLBACK``.)

Every name is an entry of a directory the caller opened (a descriptor: ``openat``, ``linkat``,
``renameat``, ``unlinkat``, ``fstatat``), which ``local_batch`` opens below the store's root
without following a symbolic link; nothing here resolves a path, so a link planted in the
namespace cannot lead a write elsewhere. A link at an overwritten target's name is not replaced
(``FALLBACK``: the pure path refuses it); a create-only put never replaces anything.

Nothing here decides what to write: names, flags and sizes come from the caller.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.errno cimport EDQUOT, EEXIST, EINTR, EINVAL, EISDIR, ELOOP, ENOSPC, EOPNOTSUPP, errno
from libc.stdlib cimport free, malloc
from posix.types cimport dev_t, ino_t, off_t
from posix.time cimport timespec

cdef extern from "<fcntl.h>" nogil:
    int c_open "open" (const char *path, int flags, ...)
    enum: O_RDONLY
    enum: O_WRONLY
    enum: O_CLOEXEC
    enum: O_NONBLOCK

cdef extern from "<unistd.h>" nogil:
    ssize_t c_read "read" (int fd, void *buf, size_t n)
    ssize_t c_write "write" (int fd, const void *buf, size_t n)
    int c_close "close" (int fd)
    int c_unlinkat "unlinkat" (int dirfd, const char *path, int flags)

cdef extern from "<stdio.h>" nogil:
    int c_renameat "renameat" (int olddirfd, const char *a, int newdirfd, const char *b)
    int snprintf(char *out, size_t n, const char *fmt, ...)

cdef extern from *:
    """
    #include <fcntl.h>
    #include <stdio.h>
    #include <unistd.h>
    #ifdef O_TMPFILE
    #define LAKEFS_O_TMPFILE O_TMPFILE
    #else
    #define LAKEFS_O_TMPFILE 0
    #endif
    """
    int LAKEFS_O_TMPFILE  # 0 where the platform has no unnamed files (then never tried)
    int AT_FDCWD
    int AT_SYMLINK_FOLLOW
    int AT_SYMLINK_NOFOLLOW
    int c_linkat "linkat" (int olddirfd, const char *a, int newdirfd, const char *b, int flags) nogil
    int c_openat "openat" (int dirfd, const char *path, int flags, ...) nogil

cdef extern from "<sys/stat.h>" nogil:
    cdef struct stat:
        dev_t st_dev
        ino_t st_ino
        unsigned int st_mode
        off_t st_size
        timespec st_mtim
    int c_fstat "fstat" (int fd, stat *st)
    int c_fstatat "fstatat" (int dirfd, const char *path, stat *st, int flags)
    bint S_ISREG(unsigned int mode)
    bint S_ISLNK(unsigned int mode)

# Outcomes per object (local_batch.py has the same names).
DEF DONE = 0
DEF FALLBACK = 1
DEF UNLINK_FAILED = 2

cdef struct Job:
    const char *src      # source file, or NULL when data is given
    const char *data     # the bytes to write (a source is read into the hop's buffer first)
    Py_ssize_t size      # expected source size, or the data's length
    const char *tmp      # the temporary file's name, in dirfd
    int dirfd            # the target's directory (where every name of the object is made)
    const char *target   # the object's name, in dirfd
    int metafd           # the directory of the object's sidecar, or -1 when there is none
    int status
    int err
    int has_sidecar
    stat st


cdef int _open_retry(const char *path, int flags, int mode) noexcept nogil:
    cdef int fd
    while True:
        fd = c_open(path, flags, mode)
        if fd >= 0 or errno != EINTR:
            return fd


cdef int _openat_retry(int dirfd, const char *path, int flags, int mode) noexcept nogil:
    cdef int fd
    while True:
        fd = c_openat(dirfd, path, flags, mode)
        if fd >= 0 or errno != EINTR:
            return fd


cdef int _read_source(Job *job, char *buf) noexcept nogil:
    """Read the whole source into ``buf`` (size + 1 bytes): 0 when it is a regular file of exactly
    ``size`` bytes (not blocking on a FIFO swapped in since it was listed)."""
    cdef int fd = _open_retry(job.src, O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0)
    cdef ssize_t r
    cdef Py_ssize_t got = 0
    cdef stat st
    if fd < 0:
        return -1
    if c_fstat(fd, &st) != 0 or not S_ISREG(st.st_mode):
        c_close(fd)
        return -1
    while got <= job.size:  # one byte more than expected: a longer file is noticed
        r = c_read(fd, buf + got, <size_t>(job.size + 1 - got))
        if r < 0:
            if errno == EINTR:
                continue
            c_close(fd)
            return -1
        if r == 0:
            break
        got += r
    c_close(fd)
    if got != job.size:
        return -1  # changed since it was listed: the pure path reads whatever it holds now
    job.data = buf
    return 0


cdef int _write_all(int fd, const char *data, Py_ssize_t n) noexcept nogil:
    cdef ssize_t w
    cdef Py_ssize_t done = 0
    while done < n:
        w = c_write(fd, data + done, <size_t>(n - done))
        if w < 0:
            if errno == EINTR:
                continue
            return -1
        done += w
    return 0


cdef bint _put_unnamed(Job *job, int *unnamed) noexcept nogil:
    """Create-only put through an unnamed file (``O_TMPFILE`` in the target's directory, written,
    then linked to its name through ``/proc/self/fd``): one directory entry made per object where
    the named temporary file makes two and removes one, and nothing to clean up after a crash.
    False when this filesystem or system cannot (no ``O_TMPFILE``, no ``/proc``): ``unnamed`` is
    then cleared and the caller uses a named temporary file, for this and every later object."""
    cdef int fd = _openat_retry(job.dirfd, ".", O_WRONLY | LAKEFS_O_TMPFILE | O_CLOEXEC, 0o666)
    cdef int err = 0
    cdef char proc[64]
    if fd < 0:
        if errno == EOPNOTSUPP or errno == EISDIR or errno == EINVAL:
            unnamed[0] = 0  # EISDIR, EINVAL: a kernel without O_TMPFILE
            return False
        job.status, job.err = FALLBACK, errno  # e.g. the directory does not exist yet
        return True
    if _write_all(fd, job.data, job.size) != 0 or c_fstat(fd, &job.st) != 0:
        err = errno
    if err == 0:
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd)
        if c_linkat(AT_FDCWD, proc, job.dirfd, job.target, AT_SYMLINK_FOLLOW) != 0:
            err = errno
            if err != EEXIST and err != ENOSPC and err != EDQUOT:
                # no /proc, or linking through it refused: the named path from now on (it meets
                # any error that was not about unnamed files itself)
                c_close(fd)
                unnamed[0] = 0
                return False
    if err != 0:
        c_close(fd)  # the unnamed file goes with its descriptor
        job.status, job.err = FALLBACK, err  # EEXIST: an existing target, for the pure path
        return True
    if c_close(fd) != 0:
        err = errno
        c_unlinkat(job.dirfd, job.target, 0)  # the name this call linked a moment ago (create-only)
        job.status, job.err = FALLBACK, err
        return True
    job.status, job.err = DONE, 0
    return True


cdef void _put_named(Job *job, int create_flags, bint exclusive) noexcept nogil:
    """Put through a named temporary file, moved into place (``link`` + ``unlink`` when
    create-only, ``rename`` otherwise; a link at the target's name is never replaced)."""
    cdef int fd
    cdef int err = 0
    cdef stat there
    fd = _openat_retry(job.dirfd, job.tmp, create_flags, 0o666)
    if fd < 0:
        job.status, job.err = FALLBACK, errno  # e.g. the directory does not exist yet
        return
    if _write_all(fd, job.data, job.size) != 0 or c_fstat(fd, &job.st) != 0:
        err = errno
    if c_close(fd) != 0 and err == 0:
        err = errno
    if err == 0:
        if exclusive:
            if c_linkat(job.dirfd, job.tmp, job.dirfd, job.target, 0) != 0:
                err = errno
        elif c_fstatat(job.dirfd, job.target, &there, AT_SYMLINK_NOFOLLOW) == 0 and S_ISLNK(there.st_mode):
            err = ELOOP  # the pure path refuses it with the store's error
        elif c_renameat(job.dirfd, job.tmp, job.dirfd, job.target) != 0:
            err = errno
    if err != 0:
        job.status, job.err = FALLBACK, err
        c_unlinkat(job.dirfd, job.tmp, 0)
        return
    if exclusive and c_unlinkat(job.dirfd, job.tmp, 0) != 0:
        job.status, job.err = UNLINK_FAILED, errno
        return
    job.status, job.err = DONE, 0


cdef void _put_one(Job *job, char *buf, int create_flags, bint exclusive, int *unnamed) noexcept nogil:
    cdef stat there
    if job.src != NULL and _read_source(job, buf) != 0:
        job.status, job.err = FALLBACK, errno
        return
    if not (exclusive and unnamed[0] and _put_unnamed(job, unnamed)):
        _put_named(job, create_flags, exclusive)
    if job.status != DONE:
        return
    if job.metafd >= 0 and c_fstatat(job.metafd, job.target, &there, AT_SYMLINK_NOFOLLOW) == 0:
        job.has_sidecar = 1  # rare: the caller decides whether it is stale (a sidecar has the key's name)


def put_files(list sources, list datas, list sizes, list tmps, list dir_fds, list targets, list meta_fds,
              int create_flags, bint exclusive, bint unnamed):
    """Write ``len(tmps)`` objects; object ``i`` is ``datas[i]`` (bytes) or, when that is None, the
    file ``sources[i]`` (bytes path) of ``sizes[i]`` bytes, put as the entry ``targets[i]`` of the
    directory open as ``dir_fds[i]`` through the temporary name ``tmps[i]`` there, or, when
    ``unnamed`` and ``exclusive``, through an unnamed file; ``meta_fds[i]``: the directory where
    its sidecar would be (an entry of the same name), or -1. Names are bytes, single entries of
    their directory (no ``/``): nothing here resolves a path below the directories the caller
    opened. Returns ``(outcomes, unnamed)``: one tuple per object,
    ``(status, errno, data, dev, ino, size, mtime_ns, has_sidecar)`` where ``data`` is the bytes
    written (for the ETag) when the status is DONE or UNLINK_FAILED, else None; and whether
    unnamed files still work here (False once this system showed it has none)."""
    cdef Py_ssize_t n = len(tmps), i, total = 0
    cdef int use_unnamed = 1 if unnamed and LAKEFS_O_TMPFILE != 0 else 0
    if not (len(sources) == len(datas) == len(sizes) == len(dir_fds) == len(targets) == len(meta_fds) == n):
        raise ValueError("put_files: the lists differ in length")
    cdef Job *jobs = <Job *>malloc(max(n, 1) * sizeof(Job))
    cdef Py_ssize_t *offsets = <Py_ssize_t *>malloc(max(n, 1) * sizeof(Py_ssize_t))
    cdef char *buf = NULL
    cdef bytes b
    cdef Job *j
    if jobs == NULL or offsets == NULL:
        free(jobs)
        free(offsets)
        raise MemoryError()
    try:
        for i in range(n):  # every pointer below is owned by the caller's lists, which outlive this call
            jobs[i].status, jobs[i].err, jobs[i].has_sidecar = FALLBACK, 0, 0
            jobs[i].tmp = PyBytes_AS_STRING(tmps[i])
            jobs[i].dirfd = dir_fds[i]
            jobs[i].target = PyBytes_AS_STRING(targets[i])
            jobs[i].metafd = meta_fds[i]
            offsets[i] = total
            if datas[i] is not None:
                b = datas[i]
                jobs[i].src, jobs[i].data, jobs[i].size = NULL, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b)
            else:
                jobs[i].src, jobs[i].data, jobs[i].size = PyBytes_AS_STRING(sources[i]), NULL, sizes[i]
                if jobs[i].size < 0:
                    raise ValueError("put_files: a negative size")
                total += jobs[i].size + 1
        buf = <char *>malloc(max(total, 1))
        if buf == NULL:
            raise MemoryError()
        with nogil:
            for i in range(n):
                _put_one(&jobs[i], buf + offsets[i], create_flags, exclusive, &use_unnamed)
        out = []
        for i in range(n):
            j = &jobs[i]
            if j.status == FALLBACK:
                out.append((FALLBACK, j.err, None, 0, 0, 0, 0, 0))
                continue
            data = datas[i] if datas[i] is not None else PyBytes_FromStringAndSize(j.data, j.size)
            out.append((
                j.status, j.err, data, j.st.st_dev, j.st.st_ino, j.st.st_size,
                j.st.st_mtim.tv_sec * 1_000_000_000 + j.st.st_mtim.tv_nsec, j.has_sidecar,
            ))
        return out, use_unnamed != 0
    finally:
        free(buf)
        free(offsets)
        free(jobs)
