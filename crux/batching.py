"""The point stream: which collocation points each update sees.

At update ``t`` a constraint ``c`` with more points than the update's ``M = A*B`` slots
takes the first ``M`` values of a keyed pseudo-random permutation of ``[0, N_c)``: the
images of ``0, 1, ..., M-1``, split into ``A`` micro-batches of ``B``. So an update
draws ``M`` distinct points, uniformly, at ``O(M)`` cost in time and memory whatever
``N_c`` is: no array of ``N_c`` elements is ever built, which is what lets
``offload_data`` draw from a point set larger than the device's memory.

The permutation is a Feistel network on ``Z_a x Z_b`` (``a = ceil(sqrt(N_c))``,
``b = ceil(N_c / a)``, so ``N_c <= a*b < N_c + a``): a value ``x`` is split into
``(x // b, x % b)``, and each of :data:`ROUNDS` rounds maps ``(L, R)`` to
``(R, (L + F(R, k)) mod |L's range|)``, a bijection for any round function ``F``; here
``F`` is a 32-bit integer mixer of ``R`` xor the round key ``k``. An even number of
rounds ends on ``Z_a x Z_b`` again. Values that land in ``[N_c, a*b)`` are walked
through the network again until they fall in ``[0, N_c)`` (cycle walking), which
keeps the map a permutation of ``[0, N_c)``; as fewer than ``a`` of the ``a*b``
values lie outside, few elements walk, and the vectorised walk (a ``while_loop``
until every element is in range) stops after a step or two. (A domain of a power of
two would leave up to three quarters of it outside, and the walk would run as long as
its unluckiest element: some 60 steps over ``M = 2^24``.)

The round keys come from Threefry in counter mode, keyed by the stream's key: words
``ROUNDS * r ... ROUNDS * r + ROUNDS - 1`` of the outputs for the counters
``(t, 0), (t, 1), ...`` (two words each) are the keys of the ``r``-th constraint that
draws, so one Threefry call draws every constraint's keys for an update. A
constraint with ``N_c <= B`` uses all its points in every micro-batch. One with
``B < N_c <= A*B`` has all its points in the update's effective batch: its ``A*B``
slots hold them in order, once, and then repeat the first ones, which
:meth:`PointStream.slot_weights` weighs 0 (the rest ``A / N_c``), so that the mean
over the micro-batches is the mean over its ``N_c`` points; it draws nothing, so the
other constraints draw the keys they draw in one batch of ``A*B``, where it is not
sampled either. The first ``M`` values of a permutation do not depend on ``M``, so
accumulation ``A x B`` sees exactly the points of one batch of ``A*B``, each once,
for every constraint size. On ``D`` devices the update's micro-batches are ``A*D``
(``A`` on each device), drawn as one device draws ``A*D`` of them.

The same indices are drawn on the device (inside the compiled update) and on the
host (for ``offload_data``), so both give the same numbers: Threefry and the network
are integer arithmetic, bit-identical on every backend.
"""
from __future__ import annotations

import functools
import math
import queue
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry_2x32

PRODUCER_THREAD = "crux-host-batches"  # the name of the thread that gathers offloaded batches
DRAW_WORDS = 2 ** 25  # the most indices the host draws at once (128 MiB of int32, a few times that in the draw's
# temporaries; a block of 256 updates of large batches would hold gigabytes of host memory)
ROUNDS = 6  # Feistel rounds of the permutation (even: the network ends on the domain it starts on)
MAX_POINTS = 2 ** 31 - 1  # the most points of one constraint: indices are int32


def _mix(x: jax.Array) -> jax.Array:
    """MurmurHash3's 32-bit finaliser: every input bit flips each output bit with probability close to 1/2."""
    x = x ^ (x >> 16)
    x = x * np.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * np.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def _feistel(x: jax.Array, keys: jax.Array, a: int, b: int) -> jax.Array:
    """One pass of the Feistel network over ``[0, a*b)``: ``x`` (uint32) as ``(x // b, x % b)`` in ``Z_a x Z_b``,
    :data:`ROUNDS` rounds ``(L, R) -> (R, (L + F(R)) mod |L's range|)`` with ``F(R) = _mix(R ^ key)``."""
    unsigned = np.uint32
    left, right, p, q = jax.lax.div(x, unsigned(b)), jax.lax.rem(x, unsigned(b)), a, b
    for r in range(ROUNDS):
        total = left + jax.lax.rem(_mix(right ^ keys[r]), unsigned(p))  # both terms below p < 2^16: no overflow
        left, right = right, jnp.where(total >= p, total - p, total)
        p, q = q, p
    return left * unsigned(b) + right


