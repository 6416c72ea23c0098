#!/usr/bin/env python3
"""Trains a small BitNet b1.58 model (2B-4T architecture family) on Shakespeare, on the CPU,
and writes a Hugging Face-format checkpoint plus a reference file of its own logits.

    python3 tools/train/train.py --seed 1 --out models/shakespeare-hf --ref models/shakespeare-ref

Recipe (BitNet b1.58): latent f32 weights; in every forward pass each projection is ternarized
per matrix (absmean) and its input quantized to int8 per token (absmax), with straight-through
gradients (tools/train/model.py has the exact math). Embedding / tied head and norms stay in
full precision. AdamW, linear warmup then cosine decay, gradient clipping.

Everything is deterministic for a given --seed, torch version and thread count (--threads,
default 1): the tokenizer, the initialization, the order of the training windows.

At the end the latent weights are rounded to bf16 (what model.safetensors stores), and every
figure and logit this script reports is computed from those rounded weights, ternarized
exactly as a converter would (absmean of the bf16 values).
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
from evaluate import generate, perplexity, unigram_ppl  # noqa: E402
from model import Model  # noqa: E402

REF_PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?\n"
SAMPLE_PROMPTS = ["ROMEO:\n", "First Citizen:\n", "KING RICHARD III:\nNow is the winter of our discontent\n"]

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ message['role'] | capitalize + ': ' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant: ' }}{% endif %}"
)


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="models/shakespeare-hf", help="Hugging Face checkpoint directory")
    p.add_argument("--ref", default="models/shakespeare-ref", help="reference logits / figures directory")
    p.add_argument("--text", default=data.DEFAULT_TEXT)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=512)
    p.add_argument("--ctx", type=int, default=256, help="training window (tokens, BOS included)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--min-lr", type=float, default=3e-4)
    p.add_argument("--wd", type=float, default=0.05)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    return p.parse_args()


def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    t = (step - a.warmup) / max(1, a.steps - a.warmup)
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * t))


def save_hf(model, tok, cfg, out, a):
    from safetensors.torch import save_file

    os.makedirs(out, exist_ok=True)
    sd = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.hf_state_dict().items()}
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    tok.save(os.path.join(out, "tokenizer.json"))
    added = {
        str(tok.token_to_id(t)): {
            "content": t, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": True,
        }
        for t in data.SPECIALS
    }
    tcfg = {
        "added_tokens_decoder": added,
        "bos_token": data.BOS,
        "eos_token": data.EOS,
        "pad_token": data.EOS,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": cfg["max_position_embeddings"],
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": data.BOS, "eos_token": data.EOS, "pad_token": data.EOS}, f, indent=2)
        f.write("\n")
    gcfg = {
        "bos_token_id": cfg["bos_token_id"],
        "eos_token_id": [cfg["eos_token_id"], tok.token_to_id(data.EOT)],
        "do_sample": True,
        "temperature": 0.8,
        "top_k": 40,
        "max_length": cfg["max_position_embeddings"],
    }
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(gcfg, f, indent=2)
        f.write("\n")


def main():
    a = parse()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t0 = time.time()

    text = open(a.text, encoding="utf-8").read()
    train_text, held_text = data.split(text)
    tok = data.train_tokenizer(train_text, a.vocab)
    bos, eos = tok.token_to_id(data.BOS), tok.token_to_id(data.EOS)
    train_ids = torch.tensor(tok.encode(train_text, add_special_tokens=False).ids, dtype=torch.long)
    held_ids = tok.encode(held_text).ids  # BOS first, as llama.cpp's perplexity tokenizes
    print(f"text: {len(train_text)} train chars -> {len(train_ids)} tokens, "
          f"{len(held_text)} held-out chars -> {len(held_ids)} tokens; vocab {tok.get_vocab_size()}", flush=True)

    cfg = {
        "architectures": ["BitNetForCausalLM"],
        "model_type": "bitnet",
        "hidden_act": "relu2",
        "hidden_size": a.hidden,
        "intermediate_size": a.ffn,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.hidden // a.heads,
        "vocab_size": tok.get_vocab_size(),
        "max_position_embeddings": a.ctx,
        "rms_norm_eps": 1e-5,
        "rope_theta": a.rope_theta,
        "tie_word_embeddings": True,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }
    model = Model(cfg)
    gen = torch.Generator().manual_seed(a.seed)
    model.init_weights(gen, cfg["initializer_range"])
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params} parameters; config {json.dumps({k: cfg[k] for k in list(cfg)[3:14]})}", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
        lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
    )

    # Training windows: BOS + ctx-1 tokens of text at a random offset; the targets are the
    # next tokens (the BOS position predicts the window's first token).
    n_win = len(train_ids) - a.ctx
    bos_col = torch.full((a.batch, 1), bos, dtype=torch.long)
    log = []
    model.train()
    t_train = time.time()
    ema = None
    for step in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        off = torch.randint(0, n_win, (a.batch,), generator=gen)
        win = torch.stack([train_ids[o:o + a.ctx] for o in off.tolist()])
        x = torch.cat([bos_col, win[:, :-1]], dim=1)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), win.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % 25 == 0 or step == a.steps - 1:
            el = time.time() - t_train
            print(f"step {step:5d}  loss {loss.item():.4f}  (ema {ema:.4f})  lr {lr_at(step, a):.2e}  "
                  f"{el:6.0f}s  {(step + 1) * a.batch * a.ctx / el:.0f} tok/s", flush=True)
        if (step + 1) % a.eval_every == 0 and step + 1 < a.steps:
            model.eval()
            with torch.no_grad():
                ppl, _, n = perplexity(model, held_ids, bos, a.ctx, max_chunks=40)
            model.unfreeze()
            model.train()
            print(f"  eval step {step + 1}: held-out ppl {ppl:.3f} (first 40 windows, {n} tokens)", flush=True)
            log.append({"step": step + 1, "train_loss_ema": ema, "heldout_ppl_40": ppl})
    train_s = time.time() - t_train

    # Round the latent weights to bf16 (what the checkpoint stores) and evaluate from them.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    model.eval()
    model.freeze()
    with torch.no_grad():
        ppl, se, n_scored = perplexity(model, held_ids, bos, a.ctx)
        uni = unigram_ppl(train_ids.tolist(), held_ids, bos, a.ctx, cfg["vocab_size"])
    print(f"held-out ppl {ppl:.4f} +/- {se:.4f} over {n_scored} tokens (n_ctx {a.ctx}); unigram {uni:.3f}", flush=True)

    save_hf(model, tok, cfg, a.out, a)

    # Reference: the trainer's logits for a fixed prompt, and its greedy continuation.
    os.makedirs(a.ref, exist_ok=True)
    ref_ids = tok.encode(REF_PROMPT).ids
    with torch.no_grad():
        lg = model(torch.tensor([ref_ids]))[0].float()
    lg.numpy().astype("<f4").tofile(os.path.join(a.ref, "logits.f32"))
    greedy = generate(model, ref_ids, 64, eos=eos, temperature=0.0)
    samples = []
    for i, sp in enumerate(SAMPLE_PROMPTS):
        ids = tok.encode(sp).ids
        out = generate(model, ids, 160, eos=eos, temperature=0.8, top_k=40, seed=a.seed * 1000 + i)
        samples.append({"prompt": sp, "seed": a.seed * 1000 + i, "temperature": 0.8, "top_k": 40,
                        "text": sp + tok.decode(out)})
    with open(os.path.join(a.ref, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(held_text)
    final_loss = ema
    info = {
        "prompt": REF_PROMPT,
        "tokens": ref_ids,
        "n_vocab": cfg["vocab_size"],
        "logits_file": "logits.f32",
        "logits_layout": "float32 little-endian [n_tokens][n_vocab], every position of `tokens`",
        "greedy_tokens": greedy,
        "greedy_text": tok.decode(greedy),
        "heldout_file": "heldout.txt",
        "heldout_ppl": ppl,
        "heldout_ppl_stderr": se,
        "heldout_scored_tokens": n_scored,
        "heldout_n_ctx": a.ctx,
        "heldout_method": "llama.cpp perplexity: BOS + tokens of heldout.txt, non-overlapping windows of "
                          "n_ctx tokens (remainder dropped), window's first token replaced by BOS, "
                          "positions n_ctx/2 .. n_ctx-2 predict the next token",
        "unigram_ppl": uni,
        "unigram_method": "add-one smoothed token frequencies of the training split, on the same scored tokens",
        "train_loss_final_ema": final_loss,
        "train_seconds": round(train_s, 1),
        "total_seconds": round(time.time() - t0, 1),
        "threads": a.threads,
        "seed": a.seed,
        "args": vars(a),
        "torch": torch.__version__,
        "parameters": n_params,
        "eval_log": log,
        "samples": samples,
    }
    with open(os.path.join(a.ref, "reference.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    print(f"greedy: {REF_PROMPT!r} -> {tok.decode(greedy)!r}")
    for s in samples:
        print("-----\n" + s["text"])
    print(f"done in {time.time() - t0:.0f}s (training {train_s:.0f}s); wrote {a.out} and {a.ref}")


if __name__ == "__main__":
    main()
