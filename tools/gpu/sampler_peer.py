#!/usr/bin/env python3
"""The peer of `dice bench sample`: a straightforward PyTorch SDAR-style block-diffusion loop.

HF transformers Qwen3 forward with explicit 4-D masks and a DynamicCache, one Python step per
denoising iteration, static schedule (block 4 / 4 steps -> 1 token per step), as the SDAR
reference `generate.py` does it:
  - full prompt blocks prefilled with a block-causal mask;
  - each denoising step runs the block against the cache (bidirectional in the block), then the
    cache is cropped back (the block's K/V are not kept);
  - when the block has no masks, one more forward of the final block keeps its K/V.
Greedy (temperature 0): token = argmax, confidence = softmax(logits)[token], ties leftmost,
which is the rule dice uses, so greedy tokens can be compared one for one.

Modes:
  bench:  random weights of a shape, B prompts of one length; prints one JSON line with tok/s.
  greedy: loads an HF folder (written by `dice bench sample --write-model`), decodes the prompts
          of a JSON file one at a time, writes {"responses": [[ids...], ...], "step_maps": ...}.
If transformers is missing, a small PyTorch Qwen3 written here is used instead (reported).
"""
import argparse
import json
import math
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
MASK_ID = 151669


# ---- model -----------------------------------------------------------------------------------
def make_hf_model(shape, dtype, device, model_dir=None):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    if model_dir:
        m = Qwen3ForCausalLM.from_pretrained(model_dir, torch_dtype=dtype, attn_implementation="sdpa")
        return m.to(device).eval()
    h, n, q, kv, hd, ffn = SHAPES[shape]
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=h, num_hidden_layers=n, num_attention_heads=q,
                      num_key_value_heads=kv, head_dim=hd, intermediate_size=ffn, rms_norm_eps=1e-6,
                      rope_theta=1e6, max_position_embeddings=32768, tie_word_embeddings=False,
                      attn_implementation="sdpa", torch_dtype=dtype)
    with torch.device(device):
        m = Qwen3ForCausalLM(cfg).to(dtype)
    return m.eval()


class HFRunner:
    """Forward of the block against a DynamicCache; keep=False crops the new K/V away again."""

    def __init__(self, model):
        from transformers import DynamicCache
        self.model = model
        self.cache = DynamicCache()
        self.min = torch.finfo(model.dtype).min

    def reset(self):
        from transformers import DynamicCache
        self.cache = DynamicCache()

    def forward(self, ids, start, allow, keep, want_logits=True):
        # ids [B, L] at positions start..start+L-1; allow: bool [L, start+L] (true = attend)
        B, L = ids.shape
        pos = torch.arange(start, start + L, device=ids.device).unsqueeze(0).expand(B, L)
        mask = torch.zeros(allow.shape, dtype=self.model.dtype, device=ids.device)
        mask.masked_fill_(~allow, self.min)
        mask = mask[None, None].expand(B, 1, *allow.shape)
        out = self.model(input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=self.cache,
                         use_cache=True, logits_to_keep=L if want_logits else 1)
        if not keep:
            self.cache.crop(start)
        return out.logits if want_logits else None


