"""One file fetched as parts over several connections at once, handed on in the file's order: the in-order
reassembly behind parallel ranged GETs (jobs.staging.fetch over HTTP, s3_reads over S3).

Each connection takes the next part no one has taken, at most `window` parts past the one being handed on,
and reads it into buffers of `chunk` bytes. A filled buffer of the part being handed on goes on at once; those
of later parts wait for it. What waits is bounded by the window, whatever the file's size. The buffers are
page-aligned, so that a large staged copy can be written from them past the page cache, and lent: the reader
they are handed to calls `done` once it no longer reads one, and it is filled again.
"""

import collections
import mmap
import threading
from collections.abc import Callable, Iterator, Sequence

Done = Callable[[], None]
HandOn = Callable[[memoryview, Done], None]


class Buffers:
    """Page-aligned buffers of one size, filled again once their reader lets go of them."""

    KEPT = 64  # free buffers kept for reuse; one let go of past these goes back to the system

    def __init__(self, size: int):
        self.size = size
        self.free: list[mmap.mmap] = []  # append and pop are atomic: no lock

    def take(self) -> mmap.mmap:
        try:
            return self.free.pop()
        except IndexError:
            return mmap.mmap(-1, self.size)

    def give(self, buffer: mmap.mmap) -> None:
        if len(self.free) < self.KEPT:
            self.free.append(buffer)


class Stopped(Exception):
    """The fetch stopped (another part failed, or the reader stopped reading): a connection ends quietly."""


class Filling:
    """A buffer handed on in pieces as it fills (a whole one, where the bytes come faster than they are
    read): given back once it is full and each piece is let go of."""

    def __init__(self, buffers: Buffers):
        self.buffers, self.buffer = buffers, buffers.take()
        self.view = memoryview(self.buffer)
        self.filled = self.handed = 0
        self.out = 1  # its filling holds it too, until it is full
        self.lock = threading.Lock()

    def space(self, most: int) -> memoryview:
        return self.view[self.filled : self.filled + min(len(self.view) - self.filled, most)]

    @property
    def full(self) -> bool:
        return self.filled == len(self.view)

    def piece(self) -> tuple[memoryview, Done]:
        """What was filled since the last piece, and what its reader calls once done with it."""
        view, self.handed = self.view[self.handed : self.filled], self.filled
        with self.lock:
            self.out += 1
        return view, self.let_go

    def let_go(self) -> None:
        with self.lock:
            self.out -= 1
            last = not self.out
        if last:
            self.buffers.give(self.buffer)


class Part:
    """Bytes [start, stop) of the file, read by one connection: `space()` is where its next bytes go,
    `filled(n, more)` says n bytes went there; they are handed on once the buffer is full or, where no
    `more` have come already, at once, so that a slow source's bytes go on as they arrive."""

    def __init__(self, start: int, stop: int, assembly: "Assembly"):
        self.start = self.position = start
        self.stop = stop
        self.assembly = assembly
        self.chunks: collections.deque[tuple[memoryview, Done]] = collections.deque()
        self.ended = False
        self.filling: Filling | None = None

    @property
    def left(self) -> int:
        return self.stop - self.position

    @property
    def stopped(self) -> bool:
        """Whether the fetch has stopped: the connection asks for no more."""
        return self.assembly.error is not None

    def space(self) -> memoryview:
        """The free rest of the buffer under way (a new one when none), no further than the part's end."""
        if self.stopped:
            raise Stopped
        if self.filling is None:
            self.filling = Filling(self.assembly.buffers)
        return self.filling.space(self.left)

    def filled(self, count: int, more: bool = False) -> None:
        self.position += count
        self.filling.filled += count
        ended = self.filling.full or not self.left
        if count and (ended or not more):
            self.assembly.add(self, *self.filling.piece())
        if ended:
            self.filling.let_go()
            self.filling = None


class Assembly:
    """The parts of one file, taken by connections in order and handed on in order."""

    def __init__(self, bounds: Sequence[tuple[int, int]], window: int, chunk: int):
        self.parts = [Part(start, stop, self) for start, stop in bounds]
        self.window = window
        self.buffers = Buffers(chunk)
        self.changed = threading.Condition()
        self.taken = 0  # parts taken by a connection
        self.head = 0  # the part being handed on
        self.error: BaseException | None = None

    def take(self) -> Iterator[Part]:
        """A connection's parts: the next one not taken, once it is within the window."""
        while True:
            with self.changed:
                while self.error is None and self.taken < len(self.parts) and self.taken >= self.head + self.window:
                    self.changed.wait()
                if self.error is not None or self.taken == len(self.parts):
                    return
                part = self.parts[self.taken]
                self.taken += 1
            yield part
            with self.changed:
                part.ended = True
                self.changed.notify_all()

    def add(self, part: Part, view: memoryview, done: Done) -> None:
        with self.changed:
            part.chunks.append((view, done))
            self.changed.notify_all()

    def fail(self, error: BaseException) -> None:
        with self.changed:
            if self.error is None:
                self.error = error
            self.changed.notify_all()

    def in_order(self) -> Iterator[tuple[memoryview, Done]]:
        """Every chunk in the file's order, as soon as it and all before it are in; the first error of a
        connection is raised here."""
        while True:
            with self.changed:
                while self.error is None and self.head < len(self.parts) and not self._next_known():
                    self.changed.wait()
                if self.error is not None:
                    raise self.error
                if self.head == len(self.parts):
                    return
                part = self.parts[self.head]
                if not part.chunks:
                    self.head += 1  # ended, and all of it handed on
                    self.changed.notify_all()
                    continue
                chunk = part.chunks.popleft()
            yield chunk

    def _next_known(self) -> bool:
        part = self.parts[self.head]
        return bool(part.chunks) or part.ended


def fetch_in_parts(
    bounds: Sequence[tuple[int, int]],
    connection: Callable[[Iterator[Part]], None],
    hand_on: HandOn,
    *,
    connections: int,
    chunk: int,
    stop: Callable[[], None] = lambda: None,
    name: str = "e31-part",
) -> None:
    """Fetch the parts `bounds` (start, stop) of a file over `connections` threads, each running
    `connection(parts)` over the parts it takes (filling each, or raising), and hand every chunk on in
    order with `hand_on(view, done)`. The connections after the first start once its first chunk is
    handed on: a reader that wants only the head of the file (a part's format and header) stops before
    any other part is asked for. The first error, of a connection or of `hand_on`, stops the rest (`stop`
    wakes connections blocked on a socket) and is raised."""
    assembly = Assembly(bounds, window=connections + 2, chunk=chunk)
    threads = [
        threading.Thread(target=_serve, args=(assembly, connection), name=f"{name}-{number}", daemon=True)
        for number in range(min(connections, len(bounds)))
    ]
    threads[0].start()
    try:
        for view, done in assembly.in_order():
            hand_on(view, done)
            for thread in threads:
                if not thread.ident:
                    thread.start()
    except BaseException as error:
        assembly.fail(error)
        stop()
        raise
    finally:
        for thread in threads:
            if thread.ident:
                thread.join()
        # Parts and their assembly refer to each other: let go of them, and of the free buffers, now
        # rather than at the next garbage collection.
        assembly.parts.clear()
        assembly.buffers.free.clear()


def _serve(assembly: Assembly, connection: Callable[[Iterator[Part]], None]) -> None:
    try:
        connection(assembly.take())
    except Stopped:
        pass
    except BaseException as error:  # the fetch's thread raises it
        assembly.fail(error)
