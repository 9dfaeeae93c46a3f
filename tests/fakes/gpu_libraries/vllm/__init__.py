"""A fake vLLM with the calls jobs.processors.partner_model makes, for machines without GPUs: put its
folder on a slot's PYTHONPATH and a GPU slot (the fake NVML's) generates with it.

It keeps the real one's contract where the portal depends on it: `LLM(model=folder, ..., max_model_len=N)`
refuses a length beyond the model's positions; `generate(prompts, [SamplingParams], use_tqdm=False)` gives
one result per prompt, in order, refuses a prompt longer than max_model_len, ends a completion at
max_model_len (finish_reason "length") and at the end-of-text token ("stop", the token counted in
token_ids, left out of the text), its text decoded as it follows the prompt's. As vLLM's V1 engine does
unless VLLM_ENABLE_V1_MULTIPROCESSING is 0, `LLM` starts its engine in a process of its own; an engine
made in the slot's process keeps the GPU's memory, so that no other starts there. The tokens come from
transformers on the CPU, each prompt alone, seeded with its request's seed, as the portal's transformers
path seeds a record."""

import multiprocessing
import os
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


@dataclass
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None


def _engine_core() -> None:
    """The engine's own process, as V1 starts it (it has nothing to do here)."""


_made = []  # the engines made in this process: in-process, an engine keeps the GPU's memory (vllm#21073)


class LLM:
    def __init__(self, model: str, max_model_len: int | None = None, **options):
        if _made:
            raise ValueError(
                "Free memory on device (0.9/79.2 GiB) on startup is less than desired GPU memory utilization "
                f"(0.9, 71.3 GiB): an engine of {_made[0]} holds it"
            )
        _made.append(model)
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0":
            process = multiprocessing.get_context("spawn").Process(target=_engine_core)
            process.start()
            process.join()
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModelForCausalLM.from_pretrained(model, use_safetensors=True).eval()
        positions = self.model.config.max_position_embeddings
        if max_model_len is not None and max_model_len > positions:
            raise ValueError(f"max_model_len {max_model_len} is greater than the model's {positions} positions")
        self.max_model_len = max_model_len or positions
        self.options = options

    def generate(self, prompts: list[str], sampling: list[SamplingParams], use_tqdm: bool = True) -> list:
        if calls := os.environ.get("E31_FAKE_VLLM_CALLS"):  # where a test reads how many prompts each call had
            with open(calls, "a") as log:
                log.write(f"{len(prompts)}\n")
        return [self._one(prompt, params) for prompt, params in zip(prompts, sampling, strict=True)]

    def _one(self, prompt: str, params: SamplingParams):
        ids = self.tokenizer(prompt)["input_ids"]
        if len(ids) > self.max_model_len:
            raise ValueError(f"The prompt ({len(ids)} tokens) is longer than max_model_len {self.max_model_len}")
        room = min(params.max_tokens, self.max_model_len - len(ids))
        sampling = {"do_sample": False}
        if params.temperature > 0:
            sampling = {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p, "top_k": 0}
        torch.manual_seed(params.seed or 0)
        with torch.inference_mode():
            output = self.model.generate(
                torch.tensor([ids]), max_new_tokens=room, pad_token_id=self.tokenizer.eos_token_id, **sampling
            )[0, len(ids) :].tolist()
        end = self.tokenizer.eos_token_id
        tokens = output[: output.index(end) + 1] if end in output else output
        prompt = self.tokenizer.decode(ids, skip_special_tokens=True)
        completion = SimpleNamespace(
            text=self.tokenizer.decode(ids + tokens, skip_special_tokens=True).removeprefix(prompt),
            token_ids=tokens,
            finish_reason="stop" if end in tokens else "length",
        )
        return SimpleNamespace(prompt_token_ids=ids, outputs=[completion])
