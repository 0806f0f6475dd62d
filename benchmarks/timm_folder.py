"""An image folder in timm's layout (`train/` and `validation/`, one sub-folder of JPEGs per class), to try
`wif-advise data=folder` as a timm user meets it (docs/advise.md):

    python benchmarks/timm_folder.py /tmp/timm1600
    wif-advise data=folder data.root=/tmp/timm1600 data.image_size=64 model=timm model.arch=resnet18

1,600 training images (10 classes of 160) and 160 held out, 72 x 72 px: a class's colour and stripes under
noise, so a model can learn them. PIL only (no torch): the tests make tens of images in a second.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from PIL import Image


SEED = 0  # the same folder every time


def striped_image(colour: Tuple[int, int, int], size: int, stripe_every: int, rng: random.Random) -> "Image.Image":
    """A square of `colour` with a noisy stripe of its reversed colour every `stripe_every` rows."""
    from PIL import Image

    img = Image.new("RGB", (size, size), colour)
    pixels = img.load()
    for y in range(0, size, stripe_every):
        for x in range(size):
            pixels[x, y] = tuple(min(255, v + rng.randint(0, 60)) for v in colour[::-1])
    return img


def make_folder(
    root: Path,
    images: int = 1600,
    held_out: int = 160,
    classes: int = 10,
    size: int = 72,
    held_out_name: str = "validation",
) -> Path:
    """Write `images` training JPEGs and `held_out` held-out ones, spread evenly over `classes`.

    Args:
        root: the folder to write, made if missing.
        images: the training images.
        held_out: the held-out images.
        classes: the classes, one folder each.
        size: the image side in px.
        held_out_name: the held-out split's folder.
    """
    rng = random.Random(SEED)
    for part, count in (("train", images), (held_out_name, held_out)):
        for c in range(classes):
            folder = root / part / f"n{c:08d}"  # timm's (ImageNet's) class folder names
            folder.mkdir(parents=True, exist_ok=True)
            colour = ((37 * c) % 256, (91 * c + 40) % 256, (153 * c + 80) % 256)
            for i in range(count // classes + (1 if c < count % classes else 0)):
                img = striped_image(colour, size, stripe_every=2 + c % 4, rng=rng)
                img.save(folder / f"{part}_{c}_{i:05d}.JPEG", quality=90)
    return root


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", type=Path, help="the folder to write (made if missing)")
    p.add_argument("--images", type=int, default=1600, help="training images (default: %(default)s)")
    p.add_argument("--held-out", type=int, default=160, help="held-out images (default: %(default)s)")
    p.add_argument("--classes", type=int, default=10, help="classes (default: %(default)s)")
    p.add_argument("--size", type=int, default=72, help="image side in px (default: %(default)s)")
    p.add_argument(
        "--held-out-name",
        default="validation",
        choices=["test", "val", "validation"],
        help="the held-out split's folder (default: %(default)s, timm's)",
    )
    args = p.parse_args(argv)
    make_folder(
        args.root,
        images=args.images,
        held_out=args.held_out,
        classes=args.classes,
        size=args.size,
        held_out_name=args.held_out_name,
    )
    print(
        f"{args.root}: {args.images} training and {args.held_out} held-out ({args.held_out_name}/) JPEGs, "
        f"{args.classes} classes, {args.size} px"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
