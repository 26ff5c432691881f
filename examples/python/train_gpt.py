#!/usr/bin/env python3
"""Trains a small GPT on Python's own documentation, byte by byte, in bf16 autocast, with optgen's or torch's AdamW.

The corpus is pydoc_data.topics.topics, the reference manual's prose that ships with every CPython (what help("if")
prints): its topics in sorted order, joined; the first 90% of the bytes train, the last 10% validate. The model is a
decoder-only transformer (pre-norm blocks, causal attention through scaled_dot_product_attention, GELU MLP) with fp32
params, trained under torch.autocast(bfloat16). Both optimizers start from the same init and see the same batches.
"""

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

import common

BETAS = (0.9, 0.99)


@dataclass
class GPTConfig:
    vocab_size: int = 256  # bytes
    context: int = 256
    layers: int = 6
    heads: int = 6
    width: int = 384


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.heads = config.heads
        # No bias: the keys' would get no gradient (softmax ignores a shift common to a row's logits) but round-off,
        # which Adam scales up to full-size steps of noise.
        self.qkv = nn.Linear(config.width, 3 * config.width, bias=False)
        self.proj = nn.Linear(config.width, config.width)

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(width, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.width)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.width)
        self.mlp = nn.Sequential(nn.Linear(config.width, 4 * config.width), nn.GELU(),
                                 nn.Linear(4 * config.width, config.width))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.token = nn.Embedding(config.vocab_size, config.width)
        self.position = nn.Embedding(config.context, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(module):
        """GPT-2's init: N(0, 0.02) weights, zero biases."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token(tokens) + self.position(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def load_corpus(validation_fraction=0.1):
    """pydoc_data's topics as bytes (uint8 tensors): (train, validation)."""
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[name] for name in sorted(topics)).encode()
    data = torch.frombuffer(bytearray(text), dtype=torch.uint8)
    split = int(len(data) * (1 - validation_fraction))
    return data[:split], data[split:]


def windows(data, starts, length):
    """Token windows data[s : s + length] for every s in starts, as int64 for the embedding."""
    return data[starts[:, None] + torch.arange(length, device=data.device)].long()


def next_byte_loss(model, inputs, targets):
    logits = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class TextTask:
    """Random windows of the training bytes, drawn for every step up front; the validation bytes in consecutive,
    non-overlapping windows, each scored once."""

    def __init__(self, train, validation, *, context, batch_size, steps, seed, device):
        generator = torch.Generator().manual_seed(seed)
        self.train = train.to(device)
        self.validation = validation.to(device)
        self.context = context
        self.batch_size = batch_size
        self.starts = torch.randint(len(train) - context, (steps, batch_size), generator=generator).to(device)

    def batch(self, step):
        tokens = windows(self.train, self.starts[step], self.context + 1)
        return tokens[:, :-1], tokens[:, 1:]

    def loss(self, model, inputs, targets):
        return next_byte_loss(model, inputs, targets)

    def evaluate(self, model):
        starts = torch.arange(0, len(self.validation) - self.context, self.context, device=self.validation.device)
        total = 0.0
        for chunk in starts.split(self.batch_size):
            tokens = windows(self.validation, chunk, self.context + 1)
            total += next_byte_loss(model, tokens[:, :-1], tokens[:, 1:]).item() * len(chunk)
        return {"val_loss": total / len(starts)}


def main():
    p = common.parser(__doc__.split("\n\n")[0], model="gpt", steps=500, batch_size=64, lr=1e-3, weight_decay=0.1)
    defaults = GPTConfig()
    p.add_argument("--context", type=int, default=defaults.context, help="tokens (bytes) per sequence")
    p.add_argument("--layers", type=int, default=defaults.layers)
    p.add_argument("--heads", type=int, default=defaults.heads)
    p.add_argument("--width", type=int, default=defaults.width, help="model width, a multiple of --heads")
    args = p.parse_args()
    common.check_args(p, args, "gpt")
    if args.width % args.heads:
        p.error("--width must be a multiple of --heads")

    config = GPTConfig(context=args.context, layers=args.layers, heads=args.heads, width=args.width)
    train, validation = load_corpus()
    task = TextTask(train, validation, context=args.context, batch_size=args.batch_size, steps=args.steps,
                    seed=args.seed + 1, device=args.device)
    torch.manual_seed(args.seed)
    model = GPT(config).to(args.device)
    params, tensors = sum(p.numel() for p in model.parameters()), len(list(model.parameters()))
    print(f"GPT {asdict(config)}: {params:,} params in {tensors} tensors; "
          f"{len(train):,} training and {len(validation):,} validation bytes")
    common.run(task, model, args, betas=BETAS, config={
        "model": "gpt", "vocab_size": config.vocab_size, "params": params, "tensors": tensors,
        "train_bytes": len(train), "validation_bytes": len(validation)}, hidden_matrices=hidden_matrices)


def hidden_matrices(model):
    """What Muon steps: the blocks' 2-D weights (attention and MLP), not the token and position embeddings, the
    output head or the norms (KellerJordan/Muon's split)."""
    return [p for name, p in model.named_parameters() if p.ndim == 2 and name.startswith("blocks.")]


if __name__ == "__main__":
    main()
