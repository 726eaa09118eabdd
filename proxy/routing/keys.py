"""Routing keys: which conversation a prompt belongs to, read from its raw bytes.

A prompt is keyed by the hash of its shared part (chat template, system prompt, few-shot
preamble) plus its first block after that part. All rollouts of a GRPO group and every later
turn of a conversation share that prefix, so they share a key; different problems differ in that
block, so they spread.

Blocks. Token-id prompts are cut into whole blocks of ``block_tokens`` ids (16, vLLM's GPU block
size); text prompts and chat messages into ``chunk_bytes`` chunks of the JSON text as the client
sent it (a client encodes alike every time). Blocks are read from the request's bytes with
``bytes.find``/compiled patterns: no JSON parse, no Python object per token. Hashes are xxh64,
seeded with the adapter family (the model name without its ``-vN`` suffix), so a new policy
version keeps its conversations where their KV lives.

Template learning. A block-aligned prefix P is *shared* once more than ``threshold`` different
next blocks have followed it (default 16: more than a group has rollouts, so the last block of a
problem, followed by at most G different completions in multi-turn traffic, stays specific).
Candidates for P come from the longest common prefix with a few recent prompts of the same family
(a binary search of ``memcmp``s); their successors are counted in a bounded LRU table. Known
templates are matched with one ``startswith`` per request.

Stability. A key is a function of the prompt and of the *confirmed* templates only: candidates are
counted, never used for keys, so the same prefix gets the same key whatever traffic came before it
(a candidate learned from a group's own prompts, which share a long prefix and differ in their
suffixes, would key each suffix apart and split the group). Before any template is confirmed a
prompt's key is its first block. Confirming a template moves the keys of the prompts under it
once, from the one key they all shared before (the first block after the previous template lies
inside the new one) to one key per problem. Pinning them to that shared key instead would keep
the warm-up's pile together for the rest of those conversations: measured on the routing trace,
pins lost 1-2 points of hit rate against letting them move (benchmarks/README.md, routing).

Hints. While no template matches, a single prompt also gets a *hint*: the hash of the candidate
prefix it shares with recent prompts plus its next block (what a key would be if that candidate
were confirmed; once it is, the hint's value is the prompt's key). A hint never routes: the
prefix policy only recalls where a hint went before (a replica that served that longer prefix of
this very prompt) ahead of its key's memory, so that during the warm-up, when every prompt behind
the still unconfirmed template shares one key, a group and its later turns follow their own
first request instead of wherever the shared key went last. A hint that was never seen (a
suffix, a guess learned from a group's own prompts) recalls nothing and the key decides.

Cost per prompt, steady state: one ``startswith`` over the template, one block match, one xxh64:
a few microseconds whatever the prompt's length. While no template matches (warm-up, or traffic
with no shared part) add one longest-common-prefix search over ``recent`` prompts.
Work is bounded whatever the request: a batch is keyed by its first ``KEYED_PROMPTS`` prompts and
a key reads at most the first ``KEY_WINDOW`` bytes of a prompt.
Memory: at most ``max_tracked`` successor sets of at most ``threshold + 1`` ints, ``recent``
prompt references and ``max_templates`` templates per family: bounded by configuration.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import xxhash

from proxy.routing.peek import Peek, elements

_VERSION_SUFFIX = re.compile(r"-v[0-9]+$")
_FAMILY_CACHE_LIMIT = 4096
# Bounded work per request: a batch is routed by the keys of its first prompts, and a key reads
# at most the first KEY_WINDOW bytes of a prompt (a template longer than that is not learned).
KEYED_PROMPTS = 32
KEY_WINDOW = 64 * 1024


@dataclass(frozen=True, slots=True)
class KeySettings:
    block_tokens: int = 16
    chunk_bytes: int = 64
    threshold: int = 16
    max_tracked: int = 65_536
    max_templates: int = 8
    recent: int = 4


@dataclass(frozen=True, slots=True)
class Template:
    data: bytes
    hash: int


@dataclass(slots=True)
class _Family:
    seed: int
    templates: list[Template] = field(default_factory=list)
    recent: deque[bytes] = field(default_factory=deque)


class KeyBuilder:
    """Computes routing keys and learns templates. Synchronous and I/O-free; not thread-safe."""

    def __init__(self, settings: KeySettings | None = None) -> None:
        self.settings = settings or KeySettings()
        self._block = re.compile(rb"(?:[^,]*,){%d}" % self.settings.block_tokens)
        self._families: dict[str, _Family] = {}  # by family name: all versions share one
        self._by_model: dict[str | None, _Family] = {}
        self._successors: OrderedDict[int, set[int]] = OrderedDict()

    @property
    def tracked(self) -> int:
        """Prefixes whose successors are being counted (bounded by ``max_tracked``)."""
        return len(self._successors)

    @property
    def templates(self) -> int:
        return sum(len(f.templates) for f in self._families.values())

    def keys(self, peek: Peek, model: str | None) -> tuple[int, ...]:
        """The routing key of each prompt in the request (one, or one per batch element)."""
        return self.keyed(peek, model)[0]

    def keyed(self, peek: Peek, model: str | None) -> tuple[tuple[int, ...], int | None]:
        """The keys (see ``keys``) and, for a single prompt keyed while no template matches it,
        its hint (module docstring); None otherwise."""
        family = self._family(model)
        buf, start, end = peek.buffer, peek.start, peek.end
        kind = peek.kind
        if kind == "tokens":
            key, hint = self.key(buf, start + 1, _window(start + 1, end - 1), family, tokens=True)
            return (key,), hint
        if kind == "text":
            key, hint = self.key(buf, start + 1, _window(start + 1, end - 1), family, tokens=False)
            return (key,), hint
        if kind == "messages":
            key, hint = self.key(buf, start, _window(start, end), family, tokens=False)
            return (key,), hint
        if kind in ("batch_tokens", "batch_text"):
            keys = tuple(
                self.key(
                    buf, lo + 1, _window(lo + 1, hi - 1), family, tokens=kind == "batch_tokens"
                )[0]
                for lo, hi in elements(buf, start, end, KEYED_PROMPTS)
            )
            return keys, None
        return (), None

    def _family(self, model: str | None) -> _Family:
        family = self._by_model.get(model)
        if family is None:
            if len(self._by_model) >= _FAMILY_CACHE_LIMIT:
                self._by_model.clear()
                self._families.clear()
            name = _VERSION_SUFFIX.sub("", model) if model else ""
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = _Family(xxhash.xxh64_intdigest(name.encode()))
            self._by_model[model] = family
        return family

    def key(
        self, buf: bytes, lo: int, hi: int, family: _Family, *, tokens: bool
    ) -> tuple[int, int | None]:
        """Hash of the longest confirmed template plus the first block after it (or the partial
        tail); the prompt's first block when no template matches. Learning only counts. With
        the key, the prompt's hint (None when a template matched or no candidate did)."""
        for template in family.templates:
            size = len(template.data)
            if hi - lo > size and buf.startswith(template.data, lo):
                block_end = self._block_end(buf, lo + size, hi, tokens)
                key = xxhash.xxh64_intdigest(buf[lo + size : block_end], template.hash)
                self._note(template.hash, key, family, buf, lo, lo + size)
                return key, None
        hint = self._learn(buf, lo, hi, family, tokens)
        block_end = self._block_end(buf, lo, hi, tokens)
        return xxhash.xxh64_intdigest(buf[lo:block_end], family.seed), hint

    def _block_end(self, buf: bytes, pos: int, hi: int, tokens: bool) -> int:
        if tokens:
            match = self._block.match(buf, pos, hi)
            return match.end() if match is not None else hi
        return min(pos + self.settings.chunk_bytes, hi)

    def _learn(self, buf: bytes, lo: int, hi: int, family: _Family, tokens: bool) -> int | None:
        """Count the successor of the block-aligned prefix this prompt shares with recent ones;
        return this prompt's successor hash (its hint), None without a candidate.

        The candidate is the shortest common prefix with a recent prompt it diverges from (the
        most general: another group's prompt shares only the template). Both prompts' successors
        are counted (the first conversation seen counts too).
        """
        prompt = buf[lo:hi]
        common, other = 0, b""
        for recent in family.recent:
            if recent == prompt:  # another rollout of the same prompt: nothing to learn
                continue
            shared = _common_prefix(prompt, recent)
            # They diverge (not one conversation extending the other); keep the shortest.
            if 0 < shared < min(len(prompt), len(recent)) and (not other or shared < common):
                common, other = shared, recent
        if prompt not in family.recent:
            if len(family.recent) >= self.settings.recent:
                family.recent.popleft()
            family.recent.append(prompt)
        size = self._align(prompt, common, tokens) if other else 0
        if size <= 0:
            return None
        prefix_hash = xxhash.xxh64_intdigest(prompt[:size], family.seed)
        successor = 0
        for seen in (other, prompt):
            next_end = self._block_end(seen, size, len(seen), tokens)
            successor = xxhash.xxh64_intdigest(seen[size:next_end], prefix_hash)
            self._note(prefix_hash, successor, family, prompt, 0, size)
        return successor  # the prompt's, counted last

    def _align(self, prompt: bytes, size: int, tokens: bool) -> int:
        """``size`` rounded down to a whole number of blocks."""
        if not tokens:
            return size - size % self.settings.chunk_bytes
        whole = prompt.count(b",", 0, size)
        blocks = whole // self.settings.block_tokens
        if blocks == 0:
            return 0
        pattern = re.compile(rb"(?:[^,]*,){%d}" % (blocks * self.settings.block_tokens))
        match = pattern.match(prompt)
        return match.end() if match is not None else 0

    def _note(
        self, prefix: int, successor: int, family: _Family, buf: bytes, lo: int, hi: int
    ) -> None:
        successors = self._successors.get(prefix)
        if successors is None:
            successors = self._successors[prefix] = set()
            if len(self._successors) > self.settings.max_tracked:
                self._successors.popitem(last=False)
        else:
            self._successors.move_to_end(prefix)
        limit = self.settings.threshold
        if len(successors) > limit:
            return
        successors.add(successor)
        if len(successors) > limit and not any(t.hash == prefix for t in family.templates):
            self._promote(Template(buf[lo:hi], prefix), family)

    def _promote(self, template: Template, family: _Family) -> None:
        family.templates.append(template)
        # Longest first, so a request matches the most specific shared prefix it has.
        family.templates.sort(key=lambda t: len(t.data), reverse=True)
        del family.templates[self.settings.max_templates :]


def _common_prefix(a: bytes, b: bytes, first: int = 64) -> int:
    """Length of the longest common prefix, found with C-level slice comparisons.

    Galloping from ``first`` bytes, then a binary search: O(log n) comparisons copying about
    twice the common length; a pair that differs within ``first`` bytes costs one comparison.
    """
    limit = min(len(a), len(b))
    lo, probe = 0, min(first, limit)
    while a[:probe] == b[:probe]:
        lo = probe
        if probe == limit:
            return limit
        probe = min(probe * 2, limit)
    hi = probe - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _window(lo: int, hi: int) -> int:
    """The end of the part of a prompt a key may read."""
    return min(hi, lo + KEY_WINDOW)
