"""Guide text scores in metrics.py: hand-worked examples, edge cases, and parity with the reference libraries.

Run with:  python -m pytest -q tests/test_text_scores.py
"""
import math
import random

import pytest

from metrics import (
    _tokenize_13a,  # private, but its behaviour is worth pinning down
    chrf,
    rouge_l,
    sentence_bleu,
)

approx = lambda x: pytest.approx(x, abs=1e-9)  # noqa: E731


# --------------------------------------------------------------------------- 13a tokenizer

@pytest.mark.parametrize("text, tokens", [
    ("Hello, world!", ["Hello", ",", "world", "!"]),
    ("1,000.5", ["1,000.5"]),                  # , and . between digits stay inside numbers
    ("costs $5.", ["costs", "$", "5", "."]),    # ... but a final period is split off
    (".5", [".", "5"]),                         # leading period has a (padding) space before it
    ("e.g. 3.14", ["e", ".", "g", ".", "3.14"]),
    ("1-2", ["1", "-", "2"]),                   # hyphen after a digit is split
    ("well-known", ["well-known"]),             # ... otherwise it is not
    ("don't", ["don't"]),                       # apostrophes are never split
    ("a.,5", ["a", ".", ",5"]),                 # consuming-regex quirk of mteval-v13a
    ("a &amp; b", ["a", "&", "b"]),
    ("&amp;lt;", ["<"]),                        # &amp; is decoded before &lt;
    ("&amp;quot;", ["&", "quot", ";"]),         # ... but after &quot;
    ("hyphen-\nated", ["hyphenated"]),          # line-break hyphenation is undone
    ("x <skipped> y", ["x", "y"]),
    ("  spaced\tout  ", ["spaced", "out"]),
    ("", []),
])
def test_tokenize_13a(text, tokens):
    assert _tokenize_13a(text) == tokens


# --------------------------------------------------------------------------- BLEU by hand

def test_bleu_four_tokens_with_one_smoothed_order():
    # hyp "the cat sat down" vs ref "the cat sat up", 4 tokens each, so BP = 1.
    # p1 = 3/4 (the, cat, sat)   p2 = 2/3 (the cat, cat sat)   p3 = 1/2 (the cat sat)
    # p4 = 0/1 -> first zero order, exp smoothing: 1 / (2 * 1) = 1/2
    # BLEU = (3/4 * 2/3 * 1/2 * 1/2) ** (1/4) = (1/8) ** (1/4) = 2 ** -0.75 = 0.594604
    assert sentence_bleu("the cat sat down", "the cat sat up") == approx(100 * 2 ** -0.75)


def test_bleu_two_smoothed_orders_and_brevity_penalty():
    # hyp "a b c d" (4 tokens) vs ref "a b x c d" (5 tokens).
    # p1 = 4/4   p2 = 2/3 (a b, c d)   p3 = 0/2 -> 1/(2*2) = 1/4   p4 = 0/1 -> 1/(4*1) = 1/4
    # BP = exp(1 - 5/4) = exp(-0.25)
    # BLEU = exp(-0.25) * (1 * 2/3 * 1/4 * 1/4) ** (1/4) = 0.7788 * (1/24) ** 0.25 = 35.186
    expected = 100 * math.exp(-0.25) * (1 / 24) ** 0.25
    assert sentence_bleu("a b c d", "a b x c d") == approx(expected)


def test_bleu_effective_order_and_brevity_penalty():
    # hyp has 2 tokens, so only orders 1 and 2 count: p1 = 2/2, p2 = 1/1.
    # BP = exp(1 - 4/2) = exp(-1) = 0.367879
    assert sentence_bleu("the cat", "the cat sat down") == approx(100 * math.exp(-1))


def test_bleu_is_case_sensitive_and_keeps_numbers_whole():
    # tokens: [1,000.5, USD] vs [1,000.5, usd]: p1 = 1/2, p2 = 0/1 -> 1/2; sqrt(1/4) = 1/2
    assert sentence_bleu("1,000.5 USD", "1,000.5 usd") == approx(50.0)


def test_bleu_longer_hypothesis_has_no_penalty():
    # hyp "a a a a" vs ref "a a"; counts are clipped to the reference counts, and BP = 1.
    # p1 = 2/4   p2 = 1/3 ("a a" occurs once in ref)   p3 = 0/2 -> 1/(2*2)   p4 = 0/1 -> 1/(4*1)
    # BLEU = (1/2 * 1/3 * 1/4 * 1/4) ** (1/4) = (1/96) ** (1/4) = 0.31947
    assert sentence_bleu("a a a a", "a a") == approx(100 * (1 / 96) ** 0.25)


