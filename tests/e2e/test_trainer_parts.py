"""Trainer parts that need the heavy packages but no server: the response template for chat
templates TRL does not know (the README's default model among them), and untying tied
embeddings for an accelerate whose FSDP2 cannot shard them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainer_entry.templates import TemplateError, ensure_response_template, family_of

# Qwen2.5-Math's template is Qwen2.5's with another default system prompt: TRL compares template
# texts exactly, so it does not recognise it ("Unrecognized chat template").
QWEN_MATH_SYSTEM = "Please reason step by step, and put your final answer within \\\\boxed{}."


def _tokenizer(tiny: dict[str, Path]) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny["model"])


def _qwen_math_template() -> str:
    from trl.chat_template_utils import qwen2_5_chat_template

    original = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    assert original in qwen2_5_chat_template
    return str(qwen2_5_chat_template.replace(original, QWEN_MATH_SYSTEM))


def test_trl_refuses_qwen_math_and_the_trainer_sets_chatml(tiny: dict[str, Path]) -> None:
    from trl.chat_template_utils import add_response_schema, qwen3_template

    tokenizer = _tokenizer(tiny)
    tokenizer.chat_template = _qwen_math_template()
    with pytest.raises(ValueError, match="Unrecognized chat template"):
        add_response_schema(tokenizer)
    tokenizer.response_template = None
    assert ensure_response_template(tokenizer, "Qwen/Qwen2.5-Math-1.5B") == "chatml"
    assert tokenizer.response_template == qwen3_template
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "1+1?"}], tokenize=False, add_generation_prompt=True
    )
    parsed = tokenizer.parse_response("\\boxed{2}<|im_end|>", prefix=prompt)
    assert parsed["content"] == "\\boxed{2}"  # as TRL's rollout worker will read a completion


def test_a_recognised_template_is_left_to_trl(tiny: dict[str, Path]) -> None:
    assert ensure_response_template(_tokenizer(tiny), "tiny") == "trl"


def test_an_unknown_family_stops_naming_the_model_and_the_flag(tiny: dict[str, Path]) -> None:
    tokenizer = _tokenizer(tiny)
    tokenizer.chat_template = "{% for m in messages %}<<{{ m['content'] }}>>{% endfor %}"
    with pytest.raises(TemplateError, match=r"of acme/odd-7b .* --response-template"):
        ensure_response_template(tokenizer, "acme/odd-7b")
    assert ensure_response_template(tokenizer, "acme/odd-7b", "llama3") == "flag"
    assert family_of(tokenizer.chat_template) is None


def test_untie_gives_lm_head_its_own_equal_weight(tmp_path: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer_entry.fsdp import accelerate_groups_tied_weights, tied, untie, untie_if_needed

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=1, head_dim=32, tie_word_embeddings=True)  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    ids = torch.tensor([[1, 2, 3]])
    before = model(ids).logits.detach()
    assert tied(model)
    assert not untie_if_needed(model, sharded=False)  # one rank: nothing to do
    untie(model)
    assert not tied(model) and not model.config.tie_word_embeddings
    assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    assert torch.equal(model(ids).logits, before)
    model.tie_weights()  # transformers' own re-tying leaves it untied now
    assert not tied(model)
    assert not accelerate_groups_tied_weights("1.14.0")
    assert accelerate_groups_tied_weights("1.15.0")


# TRL 1.16 warns at import that it was tested up to vLLM 0.31 (the tier runs 0.32, REFERENCE 5).
@pytest.mark.filterwarnings("ignore:TRL currently supports vLLM versions:UserWarning")
def test_out_of_gpu_memory_is_one_line_naming_the_knobs(
    tiny: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # read when trl.experimental is imported
    import torch

    from trainer_entry import rank, train
    from trainer_entry.flags import build_parser
    from trainer_entry.freeze import options_from_args
    from trainer_entry.options import OPTIONS_ENV

    parser = build_parser()
    argv = ["--model", str(tiny["model"]), "--dataset", str(tiny["data"]), "--output-dir",
            str(tmp_path), "--sidecar-replicas", "http://127.0.0.1:9"]  # fmt: skip
    monkeypatch.setenv(OPTIONS_ENV, options_from_args(parser.parse_args(argv), parser).to_json())

    def exhausted(*_: object, **__: object) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(train, "run", exhausted)
    assert rank.main() == 3
    assert (
        "out of GPU memory at --token-budget 16384 tokens per rank: lower --token-budget "
        "(e.g. 8192), turn on --gradient-checkpointing"
    ) in caplog.text


class _NoWorker:
    """TRL's injected rollout worker (a stub: this test drives the syncs itself)."""

    rollout_buffer = None

    def update_model_version(self, version: int) -> None:
        self.version = version


