"""The bench model: a random-init Qwen2.5-VL at the published 3B or 7B sizes, with the real vocabulary
size (151,936 embedding rows) and a byte-level BPE tokenizer trained here, offline, on English text this
machine already holds -- so a bench prompt has about as many tokens as a real Qwen tokenizer would make
of it, and the logits, the embeddings and the step times are those of a real checkpoint. The tiny
demo tokenizer (2,048 ids, trained on a few UI words) makes English prompts ~2x longer in tokens and
the logits ~75x smaller; a bench on it measures another model.

  python bench/bench_model.py --tokenizer-only              # train (or reuse) the tokenizer, report chars/token
  python bench/bench_model.py --size 3b --out bench/out/qwen2_5_vl-3b   # on a GPU: ~7 GB of bf16 weights
  python bench/bench_model.py --size 7b --out bench/out/qwen2_5_vl-7b
  python bench/bench_model.py --size test --out /tmp/bench-test         # the same tokenizer on a tiny model (CPU)

Nothing here is downloaded and nothing is committed: the tokenizer is cached in bench/out/ (gitignored), a
checkpoint folder is written where --out says (once: an existing one is kept). The text: Python's own
documentation (pydoc_data's language reference topics) and the docstrings and comments of its standard
library (~3M characters; none of this project's texts, which the tokenizer is measured on). The
pre-tokenizer is Qwen2's (its split regex, digits one by one, then bytes); 151,643 ids are asked of the
trainer, as many as Qwen2's regular vocabulary, and the embedding is padded to 151,936 as Qwen's is.
"""
import argparse
import ast
import glob
import json
import os
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import metrics  # noqa: E402
import train_sft  # noqa: E402

VOCAB = 151936     # Qwen2.5-VL's embedding rows (its tokenizer has 151,665 ids; the rest is padding)
BPE_IDS = 151643   # Qwen2's regular (non-special) vocabulary
TOKENIZER = os.path.join(HERE, "out", "bpe-151k", "tokenizer.json")
# Qwen2's pre-tokenizer: contractions, words with one leading non-letter, single digits, punctuation runs, spaces.
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
              r"\s+(?!\S)|\s+")

# Qwen2.5-VL-3B-Instruct's and -7B-Instruct's published config.json (text and vision towers).
VISION = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, fullatt_block_indexes=[7, 15, 23, 31],
              window_size=112, patch_size=14, spatial_merge_size=2, temporal_patch_size=2, tokens_per_second=2)
ROPE = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]}
SIZES = {"3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                    num_key_value_heads=2, tie_word_embeddings=True),
         "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                    num_key_value_heads=4, tie_word_embeddings=False),
         # a CPU check of the scripts: the real vocabulary and processor, a tiny transformer
         "test": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, tie_word_embeddings=True)}


def corpus_files():
    """Where the English text is: Python's documentation topics and standard library. Not this project's
    texts: a tokenizer fitted to the prompts it is measured on would flatter their token counts."""
    paths = sysconfig.get_paths()
    files = sorted(glob.glob(os.path.join(paths["stdlib"], "**", "*.py"), recursive=True))
    files = [f for f in files if "site-packages" not in f and "/test" not in f and "lib2to3" not in f]
    # and the docstrings of the installed libraries that document themselves at length, when there
    for package in ("transformers", "torch", "django", "numpy", "PIL", "setuptools", "pip"):
        files += sorted(glob.glob(os.path.join(paths["purelib"], package, "**", "*.py"), recursive=True))
    return [f for f in files if "/tests/" not in f]


def english_of(path):
    """The docstrings and comments of a Python file: its English."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    if path.endswith("pydoc_data/topics.py"):  # the language reference as one dict of strings
        try:
            return list(ast.literal_eval(text.split("=", 1)[1]).values())
        except (ValueError, SyntaxError):
            return []
    out = [line.strip().lstrip("#").strip() for line in text.splitlines() if line.strip().startswith("#")]
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return out
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                out.append(doc)
    return out


def project_prompts():
    """The prompt texts the bench sends (system text, task, history, element list), image tags left out:
    the synthetic dataset's steps and the back-office tasks' instructions, in every prompt variant."""
    import tempfile

    from conftest import make_toy_dataset
    texts = []
    with tempfile.TemporaryDirectory() as tmp:
        for ep in metrics.load_dataset(make_toy_dataset(os.path.join(tmp, "toy"), n_episodes=8)):
            for k in range(len(ep["steps"])):
                for elements in (None, "text"):
                    msgs = metrics.build_messages(ep, k, "som", "guide_first", elements=elements)
                    texts.append("\n".join(c["text"] for m in msgs for c in m["content"] if c["type"] == "text"))
    with open(os.path.join(ROOT, "tasks", "backoffice.json")) as f:
        tasks = json.load(f)

    def instructions(x):  # every "instruction" string of the task file, wherever it sits
        if isinstance(x, dict):
            own = [x["instruction"]] if isinstance(x.get("instruction"), str) else []
            return own + instructions(list(x.values()))
        return [s for item in x for s in instructions(item)] if isinstance(x, list) else []
    return texts + instructions(tasks)


def train_tokenizer():
    """Train (once; cached at TOKENIZER) the byte-level BPE. -> a tokenizers.Tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    if os.path.exists(TOKENIZER):
        return Tokenizer.from_file(TOKENIZER)
    files = corpus_files()
    t0 = time.perf_counter()
    texts = [t for path in files for t in english_of(path)]
    print(f"tokenizer: {sum(map(len, texts)) / 1e6:.1f}M characters from {len(files)} files", flush=True)
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=BPE_IDS, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens(train_sft.QWEN_SPECIAL)
    os.makedirs(os.path.dirname(TOKENIZER), exist_ok=True)
    tok.save(TOKENIZER)
    print(f"tokenizer: {tok.get_vocab_size()} ids in {time.perf_counter() - t0:.0f} s -> {TOKENIZER}", flush=True)
    return tok