class OwnQwen3(torch.nn.Module):
    """Fallback when transformers is missing: the same architecture in plain PyTorch."""

    def __init__(self, shape, dtype, device, weights=None):
        super().__init__()
        h, n, q, kv, hd, ffn = SHAPES[shape]
        self.h, self.n, self.q, self.kv, self.hd = h, n, q, kv, hd
        o = dict(dtype=dtype, device=device)
        r = lambda *s: torch.randn(*s, **o) * 0.02
        self.embed = r(VOCAB, h)
        self.layers = [dict(ln1=torch.ones(h, **o), ln2=torch.ones(h, **o), qn=torch.ones(hd, **o),
                            kn=torch.ones(hd, **o), wq=r(q * hd, h), wk=r(kv * hd, h), wv=r(kv * hd, h),
                            wo=r(h, q * hd), wg=r(ffn, h), wu=r(ffn, h), wd=r(h, ffn)) for _ in range(n)]
        self.norm = torch.ones(h, **o)
        self.lm_head = r(VOCAB, h)
        self.inv_freq = 1.0 / (1e6 ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))
        self.dtype = dtype

    @staticmethod
    def from_hf_dir(model_dir, dtype, device):
        """Reads config.json and safetensors (one file or an index of shards) without transformers."""
        import os
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        shape = "hf"
        SHAPES[shape] = (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"],
                         cfg["num_key_value_heads"], cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"]),
                         cfg["intermediate_size"])
        global VOCAB
        VOCAB = cfg["vocab_size"]
        index = os.path.join(model_dir, "model.safetensors.index.json")
        files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
        kinds = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
        w = {}
        for f in files:
            raw = open(os.path.join(model_dir, f), "rb").read()
            n = int.from_bytes(raw[:8], "little")
            header = json.loads(raw[8:8 + n])
            for name, e in header.items():
                if name == "__metadata__":
                    continue
                b, end = e["data_offsets"]
                buf = bytearray(raw[8 + n + b: 8 + n + end])
                t = torch.frombuffer(buf, dtype=kinds[e["dtype"]]) if len(buf) else torch.empty(0)
                w[name] = t.reshape(e["shape"]).to(device=device, dtype=dtype)
        m = OwnQwen3(shape, dtype, device)
        m.embed = w["model.embed_tokens.weight"]
        m.norm = w["model.norm.weight"]
        m.lm_head = w.get("lm_head.weight", m.embed)
        names = dict(ln1="input_layernorm", ln2="post_attention_layernorm", qn="self_attn.q_norm",
                     kn="self_attn.k_norm", wq="self_attn.q_proj", wk="self_attn.k_proj", wv="self_attn.v_proj",
                     wo="self_attn.o_proj", wg="mlp.gate_proj", wu="mlp.up_proj", wd="mlp.down_proj")
        for i, layer in enumerate(m.layers):
            for k, hf in names.items():
                layer[k] = w[f"model.layers.{i}.{hf}.weight"]
        return m, cfg.get("mask_token_id", MASK_ID)

    @staticmethod
    def rms(x, w):
        xf = x.float()
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def attention(q, k, v, allow):
    if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allow)
    s = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])  # torch < 2.0
    s = s.masked_fill(~allow, float("-inf"))
    return torch.softmax(s, -1).to(v.dtype) @ v