@pytest.mark.filterwarnings("ignore:TRL currently supports vLLM versions:UserWarning")
def test_a_redirected_trl_trainer_saves_locally_and_the_bucket_copy_lands(
    tiny: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TRL's own ``_sync_weight_lora`` (save, load through the sidecar proxy, unload, delete), on
    a real AsyncGRPOTrainer redirected to the trainer's disk: every version lands complete in
    ``<output_dir>/.vllm_lora`` through the mirror, where TRL itself wrote nothing, the replica
    without a receiver loads that bucket copy, and the version TRL deletes locally is pruned."""
    import time
    from dataclasses import replace

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from adapter_receiver.reference import decode
    from adapter_receiver.wire import PROBE_FILE
    from replica_entry.sim import SimSettings, build_sim_app
    from tests.support.background import BackgroundServers
    from trainer_entry import sidecar, train
    from trainer_entry.cpu_shims import apply_cpu_shims
    from trainer_entry.flags import build_parser
    from trainer_entry.freeze import options_from_args
    from trainer_entry.lora_dir import redirect
    from trainer_entry.rewards import reward_functions

    output, local = tmp_path / "run", tmp_path / "disk"
    bucket = output / ".vllm_lora"
    local.mkdir()
    servers = BackgroundServers()
    try:
        replica = servers.start(build_sim_app(SimSettings(adapter_receiver=False)))
        argv = sidecar.sidecar_command(
            [replica], sidecar.free_port(), local,
            [*sidecar.mirror_args(local, bucket), "--health-interval", "0.05"],
        )  # fmt: skip
        with sidecar.running(argv) as url:
            parser = build_parser()
            flags = ["--model", str(tiny["model"]), "--dataset", str(tiny["data"]),
                     "--output-dir", str(output), "--sidecar-replicas", replica,
                     "--max-staleness", "0", "--adapters-local", str(local)]  # fmt: skip
            options = options_from_args(parser.parse_args(flags), parser)
            options = replace(options, recipe=options.recipe.resolved(1))
            apply_cpu_shims()
            from transformers import AutoTokenizer
            from trl.experimental.async_grpo import AsyncGRPOTrainer

            trainer = AsyncGRPOTrainer(
                model=options.model,
                reward_funcs=reward_functions(options.rewards, []),
                args=train.build_config(options, url),
                train_dataset=train.load_prompts(options),
                processing_class=AutoTokenizer.from_pretrained(options.model),
                peft_config=train.build_lora(options),
                weight_transfer=object(),  # TRL probes no server for an injected one
                rollout_worker=_NoWorker(),
            )
            assert trainer._lora_dir == str(bucket)  # TRL's own choice
            assert redirect(trainer, local) == str(local)
            train.attest(trainer, trainer.processing_class)
            for version in (1, 2, 3):  # max_staleness 0: at v3 TRL deletes v1 locally
                trainer._sync_weight_lora(time.time())
                assert trainer.model_version == version  # TRL's load answered 200
                name = f"trl-policy-v{version}"
                saved = {p.name: p.read_bytes() for p in (local / name).iterdir()}
                assert {p.name: p.read_bytes() for p in (bucket / name).iterdir()} == saved
                # The served-policy reference is part of the version (inside it before its
                # rename: nothing staged is left beside it; .mirror is the mirror's own).
                assert decode(saved[PROBE_FILE]).top
                assert not [p.name for p in local.iterdir() if p.name.endswith(".probed")]
            assert not (local / "trl-policy-v1").exists()
            deadline = time.monotonic() + 20
            while (bucket / "trl-policy-v1").exists():  # the mirror's scan prunes it
                assert time.monotonic() < deadline, "trl-policy-v1 never pruned from the bucket"
                time.sleep(0.05)
            assert sorted(p.name for p in bucket.iterdir()) == ["trl-policy-v2", "trl-policy-v3"]
    finally:
        servers.close()


@pytest.mark.filterwarnings("ignore:TRL currently supports vLLM versions:UserWarning")
def test_the_reference_is_the_trainers_packed_forward_at_temperature_one(
    tiny: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe through the model as TRL builds it (tree attention, the fused head at TRL's
    temperature, PEFT, in training mode) equals a plain forward of the same weights at
    temperature 1: each cut's top logprobs, log-softmaxed in float32 (what vLLM returns: the
    training test checks that against real replicas). The model is left in its mode."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    from trl.experimental.async_grpo.packing import TREE_ATTENTION, register_tree_attention
    from trl.trainer.utils import add_fused_lm_head

    from adapter_receiver.reference import K, cuts_for
    from trainer_entry.cpu_shims import apply_cpu_shims
    from trainer_entry.reference import answer

    apply_cpu_shims()
    register_tree_attention()
    trl_model = AutoModelForCausalLM.from_pretrained(
        tiny["model"], attn_implementation=TREE_ATTENTION, dtype=torch.float32
    )
    add_fused_lm_head(trl_model, temperature=0.7, outputs=("log_probs", "entropy"))
    policy = PeftModel.from_pretrained(trl_model, tiny["adapter"], is_trainable=True)
    policy.train()
    ids = list(range(5, 69))
    cuts = cuts_for(len(ids))
    mine = answer(policy, ids, cuts, torch.device("cpu"))
    assert policy.training

    def plain(model: Any) -> list[list[float]]:
        with torch.no_grad():
            logprobs = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
        return [logprobs[cut - 1].topk(K).values.tolist() for cut in cuts]

    base = AutoModelForCausalLM.from_pretrained(tiny["model"], dtype=torch.float32)
    unadapted = plain(base)
    expected = plain(PeftModel.from_pretrained(base, tiny["adapter"]))
    flat = [(a, b, c) for r, s, t in zip(mine, expected, unadapted, strict=True)
            for a, b, c in zip(r, s, t, strict=True)]  # fmt: skip
    assert len(flat) == len(cuts) * K
    assert max(abs(a - b) for a, b, _ in flat) < 1e-5
    assert sum(abs(a - c) for a, _, c in flat) / len(flat) > 1e-3  # the adapter shows


@pytest.mark.filterwarnings("ignore:TRL currently supports vLLM versions:UserWarning")
def test_rank_zero_says_how_far_a_step_waiting_for_samples_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``train._watch_samples`` puts ``progress.Counted`` between TRL's rollout queue and the
    trainer (TRL's ``get_train_dataloader`` reads ``trainer.rollout_queue`` when training
    starts), ends a step's count at each step's end, and stops its reporter when told."""
    import queue
    import threading
    import types

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from trainer_entry import progress, train
    from trainer_entry.flags import build_parser
    from trainer_entry.freeze import options_from_args

    parser = build_parser()
    flags = ["--model", "m", "--dataset", "d.jsonl", "--output-dir", str(tmp_path),
             "--sidecar-replicas", "http://127.0.0.1:9", "--token-budget", "256",
             "--gradient-accumulation-steps", "1"]  # fmt: skip
    options = options_from_args(parser.parse_args(flags), parser)
    said: list[str] = []
    spoke = threading.Event()

    def heard(line: str) -> None:
        said.append(line)
        spoke.set()

    def report(progress_: progress.Progress, stop: threading.Event, say: Any) -> None:
        progress.report(progress_, stop, heard, 0.01)

    monkeypatch.setattr(train, "report", report)
    callbacks: list[Any] = []
    samples: queue.Queue[Any] = queue.Queue()
    trainer = types.SimpleNamespace(
        rollout_queue=samples,
        accelerator=types.SimpleNamespace(num_processes=1),
        add_callback=callbacks.append,
    )
    watching = train._watch_samples(trainer, options)
    assert watching is not None and isinstance(trainer.rollout_queue, progress.Counted)
    stop, watched = watching
    assert watched is trainer.rollout_queue.progress  # what the scaler reads the wait from
    samples.put(types.SimpleNamespace(input_ids=[1, 2, 3]))
    trainer.rollout_queue.get(timeout=1)
    assert spoke.wait(5)
    stop.set()
    assert said[0].startswith("step 1: 1 samples (3 tokens) received in")
    (ended,) = callbacks
    ended.on_step_end(None, types.SimpleNamespace(global_step=1), None)
    assert (trainer.rollout_queue.progress.line(0) or "").startswith("step 2: 0 samples")
    no_queue = types.SimpleNamespace(rollout_queue=None)
    assert train._watch_samples(no_queue, options) is None  # the other ranks: no queue