def _permuted(count: int, n: int, keys: jax.Array) -> jax.Array:
    """The first ``count`` values (int32) of the permutation of ``[0, n)`` that ``keys`` (:data:`ROUNDS` uint32 words)
    select: the Feistel network on ``Z_a x Z_b`` (``a = ceil(sqrt(n))``, ``b = ceil(n / a)``), with values in
    ``[n, a*b)`` walked through it again until they fall below ``n``. ``O(count)``, whatever ``n``."""
    a = math.isqrt(n - 1) + 1
    b = -(-n // a)
    values = _feistel(jnp.arange(count, dtype=jnp.uint32), keys, a, b)
    if a * b > n:  # some values can land past n: walk them
        values = jax.lax.while_loop(lambda x: jnp.any(x >= n),
                                    lambda x: jnp.where(x >= n, _feistel(x, keys, a, b), x), values)
    return values.astype(jnp.int32)


@dataclass(frozen=True)
class PointStream:
    """Static description of the stream: constraint sizes, batch size, micro-batches per update and device.

    An update has ``G = accumulation_steps * devices`` micro-batches; with several devices each takes
    ``accumulation_steps`` consecutive ones, so an update on ``D`` devices draws what one device draws with
    ``D * accumulation_steps`` micro-batches. With ``batchsize=None`` and several devices, each constraint's
    points are split over the devices (``ceil(N_c / D)`` slots each, the slots past ``N_c`` weighted 0).
    """

    sizes: tuple[int, ...]
    batchsize: int | None
    accumulation_steps: int = 1
    devices: int = 1

    def __post_init__(self):
        for c, n in enumerate(self.sizes):
            if not 1 <= n <= MAX_POINTS:
                raise ValueError(f"constraint {c} has {n:,} points: the point stream indexes them with int32, from 1 "
                                 f"to {MAX_POINTS:,} points per constraint; split the points over several constraints")

    @property
    def micro_batches(self) -> int:
        """``G``: the micro-batches of one update, over all devices."""
        return self.accumulation_steps * self.devices

    def points_per_batch(self, c: int) -> int:
        """``B_c``: the slots constraint ``c`` has in each micro-batch.

        Args:
            c: the constraint's index.

        Returns:
            ``B`` where the constraint has more points, else all its points ``N_c``; with ``batchsize=None``,
            ``ceil(N_c / devices)``.
        """
        n = self.sizes[c]
        if self.batchsize is None:
            return -(-n // self.devices)
        return n if n <= self.batchsize else self.batchsize

    def samples(self, c: int) -> bool:
        """Whether constraint ``c``'s micro-batches hold parts of its points (else each holds all of them).

        Args:
            c: the constraint's index.
        """
        return self.points_per_batch(c) < self.sizes[c]

    def draws(self, c: int) -> bool:
        """Whether constraint ``c`` draws a random subset: more points than the update's ``G*B`` slots. A
        constraint with ``B < N_c <= G*B`` is sampled by each micro-batch but not by the update, whose
        effective batch is all its points: it takes them in their order, and draws no round keys, so that
        the other constraints' keys are those of one batch of ``G*B`` (where it is not sampled either).

        Args:
            c: the constraint's index.
        """
        return (self.batchsize is not None and self.samples(c)
                and self.sizes[c] > self.micro_batches * self.points_per_batch(c))

    def slot_weights(self, c: int) -> np.ndarray | None:
        """Per slot of constraint ``c``'s micro-batches, ``(G, B_c)`` float32, what its squared residual counts in
        the micro-batch's loss, where the slots do not hold distinct points (``B_c < N_c < G*B_c``): ``G / N_c``
        for the first ``N_c`` slots, which hold every point once, 0 for the repeats after them, so that the
        mean of the ``G`` micro-batch losses is the mean over the ``N_c`` points. ``None`` where each
        micro-batch's loss is its plain mean (every slot a distinct point of the effective batch, or every
        micro-batch all the points).

        Args:
            c: the constraint's index.
        """
        g, b, n = self.micro_batches, self.points_per_batch(c), self.sizes[c]
        if not self.samples(c) or g * b <= n:
            return None
        return np.where(np.arange(g * b) < n, np.float32(g / n), np.float32(0)).astype(np.float32).reshape(g, b)

    def indices(self, key: jax.Array, step: jax.Array) -> tuple[jax.Array, ...]:
        """Which points each micro-batch of update ``step`` takes.

        Args:
            key: the stream's Threefry key.
            step: the update's index (a traced integer in a compiled call).

        Returns:
            Per constraint, int32 indices into its points, shape ``(G, B_c)``.
        """
        drawn = [c for c in range(len(self.sizes)) if self.draws(c)]
        if drawn:
            pairs = ROUNDS // 2 * len(drawn)  # each counter (t, j) gives two words
            counter = jnp.concatenate([jnp.broadcast_to(jnp.asarray(step).astype(jnp.uint32), (pairs,)),
                                       jnp.arange(pairs, dtype=jnp.uint32)])
            keys = threefry_2x32(jax.random.key_data(key), counter).reshape(len(drawn), ROUNDS)
        out = []
        for c, n in enumerate(self.sizes):
            g, b = self.micro_batches, self.points_per_batch(c)
            if not self.samples(c):
                out.append(jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (g, n)))
            elif c not in drawn:  # every point once, then the first again in slots that slot_weights zeroes
                out.append(jnp.asarray(np.arange(g * b, dtype=np.int32).reshape(g, b) % n))
            else:
                out.append(_permuted(g * b, n, keys[drawn.index(c)]).reshape(g, b))
        return tuple(out)

    def gather(self, points: tuple[jax.Array | None, ...], key: jax.Array, step: jax.Array
               ) -> tuple[jax.Array | None, ...]:
        """On the device: the micro-batches of update ``step``.

        Args:
            points: per constraint, its points ``(N_c, d)``, or None for one whose batches come otherwise.
            key: the stream's Threefry key.
            step: the update's index.

        Returns:
            Per constraint, the points ``(G, B_c, d)`` (None where ``points`` holds None).
        """
        indices = self.indices(key, step)
        return tuple(None if p is None else p[i] if self.samples(c) else
                     jnp.broadcast_to(p, (self.micro_batches, *p.shape))
                     for c, (p, i) in enumerate(zip(points, indices)))

    def streams(self, c: int, updates: int) -> bool:
        """Whether ``offload_data`` streams constraint ``c``'s batches to a call of ``updates`` updates: only where
        they hold fewer points than the constraint has; else its points travel whole, once, and the call draws
        from them as on-device batching does (the same indices, so the same numbers), so that offloading never
        puts more on the device than keeping the points there.

        Args:
            c: the constraint's index.
            updates: the updates of one call.
        """
        return updates * self.micro_batches * self.points_per_batch(c) < self.sizes[c]


class DevicePoints(NamedTuple):
    """What a compiled call draws its batches from when the points stay on the device."""

    key: jax.Array  # the stream's Threefry key
    points: tuple[jax.Array, ...]  # per constraint, (N_c, d)


class StreamedBatches(NamedTuple):
    """What a compiled call gets with ``offload_data``: its updates' batches, gathered on the host, of the
    constraints whose batches hold fewer points than they have (:meth:`PointStream.streams`); the others' points
    whole, and the stream's key to draw from them as on-device batching does.

    Each micro-batch travels as rows, one per coordinate (``(d, B_c)``, the points along the last axis): a device
    that pads an array's last axis to its tile (a TPU's 128 lanes) would pad points ``(B_c, d)`` of one or two
    coordinates 64- to 128-fold, more memory than the same points kept on the device.
    """

    batches: tuple[jax.Array | None, ...]  # per constraint streamed, (updates of the call, G, d, B_c); else None
    whole: tuple[jax.Array | None, ...]  # per constraint not streamed, its points (N_c, d); else None
    key: jax.Array  # the stream's Threefry key

    def points(self) -> tuple[jax.Array | None, ...]:
        """Per constraint streamed, the batches as points ``(updates of the call, G, B_c, d)`` (inside the compiled
        call); None for the others."""
        return tuple(None if rows is None else jnp.swapaxes(rows, -1, -2) for rows in self.batches)


@functools.lru_cache(maxsize=64)
def _host_draw(stream: PointStream) -> Callable[[jax.Array, jax.Array], tuple[jax.Array, ...]]:
    """``stream.indices`` for a block of updates, compiled for the host's CPU, one jit per stream: every offloaded
    solve() makes its own HostBatches, and a jit of its own would trace, lower and compile the draw again each
    time. The CPU is named, not left to the arguments: on a TPU v5e the draw of two updates from 16,777,216 points
    otherwise ran on the chip and asked it for 16.06 GiB, the very memory offloading is there to spare."""
    on_host = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])
    return jax.jit(jax.vmap(stream.indices, in_axes=(None, 0)), in_shardings=on_host, out_shardings=on_host)


