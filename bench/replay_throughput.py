"""Replay throughput: replay.py's batched, left-padded KV-cache decoding against a naive loop of
one `model.generate` call per step, on the same model and steps, in one run; the outputs must be
the same. Prints steps/s of both and the ratio (target >= 3x on CPU), writes
bench/out/replay_throughput.json.

  python bench/replay_throughput.py                        # tiny demo-size model, CPU
  python bench/replay_throughput.py --data demo/miniwob    # on real screenshots (after `make demo`)
  python bench/replay_throughput.py --real                 # CUDA: a random-init model of Qwen2.5-VL-3B's
                                                           # size, FlashAttention-2 against SDPA

Without --data the steps come from the synthetic dataset the tests use (drawn with Pillow).
"""
import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import metrics  # noqa: E402
import replay  # noqa: E402
import train_sft  # noqa: E402

# Qwen2.5-VL-3B-Instruct's published sizes (config.json of the checkpoint), random weights
QWEN25_VL_3B = dict(text=dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                              num_key_value_heads=2, vocab_size=151936, max_position_embeddings=128000,
                              rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                               "mrope_section": [16, 24, 24]}),
                    vision=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                                fullatt_block_indexes=[7, 15, 23, 31], window_size=112, patch_size=14,
                                spatial_merge_size=2, temporal_patch_size=2))


def naive(model, processor, prompts, images, max_new_tokens):
    outs = []
    for p, im in zip(prompts, images):
        enc = processor(text=[p], images=metrics.images_arg(processor, [im]), return_tensors="pt")
        enc = {k: v.to(model.device) for k, v in enc.items()}
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1)
        outs.append(processor.tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True))
    return outs


def batched(model, processor, prompts, images, max_new_tokens, batch_size):
    outs = []
    for b in range(0, len(prompts), batch_size):
        outs += replay.generate(model, processor, prompts[b:b + batch_size], images[b:b + batch_size], max_new_tokens)
    return outs


def timed(fn, *a):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn(*a)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def compare(model, processor, items, opts, args):
    prompts, images = map(list, zip(*(metrics.chat_prompt(processor, ep, k, opts) for ep, k in items)))
    batched(model, processor, prompts[:2], images[:2], 4, 2)  # warm-up: kernels, allocator, lazy imports
    slow, t_naive = timed(naive, model, processor, prompts, images, args.max_new_tokens)
    fast, t_batched = timed(batched, model, processor, prompts, images, args.max_new_tokens, args.batch_size)
    same = sum(a == b for a, b in zip(slow, fast))
    tokens = sum(len(processor.tokenizer(o)["input_ids"]) for o in fast)
    return {"steps": len(items), "naive_steps_per_s": len(items) / t_naive,
            "batched_steps_per_s": len(items) / t_batched, "speedup": t_naive / t_batched, "same_outputs": same,
            "generated_tokens": tokens}


def real_size_model(attn):
    """A random-init model of Qwen2.5-VL-3B's size, with the tiny builder's tokenizer and processor."""
    import transformers as tf
    folder = os.path.join(tempfile.gettempdir(), "mag-bench-tiny")
    processor = tf.AutoProcessor.from_pretrained(train_sft.build_tiny(folder, "qwen2_5_vl"))
    v = processor.tokenizer.get_vocab()
    text = dict(QWEN25_VL_3B["text"], vocab_size=len(v), eos_token_id=v["<|im_end|>"], pad_token_id=v["<|endoftext|>"])
    config = tf.Qwen2_5_VLConfig(text_config=text, vision_config=QWEN25_VL_3B["vision"],
                                 image_token_id=v["<|image_pad|>"], video_token_id=v["<|video_pad|>"],
                                 vision_start_token_id=v["<|vision_start|>"], vision_end_token_id=v["<|vision_end|>"])
    config._attn_implementation = attn
    with torch.device("cuda"):
        model = tf.Qwen2_5_VLForConditionalGeneration(config).to(torch.bfloat16).eval()
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = v["<|im_end|>"], v["<|endoftext|>"]
    return model, processor


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="", help="dataset folder (default: the synthetic test dataset)")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--real", action="store_true", help="CUDA only: Qwen2.5-VL-3B-size model, flash-attention vs SDPA")
    args = p.parse_args()
    torch.manual_seed(0)
    data = args.data
    if not data:
        from conftest import make_toy_dataset
        data = make_toy_dataset(os.path.join(tempfile.mkdtemp(), "toy"), n_episodes=12)
    items = replay.replay_steps(metrics.load_dataset(data), "all")[:args.steps]
    opts = {"grounding": "som", "order": "guide_first", "elements": "text"}
    report = {"data": data, "batch_size": args.batch_size, "max_new_tokens": args.max_new_tokens,
              "threads": torch.get_num_threads()}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, processor, attn = replay.load_model(train_sft.resolve_ckpt("tiny"), device, torch.float32)
    report["tiny"] = dict(compare(model, processor, items, opts, args), attention=attn, device=str(device))
    r = report["tiny"]
    print(f"tiny model ({device}, {attn}): naive {r['naive_steps_per_s']:.2f} steps/s, "
          f"batched {r['batched_steps_per_s']:.2f} steps/s -> {r['speedup']:.2f}x (target >= 3x); "
          f"same outputs {r['same_outputs']}/{r['steps']}")
    if args.real:
        if device.type != "cuda":
            raise SystemExit("--real needs a CUDA GPU")
        for attn in ("flash_attention_2", "sdpa"):
            model, processor = real_size_model(attn)
            r = report[f"qwen2_5_vl_3b_{attn}"] = compare(model, processor, items, opts, args)
            print(f"Qwen2.5-VL-3B size, {attn}: naive {r['naive_steps_per_s']:.2f}, "
                  f"batched {r['batched_steps_per_s']:.2f} steps/s -> {r['speedup']:.2f}x; "
                  f"same outputs {r['same_outputs']}/{r['steps']}; "
                  f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
            del model
            torch.cuda.empty_cache()
        a, b = report["qwen2_5_vl_3b_flash_attention_2"], report["qwen2_5_vl_3b_sdpa"]
        print(f"flash-attention / SDPA (batched): {a['batched_steps_per_s'] / b['batched_steps_per_s']:.2f}x")
    os.makedirs(os.path.join(HERE, "out"), exist_ok=True)
    with open(os.path.join(HERE, "out", "replay_throughput.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
