"""The training recipe: by default the fastest published run, every value a flag.

The published "Async GRPO with LoRA across HF Jobs" runs went from 3 h 27 min to 53 min for 500
steps (Qwen2.5-Math-1.5B, trainer on 2 H200s, 3 H200 replicas) with: micro-batches packed to a
token budget (16,384 tokens per rank, 6 accumulation steps), gradient checkpointing off, 384
rollouts in flight (128 per replica), a sync every 4 steps within a staleness window of 4, lr
4e-5 constant, ``adam_beta2`` 0.95, LoRA r=1 alpha 2 on all linear layers, 8 rollouts per prompt,
completions up to 3,000 tokens. Those are the defaults below.

Two values are derived, not fixed (``Recipe.resolved``):
- ``queue_maxsize``: ``max_staleness x samples per step``. TRL's default (1024) buffered eight
  steps against a four-step window and dropped 158 samples as stale in the first 12 steps of the
  published smoke run; sized to the window, the rollout worker blocks instead of making waste.
- ``max_inflight_tasks``: what the fleet what-if recommends (``benchmarks/fleet/whatif.py``:
  the least GPU-time per trained step within 3 % of the generated tokens wasted on samples TRL
  drops as too stale): about a third of the staleness slack, ``max_staleness x
  weight_sync_steps`` steps, in steps' worth of samples (``SLACK_SHARE``), in whole groups,
  capped at what TRL's queue holds (``max_staleness x samples per step``). Measured with the
  what-if on 1-8 H200 replicas: the largest in-flight count within 3 % waste was 1.33 steps'
  worth at a slack of 4 (a sync every step), 2.25-2.92 at 8 (every 2 steps; fewer with more
  replicas), and the whole queue (4) at 16, this recipe's (every 4 steps), where nothing is
  wasted at any fleet size. The fleet's size moves it by less than a group or two, so it is not
  an input. The published run's 128 per replica (384 on 3 replicas) wasted 11.7 % of the
  tokens with a sync every 2 steps.

"Samples per step" is TRL's nominal figure, ``batch_size x gradient_accumulation_steps x
world_size`` (with a token budget the real count per micro-batch varies with sample lengths).

On a machine without CUDA the sizes the user left unset are the CPU recipe's (``CPU_SIZES``,
``Recipe.for_machine``): the GPU recipe's 6 micro-batches of 16,384 tokens a rank a step, with
completions of up to 3,000 tokens, kept a tiny 2-step run through 2 real vLLM CPU servers
waiting for samples for 15 minutes without finishing step 1; with one micro-batch of 256 tokens
and short completions the same run takes about a minute. A completion longer than the token
budget is dropped by TRL, so the CPU recipe's completions stay below its budget.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

SLACK_SHARE = 1 / 3  # of the staleness slack (steps), in steps' worth of samples in flight
# The sizes a machine without CUDA gets for every one its user did not set (module docstring).
CPU_SIZES = {"gradient_accumulation_steps": 1, "token_budget": 256, "max_completion_length": 128}


@dataclass(frozen=True)
class Recipe:
    learning_rate: float = 4e-5
    lr_scheduler: str = "constant"
    adam_beta2: float = 0.95
    lora_rank: int = 1
    lora_alpha: int | None = None  # None: 2 x rank
    lora_target_modules: tuple[str, ...] = ("all-linear",)
    num_generations: int = 8
    batch_size: int | None = None  # samples per rank per micro-batch; None: one group
    gradient_accumulation_steps: int = 6
    token_budget: int = 16384  # tokens per rank per micro-batch; 0: a fixed batch_size instead
    gradient_checkpointing: bool = False
    max_completion_length: int = 3000
    temperature: float = 1.0
    max_staleness: int = 4
    weight_sync_steps: int = 4
    queue_maxsize: int | None = None  # None: derived (module docstring)
    max_inflight_tasks: int | None = None  # None: derived (module docstring)
    # The sizes (``CPU_SIZES``' names) the user left unset: the machine decides them.
    machine_sized: tuple[str, ...] = ()

    @property
    def alpha(self) -> int:
        return self.lora_alpha if self.lora_alpha is not None else 2 * self.lora_rank

    @property
    def per_rank_batch(self) -> int:
        return self.batch_size or self.num_generations

    def samples_per_step(self, world_size: int) -> int:
        return self.per_rank_batch * self.gradient_accumulation_steps * world_size

    def for_machine(self, gpus: int) -> tuple[Recipe, str]:
        """This recipe for a machine with ``gpus`` CUDA devices, and one line saying which
        recipe that is and why: without CUDA, the sizes left unset are ``CPU_SIZES``."""
        cpu = {name: value for name, value in CPU_SIZES.items() if name in self.machine_sized}
        if gpus:
            return replace(self, machine_sized=()), (
                f"the GPU recipe (the fastest published run): {gpus} CUDA device(s) here"
            )
        if not cpu:
            return self, "no CUDA here: the sizes as given (--gradient-accumulation-steps, ...)"
        # mypy cannot tell that every CPU_SIZES name is an int field: each one is.
        given = replace(self, **cpu, machine_sized=())  # type: ignore[arg-type]
        shown = " ".join(f"--{name.replace('_', '-')} {value}" for name, value in cpu.items())
        return given, (
            f"the CPU recipe, as there is no CUDA here: {shown} (the GPU recipe's steps would "
            "keep CPU replicas generating for many minutes each; set these flags to choose)"
        )

    def resolved(self, world_size: int) -> Recipe:
        """This recipe with the derived values filled in."""
        per_step = self.samples_per_step(world_size)
        window = max(self.max_staleness, 1) * per_step
        inflight = self.max_inflight_tasks
        if inflight is None:
            slack = max(self.max_staleness, 1) * max(self.weight_sync_steps, 1)
            groups = int(SLACK_SHARE * slack * per_step) // self.num_generations
            inflight = min(max(groups, 1) * self.num_generations, window)
        queue = self.queue_maxsize if self.queue_maxsize is not None else window
        return replace(
            self,
            lora_alpha=self.alpha,
            batch_size=self.per_rank_batch,
            max_inflight_tasks=inflight,
            queue_maxsize=queue,
        )

    def describe(self) -> list[str]:
        """One ``--flag value`` line per setting, for the start-up log."""
        lines = []
        for spec in fields(self):
            if spec.name == "machine_sized":
                continue
            value, flag = getattr(self, spec.name), spec.name.replace("_", "-")
            if isinstance(value, bool):
                lines.append(f"--{flag}" if value else f"--no-{flag}")
            else:
                shown = ",".join(value) if isinstance(value, tuple) else value
                lines.append(f"--{flag} {shown}")
        return lines
