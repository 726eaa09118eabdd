"""One simulated vLLM replica: continuous batching, chunked prefill, KV blocks with a prefix
cache, preemption with recompute, ``max_loras``. Simulated time, driven by ``Loop``.

A step schedules, within ``max_num_batched_tokens``: one token for every decoding sequence, then
prefill chunks (prefills under way first, then waiting requests in arrival order while
``max_num_seqs``, the KV blocks and ``max_loras`` allow). It lasts ``GpuModel.step_time``.
A stretch of steps with nothing to prefill and nothing admissible runs as one *decode run* of
m steps (m up to the next answer's end or the KV blocks' end; closed-form duration, since the
context read grows by one token per sequence per step); an arrival or a pause cuts it at the
step under way. So events cost O(arrivals + answers), not O(steps x sequences).

KV, in blocks of ``block_size`` tokens: a request's whole-block prompt prefix is shared and
hashed as in vLLM (chained hashes, rooted in the adapter: a new policy version starts a new
cache namespace); blocks nobody runs on stay cached in an LRU (a request's tail first to go)
until a new allocation needs them. A request's other blocks (partial tail, what it generates)
are its own. Admission takes the leading cached blocks as hits (at most (len - 1) // block
blocks: the last token is always recomputed). When decoding needs a block and none is free or
cached, the most recently admitted request is preempted: its blocks are freed, it goes back to
the head of the queue and recomputes its prompt and what it had generated (cached prompt blocks
still hit). A finished turn of a conversation that goes on leaves its answer's blocks cached
for the next turn. Decoding requests' own blocks are counted as if each were half full at the
tail (exact for the shared ones): the KV figures are sums of ceilings, approximated.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.fleet.model import GpuModel
from replica_entry.sim.prefix_cache import chain_hashes, root_hash


class Loop:
    """A discrete-event loop in simulated seconds."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0

    def at(self, when: float, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, fn, args))

    def run(self, stop: Callable[[], bool]) -> None:
        while self._heap and not stop():
            when, _, fn, args = heapq.heappop(self._heap)
            self.now = when
            fn(*args)


@dataclass(eq=False, slots=True)
class Request:
    uid: int
    prompt: list[int]
    answer: int  # tokens it will generate: known to the simulation, never to the proxy
    lora: str
    done: Callable[[Request], None]
    answer_ids: list[int] | None = None  # its answer's tokens if the conversation goes on
    hashes: list[int] = field(default_factory=list)
    generated: int = 0
    prefill_left: int = 0
    private: int = 0  # blocks of its own while prefilling
    enter: int = 0  # decode counter when it began decoding
    at_enter: int = 0  # its context (tokens) then
    preemptions: int = 0  # times preempted (only a preemption admits a request again)
    finish_at: int = -1  # decode step of its last token while decoding, else -1