class HostBatches:
    """Batches gathered on the host and sent to the device one call at a time, for ``offload_data``.

    Each item holds the batches of ``steps_per_call`` updates of the constraints it streams
    (:meth:`PointStream.streams`). A thread gathers the next items on the host; an item goes to the device only
    when the loop asks for it, so the device holds the batches of the call that runs and of the one dispatched
    after it, never a streamed constraint's point set or a queue of batches. The constraints not streamed, whose
    points are fewer than a call's batches would be, go to ``whole`` (a device or a sharding) once, with the
    stream's key.
    Indices are drawn with the same function as on the device (threefry is
    bit-identical across backends), jitted on the CPU in blocks of updates.
    """

    def __init__(self, stream: PointStream, points: tuple[np.ndarray, ...], key: jax.Array, first_step: int,
                 steps_per_call: int, calls: int, device: jax.Device | jax.sharding.Sharding,
                 whole: jax.Device | jax.sharding.Sharding | None = None, block: int = 256):
        # device: where the batches go; a sharding that splits their micro-batch axis over several devices
        # sends each device its own micro-batches; whole: where the points not streamed go (by default device)
        self.stream, self.points, self.device = stream, points, device
        self.first_step, self.steps_per_call, self.calls = first_step, steps_per_call, calls
        self.streamed = tuple(stream.streams(c, steps_per_call) for c in range(len(points)))
        self._whole = jax.device_put((tuple(None if s else p for s, p in zip(self.streamed, points)), key),
                                     device if whole is None else whole)
        cpu = jax.devices("cpu")[0]
        self._key = jax.device_put(key, cpu)
        self._cpu = cpu
        self._draw = _host_draw(stream)
        # updates drawn at once: ``block``, or fewer where their indices would pass DRAW_WORDS
        words = stream.micro_batches * sum(stream.points_per_batch(c) for c in range(len(stream.sizes)))
        block = min(block, max(DRAW_WORDS // words, 1))
        self._block = max(block // steps_per_call, 1) * steps_per_call

    def _indices(self, start: int, count: int) -> tuple[np.ndarray, ...]:
        steps = jax.device_put(np.arange(start, start + count, dtype=np.int32), self._cpu)
        return tuple(np.asarray(i) for i in self._draw(self._key, steps))

    def _produce(self, out: "queue.Queue", stop: threading.Event) -> None:
        total, k = self.steps_per_call * self.calls, self.steps_per_call
        try:
            for start in range(0, total, self._block):
                count = min(self._block, total - start)
                block = self._indices(self.first_step + start, self._block)  # one shape: compiled once
                for offset in range(0, count, k):
                    batch = tuple(np.ascontiguousarray(np.swapaxes(p[i[offset:offset + k]], -1, -2)) if s else None
                                  for s, p, i in zip(self.streamed, self.points, block))
                    if not self._put(out, batch, stop):
                        return
        except BaseException as error:  # surfaced in the consumer
            self._put(out, error, stop)

    @staticmethod
    def _put(out: "queue.Queue", item, stop: threading.Event) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def shapes(self) -> StreamedBatches:
        """The shape of every item (the points sent whole as they are), to compile the call before the first batch
        is drawn."""
        sharding = self.device if isinstance(self.device, jax.sharding.Sharding) else None
        return StreamedBatches(tuple(
            jax.ShapeDtypeStruct((self.steps_per_call, self.stream.micro_batches,
                                  p.shape[1], self.stream.points_per_batch(c)), p.dtype, sharding=sharding)
            if streamed else None for c, (streamed, p) in enumerate(zip(self.streamed, self.points))), *self._whole)

    def __iter__(self) -> Iterator[StreamedBatches]:
        out: queue.Queue = queue.Queue(maxsize=2)
        stop = threading.Event()
        threading.Thread(target=self._produce, args=(out, stop), name=PRODUCER_THREAD, daemon=True).start()
        try:
            for _ in range(self.calls):
                item = out.get()
                if isinstance(item, BaseException):
                    raise item
                yield StreamedBatches(jax.device_put(item, self.device), *self._whole)
        finally:  # the solver finished, stopped early (non-finite loss) or was interrupted: let the producer go
            stop.set()
