#!/usr/bin/env python3
"""The peer of `dice bench learner`: DICE's TraceRL update as its reference code lays it out.

transformers Qwen3ForCausalLM (random weights of a shape, bf16, SDPA attention) on reference rows
[prompt (P) | clean response (R) | noisy response copy (R)] with a dense 4-D mask of (P + 2R)^2
(recipe §4.6: prompt and clean block-causal, noisy block b -> clean blocks < b and itself), full-
vocabulary logits at every position (the model's default), log-softmax of the noisy positions'
logits in fp32 gathered at the clean tokens, a PPO-like weighted sum, backward. One row per
forward/backward (DICE's micro-batch 1). Blocks of 4 from position 0 (P a multiple of 4 gives the
recipe's grid). Prints one JSON line: row tokens/s, seconds per row, peak memory.
--profile prints torch.profiler's top operators (CUDA time) to stderr.
"""
import argparse
import json
import sys
import time

import torch

SHAPES = {  # hidden, layers, heads, kv_heads, head_dim, ffn
    "sdar-1.7b": (2048, 28, 16, 8, 128, 6144),
    "sdar-4b": (2560, 36, 32, 8, 128, 9728),
    "sdar-8b": (4096, 36, 32, 8, 128, 12288),
    "tiny": (64, 2, 4, 2, 16, 128),
}
VOCAB = 151936
BLOCK = 4


def make_model(shape, dtype, device, checkpoint):
    import transformers
    from transformers import Qwen3Config, Qwen3ForCausalLM
    h, n, q, kv, hd, ffn = SHAPES[shape]
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=h, num_hidden_layers=n, num_attention_heads=q,
                      num_key_value_heads=kv, head_dim=hd, intermediate_size=ffn, rms_norm_eps=1e-6,
                      rope_theta=1e6, max_position_embeddings=32768, tie_word_embeddings=False,
                      attn_implementation="sdpa", torch_dtype=dtype, use_cache=False)
    with torch.device(device):
        m = Qwen3ForCausalLM(cfg).to(dtype)
    if checkpoint:
        m.gradient_checkpointing_enable()
    m.train()
    return m, f"transformers {transformers.__version__} Qwen3ForCausalLM sdpa {dtype}".replace("torch.", "")


def reference_row(P, R, device):
    """Row layout: positions, the bool mask [T, T] (true = attend), noisy index range."""
    T = P + 2 * R
    pos_clean = torch.arange(P + R, device=device)
    pos = torch.cat([pos_clean, pos_clean[P:]])
    blk = pos // BLOCK
    noisy = torch.zeros(T, dtype=torch.bool, device=device)
    noisy[P + R:] = True
    qb, kb = blk[:, None], blk[None, :]
    qn, kn = noisy[:, None], noisy[None, :]
    idx = torch.arange(T, device=device)
    same_copy_block = (kb == qb) & kn
    clean_view = ~kn & (kb <= qb)
    noisy_view = (~kn & (kb < qb)) | same_copy_block
    allow = torch.where(qn, noisy_view, clean_view) | (idx[:, None] == idx[None, :])
    return pos, allow, noisy


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="sdar-1.7b")
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--response-len", type=int, default=4096)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--checkpoint", action="store_true", help="gradient checkpointing (DICE's setting)")
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    if a.shape == "tiny":
        global VOCAB
        VOCAB = 512
    torch.manual_seed(0)
    model, impl = make_model(a.shape, dtype, dev, a.checkpoint)
    P, R = a.prompt_len, a.response_len
    T = P + 2 * R
    pos, allow, noisy = reference_row(P, R, dev)
    mask = torch.zeros((1, 1, T, T), dtype=dtype, device=dev)
    mask.masked_fill_(~allow[None, None], torch.finfo(dtype).min)
    del allow
    g = torch.Generator(device=dev).manual_seed(1)
    clean = torch.randint(0, VOCAB - 300, (P + R,), device=dev, generator=g)
    # One round's row: a quarter of the response is the target, masked in the noisy copy.
    target = torch.rand(R, device=dev, generator=g) < 0.25
    noisy_ids = torch.where(target, torch.full_like(clean[P:], VOCAB - 267), clean[P:])
    ids = torch.cat([clean, noisy_ids])[None]
    tgt_pos = (P + R + torch.nonzero(target).squeeze(1))
    tgt_tok = clean[P:][target]
    adv = torch.randn(tgt_pos.numel(), device=dev, generator=g)

    def step():
        out = model(input_ids=ids, position_ids=pos[None], attention_mask=mask, use_cache=False)
        lp = torch.log_softmax(out.logits[0, tgt_pos].float(), -1).gather(1, tgt_tok[:, None]).squeeze(1)
        loss = -(lp * adv).sum() / R
        loss.backward()

    step()  # warm-up
    model.zero_grad(set_to_none=False)
    if dev == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    for _ in range(a.rows):
        step()
    if dev == "cuda":
        torch.cuda.synchronize()
    sec = time.perf_counter() - t
    res = {"impl": impl, "shape": a.shape, "row_tokens": T, "rows": a.rows, "seconds": sec,
           "seconds_per_row": sec / a.rows, "row_tokens_per_s": a.rows * T / sec, "checkpoint": a.checkpoint,
           "peak_bytes": torch.cuda.max_memory_allocated() if dev == "cuda" else -1}
    if a.profile:
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
        with profile(activities=acts) as prof:
            step()
            if dev == "cuda":
                torch.cuda.synchronize()
        key = "cuda_time_total" if dev == "cuda" else "cpu_time_total"
        try:
            table = prof.key_averages().table(sort_by=key, row_limit=18)
        except Exception:  # newer torch names it device_time_total
            table = prof.key_averages().table(sort_by="device_time_total", row_limit=18)
        print(table, file=sys.stderr)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