class Replica:
    def __init__(self, rid: str, gpu: GpuModel, loop: Loop) -> None:
        self.id = rid
        self.gpu = gpu
        self.loop = loop
        self.waiting: deque[Request] = deque()
        self.running: dict[int, Request] = {}  # in admission order
        self.prefilling: list[Request] = []
        self.loras: Counter[str] = Counter()
        self.decoding = 0
        self.base = 0  # context of the decoding requests = base + decoding x D
        self.held = 0  # whole prompt blocks the decoding requests hold
        self.prefill_private = 0
        self.D = 0  # decode steps so far
        self.finishes: list[tuple[int, int]] = []  # (decode step of the last token, uid)
        self.used: dict[int, int] = {}  # shared block hash -> requests holding it
        self.free: OrderedDict[int, None] = OrderedDict()  # cached, held by nobody; LRU first
        self.paused = False
        self.busy = False
        self._token = 0
        self._run: tuple[float, int, float, float] | None = None  # start, steps, per-step, growth
        # Figures for the report.
        self.busy_s = 0.0
        self.prompt_tokens = 0
        self.hit_tokens = 0
        self.preemptions = 0
        self.recomputed = 0  # tokens prefilled again after a preemption
        self.unscheduled = 0  # waiting after the last step was composed

    # -- what the outside sees -------------------------------------------------------------

    def submit(self, request: Request) -> None:
        B = self.gpu.block_size
        request.hashes = chain_hashes(root_hash(request.lora), request.prompt, B)
        self.waiting.append(request)
        if not self.busy:
            self._plan()
        else:
            self._cut()

    def pause(self) -> None:
        self.paused = True
        self._cut()

    def resume(self) -> None:
        self.paused = False
        if not self.busy:
            self._plan()

    def queued(self) -> int:
        """``num_requests_waiting`` as vLLM reports it: what its last step could not schedule
        (arrivals since then are not counted), everything while paused."""
        return len(self.waiting) if self.paused else self.unscheduled

    def kv_usage(self) -> float:
        return min(self._in_use() / self.gpu.kv_blocks, 1.0)

    # -- KV blocks ----------------------------------------------------------------------------

    def _in_use(self) -> float:
        n = self.decoding
        context = self.base + n * self.D
        own = (context + n * self.gpu.block_size / 2) / self.gpu.block_size - self.held
        return len(self.used) + self.prefill_private + own

    def _evict(self) -> None:
        spare = self.gpu.kv_blocks - self._in_use() - len(self.free)
        while spare < 0 and self.free:
            self.free.popitem(last=False)
            spare += 1

    def _fit(self) -> None:
        """Back within the KV capacity: evict cached blocks, then preempt the newest."""
        self._evict()
        while self._in_use() > self.gpu.kv_blocks and len(self.running) > 1:
            self._preempt(next(reversed(self.running.values())))
            self._evict()

    def _take(self, request: Request) -> bool:
        """Admit ``request`` if its blocks fit: hits first, the rest allocated."""
        B = self.gpu.block_size
        hashes = request.hashes
        hittable = (len(request.prompt) - 1) // B
        hit = 0
        for h in hashes[:hittable]:
            if h not in self.used and h not in self.free:
                break
            hit += 1
        total = -(-(len(request.prompt) + request.generated) // B)
        if self.running and self._in_use() + total - hit > self.gpu.kv_blocks:
            return False
        for h in hashes:
            if h in self.free:
                del self.free[h]
            self.used[h] = self.used.get(h, 0) + 1
        request.private = total - len(hashes)
        self.prefill_private += request.private
        if not request.preemptions:  # its first admission
            self.prompt_tokens += len(request.prompt)
            self.hit_tokens += hit * B
        else:
            self.recomputed += len(request.prompt) + request.generated - hit * B
        request.prefill_left = len(request.prompt) + request.generated - hit * B
        self.running[request.uid] = request
        self.prefilling.append(request)
        self.loras[request.lora] += 1
        self._evict()
        return True

    def _release(self, request: Request) -> None:
        for h in reversed(request.hashes):  # the tail is evicted first
            refs = self.used[h] - 1
            if refs:
                self.used[h] = refs
            else:
                del self.used[h]
                self.free[h] = None
        self.loras[request.lora] -= 1
        if not self.loras[request.lora]:
            del self.loras[request.lora]

    def _stop_decoding(self, request: Request) -> None:
        request.finish_at = -1
        self.decoding -= 1
        self.base -= request.at_enter - request.enter
        self.held -= len(request.hashes)

    def _preempt(self, request: Request) -> None:
        del self.running[request.uid]
        if request.finish_at < 0:  # still prefilling
            self.prefilling.remove(request)
            self.prefill_private -= request.private
        else:
            request.generated = request.at_enter - len(request.prompt) + (self.D - request.enter)
            self._stop_decoding(request)
        self._release(request)
        request.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(request)

    # -- steps --------------------------------------------------------------------------------

    def _compose(self) -> tuple[list[tuple[Request, int]], int, int]:
        """This step's prefill chunks, their tokens and the context they read: waiting requests
        are admitted while the prefills under way leave tokens over (``_take`` appends them to
        ``prefilling``), then ``prefilling`` is cut into chunks in order."""
        gpu = self.gpu
        budget = gpu.max_num_batched_tokens - self.decoding
        left = budget - sum(request.prefill_left for request in self.prefilling)
        skipped = 0
        while left > 0 and len(self.waiting) > skipped and len(self.running) < gpu.max_num_seqs:
            request = self.waiting[skipped]
            if request.lora not in self.loras and len(self.loras) >= gpu.max_loras:
                skipped += 1  # vLLM skips it and looks at the next one
                continue
            if not self._take(request):
                break
            del self.waiting[skipped]
            left -= request.prefill_left
        chunks: list[tuple[Request, int]] = []
        prefill = context = 0
        for request in self.prefilling:
            if budget <= 0:
                break
            chunk = min(request.prefill_left, budget)
            budget -= chunk
            chunks.append((request, chunk))
            prefill += chunk
            context += len(request.prompt) + request.generated - request.prefill_left + chunk
        return chunks, prefill, context

    def _plan(self) -> None:
        if self.paused or not (self.running or self.waiting):
            return
        self._fit()
        chunks, prefill, context = self._compose()
        self.unscheduled = len(self.waiting)
        n = self.decoding
        now = self.loop.now
        self._token += 1
        self.busy = True
        if chunks:
            seconds = self.gpu.step_time(prefill, n + len(chunks), context + self.base + n * self.D)
            self._run = None
            self.loop.at(now + seconds, self._step_done, self._token, chunks, seconds)
            return
        if not n:
            self.busy = False  # waiting for blocks or an adapter slot with nothing running
            return
        steps = self.finishes[0][0] - self.D if self.finishes else 1
        room = (
            (self.gpu.kv_blocks - len(self.used) - self.prefill_private + self.held)
            * self.gpu.block_size
            - self.base
            - n * self.gpu.block_size / 2
        ) / n - self.D
        steps = max(1, min(steps, int(room), 100_000))
        per_step = self.gpu.step_time(0, n, self.base + n * self.D)
        growth = self.gpu.kv_token_s * n
        self._run = (now, steps, per_step, growth)
        seconds = per_step * steps + growth * steps * (steps - 1) / 2
        self.loop.at(now + seconds, self._run_done, self._token, steps, seconds)

    def _cut(self) -> None:
        """End a decode run at the step under way (an arrival or a pause)."""
        if self._run is None:
            return
        start, steps, per_step, growth = self._run
        elapsed = self.loop.now - start
        # Steps done by now: solve growth/2 m^2 + (per_step - growth/2) m = elapsed.
        a, b = growth / 2, per_step - growth / 2
        done = (
            int((-b + math.sqrt(b * b + 4 * a * elapsed)) / (2 * a)) if a > 0 else int(elapsed / b)
        )
        cut = min(steps, done + 1)
        if cut >= steps:
            return
        self._token += 1
        self._run = (start, cut, per_step, growth)
        seconds = per_step * cut + growth * cut * (cut - 1) / 2
        self.loop.at(start + seconds, self._run_done, self._token, cut, seconds)

    def _step_done(self, token: int, chunks: list[tuple[Request, int]], seconds: float) -> None:
        if token != self._token:
            return
        self.busy_s += seconds
        self.D += 1
        for request, chunk in chunks:
            request.prefill_left -= chunk
            if request.prefill_left == 0 and request.uid in self.running:
                self.prefilling.remove(request)
                self.prefill_private -= request.private
                request.generated += 1
                self._start_decoding(request)
        self._after()

    def _run_done(self, token: int, steps: int, seconds: float) -> None:
        if token != self._token:
            return
        self.busy_s += seconds
        self.D += steps
        self._after()

    def _start_decoding(self, request: Request) -> None:
        request.enter = self.D
        request.at_enter = len(request.prompt) + request.generated
        self.decoding += 1
        self.base += request.at_enter - request.enter
        self.held += len(request.hashes)
        request.finish_at = self.D + max(request.answer - request.generated, 0)
        heapq.heappush(self.finishes, (request.finish_at, request.uid))

    def _after(self) -> None:
        self._run = None
        self.busy = False
        while self.finishes and self.finishes[0][0] <= self.D:
            at, uid = heapq.heappop(self.finishes)
            request = self.running.get(uid)
            if request is not None and request.finish_at == at:  # else: preempted meanwhile
                self._finish(request)
        self._plan()

    def _finish(self, request: Request) -> None:
        del self.running[request.uid]
        self._stop_decoding(request)
        self._release(request)
        if request.answer_ids is not None:
            # The conversation goes on: its answer's whole blocks stay cached for the next turn.
            hashes = chain_hashes(
                root_hash(request.lora),
                request.prompt + request.answer_ids[:-1],
                self.gpu.block_size,
            )
            for h in hashes[len(request.hashes) :]:
                if h not in self.used:
                    self.free[h] = None
                    self.free.move_to_end(h)
        self._evict()
        request.done(request)