def chars_per_token(tok, texts):
    return sum(map(len, texts)) / sum(len(tok.encode(t).ids) for t in texts)


def build(out, size, seed=0):
    """Write a random-init Qwen2.5-VL of `size` + its processor to `out` (kept if already there) -> out."""
    import torch
    import transformers as tf
    if os.path.exists(os.path.join(out, "config.json")):
        return out
    tok = train_tokenizer()
    v = tok.get_vocab()
    tokenizer = tf.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                           bos_token=None, chat_template=train_sft.QWEN_TEMPLATE)
    text = dict(SIZES[size], vocab_size=VOCAB, max_position_embeddings=128000, rope_parameters=ROPE,
                bos_token_id=v["<|endoftext|>"], eos_token_id=v["<|im_end|>"], pad_token_id=v["<|endoftext|>"])
    if size == "test":
        text["rope_parameters"] = dict(ROPE, mrope_section=[2, 3, 3])  # head_dim 16
    vision = dict(VISION, out_hidden_size=text["hidden_size"])
    if size == "test":
        vision.update(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, fullatt_block_indexes=[1])
    config = tf.Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=v["<|image_pad|>"],
                                 video_token_id=v["<|video_pad|>"], vision_start_token_id=v["<|vision_start|>"],
                                 vision_end_token_id=v["<|vision_end|>"],
                                 tie_word_embeddings=text["tie_word_embeddings"])
    cuda = torch.cuda.is_available()
    torch.manual_seed(seed)
    with torch.device("cuda" if cuda else "cpu"):  # a 7B initialises in seconds on a GPU, minutes on a CPU
        model = tf.Qwen2_5_VLForConditionalGeneration(config).to(torch.bfloat16 if cuda else torch.float32)
    gen = model.generation_config
    gen.eos_token_id, gen.pad_token_id, gen.bos_token_id = v["<|im_end|>"], v["<|endoftext|>"], v["<|endoftext|>"]
    # Qwen2.5-VL's own image preprocessing (preprocessor_config.json): 14 px patches merged 2x2, up to 12.8 MP
    image_proc = tf.Qwen2VLImageProcessor(patch_size=14, merge_size=2, temporal_patch_size=2, min_pixels=3136,
                                          max_pixels=12845056)
    video_proc = tf.Qwen2VLVideoProcessor(patch_size=14, merge_size=2, temporal_patch_size=2)
    processor = tf.Qwen2_5_VLProcessor(image_processor=image_proc, tokenizer=tokenizer, video_processor=video_proc,
                                       chat_template=train_sft.QWEN_TEMPLATE)
    tmp = out.rstrip("/") + ".tmp"
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    os.replace(tmp, out)
    n = sum(p.numel() for p in model.parameters())
    print(f"built {out}: Qwen2.5-VL {size}, {n / 1e9:.2f}B parameters, vocabulary {VOCAB} "
          f"(tokenizer {tok.get_vocab_size()})", flush=True)
    del model
    if cuda:
        torch.cuda.empty_cache()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="3b", choices=sorted(SIZES))
    p.add_argument("--out", help="checkpoint folder to write (kept if it already exists)")
    p.add_argument("--tokenizer-only", action="store_true", help="train the tokenizer and report chars/token")
    p.add_argument("--json", default="", help="also write the tokenizer report there")
    a = p.parse_args()
    if not a.tokenizer_only and not a.out:
        p.error("--out is needed to build a model (or pass --tokenizer-only)")
    tok = train_tokenizer()
    prompts = project_prompts()
    tiny = train_sft.train_tokenizer(train_sft.QWEN_SPECIAL, train_sft.TINY_SIZES["demo"]["vocab"])
    report = {"tokenizer": TOKENIZER, "ids": tok.get_vocab_size(), "prompts": len(prompts),
              "chars_per_token": round(chars_per_token(tok, prompts), 2),
              "chars_per_token_tiny_demo_tokenizer": round(chars_per_token(tiny, prompts), 2)}
    print(json.dumps(report), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    if a.out:
        build(a.out, a.size)


if __name__ == "__main__":
    main()
