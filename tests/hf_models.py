"""Tiny Hugging Face model folders the tests build (there is no hub here): a 2-layer BERT with a WordPiece
tokenizer made from a word list, and a 2-layer GPT-2 with a word-level one, saved with safetensors.

`checkable_bert` needs no torch: random weights written with safetensors' numpy API beside a real config
and tokenizer, enough for the submit-time checks, which never load weights. `bert`, `sentence_bert` and
`gpt2` build real models and need torch (requirements-gpu.txt)."""

import io
import json
import tarfile
import tempfile
import zipfile
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, GPT2Config, PreTrainedTokenizerFast

WORDS = [
    "the",
    "a",
    "an",
    "invoice",
    "was",
    "paid",
    "late",
    "early",
    "client",
    "asked",
    "for",
    "refund",
    "shipping",
    "to",
    "oslo",
    "takes",
    "three",
    "days",
    "parcel",
    "arrived",
    "damaged",
    "please",
    "replace",
    "it",
    "quickly",
    "good",
    "bad",
    "great",
    "awful",
    "order",
    "price",
    "tea",
    "coffee",
    "is",
    "are",
    "and",
    "or",
    "not",
    "very",
    "with",
    "much",
    "service",
    "staff",
    "friendly",
    "slow",
    "fast",
    "warm",
    "cold",
]
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
GPT_END = "<|endoftext|>"
HIDDEN, LAYERS = 32, 2


def bert_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: index for index, token in enumerate(BERT_SPECIALS + WORDS)}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
    )
    tokenizer.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=64,
    )  # fmt: skip