class OwnRunner:
    def __init__(self, model):
        self.m = model
        self.k = [None] * model.n
        self.v = [None] * model.n

    def reset(self):
        self.k = [None] * self.m.n
        self.v = [None] * self.m.n

    def forward(self, ids, start, allow, keep, want_logits=True):
        m = self.m
        B, L = ids.shape
        pos = torch.arange(start, start + L, device=ids.device, dtype=torch.float32)
        f = pos[:, None] * m.inv_freq[None]
        emb = torch.cat([f, f], -1)
        cos, sin = emb.cos().to(m.dtype), emb.sin().to(m.dtype)
        rot = lambda t: torch.cat([-t[..., t.shape[-1] // 2:], t[..., : t.shape[-1] // 2]], -1)
        x = m.embed[ids]
        for i, w in enumerate(m.layers):
            y = m.rms(x, w["ln1"])
            qh = m.rms((y @ w["wq"].T).view(B, L, m.q, m.hd), w["qn"]).transpose(1, 2)
            kh = m.rms((y @ w["wk"].T).view(B, L, m.kv, m.hd), w["kn"]).transpose(1, 2)
            vh = (y @ w["wv"].T).view(B, L, m.kv, m.hd).transpose(1, 2)
            qh, kh = qh * cos + rot(qh) * sin, kh * cos + rot(kh) * sin
            K = kh if self.k[i] is None else torch.cat([self.k[i], kh], 2)
            V = vh if self.v[i] is None else torch.cat([self.v[i], vh], 2)
            if keep:
                self.k[i], self.v[i] = K, V
            rep = m.q // m.kv
            o = attention(qh, K.repeat_interleave(rep, 1), V.repeat_interleave(rep, 1), allow)
            x = x + o.transpose(1, 2).reshape(B, L, -1) @ w["wo"].T
            y = m.rms(x, w["ln2"])
            x = x + (torch.nn.functional.silu(y @ w["wg"].T) * (y @ w["wu"].T)) @ w["wd"].T
        return m.rms(x, m.norm) @ m.lm_head.T if want_logits else None


# ---- the SDAR loop ---------------------------------------------------------------------------
def transfer_counts(n_masked, steps):
    base, rem = divmod(n_masked, steps)
    return [base + (1 if s < rem else 0) for s in range(steps)]


@torch.no_grad()
def generate(runner, prompt, max_new, block=4, steps=4, temperature=0.0, mask_id=MASK_ID, gen=None):
    """prompt: int64 [B, L] (one length for the batch). Returns (tokens [B, n], step_map [B, n])."""
    B, L = prompt.shape
    dev = prompt.device
    runner.reset()
    full = L // block * block
    if full > 0:
        idx = torch.arange(full, device=dev) // block
        runner.forward(prompt[:, :full], 0, idx[:, None] >= idx[None, :], keep=True, want_logits=False)
    cur = full
    blk = torch.full((B, block), mask_id, dtype=torch.long, device=dev)
    blk[:, : L - full] = prompt[:, full:]
    first = L - full
    out_tok, out_step = [], []
    gstep = 0
    n_gen = 0
    iota = torch.arange(block, device=dev)
    while n_gen < max_new:
        masked = blk == mask_id
        masked[:, :first] = False
        steps_map = torch.full((B, block), -1, dtype=torch.long, device=dev)
        allow = torch.ones(block, cur + block, dtype=torch.bool, device=dev)
        for k in transfer_counts(block - first, steps):
            if k == 0:
                break
            logits = runner.forward(blk, cur, allow, keep=False).float()
            if temperature <= 0:
                x0 = logits.argmax(-1)
                conf = (logits.gather(-1, x0[..., None]).squeeze(-1) - logits.logsumexp(-1)).exp()
            else:
                p = torch.softmax(logits / temperature, -1)
                x0 = torch.multinomial(p.view(-1, p.shape[-1]), 1, generator=gen).view(B, block)
                conf = p.gather(-1, x0[..., None]).squeeze(-1)
            conf = torch.where(masked, conf, torch.full_like(conf, -1.0))
            order = torch.sort(conf, dim=1, descending=True, stable=True).indices
            rank = torch.empty_like(order).scatter_(1, order, iota.expand(B, block))
            sel = masked & (rank < k)
            blk = torch.where(sel, x0, blk)
            steps_map = torch.where(sel, torch.full_like(steps_map, gstep), steps_map)
            masked = masked & ~sel
            gstep += 1
        runner.forward(blk, cur, allow, keep=True, want_logits=False)  # commit the final block
        out_tok.append(blk[:, first:])
        out_step.append(steps_map[:, first:])
        n_gen += block - first
        first = 0
        cur += block
        blk = torch.full((B, block), mask_id, dtype=torch.long, device=dev)
    return torch.cat(out_tok, 1)[:, :max_new], torch.cat(out_step, 1)[:, :max_new]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["bench", "greedy"], default="bench")
    ap.add_argument("--shape", default="sdar-1.7b")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--max-new", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--model-dir", default="")
    ap.add_argument("--prompts", default="", help="greedy: JSON list of prompt id lists")
    ap.add_argument("--out", default="")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--own", action="store_true", help="use the plain PyTorch Qwen3 instead of transformers")
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, a.dtype)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    impl = "transformers"
    mask_id = MASK_ID
    try:
        if a.own:
            raise ImportError("--own")
        model = make_hf_model(a.shape, dtype, dev, a.model_dir or None)
        runner = HFRunner(model)
        if a.model_dir:
            mask_id = json.load(open(a.model_dir + "/config.json")).get("mask_token_id", MASK_ID)
    except ImportError:
        impl = "own-pytorch"
        if a.model_dir:
            own, mask_id = OwnQwen3.from_hf_dir(a.model_dir, dtype, dev)
        else:
            own = OwnQwen3(a.shape, dtype, dev)
        runner = OwnRunner(own)
    print(f"sampler_peer: {impl} model on {dev}", file=sys.stderr)
    if a.mode == "greedy":
        prompts = json.load(open(a.prompts))
        res, maps = [], []
        for p in prompts:
            t, s = generate(runner, torch.tensor([p], device=dev), a.max_new, temperature=0.0, mask_id=mask_id)
            res.append(t[0].tolist())
            maps.append(s[0].tolist())
        json.dump({"impl": impl, "responses": res, "step_maps": maps}, open(a.out, "w"))
        return
    g = torch.Generator(device=dev)
    g.manual_seed(0)
    prompt = torch.randint(0, 151643, (a.batch, a.prompt_len), device=dev, generator=g)
    generate(runner, prompt[:, : min(a.prompt_len, 64)], 8, temperature=a.temperature, gen=g)  # warm-up
    if dev == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    tok, _ = generate(runner, prompt, a.max_new, temperature=a.temperature, gen=g)
    if dev == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    n = tok.numel()
    print(json.dumps({"impl": impl, "shape": a.shape, "batch": a.batch, "prompt_len": a.prompt_len,
                      "max_new": a.max_new, "tokens": n, "seconds": dt, "tokens_per_s": n / dt}))


if __name__ == "__main__":
    main()