@pytest.mark.parametrize("hyp, ref, expected", [
    ("", "", 0.0),
    ("", "the cat", 0.0),
    ("the cat", "", 0.0),
    ("   ", "the cat", 0.0),
    ("dog", "cat", 0.0),                  # no unigram match -> 0, no smoothing rescues it
    ("!!!", "!!!", 100.0),                # punctuation marks are ordinary tokens for BLEU
    ("Tom &amp; Jerry", "Tom & Jerry", 100.0),  # entities are decoded before matching
    ("日本語 です", "日本語 です", 100.0),
    ("café", "cafe", 0.0),                # no Unicode normalisation
])
def test_bleu_edge_cases(hyp, ref, expected):
    assert sentence_bleu(hyp, ref) == approx(expected)


# --------------------------------------------------------------------------- chrF by hand

def test_chrf_two_orders():
    # hyp "ab" vs ref "abc": N = min(6, 2, 3) = 2.
    # n=1: matches a, b -> P = 2/2, R = 2/3     n=2: "ab" -> P = 1/1, R = 1/2
    # P = 1, R = (2/3 + 1/2) / 2 = 7/12;  F2 = 5PR / (4P + R) = (35/12) / (55/12) = 7/11
    assert chrf("ab", "abc") == approx(100 * 7 / 11)


def test_chrf_order_limited_by_short_reference():
    # hyp "abc" vs ref "a": only n=1 counts. P = 1/3, R = 1/1
    # F2 = 5 * (1/3) / (4/3 + 1) = 5/7
    assert chrf("abc", "a") == approx(100 * 5 / 7)


def test_chrf_unicode_characters_are_code_points():
    # "café" vs "cafe": 4 chars each, so P = R at every order, N = 4.
    # n=1: 3/4   n=2: 2/3 (ca, af)   n=3: 1/2 (caf)   n=4: 0/1
    # P = R = (3/4 + 2/3 + 1/2 + 0) / 4 = 23/48, and F2 of P = R is P.
    assert chrf("café", "cafe") == approx(100 * 23 / 48)


@pytest.mark.parametrize("hyp, ref, expected", [
    ("", "", 0.0),
    ("", "abc", 0.0),
    ("abc", "", 0.0),
    (" \t\n", "abc", 0.0),
    ("xy", "ab", 0.0),
    ("a b", "ab", 100.0),                 # whitespace is removed before counting
    ("!!!", "!!!", 100.0),
    ("1,000.5", "1,000.5", 100.0),
    ("&amp;", "&amp;", 100.0),            # no entity decoding in chrF: compared as raw text
    ("ABC", "abc", 0.0),                  # case-sensitive
])
def test_chrf_edge_cases(hyp, ref, expected):
    assert chrf(hyp, ref) == approx(expected)


# --------------------------------------------------------------------------- ROUGE-L by hand

def test_rouge_l_sentence():
    # LCS of "the cat sat on the mat" / "the cat lay on a mat" is "the cat on mat" = 4.
    # P = 4/6, R = 4/6, F = 2/3
    assert rouge_l("the cat sat on the mat", "the cat lay on a mat") == approx(2 / 3)


def test_rouge_l_uneven_lengths_and_case():
    # tokens a b c d vs b d e (lowercased); LCS = "b d" = 2
    # P = 2/4, R = 2/3, F = 2 * (1/2)(2/3) / (1/2 + 2/3) = (2/3) / (7/6) = 4/7
    assert rouge_l("A B C D", "B D E") == approx(4 / 7)


def test_rouge_l_order_matters():
    # Same bag of words, reversed: LCS = 1 of 3 -> P = R = F = 1/3
    assert rouge_l("a b c", "c b a") == approx(1 / 3)


@pytest.mark.parametrize("hyp, ref, expected", [
    ("", "", 0.0),
    ("", "the cat", 0.0),
    ("the cat", "", 0.0),
    ("!!!", "!!!", 0.0),                  # punctuation yields no tokens at all
    ("日本語", "日本語", 0.0),              # nor do non-Latin scripts
    ("Don't stop!", "don t STOP", 1.0),   # apostrophe splits: don / t / stop
    ("1,000.5", "1 000 5", 1.0),          # digits survive, separators do not
    ("Tom &amp; Jerry", "tom amp jerry", 1.0),  # no entity decoding: "amp" is a token
    ("café", "caf", 1.0),                 # é is a separator
    ("İstanbul", "i stanbul", 1.0),       # "İ".lower() == "i" + combining dot
])
def test_rouge_l_edge_cases(hyp, ref, expected):
    assert rouge_l(hyp, ref) == approx(expected)


# --------------------------------------------------------------------------- parity with references

_WORDS = ("the cat sat on mat dog ran and of is it a an quickly very ran ran the the "
          "The Cat DOG Paris NASA iPhone").split()
