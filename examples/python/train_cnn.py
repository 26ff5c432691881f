#!/usr/bin/env python3
"""Trains timm's ghostnet_100 to read rendered characters, in bf16 autocast, with optgen's or torch's AdamW.

The data is made here, offline: 32x32 colour images of the 62 digits and ASCII letters, each drawn with Pillow's
default font (FreeType, Pillow >= 10.1) at a random size, shifted and rotated at random, in random colours (light on
dark or dark on light), with Gaussian noise, stored as 8-bit images. Upper and lower case of c, o, s, v, w, x, z and
the like differ only in size, and 0/O/o and 1/I/l barely at all, so the task does not saturate at 100%. GhostNet has
many small tensors (272 of them, 4.0 M values in all): the case where a fused optimizer's launch and host overhead
matter. Both optimizers start from the same init and see the same batches.
"""

import string

import numpy as np
import timm
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw, ImageFont

import common

CLASSES = string.digits + string.ascii_uppercase + string.ascii_lowercase
IMAGE_SIZE = 32
FONT_SIZES = range(14, 29)
MAX_SHIFT = 4  # pixels
MAX_ROTATION = 20  # degrees
NOISE = 20  # standard deviation, in 8-bit levels
BETAS = (0.9, 0.999)


def render_glyphs(labels, rng):
    """White-on-black uint8 glyph masks (N, 32, 32): each character at a random size, shift and rotation."""
    fonts = {size: ImageFont.load_default(size) for size in FONT_SIZES}
    masks = np.empty((len(labels), IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8)
    center = IMAGE_SIZE // 2
    for i, label in enumerate(labels):
        image = Image.new("L", (IMAGE_SIZE, IMAGE_SIZE))
        dx, dy = rng.integers(-MAX_SHIFT, MAX_SHIFT + 1, size=2)
        font = fonts[int(rng.choice(FONT_SIZES))]
        ImageDraw.Draw(image).text((center + dx, center + dy), CLASSES[label], fill=255, font=font, anchor="mm")
        angle = rng.uniform(-MAX_ROTATION, MAX_ROTATION)
        masks[i] = np.asarray(image.rotate(angle, resample=Image.Resampling.BILINEAR))
    return masks


def colorize(masks, rng):
    """RGB uint8 images (N, 3, 32, 32): a glyph in one random colour on another, light on dark or dark on light,
    plus Gaussian noise."""
    count = len(masks)
    dark = rng.uniform(0, 100, size=(count, 3, 1, 1))
    light = rng.uniform(155, 255, size=(count, 3, 1, 1))
    swap = rng.random((count, 1, 1, 1)) < 0.5
    background, foreground = np.where(swap, light, dark), np.where(swap, dark, light)
    alpha = masks[:, None].astype(np.float32) / 255
    images = background + (foreground - background) * alpha + rng.normal(0, NOISE, size=alpha.shape)
    return np.clip(np.rint(images), 0, 255).astype(np.uint8)


def make_dataset(count, seed):
    """`count` labelled images, the same for the same seed: (uint8 images (N, 3, 32, 32), int64 labels (N,))."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(len(CLASSES), size=count)
    return torch.from_numpy(colorize(render_glyphs(labels, rng), rng)), torch.from_numpy(labels)


def normalize(images):
    """uint8 images to floats of about zero mean and unit spread."""
    return (images.float() - 127.5) / 64


class GlyphTask:
    """Random training images for every step, drawn up front; the validation images in order, each scored once."""

    def __init__(self, train, validation, *, batch_size, steps, seed, device):
        generator = torch.Generator().manual_seed(seed)
        self.train_images, self.train_labels = (t.to(device) for t in train)
        self.validation_images, self.validation_labels = (t.to(device) for t in validation)
        self.batch_size = batch_size
        self.indices = torch.randint(len(self.train_labels), (steps, batch_size), generator=generator).to(device)

    def batch(self, step):
        indices = self.indices[step]
        return normalize(self.train_images[indices]), self.train_labels[indices]

    def loss(self, model, inputs, targets):
        return F.cross_entropy(model(inputs), targets)

    def evaluate(self, model):
        loss = correct = 0
        for images, labels in zip(self.validation_images.split(self.batch_size),
                                  self.validation_labels.split(self.batch_size)):
            logits = model(normalize(images)).float()
            loss += F.cross_entropy(logits, labels, reduction="sum")
            correct += (logits.argmax(dim=1) == labels).sum()
        count = len(self.validation_labels)
        return {"val_loss": loss.item() / count, "val_accuracy": correct.item() / count}


def main():
    p = common.parser(__doc__.split("\n\n")[0], model="cnn", steps=500, batch_size=256, lr=2e-3, weight_decay=0.05)
    p.add_argument("--arch", default="ghostnet_100", help="a timm model name")
    p.add_argument("--train-size", type=int, default=20000, help="training images")
    p.add_argument("--val-size", type=int, default=4000, help="validation images")
    args = p.parse_args()
    common.check_args(p, args, "cnn")

    train = make_dataset(args.train_size, seed=args.seed + 1)
    validation = make_dataset(args.val_size, seed=args.seed + 2)
    task = GlyphTask(train, validation, batch_size=args.batch_size, steps=args.steps, seed=args.seed + 3,
                     device=args.device)
    torch.manual_seed(args.seed)
    model = timm.create_model(args.arch, num_classes=len(CLASSES), pretrained=False).to(args.device)
    params, tensors = sum(p.numel() for p in model.parameters()), len(list(model.parameters()))
    print(f"{args.arch}: {params:,} params in {tensors} tensors; "
          f"{args.train_size:,} training and {args.val_size:,} validation images of {len(CLASSES)} characters")
    common.run(task, model, args, betas=BETAS, config={
        "model": "cnn", "classes": len(CLASSES), "image_size": IMAGE_SIZE, "params": params, "tensors": tensors})


if __name__ == "__main__":
    main()
