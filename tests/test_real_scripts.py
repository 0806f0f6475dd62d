"""Real, public training scripts advised by `wif-advise -- python SCRIPT ARGS` on image folders made here.

Each script is the public file as its project publishes it (tests/real_scripts/SOURCES.md: repository, path,
commit, licence), kept verbatim under tests/real_scripts/<name>/; a test copies its folder to tmp_path and
changes exactly one line, the training loop's, to iterate `__import__("wif").watch(loader)`, or runs it as
published, not a line changed (wif.watcher.hook: `wif-advise --` watches the DataLoader itself). The advice then
runs the script for real, in subprocesses, on tiny JPEG folders (PIL only) in the layout the script reads, with
a real MLflow SQLite store in tmp_path, and must end with exit 0 and an answer ("Pick: ..." with its interval,
or "Keep what you have: ...") and every run of it in the store.

The scripts are not committed (tests/real_scripts/.gitignore): a script whose folder is not in this checkout skips,
saying so (SOURCES.md says where each comes from and its SHA-256); one whose packages are missing skips with
`pytest.importorskip`."""

from __future__ import annotations

import hashlib
import random
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.timm_folder import make_folder
from tests.answers import advise_command, assert_answered_and_stored

ROOT = Path(__file__).resolve().parents[1]
VENDORED = ROOT / "tests" / "real_scripts"


@dataclass(frozen=True)
class Real:
    folder: str  # under tests/real_scripts/
    script: str  # the file run, in that folder
    sha256: str  # of the file as published: the copy here is verbatim
    old: str  # its training loop's line, whole, as published
    new: str  # the one line the test puts in its place


IMAGENET = Real(
    "imagenet_example",
    "main.py",
    "f67ca2cd730bf91afe0504694abf07b88cbd03ac8c8a0426023620d29175c158",
    "    for i, (images, target) in enumerate(train_loader):",
    '    for i, (images, target) in enumerate(__import__("wif").watch(train_loader)):',
)
TIMM = Real(
    "timm_train",
    "train.py",
    "f0bb70b9e1c8c576eb1f7beba9cb46953d01ec1308d68c59ec055a6266f76388",
    "    for batch_idx, (input, target) in enumerate(loader):",
    '    for batch_idx, (input, target) in enumerate(__import__("wif").watch(loader)):',
)
ACCELERATE = Real(
    "accelerate_cv_example",
    "cv_example.py",
    "1837df7031a8f30f044f9d440695ce33e070737f73b3ef3ff6a0d1220cc642b0",
    "        for step, batch in enumerate(train_dataloader):",
    '        for step, batch in enumerate(__import__("wif").watch(train_dataloader)):',
)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line_changed(real: Real, tmp_path: Path, changed: bool = True) -> Path:
    """The script's folder copied to tmp_path, its training loop's line (found exactly once) changed; with
    `changed` False the script is run as published, not a line changed (wif.watcher.hook finds its loader)."""
    source = VENDORED / real.folder
    if not (source / real.script).exists():
        pytest.skip(f"tests/real_scripts/{real.folder}/{real.script} is not in this checkout (SOURCES.md: its source)")
    assert sha256(source / real.script) == real.sha256, f"{real.folder}/{real.script} is not the published file"
    assert (source / "LICENSE").exists(), f"{real.folder}: its project's LICENSE is kept beside it"
    copy = shutil.copytree(source, tmp_path / real.folder)
    script = copy / real.script
    lines = script.read_text().splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == real.old]
    assert len(at) == 1, f"{real.script}: {real.old.strip()!r} found {len(at)} times, not once"
    if not changed:
        return script
    lines[at[0]] = real.new + lines[at[0]][len(lines[at[0]].rstrip("\r\n")) :]
    script.write_text("".join(lines))
    return script


# Every test: no rerun of a run others disturbed (the answer is what is checked here, not its timings), a small
# epoch, and the race short; each script is given epochs enough for it and stopped by the advice.
QUICK = ["--epochs", "2", "--race-candidates", "1", "--max-blocks", "2", "measure.contended_pct=1000"]


def advise_imagenet(tmp_path: Path, store: str, *, changed: bool, images: int, epochs: int, minutes: str) -> str:
    """The ImageNet example advised on a folder of `images` 32-px JPEGs, run for `epochs`: its output."""
    pytest.importorskip("torchvision")
    script = one_line_changed(IMAGENET, tmp_path, changed)
    make_folder(tmp_path / "data", images=images, held_out=8, classes=4, size=32, held_out_name="val")
    return advise_command(
        tmp_path,
        store,
        ["--minutes", minutes, "--batches", "3", *QUICK],
        [sys.executable, str(script.relative_to(tmp_path)), "data", "-a", "mobilenet_v3_small"]
        + ["--epochs", str(epochs), "-b", "8", "-j", "0", "-p", "100", "--seed", "0"],
    )


