"""experiments/nano_corpus.py -- the nano tokenizer's own words (train_sft.TINY_SIZES["nano"]): every word
of the texts a model reads and writes on MAG-Bench's train split -- task instructions, element lines as the
prompt lists them, guides, actions -- with how often it occurs, so that element names and typed values take
few tokens.

  python experiments/nano_corpus.py data/v1.1-train > assets/nano_words.tsv

Run once, by a maintainer: the file is committed, so the nano model is the same whatever it is later
trained on. A changed file changes the model: bump train_sft.TINY_VERSION with it.
"""
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import metrics  # noqa: E402
import train_sft  # noqa: E402


def step_texts(episodes):
    """Per step, the prompt's task and element lines and the reply a model is trained to write."""
    for ep in episodes:
        for step in ep["steps"]:
            yield f"Task: {ep['instruction']}\n{metrics.elements_text(step['elements'])}\n" + \
                metrics.format_output(step.get("guide") or "", step["action"], "som", "guide_first", ep["viewport"])


def word_counts(texts):
    """word -> count, the words as the tokenizer's pre-tokenizer splits them (digits one by one, a word's
    leading space kept), decoded back to text."""
    from tokenizers import decoders
    split, decode = train_sft.pre_tokenizer(), decoders.ByteLevel()
    counts = collections.Counter()
    for text in texts:
        for line in text.splitlines():
            counts.update(decode.decode([w]) for w, _ in split.pre_tokenize_str(line))
    return counts


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    episodes = [ep for ep in metrics.load_dataset(sys.argv[1]) if ep.get("split") == "train"]
    if not episodes:
        raise SystemExit(f"{sys.argv[1]}: no episode of the train split")
    counts = word_counts(step_texts(episodes))
    words = sorted((w for w in counts if "\t" not in w and "\n" not in w), key=lambda w: (-counts[w], w))
    sys.stdout.write("".join(f"{w}\t{counts[w]}\n" for w in words))
