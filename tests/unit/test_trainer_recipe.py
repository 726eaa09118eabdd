"""The trainer's recipe and its command line: the fastest published run by default, the derived
in-flight and queue sizes, and flags checked before anything starts."""

from __future__ import annotations

import json
from importlib.util import find_spec
from pathlib import Path

import pytest

from trainer_entry.flags import build_parser
from trainer_entry.freeze import options_from_args
from trainer_entry.options import TrainerOptions
from trainer_entry.recipe import Recipe
from trainer_entry.sidecar import sidecar_command

BASE = ["--model", "m", "--dataset", "d.jsonl", "--sidecar-replicas", "http://127.0.0.1:9"]


def parse(tmp_path: Path, *extra: str) -> TrainerOptions:
    parser = build_parser()
    return options_from_args(
        parser.parse_args([*BASE, "--output-dir", str(tmp_path), *extra]), parser
    )


def test_the_defaults_are_the_fastest_published_run(tmp_path: Path) -> None:
    options = parse(tmp_path)
    r = options.recipe
    assert (r.learning_rate, r.lr_scheduler, r.adam_beta2) == (4e-5, "constant", 0.95)
    assert (r.lora_rank, r.alpha, r.lora_target_modules) == (1, 2, ("all-linear",))
    assert (r.token_budget, r.gradient_accumulation_steps, r.gradient_checkpointing) == (
        16384,
        6,
        False,
    )
    assert (r.max_completion_length, r.weight_sync_steps, r.max_staleness) == (3000, 4, 4)
    assert options.rewards == ("boxed",)
    assert options.checkpoints.save_steps == 20 and options.checkpoints.resume == "auto"
    assert options.world.num_processes == 0  # the launcher counts the GPUs


def test_published_sizes_derive_384_in_flight_on_two_ranks() -> None:
    resolved = Recipe().resolved(world_size=2)
    # 8 samples a rank a micro-batch x 6 micro-batches x 2 ranks = 96 a step; x4 staleness = 384
    # (a third of the slack, 4 versions x a sync every 4 steps, is 5.3 steps: the queue caps it)
    assert resolved.max_inflight_tasks == 384
    assert resolved.queue_maxsize == 384  # TRL's 1024 would buffer eight steps of stale samples


def test_more_frequent_syncs_keep_fewer_rollouts_in_flight() -> None:
    """The fleet what-if's picks within 3 % waste: 1.33 steps' worth at a slack of 4, ~2.8 at
    8 (this recipe's step: 96 samples, groups of 8)."""
    every = {n: Recipe(weight_sync_steps=n).resolved(world_size=2).max_inflight_tasks
             for n in (1, 2, 4)}  # fmt: skip
    assert every == {1: 128, 2: 256, 4: 384}
    assert all((value or 0) % 8 == 0 for value in every.values())  # whole groups


def test_a_small_step_caps_the_inflight_default_at_what_the_window_can_use() -> None:
    recipe = Recipe(num_generations=4, gradient_accumulation_steps=1, max_staleness=2)
    resolved = recipe.resolved(world_size=1)
    assert resolved.max_inflight_tasks == 8  # the window holds 2 steps of 4 samples


def test_explicit_sizes_win() -> None:
    resolved = Recipe(max_inflight_tasks=5, queue_maxsize=7).resolved(world_size=8)
    assert (resolved.max_inflight_tasks, resolved.queue_maxsize) == (5, 7)


def test_every_value_is_printed_as_its_flag(tmp_path: Path) -> None:
    lines = parse(tmp_path, "--gradient-checkpointing").recipe.resolved(1).describe()
    assert "--gradient-checkpointing" in lines and "--token-budget 16384" in lines
    assert "--max-inflight-tasks 192" in lines and "--queue-maxsize 192" in lines
    flags = {line.split()[0] for line in lines}
    help_text = build_parser().format_help()
    assert all(flag in help_text for flag in flags), flags