_PUNCT = list(",.!?;:()\"'-/$%&@#[]{}<>*+=_|~`^") + ["--", "...", "?!"]
_NUMBERS = ["1,000.5", "3.14", "42", "-7", "1-2", "2024", "10,000", ".5", "5.", "0.0", "1.2.3"]
_SPECIAL = ["&amp;", "&lt;", "&gt;", "&quot;", "&amp;lt;", "don't", "well-known", "e.g.", "U.S.",
            "(hi)", "<skipped>", "café", "naïve", "İstanbul", "日本語", "Straße", "Ωmega", "🙂",
            "\u212a", "x\u00a0y", "ＡＢＣ"]
_GAPS = [" "] * 16 + [""] * 3 + ["  ", "\t", "\n", "-\n"]


def _random_token(rng):
    pool = rng.choices([_WORDS, _PUNCT, _NUMBERS, _SPECIAL], weights=[10, 3, 2, 2])[0]
    return rng.choice(pool)


def _join(rng, tokens):
    # Varying the gaps glues punctuation to words ("cat," "(hi") to exercise the tokenizers.
    out = tokens[:1]
    for tok in tokens[1:]:
        out += [rng.choice(_GAPS), tok]
    return "".join(out)


def _perturb(rng, tokens):
    out = []
    for tok in tokens:
        roll = rng.random()
        if roll < 0.1:
            continue                                   # drop
        if roll < 0.2:
            out.append(_random_token(rng))             # substitute
        elif roll < 0.25:
            out.append(tok.upper() if rng.random() < 0.5 else tok.capitalize())
        elif roll < 0.3:
            out += [tok, tok]                          # repeat
        else:
            out.append(tok)
    if out and rng.random() < 0.2:                     # move a chunk
        i = rng.randrange(len(out))
        out = out[i:] + out[:i]
    return out


def _make_pairs(count=420):
    rng = random.Random(0)
    pairs = []
    for k in range(count):
        kind = k % 6
        if kind == 0:        # short, unrelated (0-3 words each)
            hyp = [_random_token(rng) for _ in range(rng.randint(0, 3))]
            ref = [_random_token(rng) for _ in range(rng.randint(0, 3))]
        elif kind == 1:      # short, derived
            ref = [_random_token(rng) for _ in range(rng.randint(0, 3))]
            hyp = _perturb(rng, ref)
        elif kind in (2, 3):  # medium, derived
            ref = [_random_token(rng) for _ in range(rng.randint(4, 20))]
            hyp = _perturb(rng, ref)
        elif kind == 4:      # long, derived
            ref = [_random_token(rng) for _ in range(rng.randint(40, 90))]
            hyp = _perturb(rng, ref)
        else:                # medium, unrelated
            hyp = [_random_token(rng) for _ in range(rng.randint(1, 15))]
            ref = [_random_token(rng) for _ in range(rng.randint(1, 15))]
        pairs.append((_join(rng, hyp), _join(rng, ref)))
    return pairs


PAIRS = _make_pairs()
EDGE_PAIRS = [("", ""), ("", "a"), ("a", ""), (" ", " "), ("!!!", "!!!"), ("1,000.5", "1,000.5"),
              ("&amp;", "&"), ("a.,5", "a . ,5"), ("İstanbul", "istanbul"), ("日本語", "日本")]


def _assert_parity(ours, theirs):
    assert len(PAIRS) >= 300
    bad = []
    for hyp, ref in PAIRS + EDGE_PAIRS:
        mine, expected = ours(hyp, ref), theirs(hyp, ref)
        if abs(mine - expected) > 1e-6:
            bad.append((hyp, ref, mine, expected))
    assert not bad, f"{len(bad)} mismatches, first: {bad[:3]}"


def test_parity_sentence_bleu():
    sacrebleu = pytest.importorskip("sacrebleu")
    _assert_parity(sentence_bleu, lambda h, r: sacrebleu.sentence_bleu(h, [r]).score)


def test_parity_chrf():
    sacrebleu = pytest.importorskip("sacrebleu")
    _assert_parity(chrf, lambda h, r: sacrebleu.sentence_chrf(h, [r]).score)


def test_parity_rouge_l():
    rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    _assert_parity(rouge_l, lambda h, r: scorer.score(r, h)["rougeL"].fmeasure)


def test_parity_13a_tokenizer():
    tokenizer_13a = pytest.importorskip("sacrebleu.tokenizers.tokenizer_13a")
    reference = tokenizer_13a.Tokenizer13a()
    for hyp, ref in PAIRS + EDGE_PAIRS:
        for text in (hyp, ref):
            # sacrebleu rstrips before tokenising (BLEU._preprocess_segment)
            assert _tokenize_13a(text) == reference(text.rstrip()).split(), repr(text)


def test_generated_pairs_are_varied():
    # Guard against the generator silently degenerating into trivial cases.
    assert sum(1 for h, r in PAIRS if len(h.split()) <= 3) >= 100
    assert sum(1 for h, r in PAIRS if len(r.split()) >= 40) >= 50
    assert sum(1 for h, r in PAIRS if 0 < sentence_bleu(h, r) < 100) >= 150
