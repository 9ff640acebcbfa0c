"""Synthetic data sets, written in the format each wild script reads (nothing is downloaded).

Each maker is `maker(path, **options)`: `path` is where the script looks (a folder or a file), relative to the
run's folder. Every maker is seeded, so each run of a script (native, cpu target, stand-ins) reads the same bytes.
numpy and Pillow only (both in the wild environment); no torch, so a maker never touches what is measured.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import struct

import numpy as np

SEED = 0


def _rng(extra: int = 0) -> np.random.Generator:
    return np.random.default_rng(SEED + extra)


def mnist(path: str, n: int = 256, test: int = 64, name: str = "MNIST", gz: bool = False) -> None:
    """torchvision's MNIST / FashionMNIST raw files (`<path>/<name>/raw/*-ubyte`): `n` training and `test` test
    images of 28x28 digits-like blobs (label = a bright square's position), so a model can learn something.
    torchvision checks only that the files exist (no checksum without download), so `download=True` reads them."""
    raw = os.path.join(path, name, "raw")
    os.makedirs(raw, exist_ok=True)
    rng = _rng()
    for prefix, count in (("train", n), ("t10k", test)):
        labels = rng.integers(0, 10, count).astype(np.uint8)
        images = (rng.random((count, 28, 28)) * 60).astype(np.uint8)
        for i, label in enumerate(labels):
            r, c = 2 + 8 * (label // 4), 2 + 8 * (label % 4)
            images[i, r:r + 6, c:c + 6] = 255
        files = {f"{prefix}-images-idx3-ubyte": struct.pack(">IIII", 2051, count, 28, 28) + images.tobytes(),
                 f"{prefix}-labels-idx1-ubyte": struct.pack(">II", 2049, count) + labels.tobytes()}
        for filename, data in files.items():
            with open(os.path.join(raw, filename), "wb") as fh:
                fh.write(data)
            if gz:
                with gzip.open(os.path.join(raw, filename + ".gz"), "wb") as fh:
                    fh.write(data)


def images(path: str, classes: int = 2, per_class: int = 8, size: int = 32, splits=("",), ext: str = "png",
           mode: str = "RGB") -> None:
    """An ImageFolder tree: `<path>/<split>/class<k>/img<i>.<ext>` (no split level when splits is ("",))."""
    from PIL import Image

    rng = _rng(1)
    for split in splits:
        for k in range(classes):
            folder = os.path.join(path, split, f"class{k}")
            os.makedirs(folder, exist_ok=True)
            for i in range(per_class):
                pixels = (rng.random((size, size, 3)) * 80 + 60 * k).clip(0, 255).astype(np.uint8)
                Image.fromarray(pixels).convert(mode).save(os.path.join(folder, f"img{i}.{ext}"))


def flat_images(path: str, n: int = 8, size: int = 32, ext: str = "png") -> None:
    """`n` images directly in `path` (datasets' "imagefolder" without labels, unconditional trainers)."""
    from PIL import Image

    rng = _rng(2)
    os.makedirs(path, exist_ok=True)
    for i in range(n):
        pixels = (rng.random((size, size, 3)) * 255).astype(np.uint8)
        Image.fromarray(pixels).save(os.path.join(path, f"img{i}.{ext}"))


def segmentation(path: str, n: int = 8, size: int = 64) -> None:
    """Pytorch-UNet's data/imgs/<id>.jpg and data/masks/<id>_mask.gif (binary masks, values 0/1)."""
    from PIL import Image

    rng = _rng(3)
    os.makedirs(os.path.join(path, "imgs"), exist_ok=True)
    os.makedirs(os.path.join(path, "masks"), exist_ok=True)
    for i in range(n):
        pixels = (rng.random((size, size, 3)) * 255).astype(np.uint8)
        mask = np.zeros((size, size), np.uint8)
        mask[size // 4: size // 2, size // 4: 3 * size // 4] = 1
        Image.fromarray(pixels).save(os.path.join(path, "imgs", f"s{i}.jpg"))
        Image.fromarray(mask).save(os.path.join(path, "masks", f"s{i}_mask.gif"))


WORDS = ("the cat sat on a mat while dogs ran far across green fields and birds sang in tall trees "
         "under a bright sky near the old river where children played").split()


def text_lines(rng: np.random.Generator, lines: int, words: int = 12) -> list:
    return [" ".join(rng.choice(WORDS, words)) for _ in range(lines)]


def wikitext(path: str, lines: int = 200) -> None:
    """word_language_model's train.txt / valid.txt / test.txt."""
    rng = _rng(4)
    os.makedirs(path, exist_ok=True)
    for split, count in (("train", lines), ("valid", lines // 4), ("test", lines // 4)):
        with open(os.path.join(path, f"{split}.txt"), "w") as fh:
            fh.write("\n".join(text_lines(rng, count)) + "\n")


def text(path: str, lines: int = 400, words: int = 12) -> None:
    """A plain text file (chargpt's input.txt, makemore's names.txt with words=1)."""
    rng = _rng(5)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as fh:
        fh.write("\n".join(text_lines(rng, lines, words)) + "\n")


def names(path: str, n: int = 500) -> None:
    """makemore's names.txt: one lowercase name a line."""
    rng = _rng(6)
    syllables = ["an", "na", "li", "ma", "ra", "el", "jo", "ki", "sa", "to", "be", "ly"]
    with open(path, "w") as fh:
        fh.write("\n".join("".join(rng.choice(syllables, rng.integers(2, 4))) for _ in range(n)) + "\n")


def nanogpt_chars(path: str, chars: int = 20000) -> None:
    """nanoGPT's data/<dataset>/ as its shakespeare_char/prepare.py writes it: train.bin / val.bin (uint16
    character ids) and meta.pkl (vocab_size, stoi, itos)."""
    rng = _rng(7)
    body = "\n".join(text_lines(rng, chars // 60))
    vocab = sorted(set(body))
    stoi = {c: i for i, c in enumerate(vocab)}
    ids = np.array([stoi[c] for c in body], dtype=np.uint16)
    os.makedirs(path, exist_ok=True)
    split = int(len(ids) * 0.9)
    ids[:split].tofile(os.path.join(path, "train.bin"))
    ids[split:].tofile(os.path.join(path, "val.bin"))
    with open(os.path.join(path, "meta.pkl"), "wb") as fh:
        pickle.dump({"vocab_size": len(vocab), "itos": dict(enumerate(vocab)), "stoi": stoi}, fh)


def tokens_u16(path: str, tokens: int = 20000, vocab: int = 512, header: bool = False) -> None:
    """A uint16 token file: nanoGPT-style .bin, or llm.c's with its 256-int32 header (magic 20240520, v1)."""
    rng = _rng(8)
    ids = rng.integers(0, vocab, tokens).astype(np.uint16)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as fh:
        if header:
            head = np.zeros(256, dtype=np.int32)
            head[0], head[1], head[2] = 20240520, 1, tokens
            fh.write(head.tobytes())
        fh.write(ids.tobytes())


def llama2c_shards(path: str, shards: int = 2, tokens: int = 20000, vocab: int = 512) -> None:
    """llama2.c's pretokenized TinyStories shards for a custom vocabulary: `<path>/tok<vocab>/data<i>.bin`
    (uint16; tinystories.py's PretokDataset globs them, shard 0 is validation)."""
    rng = _rng(9)
    folder = os.path.join(path, f"tok{vocab}")
    os.makedirs(folder, exist_ok=True)
    for i in range(shards):
        rng.integers(1, vocab, tokens).astype(np.uint16).tofile(os.path.join(folder, f"data{i:02d}.bin"))


def cora(path: str, nodes: int = 120, features: int = 32, classes: int = 4, edges: int = 300) -> None:
    """The Cora files pygcn / pyGAT read: cora.content (id, binary features, label) and cora.cites (id pairs).
    pygcn takes train/val/test as nodes 0-139 / 200-499 / 500-1499: `nodes` must cover them (1500)."""
    rng = _rng(10)
    os.makedirs(path, exist_ok=True)
    ids = rng.choice(1_000_000, nodes, replace=False)
    labels = rng.integers(0, classes, nodes)
    with open(os.path.join(path, "cora.content"), "w") as fh:
        for node, label in zip(ids, labels):
            feats = (rng.random(features) < 0.1 + 0.2 * (np.arange(features) % classes == label)).astype(int)
            fh.write("\t".join([str(node), *map(str, feats), f"label{label}"]) + "\n")
    with open(os.path.join(path, "cora.cites"), "w") as fh:
        for _ in range(edges):
            a, b = rng.choice(nodes, 2, replace=False)
            fh.write(f"{ids[a]}\t{ids[b]}\n")



def coco(path: str, n: int = 4, size: int = 64, categories: int = 2) -> None:
    """A COCO-format detection set: <path>/train2017/*.jpg, <path>/val2017/*.jpg and
    <path>/annotations/instances_{train,val}2017.json, one or two boxes an image."""
    from PIL import Image

    rng = _rng(11)
    os.makedirs(os.path.join(path, "annotations"), exist_ok=True)
    for split in ("train2017", "val2017"):
        os.makedirs(os.path.join(path, split), exist_ok=True)
        images_, annotations = [], []
        for i in range(n):
            pixels = (rng.random((size, size, 3)) * 255).astype(np.uint8)
            name = f"{i:012d}.jpg"
            Image.fromarray(pixels).save(os.path.join(path, split, name))
            images_.append({"id": i + 1, "file_name": name, "width": size, "height": size})
            for j in range(1 + i % 2):
                x, y = float(rng.integers(0, size // 2)), float(rng.integers(0, size // 2))
                w, h = float(rng.integers(8, size // 2)), float(rng.integers(8, size // 2))
                annotations.append({"id": len(annotations) + 1, "image_id": i + 1,
                                    "category_id": int(1 + j % categories), "bbox": [x, y, w, h], "area": w * h,
                                    "iscrowd": 0, "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]]})
        with open(os.path.join(path, "annotations", f"instances_{split}.json"), "w") as fh:
            json.dump({"images": images_, "annotations": annotations,
                       "categories": [{"id": c + 1, "name": f"c{c}", "supercategory": "s"} for c in range(categories)]},
                      fh)


def csv_text(path: str, rows: int = 64) -> None:
    """A csv with a `text` column (transformers' run_*_no_trainer --train_file)."""
    rng = _rng(12)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as fh:
        fh.write("text\n" + "\n".join(text_lines(rng, rows)) + "\n")


def hf_tiny_model(path: str, kind: str = "gpt2") -> None:
    """A tiny model config and a word-level tokenizer trained on the synthetic vocabulary, saved as a local
    model folder (`--config_name/--tokenizer_name PATH`): the hub is out of reach."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    os.makedirs(path, exist_ok=True)
    specials = ["[UNK]", "[PAD]", "[MASK]", "[CLS]", "[SEP]", "<|endoftext|>"]
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(special_tokens=specials))
    tok.save(os.path.join(path, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    if kind == "gpt2":
        config = {"model_type": "gpt2", "vocab_size": vocab, "n_positions": 64, "n_embd": 32, "n_layer": 2,
                  "n_head": 2, "bos_token_id": 5, "eos_token_id": 5}
        tokenizer = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "pad_token": "[PAD]",
                     "eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "model_max_length": 64}
    else:  # bert
        config = {"model_type": "bert", "vocab_size": vocab, "hidden_size": 32, "num_hidden_layers": 2,
                  "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64,
                  "pad_token_id": 1}
        tokenizer = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "pad_token": "[PAD]",
                     "mask_token": "[MASK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "model_max_length": 64}
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(config, fh)
    with open(os.path.join(path, "tokenizer_config.json"), "w") as fh:
        json.dump(tokenizer, fh)


def folder(path: str) -> None:
    """An empty folder a script expects beside it (pytorch/examples' vae writes into results/)."""
    os.makedirs(path, exist_ok=True)


def unet_config(path: str) -> None:
    """A small diffusers UNet2DModel config (--model_config_name_or_path): two levels of 16/32 channels."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump({"_class_name": "UNet2DModel", "sample_size": 32, "in_channels": 3, "out_channels": 3,
                   "layers_per_block": 1, "block_out_channels": [16, 32], "norm_num_groups": 8,
                   "down_block_types": ["DownBlock2D", "AttnDownBlock2D"],
                   "up_block_types": ["AttnUpBlock2D", "UpBlock2D"]}, fh)


def planetoid(path: str, name: str = "Cora", nodes: int = 800, features: int = 32, classes: int = 4,
              edges: int = 600) -> None:
    """PyG's Planetoid raw files (<path>/<name>/raw/ind.<name>.{x,tx,allx,y,ty,ally,graph,test.index}), as the
    Planetoid splits: x/y the first 20 per class, allx/ally all but the test nodes, tx/ty the last 100 (PyG takes
    the 500 nodes after x as validation: `nodes` >= 20 * classes + 600)."""
    import scipy.sparse as sp

    rng = _rng(13)
    low = name.lower()
    raw = os.path.join(path, name, "raw")
    os.makedirs(raw, exist_ok=True)
    labels = rng.integers(0, classes, nodes)
    feats = (rng.random((nodes, features)) < 0.1 + 0.3 * (np.arange(features)[None] % classes == labels[:, None]))
    onehot = np.eye(classes)[labels]
    n_test = 100
    n_all = nodes - n_test
    parts = {"x": sp.csr_matrix(feats[:20 * classes].astype(np.float32)), "y": onehot[:20 * classes],
             "allx": sp.csr_matrix(feats[:n_all].astype(np.float32)), "ally": onehot[:n_all],
             "tx": sp.csr_matrix(feats[n_all:].astype(np.float32)), "ty": onehot[n_all:]}
    graph = {i: [] for i in range(nodes)}
    for _ in range(edges):
        a, b = (int(v) for v in rng.choice(nodes, 2, replace=False))
        graph[a].append(b)
        graph[b].append(a)
    parts["graph"] = graph
    for key, value in parts.items():
        with open(os.path.join(raw, f"ind.{low}.{key}"), "wb") as fh:
            pickle.dump(value, fh)
    with open(os.path.join(raw, f"ind.{low}.test.index"), "w") as fh:
        fh.write("\n".join(str(i) for i in range(n_all, nodes)) + "\n")


def yolo(path: str, n: int = 8, size: int = 64, classes: int = 2, config: str = "") -> None:
    """A YOLO-format detection set as yolov5's data/*.yaml describe it: <path>/images/{train,val}/*.jpg, one
    <path>/labels/{train,val}/*.txt a line a box (class cx cy w h, normalised), and <path>/data.yaml naming them.
    `config`: yolov5's settings folder (YOLOV5_CONFIG_DIR), given the font its check_dataset() otherwise downloads
    (matplotlib's DejaVu Sans, under the name yolov5 asks for)."""
    from PIL import Image

    rng = _rng(14)
    for split in ("train", "val"):
        os.makedirs(os.path.join(path, "images", split), exist_ok=True)
        os.makedirs(os.path.join(path, "labels", split), exist_ok=True)
        for i in range(n):
            pixels = (rng.random((size, size, 3)) * 120).astype(np.uint8)
            boxes = []
            for _ in range(1 + i % 2):
                k = int(rng.integers(0, classes))
                w, h = (int(v) for v in rng.integers(size // 6, size // 3, 2))
                x, y = (int(v) for v in rng.integers(0, size - max(w, h), 2))
                pixels[y:y + h, x:x + w] = 255 if k == 0 else (255, 60, 60)  # the object: a bright box
                boxes.append(f"{k} {(x + w / 2) / size:.6f} {(y + h / 2) / size:.6f} {w / size:.6f} {h / size:.6f}")
            Image.fromarray(pixels).save(os.path.join(path, "images", split, f"im{i}.jpg"))
            with open(os.path.join(path, "labels", split, f"im{i}.txt"), "w") as fh:
                fh.write("\n".join(boxes) + "\n")
    with open(os.path.join(path, "data.yaml"), "w") as fh:
        fh.write(f"path: {path}\ntrain: images/train\nval: images/val\nnames:\n")
        fh.write("".join(f"  {k}: c{k}\n" for k in range(classes)))
    if config:
        import shutil

        import matplotlib

        os.makedirs(config, exist_ok=True)
        shutil.copy(os.path.join(matplotlib.get_data_path(), "fonts", "ttf", "DejaVuSans.ttf"),
                    os.path.join(config, "Arial.ttf"))


def autovc(path: str, speakers: int = 4, utterances: int = 3, frames: int = 160, mels: int = 80,
           emb: int = 256) -> None:
    """AutoVC's ./spmel as its make_spect.py and make_metadata.py leave it: one folder of mel-spectrogram .npy
    files (frames x 80, values in [0, 1]) a speaker, and train.pkl listing [speaker, speaker embedding (256
    floats), utterance files...] a speaker."""
    rng = _rng(15)
    meta = []
    for k in range(speakers):
        speaker = f"p{225 + k}"
        os.makedirs(os.path.join(path, speaker), exist_ok=True)
        files = []
        for u in range(utterances):
            length = frames + 16 * u
            base = np.linspace(0.2 + 0.1 * k, 0.6, mels, dtype=np.float32)[None, :]
            spect = np.clip(base + 0.1 * rng.standard_normal((length, mels)), 0, 1).astype(np.float32)
            name = f"{speaker}/{speaker}_{u:03d}.npy"
            np.save(os.path.join(path, name), spect)
            files.append(name)
        embedding = rng.standard_normal(emb).astype(np.float32)
        meta.append([speaker, embedding / np.linalg.norm(embedding), *files])
    with open(os.path.join(path, "train.pkl"), "wb") as fh:
        pickle.dump(meta, fh)


MAKERS = {name: fn for name, fn in globals().items()
          if callable(fn) and not name.startswith("_") and fn.__module__ == __name__
          and name != "text_lines"}


def make(spec, root: str) -> None:
    """Make one data set of a manifest entry: spec = (maker name, path relative to the run's folder, options)."""
    name, path, options = spec
    MAKERS[name](path if os.path.isabs(path) else os.path.join(root, path), **options)


if __name__ == "__main__":  # python wild/data.py RUN_FOLDER JSON_SPECS (wild/run.py calls it with the run's Python)
    import sys

    for spec in json.loads(sys.argv[2]):
        make(spec, sys.argv[1])
