"""The executor seam: the few distributed operations the GC jobs need, in-process or on Spark.

A job is written once against :class:`Executor` and :class:`Dataset`; both implementations give the
same results for the same inputs (``tests/gc/test_spark_executor.py`` runs the contract on both):

- ``executor.parallelize(items, n)``: a dataset of ``n`` partitions from driver-side items (slice ids,
  metarange ids: small things; the driver never holds the addresses themselves);
- ``ds.flat_map_partitions(fn)``: ``fn(iterator) -> iterable`` per partition. ``fn`` is a plain
  top-level function (``functools.partial`` of one with picklable arguments such as a
  :class:`~lakefs_core.compute.partition.StoreRef`), so Spark can ship it to executors by reference;
- ``ds.distinct(n)``, ``ds.repartition(n)``, ``executor.anti_join(left, right, n)`` (the left items
  whose string is absent from the right; left duplicates are kept, as Spark's ``subtractByKey``);
- ``ds.persist()`` (use the returned dataset), ``ds.count()``, ``ds.collect()`` (small results only),
  ``ds.write_text_parts(target, relative_dir)`` (one ``part-NNNNN`` per partition, written by the
  executors, see :func:`~lakefs_core.compute.partition.write_text_part`), and
  ``ds.write_parts(target, relative_dir, writer)`` for any other per-partition writer (the Parquet
  report, :func:`~lakefs_gc.mark.parquet.write_parquet_part`).

:class:`LiteExecutor` runs partitions on a small thread pool (never on the caller's thread, so
partition functions may use :func:`~lakefs_core.compute.partition.stream_async` even when the caller is
async code; such a caller should still call the job through ``asyncio.to_thread``). It streams:
a shuffle (distinct, repartition, anti-join) and ``persist`` spill pickled batches to files in a
private directory, so memory holds one bucket's distinct items (or the right side of one anti-join
bucket) at most, never the whole dataset. ``close()`` removes the spill directory.

:class:`SparkExecutor` maps the same calls onto RDD operations of a
:func:`~lakefs_core.compute.session.spark_session` (``persist`` is ``MEMORY_AND_DISK``).
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
import shutil
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast, runtime_checkable

from lakefs_core.compute.partition import (
    StoreRef,
    WrittenPart,
    write_text_part,
    write_text_part_digested,
    write_text_part_digested_indexed,
    write_text_part_indexed,
)
from lakefs_core.errors import BadInputError

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import SparkSession

T = TypeVar("T")
U = TypeVar("U")
R = TypeVar("R")

PartitionFn = Callable[[Iterator[T]], Iterable[U]]
# A partition writer: (target, relative_dir, partition index, items) -> items written. A plain
# top-level function, so Spark ships it by reference; its output name must depend only on the index.
PartWriter = Callable[[StoreRef, str, int, Iterator[T]], int]
SPILL_BATCH = 4096  # items per pickled frame in a spill file


def _check_n(n: object, field: str = "partitions") -> int:
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 1_000_000:
        raise BadInputError("must be an int between 1 and 1000000", field=field)
    return n


class Dataset(ABC, Generic[T]):
    """A partitioned, lazily computed collection (an RDD, or the lite executor's equivalent)."""

    @property
    @abstractmethod
    def num_partitions(self) -> int: ...

    @abstractmethod
    def flat_map_partitions(self, fn: Callable[[Iterator[T]], Iterable[U]]) -> Dataset[U]: ...

    @abstractmethod
    def distinct(self, n: int | None = None) -> Dataset[T]: ...

    @abstractmethod
    def repartition(self, n: int) -> Dataset[T]: ...

    @abstractmethod
    def persist(self) -> Dataset[T]: ...

    @abstractmethod
    def unpersist(self) -> None: ...

    @abstractmethod
    def count(self) -> int: ...

    @abstractmethod
    def collect(self) -> list[T]: ...

    @abstractmethod
    def write_text_parts(self: Dataset[str], target: StoreRef, relative_dir: str) -> int:
        """Write partition ``i`` to ``<relative_dir>/part-<i>`` of the namespace; returns the lines."""

    @abstractmethod
    def write_text_parts_digested(
        self: Dataset[str], target: StoreRef, relative_dir: str
    ) -> list[WrittenPart]:
        """:meth:`write_text_parts`, answering each part's lines, bytes and SHA-256 (computed as it
        was written), in partition order."""

    @abstractmethod
    def write_parts(self, target: StoreRef, relative_dir: str, writer: PartWriter[T]) -> int:
        """Run ``writer(target, relative_dir, i, items)`` for every partition ``i`` on the executors
        (e.g. :func:`lakefs_gc.mark.parquet.write_parquet_part`); returns the sum of what they return."""


@runtime_checkable
class Executor(Protocol):
    """Creates datasets and joins them; ``close()`` releases what the executor owns."""

    @property
    def name(self) -> str: ...

    @property
    def default_parallelism(self) -> int: ...

    def parallelize(self, items: Iterable[T], n: int | None = None) -> Dataset[T]: ...

    def anti_join(self, left: Dataset[str], right: Dataset[str], n: int | None = None) -> Dataset[str]: ...

    def close(self) -> None: ...


# -- lite -----------------------------------------------------------------------------------------

Source = Callable[[], Iterator[T]]


def _apply(fn: Callable[[Iterator[T]], Iterable[U]], source: Source[T]) -> Iterator[U]:
    return iter(fn(source()))


def _read_spill(paths: Sequence[Path]) -> Iterator[Any]:
    for path in paths:
        with path.open("rb") as f:
            while True:
                try:
                    batch = pickle.load(f)
                except EOFError:
                    break
                yield from batch


def _distinct_of(source: Source[T]) -> Iterator[T]:
    seen: set[T] = set()
    for item in source():
        if item not in seen:
            seen.add(item)
            yield item


def _anti_of(left: Source[str], right: Source[str]) -> Iterator[str]:
    exclude = set(right())
    for item in left():
        if item not in exclude:
            yield item


class _SpillWriter:
    """Pickled batches into one file per bucket, files opened on first use."""

    def __init__(self, directory: Path, name: Callable[[int], str], buckets: int) -> None:
        self._directory = directory
        self._name = name
        self._buffers: list[list[Any]] = [[] for _ in range(buckets)]
        self._files: dict[int, IO[bytes]] = {}

    def add(self, bucket: int, item: Any) -> None:
        buf = self._buffers[bucket]
        buf.append(item)
        if len(buf) >= SPILL_BATCH:
            self._flush(bucket)

    def _flush(self, bucket: int) -> None:
        buf = self._buffers[bucket]
        if not buf:
            return
        f = self._files.get(bucket)
        if f is None:
            f = self._files[bucket] = (self._directory / self._name(bucket)).open("wb")
        pickle.dump(buf, f, protocol=pickle.HIGHEST_PROTOCOL)
        buf.clear()

    def close(self) -> None:
        try:
            for bucket in range(len(self._buffers)):
                self._flush(bucket)
        finally:
            for f in self._files.values():
                f.close()


class _LiteDataset(Dataset[T]):
    def __init__(self, executor: LiteExecutor, sources: Sequence[Source[T]], spill: Path | None = None):
        self._executor = executor
        self._sources = list(sources)
        self._spill = spill  # the directory ``persist`` wrote, removed by ``unpersist``

    @property
    def sources(self) -> list[Source[T]]:
        return self._sources

    @property
    def num_partitions(self) -> int:
        return len(self._sources)

    def flat_map_partitions(self, fn: Callable[[Iterator[T]], Iterable[U]]) -> Dataset[U]:
        return _LiteDataset(self._executor, [partial(_apply, fn, s) for s in self._sources])

    def distinct(self, n: int | None = None) -> Dataset[T]:
        buckets = self._executor.shuffle(self._sources, n or self.num_partitions, hashed=True)
        return _LiteDataset(self._executor, [partial(_distinct_of, b) for b in buckets])

    def repartition(self, n: int) -> Dataset[T]:
        return _LiteDataset(self._executor, self._executor.shuffle(self._sources, _check_n(n), hashed=False))

    def persist(self) -> Dataset[T]:
        directory = self._executor.new_dir("persist")

        def save(index: int, source: Source[T]) -> None:
            writer = _SpillWriter(directory, lambda _b: f"{index:05d}", 1)
            try:
                for item in source():
                    writer.add(0, item)
            finally:
                writer.close()

        self._executor.run_all([partial(save, i, s) for i, s in enumerate(self._sources)])
        paths = [directory / f"{i:05d}" for i in range(self.num_partitions)]
        sources = [partial(_read_spill, [p] if p.exists() else []) for p in paths]
        return _LiteDataset(self._executor, sources, spill=directory)

    def unpersist(self) -> None:
        if self._spill is not None:
            shutil.rmtree(self._spill, ignore_errors=True)
            self._spill = None

    def count(self) -> int:
        return sum(self._executor.run_all([partial(_count, s) for s in self._sources]))

    def collect(self) -> list[T]:
        parts = self._executor.run_all([partial(_listed, s) for s in self._sources])
        return list(itertools.chain.from_iterable(parts))

    def write_text_parts(self: _LiteDataset[str], target: StoreRef, relative_dir: str) -> int:
        jobs = [partial(_write_source, target, relative_dir, i, s) for i, s in enumerate(self._sources)]
        return sum(self._executor.run_all(jobs))

    def write_text_parts_digested(
        self: _LiteDataset[str], target: StoreRef, relative_dir: str
    ) -> list[WrittenPart]:
        jobs = [partial(_write_digested, target, relative_dir, i, s) for i, s in enumerate(self._sources)]
        return list(self._executor.run_all(jobs))

    def write_parts(self, target: StoreRef, relative_dir: str, writer: PartWriter[T]) -> int:
        jobs = [partial(_write_with, writer, target, relative_dir, i, s) for i, s in enumerate(self._sources)]
        return sum(self._executor.run_all(jobs))


def _count(source: Source[Any]) -> int:
    return sum(1 for _ in source())


def _listed(source: Source[T]) -> list[T]:
    return list(source())


def _write_source(target: StoreRef, relative_dir: str, index: int, source: Source[str]) -> int:
    return write_text_part(target, relative_dir, index, source())


def _write_digested(target: StoreRef, relative_dir: str, index: int, source: Source[str]) -> WrittenPart:
    return write_text_part_digested(target, relative_dir, index, source())


def _write_with(
    writer: PartWriter[T], target: StoreRef, relative_dir: str, index: int, source: Source[T]
) -> int:
    return writer(target, relative_dir, index, source())


def _indexed_writer(
    writer: PartWriter[T], target: StoreRef, relative_dir: str, index: int, items: Iterator[T]
) -> Iterator[int]:
    """A :data:`PartWriter` shaped for ``mapPartitionsWithIndex``."""
    yield writer(target, relative_dir, index, items)


class LiteExecutor:
    """In-process executor: the job's partition functions on ``workers`` threads, spilling to disk."""

    def __init__(self, *, workers: int = 2, spill_dir: Path | None = None) -> None:
        self._workers = _check_n(workers, "workers")
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="lakefs-gc-lite")
        self._root = Path(tempfile.mkdtemp(prefix="lakefs-gc-lite-", dir=spill_dir))
        self._counter = itertools.count()
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return "lite"

    @property
    def default_parallelism(self) -> int:
        return self._workers

    def __enter__(self) -> LiteExecutor:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self._root, ignore_errors=True)

    def new_dir(self, kind: str) -> Path:
        with self._lock:
            path = self._root / f"{kind}-{next(self._counter):05d}"
        path.mkdir()
        return path

    def run_all(self, jobs: Sequence[Callable[[], R]]) -> list[R]:
        """Run ``jobs`` on the pool; the first failure cancels what has not started and is raised."""
        futures: list[Future[R]] = [self._pool.submit(job) for job in jobs]
        try:
            return [f.result() for f in futures]
        finally:
            for f in futures:
                f.cancel()
            for f in futures:  # nothing keeps writing into a spill directory after we return
                with contextlib.suppress(BaseException):
                    f.exception()

    def parallelize(self, items: Iterable[T], n: int | None = None) -> Dataset[T]:
        data = list(items)
        n = _check_n(n if n is not None else self.default_parallelism)
        chunks = [data[i * len(data) // n : (i + 1) * len(data) // n] for i in range(n)]
        return _LiteDataset(self, [partial(iter, c) for c in chunks])

    def anti_join(self, left: Dataset[str], right: Dataset[str], n: int | None = None) -> Dataset[str]:
        lsrc, rsrc = self._sources(left), self._sources(right)
        n = _check_n(n if n is not None else max(len(lsrc), 1))
        lb = self.shuffle(lsrc, n, hashed=True)
        rb = self.shuffle(rsrc, n, hashed=True)
        return _LiteDataset(self, [partial(_anti_of, a, b) for a, b in zip(lb, rb, strict=True)])

    def _sources(self, ds: Dataset[T]) -> list[Source[T]]:
        if not isinstance(ds, _LiteDataset) or ds._executor is not self:
            raise BadInputError("the dataset belongs to another executor", field="dataset")
        return ds.sources

    def shuffle(self, sources: Sequence[Source[T]], n: int, *, hashed: bool) -> list[Source[T]]:
        """Route every item of ``sources`` into ``n`` buckets on disk (by hash, or round robin);
        returns one source per bucket. Runs the upstream partitions now (like a Spark stage)."""
        n = _check_n(n)
        directory = self.new_dir("shuffle")

        def route(index: int, source: Source[T]) -> None:
            writer = _SpillWriter(directory, lambda b: f"{b:05d}-{index:05d}", n)
            try:
                for position, item in enumerate(source(), start=index):
                    writer.add(hash(item) % n if hashed else position % n, item)
            finally:
                writer.close()

        self.run_all([partial(route, i, s) for i, s in enumerate(sources)])
        out: list[Source[T]] = []
        for b in range(n):
            paths = sorted(directory.glob(f"{b:05d}-*"))
            out.append(partial(_read_spill, paths))
        return out


# -- Spark ----------------------------------------------------------------------------------------


def _keyed(item: str) -> tuple[str, None]:
    return item, None


def _key(pair: tuple[str, None]) -> str:
    return pair[0]


class _SparkDataset(Dataset[T]):
    def __init__(self, executor: SparkExecutor, rdd: RDD[T]) -> None:
        self._executor = executor
        self.rdd = rdd

    @property
    def num_partitions(self) -> int:
        return self.rdd.getNumPartitions()

    def flat_map_partitions(self, fn: Callable[[Iterator[T]], Iterable[U]]) -> Dataset[U]:
        # Spark hands the function an iterator; its annotation only promises an iterable.
        spark_fn = cast("Callable[[Iterable[T]], Iterable[U]]", fn)
        return _SparkDataset(self._executor, self.rdd.mapPartitions(spark_fn))

    def distinct(self, n: int | None = None) -> Dataset[T]:
        return _SparkDataset(self._executor, self.rdd.distinct(n or self.num_partitions))

    def repartition(self, n: int) -> Dataset[T]:
        return _SparkDataset(self._executor, self.rdd.repartition(_check_n(n)))

    def persist(self) -> Dataset[T]:
        from pyspark import StorageLevel

        self.rdd.persist(StorageLevel.MEMORY_AND_DISK)
        return self

    def unpersist(self) -> None:
        self.rdd.unpersist()

    def count(self) -> int:
        return self.rdd.count()

    def collect(self) -> list[T]:
        return self.rdd.collect()

    def write_text_parts(self: _SparkDataset[str], target: StoreRef, relative_dir: str) -> int:
        fn = partial(write_text_part_indexed, target, relative_dir)
        return sum(self.rdd.mapPartitionsWithIndex(fn).collect())

    def write_text_parts_digested(
        self: _SparkDataset[str], target: StoreRef, relative_dir: str
    ) -> list[WrittenPart]:
        fn = partial(write_text_part_digested_indexed, target, relative_dir)
        return [WrittenPart(*part) for _, part in sorted(self.rdd.mapPartitionsWithIndex(fn).collect())]

    def write_parts(self, target: StoreRef, relative_dir: str, writer: PartWriter[T]) -> int:
        fn = partial(_indexed_writer, writer, target, relative_dir)
        return sum(self.rdd.mapPartitionsWithIndex(fn).collect())


class SparkExecutor:
    """RDD operations on a shared ``SparkSession`` (created with :func:`spark_session` if not given)."""

    def __init__(self, session: SparkSession | None = None, *, master: str | None = None) -> None:
        if session is None:
            from lakefs_core.compute.session import spark_session

            session = spark_session(master)
        self._session = session
        self._sc = session.sparkContext

    @property
    def session(self) -> SparkSession:
        """The session (a job that uses Spark SQL or the data sources, e.g. ``spark-copy``)."""
        return self._session

    @property
    def name(self) -> str:
        return "spark"

    @property
    def default_parallelism(self) -> int:
        return int(self._sc.defaultParallelism)

    def parallelize(self, items: Iterable[T], n: int | None = None) -> Dataset[T]:
        n = _check_n(n if n is not None else self.default_parallelism)
        return _SparkDataset(self, self._sc.parallelize(list(items), n))

    def anti_join(self, left: Dataset[str], right: Dataset[str], n: int | None = None) -> Dataset[str]:
        lrdd, rrdd = self._rdd(left), self._rdd(right)
        n = _check_n(n if n is not None else lrdd.getNumPartitions())
        return _SparkDataset(self, lrdd.map(_keyed).subtractByKey(rrdd.map(_keyed), n).map(_key))

    def _rdd(self, ds: Dataset[T]) -> RDD[T]:
        if not isinstance(ds, _SparkDataset) or ds._executor is not self:
            raise BadInputError("the dataset belongs to another executor", field="dataset")
        return ds.rdd

    def close(self) -> None:
        """Nothing to release: the session is shared by the process (see ``stop_spark_session``)."""
