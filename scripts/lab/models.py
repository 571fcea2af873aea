"""Tiny models built locally for tests and benchmarks: nothing is downloaded.

* a random-weight Llama whose vocabulary holds a flat block of codec tokens, with a
  character-level tokenizer (and a chat template) built on the spot;
* a SNAC decoder of the real 24 kHz architecture with random weights.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<speech>", "</speech>", "<|user|>", "<|assistant|>", "<|system|>"]
AUDIO_BASE = 128  # token id of code 0
CODEBOOK = 4096
VOCAB = AUDIO_BASE + CODEBOOK + 8
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

# The flat codec layout the tiny talker uses: every frame position shares one block.
TINY_LAYOUT = {
    "name": "tiny-flat",
    "prompt": "{text}",
    "prefix_ids": [1],
    "suffix_ids": [4],
    "audio_base": AUDIO_BASE,
    "codebook_size": CODEBOOK,
    "tokens_per_frame": 7,
    "position_stride": 0,
    "stop_ids": [5, 2],
}

SNAC_24KHZ = {
    "sampling_rate": 24000,
    "encoder_dim": 48,
    "encoder_rates": [2, 4, 8, 8],
    "decoder_dim": 1024,
    "decoder_rates": [8, 8, 4, 2],
    "attn_window_size": None,
    "codebook_size": 4096,
    "codebook_dim": 8,
    "vq_strides": [4, 2, 1],
    "noise": True,
    "depthwise": True,
}


def build_tokenizer(path: Path) -> None:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = list(string.ascii_letters + string.digits + string.punctuation + " ")
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    assert len(vocab) <= AUDIO_BASE
    for i in range(len(vocab), AUDIO_BASE):  # reserved, so codec ids stay where the layout says
        vocab[f"<reserved_{i}>"] = i
    for code in range(CODEBOOK):
        vocab[f"<code_{code}>"] = AUDIO_BASE + code
    for i in range(AUDIO_BASE + CODEBOOK, VOCAB):
        vocab[f"<extra_{i}>"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()  # characters join back without spaces between them
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        additional_special_tokens=SPECIALS[4:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)


def build_tiny_llama(path: str | Path, *, seed: int = 0) -> Path:
    """A 2-layer, 64-wide, single-head random Llama that fits the tiny codec layout."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = Path(path)
    if (path / "config.json").is_file() and (path / "tokenizer.json").is_file():
        return path
    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        # head_dim 64: vLLM's CPU attention kernels take 32/64/80/96/112/128, not 16
        num_attention_heads=1,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    config.torch_dtype = torch.float32
    LlamaForCausalLM(config).save_pretrained(path, safe_serialization=True)
    build_tokenizer(path)
    (path / "codec_layout.json").write_text(json.dumps(TINY_LAYOUT, indent=2))
    return path


def build_snac(path: str | Path, *, seed: int = 0) -> Path:
    """SNAC's 24 kHz architecture with random weights, saved like the published checkpoint."""
    import torch
    from snac import SNAC

    path = Path(path)
    if (path / "pytorch_model.bin").is_file():
        return path
    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = SNAC(**SNAC_24KHZ)
    (path / "config.json").write_text(json.dumps(SNAC_24KHZ, indent=2))
    torch.save(model.state_dict(), path / "pytorch_model.bin")
    return path


def text_token_ids() -> list[int]:
    """Token ids of plain text in the tiny vocabulary (letters, space, a little
    punctuation): what a random chat model is allowed to say, so it says words."""
    chars = string.ascii_lowercase + " " * 6 + ".,"
    first_char = len(SPECIALS)
    order = list(dict.fromkeys(string.ascii_letters + string.digits + string.punctuation + " "))
    return sorted({first_char + order.index(c) for c in chars})
