#!/usr/bin/env python3
"""Writes a large synthetic Hugging Face checkpoint for measuring bitnet-convert's time and
peak memory (standard library only, no numpy / torch).

Shapes are BitNet b1.58 2B-4T's (hidden 2560, 30 layers, 20/5 heads, ffn 6912, vocab
128256, relu2, tied embedding). Two formats:
  bf16    : the bf16 master-weight release (every tensor bf16): ~4.8 GB, 2.4 B values
  packed  : the packed release (projections uint8 [out/4, in] + bf16 weight_scale)
Values are random with a bounded exponent (never NaN/Inf); the model is noise, only the
sizes matter. The tokenizer is the golden tiny checkpoint's tokenizer.model, so the vocab
is padded from 32000 to 128256 ids.

usage: gen-big-checkpoint.py OUT_DIR [bf16|packed] [--layers N] [--shards N]
"""
import json, os, shutil, struct, sys

E, L, H, KV, FF, V = 2560, 30, 20, 5, 6912, 128256
HD = E // H

args = sys.argv[1:]
if not args:
    sys.exit(__doc__)
out = args[0]
fmt = args[1] if len(args) > 1 and not args[1].startswith("--") else "bf16"
if "--layers" in args:
    L = int(args[args.index("--layers") + 1])
shards = int(args[args.index("--shards") + 1]) if "--shards" in args else 1
os.makedirs(out, exist_ok=True)

# High byte of a little-endian bf16: keep the sign, force exponent 120 (|x| in [2^-7, 2^-6)).
BF16_HI = bytes(((b & 0x80) | 0x3C) for b in range(256))
# Packed trits: each 2-bit code must be 0, 1 or 2 (map code 3 to 1).
PACKED = bytes(sum((((b >> (2 * i)) & 3) if ((b >> (2 * i)) & 3) != 3 else 1) << (2 * i) for i in range(4)) for b in range(256))


def bf16_bytes(n):
    a = bytearray(os.urandom(2 * n))
    a[1::2] = a[1::2].translate(BF16_HI)
    return a


def tensors():
    """(name, dtype, shape, byte count, generator of the bytes)"""
    yield "model.embed_tokens.weight", "BF16", [V, E]
    for l in range(L):
        p = f"model.layers.{l}."
        for n, shape in [("input_layernorm", [E]), ("post_attention_layernorm", [E]),
                         ("self_attn.attn_sub_norm", [E]), ("mlp.ffn_sub_norm", [FF])]:
            yield p + n + ".weight", "BF16", shape
        for n, shape in [("self_attn.q_proj", [E, E]), ("self_attn.k_proj", [KV * HD, E]),
                         ("self_attn.v_proj", [KV * HD, E]), ("self_attn.o_proj", [E, E]),
                         ("mlp.gate_proj", [FF, E]), ("mlp.up_proj", [FF, E]), ("mlp.down_proj", [E, FF])]:
            if fmt == "packed":
                yield p + n + ".weight", "U8", [shape[0] // 4, shape[1]]
                yield p + n + ".weight_scale", "BF16", [1]
            else:
                yield p + n + ".weight", "BF16", shape
    yield "model.norm.weight", "BF16", [E]


def nbytes(dtype, shape):
    n = 1
    for d in shape:
        n *= d
    return n * (1 if dtype == "U8" else 2)


def write_chunked(f, dtype, n_bytes, name):
    chunk = 64 << 20
    done = 0
    while done < n_bytes:
        m = min(chunk, n_bytes - done)
        if dtype == "U8":
            f.write(os.urandom(m).translate(PACKED))
        elif name.endswith("weight_scale"):
            f.write(struct.pack("<f", 40.0)[2:])  # bf16 40.0: scale 1/40
        else:
            f.write(bf16_bytes(m // 2))
        done += m


specs = list(tensors())
groups = [specs[i::shards] for i in range(shards)] if shards > 1 else [specs]
weight_map, total = {}, 0
for k, group in enumerate(groups):
    fname = "model.safetensors" if shards == 1 else f"model-{k + 1:05}-of-{shards:05}.safetensors"
    header, off = {}, 0
    for name, dtype, shape in group:
        n = nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
        weight_map[name] = fname
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, fname), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name, dtype, shape in group:
            write_chunked(f, dtype, nbytes(dtype, shape), name)
    total += off
    print(f"{fname}: {off / 2**30:.2f} GiB", file=sys.stderr)
if shards > 1:
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)

cfg = {"architectures": ["BitNetForCausalLM"], "model_type": "bitnet", "hidden_act": "relu2",
       "hidden_size": E, "intermediate_size": FF, "num_hidden_layers": L, "num_attention_heads": H,
       "num_key_value_heads": KV, "vocab_size": V, "max_position_embeddings": 4096,
       "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": True,
       "bos_token_id": 1, "eos_token_id": 2}
if fmt == "packed":
    cfg["quantization_config"] = {"quant_method": "bitnet", "linear_class": "bitlinear"}
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
here = os.path.dirname(os.path.abspath(__file__))
spm = os.path.join(here, "../../../testdata/golden/hf/bitnet-tiny-hf/tokenizer.model")
shutil.copy(spm, os.path.join(out, "tokenizer.model"))
print(f"total {total / 2**30:.2f} GiB in {out}", file=sys.stderr)
