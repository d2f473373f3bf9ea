"""The built-in datasets of the DataLoader smoke test, run inside the target interpreter.

Standalone on purpose (standard library at top level, torch imported inside
the methods): the loader runner imports this file from its own folder, never
through envdoctor, so the inspected environment needs nothing but torch.

- `SyntheticImages`: image-like samples made from a per-index seed and put
  through a real CPU-bound transform (box blur, flip, normalize), so
  `envdoctor check` always has a loader to measure.
- `FolderImages`: an image-folder style directory (`--data PATH`), read and
  decoded the way a typical training set is; reading and decoding are separate
  methods so the runner can time storage and CPU apart.
"""
from __future__ import annotations

import io
import os
import time

#: File endings FolderImages treats as samples.
SAMPLE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".npy", ".bin", ".raw")
#: Of those, the compressed image formats only Pillow decodes.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
#: Side of the square every decoded sample is brought to, as a typical training crop.
CROP = 224
#: Files listed at most, so a huge tree does not spend the budget on listing.
MAX_FILES = 20000


def _torch():
    import torch

    return torch


class SyntheticImages:
    """3×64×64 images made from a per-index seed, blurred, flipped and normalized.

    About a millisecond or two of single-threaded CPU a sample on a current
    core: enough that workers help and the curve has a shape, little enough
    that a sweep fits a 15 s budget. Tensors this small stay below torch's
    intra-op parallel grain, so the main process and a worker do the same work.
    """

    description = "synthetic 3x64x64 images with a blur/flip/normalize transform"

    def __init__(self, length: int = 8192, side: int = 64, blur_passes: int = 6) -> None:
        self.length = length
        self.side = side
        self.blur_passes = blur_passes

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        torch = _torch()
        import torch.nn.functional as F

        if index < 0 or index >= self.length:
            raise IndexError(index)
        generator = torch.Generator().manual_seed(index)
        image = torch.rand((1, 3, self.side, self.side), generator=generator)
        for _ in range(self.blur_passes):
            image = F.avg_pool2d(image, 3, stride=1, padding=1)
        if index % 2:
            image = torch.flip(image, dims=(3,))
        mean = image.mean(dim=(2, 3), keepdim=True)
        std = image.std(dim=(2, 3), keepdim=True) + 1e-6
        return ((image - mean) / std)[0], index % 10


def _list_files(root: str) -> list[str]:
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if name.lower().endswith(SAMPLE_SUFFIXES):
                found.append(os.path.join(folder, name))
                if len(found) >= MAX_FILES:
                    return found
    return found


class FolderImages:
    """An image-folder dataset: class folders holding sample files.

    Decoding uses Pillow when the environment has it (open, convert to RGB,
    resize to 224×224: what torchvision's ImageFolder plus a resize does),
    NumPy for `.npy` files, and otherwise turns the raw bytes into a
    3×224×224 tensor, so a read is always followed by real CPU work.
    """

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.files = _list_files(self.root)
        classes = sorted({os.path.relpath(os.path.dirname(f), self.root) for f in self.files})
        self.class_index = {name: i for i, name in enumerate(classes)}
        try:
            import PIL.Image  # noqa: F401

            self.decoder = "pillow"
        except ImportError:
            self.decoder = "bytes"
        images = sum(1 for f in self.files if f.lower().endswith(IMAGE_SUFFIXES))
        # Without Pillow an image's compressed bytes are only turned into numbers: the run then
        # measures reading, not the decoding a training pipeline does.
        self.decoding = {"decoder": self.decoder, "images": images,
                         "undecoded_images": images if self.decoder == "bytes" else 0}
        self.description = f"image folder {self.root} ({len(self.files)} files, {self.decoder} decoding)"

    def __len__(self) -> int:
        return len(self.files)

    def read_sample(self, index: int) -> bytes:
        with open(self.files[index], "rb") as fh:
            return fh.read()

    def decode_sample(self, index: int, raw: bytes):
        torch = _torch()
        path = self.files[index]
        if path.lower().endswith(".npy"):
            import numpy

            array = numpy.load(io.BytesIO(raw), allow_pickle=False)
            tensor = torch.as_tensor(array).float().flatten()
        elif self.decoder == "pillow" and path.lower().endswith(IMAGE_SUFFIXES):
            from PIL import Image

            with Image.open(io.BytesIO(raw)) as img:
                rgb = img.convert("RGB").resize((CROP, CROP))
                tensor = torch.frombuffer(bytearray(rgb.tobytes()), dtype=torch.uint8).float()
        else:
            tensor = torch.frombuffer(bytearray(raw), dtype=torch.uint8).float() if raw else torch.zeros(1)
        want = 3 * CROP * CROP
        if tensor.numel() < want:
            tensor = tensor.repeat(want // max(1, tensor.numel()) + 1)
        image = tensor[:want].view(3, CROP, CROP) / 255.0
        image = (image - 0.45) / 0.225
        label = self.class_index.get(os.path.relpath(os.path.dirname(path), self.root), 0)
        return image, label

    def __getitem__(self, index: int):
        return self.decode_sample(index, self.read_sample(index))


class TrackedDataset:
    """Wraps the dataset under test so a failure can be pinned to an index.

    Each worker writes the index it is fetching into its slot of a shared
    array before calling the real `__getitem__` and clears it afterwards; an
    exception leaves the index in `failed`. When a worker raises, hangs or is
    killed, the runner reads the slots and knows which index did it. The
    arrays are created before the workers start, so fork shares them and
    spawn passes them while starting the process (the one time multiprocessing
    allows it).
    """

    def __init__(self, dataset, slots: int) -> None:
        import multiprocessing

        self.dataset = dataset
        self.current = multiprocessing.RawArray("q", [-1] * (slots + 1))
        self.failed = multiprocessing.RawArray("q", [-1] * (slots + 1))
        self.pids = multiprocessing.RawArray("q", [0] * (slots + 1))
        #: When each slot's fetch began (time.monotonic: one clock for every process of the machine).
        self.since = multiprocessing.RawArray("d", [0.0] * (slots + 1))

    def __len__(self) -> int:
        return len(self.dataset)

    def _slot(self) -> int:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        # Slot 0 is the main process, worker k uses slot k + 1.
        return 0 if info is None else min(info.id + 1, len(self.current) - 1)

    def __getitem__(self, index):
        slot = self._slot()
        self.pids[slot] = os.getpid()
        self.since[slot] = time.monotonic()
        self.current[slot] = index
        try:
            item = self.dataset[index]
        except BaseException:
            self.failed[slot] = index
            raise
        self.current[slot] = -1
        return item

    def in_progress(self) -> dict[int, int]:
        """{slot: index} for fetches that started and never finished."""
        return {slot: self.current[slot] for slot in range(len(self.current)) if self.current[slot] >= 0}

    def oldest_fetch(self) -> tuple[int, float] | None:
        """The oldest fetch still in progress: (its index, seconds it has run); None when none is."""
        begun = [(self.since[slot], self.current[slot]) for slot in range(len(self.current)) if self.current[slot] >= 0]
        if not begun:
            return None
        since, index = min(begun)
        return index, time.monotonic() - since

    def failures(self) -> dict[int, int]:
        return {slot: self.failed[slot] for slot in range(len(self.failed)) if self.failed[slot] >= 0}

    def slot_of_pid(self, pid: int) -> int | None:
        for slot in range(len(self.pids)):
            if self.pids[slot] == pid:
                return slot
        return None

    def reset(self) -> None:
        for slot in range(len(self.current)):
            self.current[slot] = -1
            self.failed[slot] = -1
            self.pids[slot] = 0