@pytest.mark.alone
@pytest.mark.slow
@pytest.mark.parametrize("changed", [True, False], ids=["one-line", "unchanged"])
def test_pytorch_imagenet_example(tmp_path: Path, store: str, changed: bool) -> None:
    """pytorch/examples imagenet/main.py: ImageFolder train/ and val/, RandomResizedCrop(224), a torchvision
    model by name; on a CPU it says "using CPU, this will be slow" and trains there."""
    out = advise_imagenet(tmp_path, store, changed=changed, images=48, epochs=40, minutes="1.5")
    assert_answered_and_stored(out, store)


@pytest.mark.alone
@pytest.mark.slow
def test_pytorch_imagenet_example_of_one_epoch(tmp_path: Path, store: str) -> None:
    """The same script with `--epochs 1`: its one epoch of 12 batches is measured in windows of 3 (before:
    "a measurement needs 2 (the first is its warm-up): let the script run more epochs")."""
    out = advise_imagenet(tmp_path, store, changed=True, images=96, epochs=1, minutes="2")
    assert "an epoch below is a window of 3 batches" in out, out[-3000:]
    assert_answered_and_stored(out, store)


@pytest.mark.alone
@pytest.mark.slow
@pytest.mark.parametrize("changed", [True, False], ids=["one-line", "unchanged"])
def test_timm_train(tmp_path: Path, store: str, changed: bool) -> None:
    """timm's train.py: --data-dir with train/ and validation/, resnet18 at 32 px on the CPU, its own
    PrefetchLoader around the DataLoader, checkpoints and a summary in a tmp output folder."""
    pytest.importorskip("timm")
    script = one_line_changed(TIMM, tmp_path, changed)
    make_folder(tmp_path / "data", images=48, held_out=8, classes=4, size=32, held_out_name="validation")
    out = advise_command(
        tmp_path,
        store,
        ["--minutes", "1.5", "--batches", "3", *QUICK],
        [sys.executable, str(script.relative_to(tmp_path)), "--data-dir", "data", "--model", "resnet18"]
        + ["--num-classes", "4", "--img-size", "32", "--epochs", "40", "-b", "8", "-j", "0", "--device", "cpu"]
        + ["--log-interval", "100", "--output", "out", "--checkpoint-hist", "1", "--warmup-epochs", "0"],
    )
    assert_answered_and_stored(out, store)


def pets_folder(root: Path, per_label: int = 6) -> Path:
    """cv_example's Oxford-IIIT Pet layout: one folder of `<label>_<n>.jpg`, the label read from the name."""
    from PIL import Image

    rng = random.Random(0)
    root.mkdir(parents=True)
    for label, colour in (("abyssinian", (200, 120, 40)), ("beagle", (60, 90, 200))):
        for i in range(per_label):
            img = Image.new("RGB", (32, 32), colour)
            pixels = img.load()
            for y in range(0, 32, 3):
                for x in range(32):
                    pixels[x, y] = tuple(min(255, v + rng.randint(0, 60)) for v in colour[::-1])
            img.save(root / f"{label}_{i}.jpg", quality=90)
    return root


def hub_cache_with(root: Path, repo_id: str, model_name: str) -> Path:
    """A Hugging Face hub cache, offline, holding `repo_id`'s model.safetensors: the timm model's own freshly
    initialised weights (half precision, half the bytes), for a script that asks for pretrained ones."""
    import timm
    import torch
    from safetensors.torch import save_file

    repo = root / "hub" / ("models--" + repo_id.replace("/", "--"))
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    torch.manual_seed(0)
    state = timm.create_model(model_name).state_dict()
    save_file(
        {k: v.half() if v.is_floating_point() else v for k, v in state.items()},
        str(repo / "snapshots" / commit / "model.safetensors"),
    )
    return root


@pytest.mark.alone
@pytest.mark.slow
@pytest.mark.parametrize("changed", [True, False], ids=["one-line", "unchanged"])
def test_accelerate_cv_example(tmp_path: Path, store: str, changed: bool) -> None:
    """accelerate's examples/cv_example.py: its Accelerator prepares a DataLoader of 4 workers (not persistent)
    over a folder of pet photos, and fine-tunes timm's pretrained resnet50d's classifier, batch 64 at 224 px, 3
    epochs: all fixed in the script. 12 images (9 to train: one batch an epoch) keep it short; the
    pretrained weights come from an offline hub cache made here."""
    pytest.importorskip("accelerate")
    timm = pytest.importorskip("timm")
    script = one_line_changed(ACCELERATE, tmp_path, changed)
    pets_folder(tmp_path / "pets")
    hub_id = timm.models.get_pretrained_cfg("resnet50d").hf_hub_id
    hf = hub_cache_with(tmp_path / "hf", hub_id, "resnet50d")
    out = advise_command(
        tmp_path,
        store,
        ["--minutes", "2", *QUICK],
        [sys.executable, str(script.relative_to(tmp_path)), "--data_dir", "pets", "--cpu"],
        HF_HOME=str(hf),
        HF_HUB_OFFLINE="1",
    )
    assert_answered_and_stored(out, store)