def test_options_travel_to_the_ranks_as_json_unchanged(tmp_path: Path) -> None:
    options = parse(tmp_path, "--nnodes", "2", "--node-rank", "1", "--proxy-arg=--x")
    again = TrainerOptions.from_json(options.to_json())
    assert again == options
    assert isinstance(again.output_dir, Path) and isinstance(again.topology.proxy_args, tuple)
    assert json.loads(options.to_json())["world"]["nnodes"] == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--nnodes", "0"], "argument --nnodes: must be >= 1"),
        (["--nnodes", "2", "--node-rank", "2"], "argument --node-rank: 0 to --nnodes - 1"),
        (["--num-processes", "0"], "argument --num-processes: must be >= 1"),
        (["--save-steps", "0"], "argument --save-steps: must be >= 1"),
        (["--save-minutes", "-1"], "argument --save-minutes: must be >= 0"),
        (["--master-port", "70000"], "argument --master-port: 0 to 65535"),
        (["--resume", "/no/such/checkpoint"], "argument --resume: auto, never, or a checkpoint"),
        (["--rewards", "boxed,nope"], "argument --rewards: choose from"),
        (["--gradient-accumulation-steps", "0"], "argument --gradient-accumulation-steps"),
    ],
)
def test_a_bad_flag_exits_2_naming_it(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse(tmp_path, *extra)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_a_reward_of_the_users_own_is_a_module_and_a_function(tmp_path: Path) -> None:
    assert parse(tmp_path, "--rewards", "boxed,my_rewards:brevity").rewards == (
        "boxed",
        "my_rewards:brevity",
    )


@pytest.mark.skipif(find_spec("torch") is not None, reason="torch is installed here")
def test_without_the_trainer_packages_the_command_says_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainer_entry.cli import main

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "d.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n')
    argv = ["--model", str(tmp_path / "model"), "--dataset", str(tmp_path / "d.jsonl")]
    argv += ["--sidecar-replicas", "http://127.0.0.1:9", "--output-dir", str(tmp_path / "out")]
    assert main(argv) == 2  # the inputs are there: what is missing is the packages
    err = capsys.readouterr().err
    assert "rollout-trainer: needs torch, trl and peft: pip install -e '.[trainer]' in a" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()  # stopped before anything was started or written


def test_cpu_ranks_compute_on_one_thread_unless_told(tmp_path: Path) -> None:
    """Without CUDA a rank's OpenMP threads fight the rollout worker and vLLM for the cores
    (8.9 s of forward and backward a step in the e2e tier, 0.24 s on one thread)."""
    from trainer_entry.launch import ranks_environ

    options = parse(tmp_path)
    env = ranks_environ(options, 0, "http://127.0.0.1:1", (None, None), {"PATH": "/bin"})
    assert env["OMP_NUM_THREADS"] == "1" and env["PATH"] == "/bin"
    told = ranks_environ(options, 0, "u", (None, None), {"OMP_NUM_THREADS": "4"})
    assert told["OMP_NUM_THREADS"] == "4"
    assert "OMP_NUM_THREADS" not in ranks_environ(options, 2, "u", (None, None), {})
    assert TrainerOptions.from_json(env["ROLLOUT_TRAINER_OPTIONS"]) == options


def test_the_sidecar_may_find_its_replicas_by_name(tmp_path: Path) -> None:
    parser = build_parser()
    base = ["--model", "m", "--dataset", "d.jsonl", "--output-dir", str(tmp_path)]
    args = parser.parse_args([*base, "--sidecar-discover", "dns:grp-replica:8000"])
    topology = options_from_args(args, parser).topology
    assert topology.sidecar and topology.sidecar_discover == "dns:grp-replica:8000"
    argv = sidecar_command(topology.sidecar_replicas, 9, tmp_path,
                           discover=topology.sidecar_discover)  # fmt: skip
    assert argv[3:5] == ["--discover", "dns:grp-replica:8000"]
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--sidecar-discover", "d", "--sidecar-replicas", "http://a:1"])
    bad = parser.parse_args([*base, "--sidecar-discover", "dns:no-port"])
    with pytest.raises(SystemExit):
        options_from_args(bad, parser)


def test_without_cuda_the_sizes_left_unset_are_the_cpu_recipe(tmp_path: Path) -> None:
    """The GPU recipe's 6 micro-batches of 16,384 tokens a step (completions up to 3,000 tokens)
    kept a tiny CPU run through 2 vLLM CPU servers waiting 15 minutes for step 1."""
    recipe, line = parse(tmp_path).recipe.for_machine(gpus=0)
    assert (recipe.gradient_accumulation_steps, recipe.token_budget) == (1, 256)
    assert recipe.max_completion_length == 128 < recipe.token_budget  # TRL drops longer ones
    assert line.startswith("the CPU recipe, as there is no CUDA here:")
    assert "--gradient-accumulation-steps 1 --token-budget 256 --max-completion-length 128" in line
    assert recipe.resolved(1).samples_per_step(1) == 8  # one group a step
    assert "machine_sized" not in " ".join(recipe.describe())


def test_with_cuda_the_recipe_is_the_published_one(tmp_path: Path) -> None:
    recipe, line = parse(tmp_path).recipe.for_machine(gpus=2)
    assert (recipe.gradient_accumulation_steps, recipe.token_budget) == (6, 16384)
    assert recipe.max_completion_length == 3000 and recipe.machine_sized == ()
    assert line == "the GPU recipe (the fastest published run): 2 CUDA device(s) here"


def test_sizes_the_user_set_stay_on_a_cpu(tmp_path: Path) -> None:
    options = parse(tmp_path, "--token-budget", "512", "--gradient-accumulation-steps", "6")
    assert options.recipe.machine_sized == ("max_completion_length",)
    recipe, line = options.recipe.for_machine(gpus=0)
    assert (recipe.gradient_accumulation_steps, recipe.token_budget) == (6, 512)
    assert recipe.max_completion_length == 128 and "--token-budget" not in line
    every = ("--token-budget", "0", "--gradient-accumulation-steps", "2",
             "--max-completion-length", "64")  # fmt: skip
    recipe, line = parse(tmp_path, *every).recipe.for_machine(gpus=0)
    assert (recipe.token_budget, recipe.gradient_accumulation_steps) == (0, 2)
    assert line.startswith("no CUDA here: the sizes as given")


def test_the_machine_decides_after_the_options_travel(tmp_path: Path) -> None:
    """What the user left unset travels with the options (deploy checks them elsewhere)."""
    options = parse(tmp_path)
    again = TrainerOptions.from_json(options.to_json())
    assert again.recipe.machine_sized == (
        "gradient_accumulation_steps",
        "token_budget",
        "max_completion_length",
    )
    assert again == options
    helps = {a.option_strings[0]: a.help or "" for a in build_parser()._actions if a.help}
    assert helps["--gradient-accumulation-steps"].endswith("(default: 6; 1 without CUDA)")
    assert helps["--token-budget"].endswith("(default: 16384; 256 without CUDA)")
    assert helps["--max-completion-length"].endswith("(default: 3000; 128 without CUDA)")
