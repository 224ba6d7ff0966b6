"""The point stream: which collocation points each update sees.

At update ``t`` constraint ``c`` draws, from ``fold_in(fold_in(key, t), c)``, the
first ``M = A*B`` indices of a random permutation of its ``N_c`` points (as the
``M`` largest of ``N_c`` uniform keys, which costs far less than sorting them all;
when ``M > N_c`` a full permutation, wrapped around), split into ``A`` micro-batches of ``B``.
A constraint with ``N_c <= B`` uses all its points in every micro-batch.
So accumulation ``A x B`` sees exactly the points of one batch of ``A*B``
whenever every constraint has ``N_c >= A*B`` or ``N_c <= B``; in between, the
wrapped draw repeats points and is a different estimator.

The same indices are drawn on the device (inside the compiled update) and on the
host (for ``offload_data``), so both give the same numbers.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Iterator

import jax
import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class PointStream:
    """Static description of the stream: constraint sizes, batch size, micro-batches per update."""

    sizes: tuple[int, ...]
    batchsize: int | None
    micro_batches: int = 1

    def batch_size(self, c: int) -> int:
        n = self.sizes[c]
        return n if self.batchsize is None or n <= self.batchsize else self.batchsize

    def samples(self, c: int) -> bool:
        return self.batch_size(c) < self.sizes[c]

    def indices(self, key: jax.Array, step: jax.Array) -> tuple[jax.Array, ...]:
        """Per constraint, int32 indices of shape ``(A, B_c)`` for update ``step``."""
        out = []
        for c, n in enumerate(self.sizes):
            a, b = self.micro_batches, self.batch_size(c)
            if not self.samples(c):
                out.append(jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (a, n)))
                continue
            draw = jax.random.fold_in(jax.random.fold_in(key, step), c)
            if a * b <= n:  # the first M of a random permutation, without sorting all N (top_k of uniform keys)
                take = jax.lax.top_k(jax.random.uniform(draw, (n,)), a * b)[1]
            else:
                take = jax.random.permutation(draw, n)[jnp.arange(a * b) % n]
            out.append(take.astype(jnp.int32).reshape(a, b))
        return tuple(out)

    def gather(self, points: tuple[jax.Array, ...], key: jax.Array, step: jax.Array) -> tuple[jax.Array, ...]:
        """On the device: per constraint, the points ``(A, B_c, d)`` of update ``step``."""
        indices = self.indices(key, step)
        return tuple(p[i] if self.samples(c) else jnp.broadcast_to(p, (self.micro_batches, *p.shape))
                     for c, (p, i) in enumerate(zip(points, indices)))


class HostBatches:
    """Batches gathered on the host and sent to the device, one dispatch ahead, for ``offload_data``.

    Each item holds ``steps_per_call`` updates: per constraint ``(K, A, B_c, d)``.
    Indices are drawn with the same function as on the device (threefry is
    bit-identical across backends), jitted on the CPU in blocks of updates.
    """

    def __init__(self, stream: PointStream, points: tuple[np.ndarray, ...], key: jax.Array, first_step: int,
                 steps_per_call: int, calls: int, device: jax.Device, block: int = 256):
        self.stream, self.points, self.device = stream, points, device
        self.first_step, self.steps_per_call, self.calls = first_step, steps_per_call, calls
        cpu = jax.devices("cpu")[0]
        self._key = jax.device_put(key, cpu)
        self._cpu = cpu
        self._draw = jax.jit(jax.vmap(stream.indices, in_axes=(None, 0)))
        self._block = max(block // steps_per_call, 1) * steps_per_call

    def _indices(self, start: int, count: int) -> tuple[np.ndarray, ...]:
        steps = jax.device_put(np.arange(start, start + count, dtype=np.int32), self._cpu)
        return tuple(np.asarray(i) for i in self._draw(self._key, steps))

    def _produce(self, out: "queue.Queue", stop: threading.Event) -> None:
        total, k = self.steps_per_call * self.calls, self.steps_per_call
        try:
            for start in range(0, total, self._block):
                count = min(self._block, total - start)
                block = self._indices(self.first_step + start, count)
                for offset in range(0, count, k):
                    batch = tuple(p[i[offset:offset + k]] for p, i in zip(self.points, block))
                    if not self._put(out, jax.device_put(batch, self.device), stop):
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

    def __iter__(self) -> Iterator[tuple[jax.Array, ...]]:
        out: queue.Queue = queue.Queue(maxsize=2)
        stop = threading.Event()
        threading.Thread(target=self._produce, args=(out, stop), daemon=True).start()
        try:
            for _ in range(self.calls):
                item = out.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:  # the solver stopped early (non-finite loss) or finished: let the producer go
            stop.set()
