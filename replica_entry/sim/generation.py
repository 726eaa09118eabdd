"""One generation request on the simulated engine: cache, time and tokens put together.

``Simulator.run(job, probe)`` admits the job (waiting while paused or full) holding the KV
blocks of its prompts, serves each prompt from the prefix cache, spends the prefill time for the
uncached tokens, and yields a ``Generation`` whose ``decode(steps)`` spends decode time,
advances every sequence and grows the blocks held. On exit it caches the whole blocks of
prompt and generated tokens (vLLM caches decoded blocks too, so a multi-turn follow-up hits
them), counts the tokens and frees the engine slot and its blocks.

All sequences of the job (prompts x n) decode together, one token per step; a sequence whose
budget is spent stops while the others go on. Abort (pause ``abort``) stops them all where
they are with ``finish_reason: "abort"``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from itertools import accumulate

from replica_entry.sim.engine import Engine, Probe, Ticket
from replica_entry.sim.latency import LatencyModel
from replica_entry.sim.metrics import SimMetrics
from replica_entry.sim.policy import next_top
from replica_entry.sim.prefix_cache import PrefixCache
from replica_entry.sim.protocol import GenerationJob
from replica_entry.sim.sampler import Sampled, sample, sequence_seed
from replica_entry.sim.tokenizer import piece


@dataclass(frozen=True, slots=True)
class Sequence:
    """One choice: ``index`` is its place in the answer (prompt-major, as vLLM numbers them)."""

    index: int
    prompt_index: int
    budget: int
    sampled: Sampled


class Generation:
    def __init__(
        self, job: GenerationJob, cached: list[int], simulator: Simulator, ticket: Ticket
    ) -> None:
        self.job = job
        self.cached = cached
        self.sequences = [
            Sequence(p * job.n + c, p, job.max_tokens[p], _sample(job, p, c, simulator))
            for p in range(len(job.prompts))
            for c in range(job.n)
        ]
        self.step = 0
        self.aborted = False
        self._simulator = simulator
        self._ticket = ticket
        self._offsets: dict[int, list[int]] = {}

    @property
    def done(self) -> bool:
        return self.aborted or self.step >= self.job.steps

    def emitted(self, seq: Sequence) -> int:
        """How many tokens of ``seq`` have been generated so far."""
        return min(self.step, seq.budget)

    def finish_reason(self, seq: Sequence) -> str | None:
        if self.emitted(seq) >= seq.budget:
            return "length"
        return "abort" if self.aborted else None

    async def decode(self, steps: int, probe: Probe) -> None:
        """Advance up to ``steps`` decode steps; fewer when an abort cuts the request short."""
        steps = min(steps, self.job.steps - self.step)
        if self.aborted or steps <= 0:
            return
        step_s = self._simulator.latency.decode_step_s(self._ticket.other_running, self.job.lora)
        engine = self._simulator.engine
        finished, spent = await engine.spend(self._ticket, steps * step_s, probe)
        if finished:
            self.step += steps
        else:
            self.step += min(steps, int(spent / step_s)) if step_s > 0 else 0
            self.aborted = True
        engine.grow(self._ticket, self.blocks())

    def blocks(self) -> int:
        """KV blocks the job holds now: each sequence's prompt and generated tokens."""
        size = self._simulator.cache.block_size
        prompts = self.job.prompts
        return sum(_blocks(len(prompts[seq.prompt_index]) + self.emitted(seq), size)
                   for seq in self.sequences)  # fmt: skip

    def text_offsets(self, seq: Sequence) -> list[int]:
        """Where each token of ``seq`` starts in its text; computed once per choice, so a
        stream with log-probabilities stays linear in its length."""
        offsets = self._offsets.get(seq.index)
        if offsets is None:
            lengths = (len(piece(token)) for token in seq.sampled.token_ids)
            offsets = self._offsets[seq.index] = list(accumulate(lengths, initial=0))
        return offsets

    def generated_tokens(self) -> int:
        return sum(self.emitted(seq) for seq in self.sequences)


def _blocks(tokens: int, block_size: int) -> int:
    """KV blocks that ``tokens`` tokens take: a partial last block takes a whole one."""
    return -(-tokens // block_size)


def _sample(job: GenerationJob, prompt_index: int, choice: int, simulator: Simulator) -> Sampled:
    name = job.lora or job.model
    seed = sequence_seed(job.seed, name, job.prompts[prompt_index], None if job.greedy else choice)
    budget, k, vocab = job.max_tokens[prompt_index], job.top_logprobs or 0, simulator.vocab_size
    first = next_top(job.policy, job.prompts[prompt_index], k, vocab) if k > 0 else ()
    return sample(seed, budget, vocab, k, first)


class Simulator:
    """The engine with its prefix cache, latency model and token counters."""

    def __init__(
        self,
        engine: Engine,
        cache: PrefixCache,
        latency: LatencyModel,
        metrics: SimMetrics,
        vocab_size: int,
    ) -> None:
        self.engine = engine
        self.cache = cache
        self.latency = latency
        self.metrics = metrics
        self.vocab_size = vocab_size

    @asynccontextmanager
    async def run(self, job: GenerationJob, probe: Probe) -> AsyncIterator[Generation]:
        size = self.cache.block_size
        need = job.n * sum(_blocks(len(prompt), size) for prompt in job.prompts)
        ticket = await self.engine.admit(job.lora, probe, need)
        try:
            cached = [self.cache.query(job.lora, prompt) for prompt in job.prompts]
            prompt_tokens = sum(len(prompt) for prompt in job.prompts)
            self.metrics.record_prefill(prompt_tokens, sum(cached))
            generation = Generation(job, cached, self, ticket)
            prefill_s = self.latency.prefill_s(prompt_tokens - sum(cached), ticket.other_running)
            finished, _ = await self.engine.spend(ticket, prefill_s, probe)
            generation.aborted = not finished
            try:
                yield generation
            finally:
                self._finish(generation)
        finally:
            self.engine.release(ticket)

    def _finish(self, generation: Generation) -> None:
        job = generation.job
        for seq in generation.sequences:
            produced = seq.sampled.token_ids[: generation.emitted(seq)]
            # The last sampled token has no KV yet: it would be computed by the next step.
            self.cache.insert(job.lora, job.prompts[seq.prompt_index] + produced[:-1])
        self.metrics.record_generated(generation.generated_tokens())
