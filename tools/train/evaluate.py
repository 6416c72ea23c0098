"""Evaluation helpers shared by train.py and eval.py: llama.cpp-style perplexity, the unigram
baseline on the same tokens, and a plain generation loop."""
import math

import torch
import torch.nn.functional as F


def windows(tokens, n_ctx):
    """llama.cpp's perplexity windows: non-overlapping n_ctx-token chunks of the token list
    (the remainder is dropped)."""
    return [tokens[i * n_ctx:(i + 1) * n_ctx] for i in range(len(tokens) // n_ctx)]


def scored_targets(win, n_ctx):
    """The tokens a window scores: positions n_ctx/2 .. n_ctx-2 predict win[n_ctx/2+1 ..]."""
    return win[n_ctx // 2 + 1:]


@torch.no_grad()
def perplexity(model, tokens, bos, n_ctx, max_chunks=None, batch=8):
    """llama.cpp's `perplexity` method. `tokens` is the whole tokenized text with BOS first
    (add_bos). Each window's first token is replaced by BOS (as llama.cpp does when the vocab
    adds BOS), the window is evaluated from position 0, and only its second half is scored:
    logits at positions first = n_ctx/2 .. n_ctx-2 against the next token, n_ctx-1-n_ctx/2
    tokens per window. Returns (ppl, its standard error, tokens scored)."""
    model.freeze()
    wins = windows(tokens, n_ctx)
    if max_chunks is not None:
        wins = wins[:max_chunks]
    first = n_ctx // 2
    nll, nll2, count = 0.0, 0.0, 0
    for b in range(0, len(wins), batch):
        x = torch.tensor([[bos] + w[1:] for w in wins[b:b + batch]])
        tgt = torch.tensor([scored_targets(w, n_ctx) for w in wins[b:b + batch]])
        lp = F.log_softmax(model(x)[:, first:n_ctx - 1].double(), dim=-1)
        tok_nll = -lp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
        nll += tok_nll.sum().item()
        nll2 += (tok_nll * tok_nll).sum().item()
        count += tok_nll.numel()
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    se = ppl * math.sqrt(max(var, 0.0) / (count - 1)) if count > 1 else float("nan")
    return ppl, se, count


def unigram_ppl(train_tokens, tokens, bos, n_ctx, n_vocab):
    """Perplexity of an add-one smoothed unigram model (token frequencies of the training
    split) on exactly the tokens perplexity() scores."""
    counts = torch.bincount(torch.tensor(train_tokens), minlength=n_vocab).double() + 1.0
    logp = torch.log(counts / counts.sum())
    tgt = [t for w in windows(tokens, n_ctx) for t in scored_targets(w, n_ctx)]
    return math.exp(-logp[torch.tensor(tgt)].mean().item())


@torch.no_grad()
def generate(model, ids, n, eos=None, temperature=0.0, top_k=0, seed=0):
    """Continues `ids` by n tokens (greedy when temperature == 0, else temperature / top-k
    sampling with a seeded generator); stops at eos. Returns the new token ids."""
    model.freeze()
    gen = torch.Generator().manual_seed(seed)
    ctx = model.c["max_position_embeddings"]
    seq, out = list(ids), []
    for _ in range(n):
        if len(seq) >= ctx:
            break
        lg = model(torch.tensor([seq]))[0, -1].double()
        if temperature == 0.0:
            t = int(torch.argmax(lg))
        else:
            lg = lg / temperature
            if top_k:
                kth = torch.topk(lg, top_k).values[-1]
                lg = torch.where(lg < kth, torch.tensor(float("-inf"), dtype=lg.dtype), lg)
            t = int(torch.multinomial(torch.softmax(lg, -1), 1, generator=gen))
        if eos is not None and t == eos:
            break
        seq.append(t)
        out.append(t)
    return out