def gpt2_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: index for index, token in enumerate([GPT_END, "[UNK]", *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins the words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", eos_token=GPT_END, bos_token=GPT_END, model_max_length=128
    )


def bert_config(**overrides) -> BertConfig:
    size = len(BERT_SPECIALS) + len(WORDS)
    fields = {"vocab_size": size, "hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": 2}
    fields |= {"intermediate_size": 37, "max_position_embeddings": 64}
    return BertConfig(**(fields | overrides))


def checkable_bert(folder: Path, **config) -> Path:
    """A BERT folder the submit-time checks pass (when `config` changes nothing), with no torch."""
    folder.mkdir(parents=True, exist_ok=True)
    settings = bert_config(**config)
    settings.architectures = ["BertModel"]
    settings.save_pretrained(folder)
    bert_tokenizer().save_pretrained(folder)
    size = len(BERT_SPECIALS) + len(WORDS)
    rng = np.random.default_rng(0)
    tensors = {"embeddings.word_embeddings.weight": rng.standard_normal((size, HIDDEN), dtype=np.float32)}
    for layer in range(LAYERS):
        tensors[f"encoder.layer.{layer}.output.dense.weight"] = rng.standard_normal((HIDDEN, 37), dtype=np.float32)
    save_file(tensors, folder / "model.safetensors")
    return folder


def bert(folder: Path, labels: list[str] | None = None) -> Path:
    """A real random 2-layer BERT, an encoder or (with labels) a sequence classifier."""
    import torch  # noqa: PLC0415 (requirements-gpu.txt; the tests that call this skip without it)
    from transformers import BertForSequenceClassification, BertModel  # noqa: PLC0415

    torch.manual_seed(0)
    if labels:
        config = bert_config(id2label=dict(enumerate(labels)), label2id={label: i for i, label in enumerate(labels)})
        model = BertForSequenceClassification(config)
    else:
        model = BertModel(bert_config())
    model.save_pretrained(folder)
    bert_tokenizer().save_pretrained(folder)
    return folder


def roberta(folder: Path) -> Path:
    """A real random 2-layer RoBERTa whose tokenizer gives no length of its own: its 66 positions start
    after its padding index (0), so it takes 65 tokens."""
    import torch  # noqa: PLC0415 (requirements-gpu.txt; the tests that call this skip without it)
    from transformers import RobertaConfig, RobertaModel  # noqa: PLC0415

    torch.manual_seed(0)
    fields = bert_config().to_dict() | {"pad_token_id": 0, "type_vocab_size": 1, "max_position_embeddings": 66}
    RobertaModel(RobertaConfig(**fields)).save_pretrained(folder)
    bert_tokenizer().save_pretrained(folder)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    del settings["model_max_length"]
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    return folder


def sentencepiece_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer that marks spaces as SentencePiece's do (▁), so that a text decoded alone
    loses its first space, as Llama's and Mistral's do."""
    vocab = {token: index for index, token in enumerate([GPT_END, "[UNK]", *(f"▁{word}" for word in WORDS)])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", eos_token=GPT_END, bos_token=GPT_END, model_max_length=128
    )


def sentence_bert(folder: Path, pooling_mode: str) -> Path:
    """The real BERT as a sentence-transformers model, saved by the pinned library (requirements-gpu.txt):
    the encoder, its pooling by `pooling_mode`, then unit length."""
    from sentence_transformers import SentenceTransformer  # noqa: PLC0415
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as encoder:
        transformer = Transformer(str(bert(Path(encoder))))
        pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling_mode)
        SentenceTransformer(modules=[transformer, pooling, Normalize()], device="cpu").save(str(folder))
    return folder


def sentencepiece_file(folder: Path) -> Path:
    """A SentencePiece BPE model trained on the word list, saved as a Llama folder's tokenizer is when it
    comes without tokenizer.json: tokenizer.model and the class that reads it."""
    import sentencepiece  # noqa: PLC0415 (requirements-gpu.txt; the tests that call this skip without it)

    folder.mkdir(parents=True, exist_ok=True)
    lines = [" ".join(WORDS[start : start + 6]) for start in range(0, len(WORDS), 3)] * 20
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(folder / "tokenizer"), vocab_size=80, model_type="bpe",
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2,
    )  # fmt: skip
    (folder / "tokenizer.vocab").unlink()
    settings = {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    return folder


def gpt2(folder: Path, tokenizer: PreTrainedTokenizerFast | None = None) -> Path:
    """A real random 2-layer GPT-2 whose end-of-text token is word 0, with gpt2_tokenizer() unless given."""
    import torch  # noqa: PLC0415 (requirements-gpu.txt; the tests that call this skip without it)
    from transformers import GPT2LMHeadModel  # noqa: PLC0415

    torch.manual_seed(0)
    tokenizer = tokenizer or gpt2_tokenizer()
    config = GPT2Config(
        vocab_size=len(tokenizer), n_embd=HIDDEN, n_layer=LAYERS, n_head=2, n_positions=128,
        bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def zipped_folder(folder: Path, top: str = "") -> bytes:
    """The folder as a .zip, its files under `top/` when given."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, f"{top}/{path.relative_to(folder)}" if top else str(path.relative_to(folder)))
    return out.getvalue()


def tarred_folder(folder: Path) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        archive.add(folder, arcname=folder.name)
    return out.getvalue()


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def completion(folder: Path, prompt: str, max_new_tokens: int, seed: int, temperature: float, top_p: float) -> dict:
    """What the causal LM in `folder` generates for the prompt alone, as generate's row: greedy at
    temperature 0, else sampled from `seed`; its tokens end at the end-of-text token (word 0), their text
    as it follows the prompt's."""
    import torch  # noqa: PLC0415 (requirements-gpu.txt; the tests that call this skip without it)
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder).eval()
    inputs = tokenizer([prompt], return_tensors="pt")
    sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0} if temperature else {}
    torch.manual_seed(seed)
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=max_new_tokens, pad_token_id=0, **sampling)
    prompt_ids = inputs["input_ids"][0].tolist()
    tokens = output[0, len(prompt_ids) :].tolist()
    stopped = 0 in tokens
    tokens = tokens[: tokens.index(0) + 1] if stopped else tokens
    whole = tokenizer.decode(prompt_ids + tokens, skip_special_tokens=True)
    return {
        "text": whole.removeprefix(tokenizer.decode(prompt_ids, skip_special_tokens=True)),
        "prompt_tokens": inputs["input_ids"].shape[1],
        "output_tokens": len(tokens),
        "finish_reason": "stop" if stopped else "length",
    }
