"""The wild scripts: public CUDA training scripts, unmodified, at pinned commits (`nox -s wild -- DIR`).

Nothing of these projects is in this repository. The user clones each repository into DIR/<name> (the clone
commands: `python wild/run.py --clone-commands`), the harness checks out the pinned commit, makes the synthetic
data the script reads (wild/data.py, never a download), and runs the script as its README says, with tiny sizes.

One `Script` per command line. Its fields:
- `args`: the command line of the CUDA run (the one users type on a GPU machine); `{src}` is the checkout,
  `{run}` the run's folder (the working directory is `{run}/w`, or `{run}/<cwd>`).
- `native`: how the script runs on the CPU by its own means: arguments appended (`--no-cuda`), an environment
  (`CUDA_VISIBLE_DEVICES=""` where the script falls back), or replacements of CUDA arguments (`{"--device=cuda":
  "--device=cpu"}`); `native=None` (with `why_not_native`) when the script has no CPU path.
- `done`: the script's own sign of completion, a regex its output must match (exit 0 alone proves nothing), or
  `file:PATH` (relative to the working directory) that must exist.
- `losses`: a regex of the loss lines; `seeded`: the script seeds everything it draws and its CUDA branch computes
  what its CPU branch does, so its losses must equal the native run's on every target; `seeded="cpu"`: on the cpu
  target only, as the script draws random numbers on the device (`randn_like`, dropout in compiled code), where a
  vendor device has its own generator, as CUDA has.
- `launcher`: python, torchrun (2 processes), or a console script of the environment (`fabric`, `accelerate`).
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Tuple, Union

#: repository -> (owner/name on GitHub, pinned commit, the folder under DIR)
REPOS: Dict[str, Tuple[str, str]] = {
    "examples": ("pytorch/examples", "6967ff567601f7b3f4827b80db4125e5c6c2c95e"),  # 2025-04-29, before torch.accelerator
    "examples-wlm": ("pytorch/examples", "ac7e960b35f72f24f0b04c3826c9d9e228599b6b"),  # word_language_model's torch>=2.6 fix
    "nanoGPT": ("karpathy/nanoGPT", "3adf61e154c3fe3fca428ad6bc3818b27a3b8291"),
    "minGPT": ("karpathy/minGPT", "37baab71b9abea1b76ab957409a1cc2fbfba8a26"),
    "makemore": ("karpathy/makemore", "988aa59e4d8fefa526d06f3b453ad116258398d4"),
    "llama2.c": ("karpathy/llama2.c", "350e04fe35433e6d2941dce5a1f53308f87058eb"),
    "cleanrl": ("vwxyzjn/cleanrl", "fe8d8a03c41a7ef5b523e2e354bd01c363e786bb"),
    "pygcn": ("tkipf/pygcn", "1600b5b748b3976413d1e307540ccc62605b4d6d"),
    "pyGAT": ("Diego999/pyGAT", "3664f2dc90cbf971564c0bf186dc794f12446d0c"),
    "PyTorch-GAN": ("eriklindernoren/PyTorch-GAN", "36d3c77e5ff20ebe0aeefd322326a134a279b93e"),
    "pytorch-tutorial": ("yunjey/pytorch-tutorial", "0500d3df5a2a8080ccfccbc00aca0eacc21818db"),
    "diffusers": ("huggingface/diffusers", "58eb52c0803ea9af3abec60841c2a093bdf1f951"),
    "pytorch-image-models": ("huggingface/pytorch-image-models", "aa4b5850c1543fa488abf260f18390eda46cf85d"),
    "pytorch-lightning": ("Lightning-AI/pytorch-lightning", "7f0c3436cd3f6ad3753125672024fc415cbcb414"),
    "ignite": ("pytorch/ignite", "de08e799cfb55a6cf4aa778575d6bad725385453"),
    "open_clip": ("mlfoundations/open_clip", "89fb801f1e6087880e951fc8354b8a2077b79c6d"),
    "dino": ("facebookresearch/dino", "7c446df5b9f45747937fb0d72314eb9f7b66930a"),
    "opacus": ("pytorch/opacus", "4d0ebc84613d214fbfd37fbfd1390e3747a625ce"),
    "barlowtwins": ("facebookresearch/barlowtwins", "8e8d284ca0bc02f88b92328e53f9b901e86b4a3c"),
    "Pytorch-UNet": ("milesial/Pytorch-UNet", "21d7850f2af30a9695bbeea75f3136aa538cfc4a"),
    "deit": ("facebookresearch/deit", "7e160fe43f0252d17191b71cbb5826254114ea5b"),
    "rl-baselines3-zoo": ("DLR-RM/rl-baselines3-zoo", "22e3ff2450fd92033f7f032915e1f64894a09584"),
    "pytorch_geometric": ("pyg-team/pytorch_geometric", "5c6461b2305ad068a6d61165b3c55852a11aaa41"),
    "mae": ("facebookresearch/mae", "efb2a8062c206524e35e47d04501ed4f544c0ae8"),
    "PyTorch-Tutorial": ("MorvanZhou/PyTorch-Tutorial", "dbe154a9e56635e51c6b0c2ccea8ae36cfb585a7"),
    "pytorch-beginner": ("L1aoXingyu/pytorch-beginner", "a57dd7ea35c9965a41f4963dee62d38884f92a65"),
    "ng-video-lecture": ("karpathy/ng-video-lecture", "52201428ed7b46804849dea0b3ccf0de9df1a5c3"),
    "ConvNeXt": ("facebookresearch/ConvNeXt", "048efcea897d999aed302f2639b6270aedf8d4c8"),
    "yolov5": ("ultralytics/yolov5", "5081342f04fb287fc2e5f2b5a4e06752b7937b1c"),  # 2026-08-21
    "autovc": ("auspicious3000/autovc", "c1827a60e83e6d26030b8953843b2f7cf2bd36db"),  # 2024-10-23
}


class Script(NamedTuple):
    name: str
    repo: str  # a key of REPOS
    script: str  # path in the checkout
    args: Tuple[str, ...]  # the CUDA run's arguments
    done: str  # regex of the script's own completion sign, or "file:PATH"
    what: str  # the kind of training, as the results table shows it
    native: Optional[dict] = {}  # {"args": [...], "env": {...}, "replace": {old: new}}; None: no CPU path
    why_not_native: str = ""
    data: Tuple[tuple, ...] = ()  # (maker, path under the run's folder or "{src}/...", options) of wild/data.py
    pre: Tuple[Tuple[str, ...], ...] = ()  # commands of the checkout run before the script, in the working dir
    losses: str = ""
    seeded: Union[bool, str] = False  # True, "cpu" (compared on the cpu target only) or False
    launcher: str = "python"  # python | torchrun | <console script>
    launcher_args: Tuple[str, ...] = ()
    cwd: str = "w"  # the working directory under the run's folder
    path: Tuple[str, ...] = ()  # folders of the checkout put on PYTHONPATH (as its README's `pip install -e .`)
    env: Tuple[Tuple[str, str], ...] = ()  # set in every run
    timeout: int = 300


CUDA_HIDDEN = {"env": {"CUDA_VISIBLE_DEVICES": ""}}
MNIST_UP = ("mnist", "data", {"n": 256, "test": 64})  # ../data from {run}/w
MNIST_UP2 = ("mnist", "data", {"n": 200, "test": 100})  # ../../data from {run}/w/w
EX = "examples"

SCRIPTS: Tuple[Script, ...] = (
    # ---------------------------------------------------------------- pytorch/examples
    Script("examples-mnist", EX, "mnist/main.py", ("--epochs", "1", "--batch-size", "32", "--test-batch-size", "64",
           "--save-model"), r"Test set: Average loss", "CNN classifier", native={"args": ["--no-cuda"]},
           data=(MNIST_UP,), losses=r"Test set: Average loss: [0-9.]+"),  # CUDA branch: shuffle, workers
    Script("examples-vae", EX, "vae/main.py", ("--epochs", "1", "--batch-size", "32"), r"====> Test set loss",
           "VAE", native={"args": ["--no-cuda"]}, data=(MNIST_UP, ("folder", "w/results", {})),
           losses=r"====> Epoch: \d+ Average loss: [0-9.]+|====> Test set loss: [0-9.]+", seeded="cpu"),
    Script("examples-dcgan-fake", EX, "dcgan/main.py", ("--dataset", "fake", "--niter", "1", "--batchSize", "8",
           "--imageSize", "64", "--ngf", "8", "--ndf", "8", "--cuda", "--outf", "out", "--manualSeed", "1"),
           "file:out/netD_epoch_0.pth", "DCGAN (FakeData)", native={"replace": {"--cuda": None}},
           losses=r"Loss_D: [0-9.]+ Loss_G: [0-9.]+", seeded=False, timeout=400),
    Script("examples-dcgan-ngpu2", EX, "dcgan/main.py", ("--dataset", "fake", "--niter", "1", "--batchSize", "8",
           "--imageSize", "64", "--ngf", "8", "--ndf", "8", "--cuda", "--ngpu", "2", "--outf", "out",
           "--manualSeed", "1"), "file:out/netD_epoch_0.pth", "DCGAN, ngpu=2 (functional data_parallel)",
           native={"replace": {"--cuda": None}}, timeout=400),
    Script("examples-word-lm-lstm", "examples-wlm", "word_language_model/main.py", ("--data", "{run}/wikitext", "--epochs", "1",
           "--emsize", "32", "--nhid", "32", "--bptt", "16", "--dropout", "0", "--batch_size", "8", "--log-interval", "5", "--cuda"),
           r"End of training", "LSTM language model", native={"replace": {"--cuda": None}},
           data=(("wikitext", "wikitext", {}),), losses=r"loss +[0-9.]+", seeded=True),
    Script("examples-word-lm-transformer", "examples-wlm", "word_language_model/main.py", ("--data", "{run}/wikitext",
           "--epochs", "1", "--model", "Transformer", "--emsize", "32", "--nhid", "32", "--bptt", "16", "--dropout", "0",
           "--batch_size", "8", "--log-interval", "5", "--cuda"), r"End of training", "Transformer language model",
           native={"replace": {"--cuda": None}}, data=(("wikitext", "wikitext", {}),), losses=r"loss +[0-9.]+"),
    # (nn.Transformer's own dropout, 0.1, which --dropout does not reach, draws from the device generator)
    Script("examples-ddp-torchrun", EX, "distributed/ddp-tutorial-series/multigpu_torchrun.py", ("2", "1",
           "--batch_size", "64"), r"Epoch 1 \| Training snapshot saved", "DDP tutorial (torchrun, 2 ranks)",
           native=None, why_not_native="calls torch.cuda.set_device and nccl unconditionally", launcher="torchrun"),
    Script("examples-siamese", EX, "siamese_network/main.py", ("--epochs", "1", "--batch-size", "32",
           "--test-batch-size", "64", "--dry-run"), r"Test set: Average loss", "Siamese network",
           native={"args": ["--no-cuda"]}, data=(MNIST_UP,), losses=r"Loss: [0-9.]+", seeded=False),
    Script("examples-mnist-rnn", EX, "mnist_rnn/main.py", ("--epochs", "1", "--batch-size", "32",
           "--test-batch-size", "64", "--cuda"), r"Test set: Average loss", "LSTM classifier",
           native={"replace": {"--cuda": None}}, data=(MNIST_UP,), losses=r"Loss: [0-9.]+"),  # dropout: device RNG
    Script("examples-forward-forward", EX, "mnist_forward_forward/main.py", ("--epochs", "20", "--train_size",
           "256", "--test_size", "64"), r"test error", "Forward-Forward", native={"args": ["--no_cuda"]},
           cwd="w", data=(("mnist", "w/data", {"n": 256, "test": 64}),), losses=r"train error: [0-9.]+"),
    Script("examples-hogwild", EX, "mnist_hogwild/main.py", ("--epochs", "1", "--num-processes", "2", "--cuda",
           "--dry-run"), r"Test set: Average loss", "Hogwild (share_memory, 2 processes)",
           native={"replace": {"--cuda": None}}, data=(MNIST_UP,)),
    Script("examples-time-sequence", EX, "time_sequence_prediction/train.py", ("--steps", "2"), r"test loss",
           "LSTM sequence prediction (L-BFGS, float64)", native=CUDA_HIDDEN,
           pre=(("python", "{src}/time_sequence_prediction/generate_sine_wave.py"),), losses=r"loss: [0-9.]+",
           seeded=True),
    # ---------------------------------------------------------------- PyTorch-GAN
    Script("pytorch-gan-gan", "PyTorch-GAN", "implementations/gan/gan.py", ("--n_epochs", "1", "--batch_size", "64",
           "--n_cpu", "0"), r"\[Epoch 0/1\] \[Batch 3/4\]", "GAN (MLP)", native=CUDA_HIDDEN, cwd="w/w",
           data=(("mnist", "data/mnist", {"n": 256, "test": 16}),)),
    Script("pytorch-gan-dcgan", "PyTorch-GAN", "implementations/dcgan/dcgan.py", ("--n_epochs", "1", "--batch_size",
           "64", "--n_cpu", "0"), r"\[Epoch 0/1\] \[Batch 3/4\]", "DCGAN (BatchNorm)", native=CUDA_HIDDEN,
           cwd="w/w", data=(("mnist", "data/mnist", {"n": 256, "test": 16}),)),
    Script("pytorch-gan-wgan-gp", "PyTorch-GAN", "implementations/wgan_gp/wgan_gp.py", ("--n_epochs", "1",
           "--batch_size", "32", "--n_cpu", "0"), r"\[Epoch 0/1\] \[Batch 5/8\]", "WGAN-GP (double backward)",
           native=CUDA_HIDDEN, cwd="w/w", data=(("mnist", "data/mnist", {"n": 256, "test": 16}),)),
    Script("pytorch-gan-cgan", "PyTorch-GAN", "implementations/cgan/cgan.py", ("--n_epochs", "1",
           "--batch_size", "64", "--n_cpu", "0"), r"\[Epoch 0/1\] \[Batch 3/4\]", "conditional GAN",
           native=CUDA_HIDDEN, cwd="w/w", data=(("mnist", "data/mnist", {"n": 256, "test": 16}),)),
    # ---------------------------------------------------------------- yunjey/pytorch-tutorial
    Script("tutorial-cnn", "pytorch-tutorial", "tutorials/02-intermediate/convolutional_neural_network/main.py", (),
           r"Test Accuracy of the model", "CNN (hard-coded 5 epochs)", native=CUDA_HIDDEN, cwd="w/w",
           data=(MNIST_UP2,)),
    Script("tutorial-rnn", "pytorch-tutorial", "tutorials/02-intermediate/recurrent_neural_network/main.py", (),
           r"Test Accuracy of the model", "LSTM classifier", native=CUDA_HIDDEN, cwd="w/w", data=(MNIST_UP2,)),
    Script("tutorial-gan", "pytorch-tutorial", "tutorials/03-advanced/generative_adversarial_network/main.py", (),
           "file:G.ckpt", "GAN (200 epochs hard-coded)", native=CUDA_HIDDEN, cwd="w/w", data=(MNIST_UP2,),
           timeout=600),
    Script("tutorial-vae", "pytorch-tutorial", "tutorials/03-advanced/variational_autoencoder/main.py", (),
           "file:samples/sampled-15.png", "VAE", native=CUDA_HIDDEN, cwd="w/w", data=(MNIST_UP2,)),
    Script("morvan-gpu", "PyTorch-Tutorial", "tutorial-contents/502_GPU.py", (), r"real number",
           "CNN written for the GPU (.cuda() everywhere)", native=None, why_not_native="calls .cuda() unconditionally",
           data=(("mnist", "w/mnist", {"n": 256, "test": 64}),)),
    Script("beginner-conv-autoencoder", "pytorch-beginner", "08-AutoEncoder/conv_autoencoder.py", (),
           "file:conv_autoencoder.pth", "conv autoencoder (100 epochs hard-coded, .cuda())", native=None,
           why_not_native="calls .cuda() unconditionally", data=(("mnist", "w/data", {"n": 256, "test": 16}),),
           timeout=600),
    Script("beginner-simple-autoencoder", "pytorch-beginner", "08-AutoEncoder/simple_autoencoder.py", (),
           "file:sim_autoencoder.pth", "MLP autoencoder (100 epochs hard-coded, .cuda())", native=None,
           why_not_native="calls .cuda() unconditionally", data=(("mnist", "w/data", {"n": 256, "test": 16}),),
           timeout=600),
    # ---------------------------------------------------------------- karpathy
    Script("nanogpt-char", "nanoGPT", "train.py", ("{src}/config/train_shakespeare_char.py", "--n_layer=2",
           "--n_head=2", "--n_embd=64", "--block_size=64", "--batch_size=12", "--max_iters=20", "--lr_decay_iters=20",
           "--eval_interval=10", "--eval_iters=2", "--log_interval=5", "--dtype=float32", "--compile=False",
           "--dropout=0.0", "--out_dir={run}/out"),
           r"iter 20: loss", "nanoGPT (shakespeare_char config)", native={"args": ["--device=cpu"]},
           data=(("nanogpt_chars", "{src}/data/shakespeare_char", {}),), cwd="{src}",
           losses=r"iter \d+: loss [0-9.]+|step \d+: train loss [0-9.]+, val loss [0-9.]+", seeded=True),
    Script("nanogpt-char-bf16", "nanoGPT", "train.py", ("{src}/config/train_shakespeare_char.py", "--n_layer=2",
           "--n_head=2", "--n_embd=64", "--block_size=64", "--batch_size=12", "--max_iters=10", "--lr_decay_iters=10",
           "--eval_interval=5", "--eval_iters=2", "--log_interval=5", "--compile=False", "--out_dir={run}/out"),
           r"iter 10: loss", "nanoGPT, default bfloat16 autocast", native={"args": ["--device=cpu"]},
           data=(("nanogpt_chars", "{src}/data/shakespeare_char", {}),), cwd="{src}", losses=r"iter \d+: loss [0-9.]+"),
    Script("nanogpt-ddp", "nanoGPT", "train.py", ("{src}/config/train_shakespeare_char.py", "--n_layer=2",
           "--n_head=2", "--n_embd=64", "--block_size=64", "--batch_size=8", "--max_iters=10", "--lr_decay_iters=10",
           "--eval_interval=5", "--eval_iters=2", "--log_interval=5", "--dtype=float32", "--compile=False",
           "--gradient_accumulation_steps=2", "--out_dir={run}/out"), r"iter 10: loss", "nanoGPT DDP (torchrun, 2 ranks)",
           native=None, why_not_native="under torchrun it sets device cuda:LOCAL_RANK whatever --device says",
           launcher="torchrun",
           data=(("nanogpt_chars", "{src}/data/shakespeare_char", {}),), cwd="{src}", losses=r"iter \d+: loss [0-9.]+"),
    Script("nanogpt-compile", "nanoGPT", "train.py", ("{src}/config/train_shakespeare_char.py", "--n_layer=1",
           "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=4", "--max_iters=4", "--lr_decay_iters=4",
           "--eval_interval=2", "--eval_iters=1", "--log_interval=1", "--dtype=float32", "--compile=True",
           "--out_dir={run}/out"),
           r"iter 4: loss", "nanoGPT with torch.compile", native={"args": ["--device=cpu"]},
           data=(("nanogpt_chars", "{src}/data/shakespeare_char", {}),), cwd="{src}", losses=r"iter \d+: loss [0-9.]+",
           seeded="cpu", timeout=600),
    Script("mingpt-adder", "minGPT", "projects/adder/adder.py", ("--trainer.max_iters=30", "--trainer.num_workers=0",
           "--trainer.batch_size=32", "--model.model_type=gpt-nano", "--system.work_dir=out", "--model.embd_pdrop=0.0",
           "--model.resid_pdrop=0.0", "--model.attn_pdrop=0.0"),
           r"test final score", "minGPT (adder project)", native={"args": ["--trainer.device=cpu"]},
           path=(".",), losses=r"train loss [0-9.]+", seeded=True),
    Script("makemore-transformer", "makemore", "makemore.py", ("-i", "{run}/names.txt", "-o", "out",
           "--max-steps", "501", "--device", "cuda", "-n", "0", "--n-layer", "2", "--n-embd", "32"),
           "file:out/model.pt", "makemore (transformer)", native={"replace": {"cuda": "cpu"}},
           data=(("names", "names.txt", {}),), losses=r"step \d+ \| loss [0-9.]+", seeded=True),
    Script("makemore-rnn", "makemore", "makemore.py", ("-i", "{run}/names.txt", "-o", "out", "--type", "gru",
           "--max-steps", "501", "--device", "cuda", "-n", "0", "--n-embd", "32", "--n-embd2", "32"),
           "file:out/model.pt", "makemore (GRU)", native={"replace": {"cuda": "cpu"}},
           data=(("names", "names.txt", {}),), losses=r"step \d+ \| loss [0-9.]+", seeded=True),
    Script("llama2c-train", "llama2.c", "train.py", ("--vocab_source=custom", "--vocab_size=512", "--dim=64",
           "--n_layers=2", "--n_heads=4", "--n_kv_heads=4", "--max_seq_len=64", "--batch_size=4",
           "--gradient_accumulation_steps=1", "--max_iters=10", "--eval_interval=5", "--eval_iters=2",
           "--compile=False", "--dtype=float32", "--warmup_iters=2", "--out_dir={run}/out"), r"10 \| loss", "llama2.c (Llama pretraining)",
           native={"args": ["--device=cpu"]}, data=(("llama2c_shards", "{src}/data", {}),), cwd="{src}",
           losses=r"\d+ \| loss [0-9.]+", seeded=True),
    Script("ng-bigram", "ng-video-lecture", "bigram.py", (), r"step 2999|step 2700: train loss",
           "bigram language model (Let's build GPT lecture; 3000 steps hard-coded)", native=CUDA_HIDDEN,
           data=(("text", "w/input.txt", {"lines": 300}),), losses=r"step \d+: train loss [0-9.]+, val loss [0-9.]+",
           seeded=True),
    # ---------------------------------------------------------------- RL
    Script("cleanrl-ppo", "cleanrl", "cleanrl/ppo.py", ("--total-timesteps", "2048", "--num-envs", "2",
           "--num-steps", "128", "--no-track"), r"SPS:", "PPO (CartPole)", native={"args": ["--no-cuda"]},
           losses=r"SPS: \d+", seeded=False),
    Script("cleanrl-dqn", "cleanrl", "cleanrl/dqn.py", ("--total-timesteps", "1500", "--learning-starts", "500",
           "--train-frequency", "10"), r"SPS:", "DQN (CartPole)", native={"args": ["--no-cuda"]}, path=(".",)),
    # ---------------------------------------------------------------- GNN
    Script("pygcn", "pygcn", "pygcn/train.py", ("--epochs", "20",), r"Test set results", "GCN (Cora format)",
           native={"args": ["--no-cuda"]}, cwd="w/w", data=(("cora", "w/data/cora", {"nodes": 1500}),),
           losses=r"loss_train: [0-9.]+", seeded=False, path=(".",)),
    Script("pygat", "pyGAT", "train.py", ("--epochs", "5", "--hidden", "4", "--nb_heads", "2"),
           r"Test set results", "GAT (Cora format)", native={"args": ["--no-cuda"]},
           data=(("cora", "w/data/cora", {"nodes": 1500, "features": 16}),), losses=r"loss_train: [0-9.]+", seeded=False),
    # ---------------------------------------------------------------- vision trainers
    Script("timm-resnet-amp", "pytorch-image-models", "train.py", ("--data-dir", "{run}/images", "--model",
           "resnet18", "--num-classes", "2", "--img-size", "64", "-b", "4", "--epochs", "1", "--amp", "--workers",
           "1", "--output", "out", "--log-interval", "1", "--seed", "1"), r"\*\*\* Best metric",
           "timm train.py, AMP, prefetcher (CUDA streams)", native={"args": ["--device", "cpu"]},
           data=(("images", "images", {"splits": ("train", "validation"), "size": 64}),), timeout=400),
    Script("timm-vit-ddp-syncbn", "pytorch-image-models", "train.py", ("--data-dir", "{run}/images", "--model",
           "resnet18", "--num-classes", "2", "--img-size", "64", "-b", "2", "--epochs", "1", "--sync-bn",
           "--channels-last", "--workers", "1", "--output", "out", "--log-interval", "1", "--seed", "1"),
           r"\*\*\* Best metric", "timm train.py, DDP 2 ranks, SyncBN, channels_last",
           native={"args": ["--device", "cpu"]}, launcher="torchrun",
           data=(("images", "images", {"splits": ("train", "validation"), "size": 64}),), timeout=400),
    Script("deit-tiny", "deit", "main.py", ("--model", "deit_tiny_patch16_224", "--data-set", "IMNET",
           "--data-path", "{run}/imagenet", "--input-size", "64", "--batch-size", "4", "--epochs", "1",
           "--num_workers", "0", "--output_dir", "out", "--seed", "1"), r"Training time",
           "DeiT (timm, mixup, AMP, EMA-free)", native={"args": ["--device", "cpu"]},
           data=(("images", "imagenet", {"splits": ("train", "val"), "size": 64}),), timeout=400),
    Script("convnext-tiny", "ConvNeXt", "main.py", ("--model", "convnext_tiny", "--input_size", "64", "--data_set",
           "image_folder", "--data_path", "{run}/images/train", "--eval_data_path", "{run}/images/val", "--nb_classes",
           "2", "--batch_size", "4", "--epochs", "1", "--num_workers", "0", "--output_dir", "out", "--use_amp", "true",
           "--warmup_epochs", "0", "--seed", "1"), r"Training time", "ConvNeXt (timm, AMP, mixup)",
           native={"args": ["--device", "cpu"]}, data=(("images", "images", {"splits": ("train", "val"), "size": 64}),),
           timeout=400),
    Script("unet-carvana", "Pytorch-UNet", "train.py", ("--epochs", "1", "--batch-size", "2", "--scale", "0.5",
           "--validation", "25", "--amp"), r"Checkpoint 1 saved", "U-Net segmentation, AMP, channels_last",
           native=CUDA_HIDDEN, data=(("segmentation", "w/data", {"n": 8, "size": 64}),), timeout=400),
    Script("dino-vit-tiny", "dino", "main_dino.py", ("--arch", "vit_tiny", "--patch_size", "16", "--out_dim", "256",
           "--batch_size_per_gpu", "4", "--epochs", "1", "--warmup_epochs", "0", "--warmup_teacher_temp_epochs", "0",
           "--local_crops_number", "2", "--num_workers", "0", "--data_path", "{run}/images", "--output_dir", "out",
           "--saveckp_freq", "1"), r"Training time", "DINO self-supervised ViT (fp16 GradScaler)", native=None,
           why_not_native="exits 'Does not support training without GPU'; nccl", data=(("images", "images",
           {"size": 64, "per_class": 4}),), timeout=600),
    Script("open-clip-synthetic", "open_clip", "open_clip_train.main", ("--dataset-type", "synthetic",
           "--train-num-samples", "8", "--batch-size", "4", "--epochs", "1", "--model", "ViT-S-16-alt",
           "--force-image-size", "64", "--workers", "0", "--precision", "amp_bf16", "--logs", "{run}/logs", "--warmup",
           "1", "--seed", "1", "--name", "wild"), r"Train Epoch: 0 \[8/8", "open_clip CLIP training (synthetic data, bf16 AMP)",
           native={"args": ["--device", "cpu"]}, launcher="module", path=("src",), timeout=600),
    Script("diffusers-unconditional", "diffusers", "examples/unconditional_image_generation/train_unconditional.py",
           ("--train_data_dir", "{run}/flat", "--resolution", "32", "--output_dir", "out", "--train_batch_size", "4",
            "--num_epochs", "1", "--save_images_epochs", "1", "--save_model_epochs", "1", "--ddpm_num_steps", "50",
            "--ddpm_num_inference_steps", "2", "--model_config_name_or_path", "{run}/unet", "--dataloader_num_workers",
            "0", "--logger", "tensorboard"), "file:out/model_index.json", "diffusers DDPM UNet (accelerate)",
           native=CUDA_HIDDEN, launcher="accelerate", launcher_args=("launch", "--num_processes=1",
           "--num_machines=1", "--mixed_precision=no", "--dynamo_backend=no"),
           data=(("flat_images", "flat", {"n": 8, "size": 32}), ("unet_config", "unet", {})), timeout=500),
    Script("barlowtwins", "barlowtwins", "main.py", ("{run}/imagenet", "--epochs", "1", "--batch-size", "4",
           "--workers", "0", "--projector", "64-64-64", "--print-freq", "1"), "file:checkpoint/resnet50.pth",
           "Barlow Twins (mp.spawn, SyncBN, GradScaler)", native=None,
           why_not_native="mp.spawn over torch.cuda.device_count(), nccl, .cuda(gpu) unconditional",
           data=(("images", "imagenet", {"splits": ("train",), "size": 64, "per_class": 4}),), timeout=600),
    Script("pyg-gcn", "pytorch_geometric", "examples/gcn.py", ("--epochs", "20"), r"Median time per epoch",
           "PyG GCN (Planetoid format)", native=CUDA_HIDDEN, data=(("planetoid", "{src}/data/Planetoid", {}),),
           losses=r"Loss: [0-9.]+"),
    Script("pyg-gat", "pytorch_geometric", "examples/gat.py", ("--epochs", "20", "--hidden_channels", "8"),
           r"Median time per epoch", "PyG GAT (Planetoid format)", native=CUDA_HIDDEN,
           data=(("planetoid", "{src}/data/Planetoid", {}),), losses=r"Loss: [0-9.]+"),
    Script("mae-pretrain", "mae", "main_pretrain.py", ("--model", "mae_vit_base_patch16", "--batch_size", "2",
           "--epochs", "1", "--input_size", "64", "--data_path", "{run}/imagenet", "--num_workers", "0",
           "--output_dir", "out", "--log_dir", "out"), r"Training time", "MAE pretraining (timm 0.3.2 pinned)",
           native={"args": ["--device", "cpu"]}, data=(("images", "imagenet", {"splits": ("train",), "size": 64}),)),
    # ---------------------------------------------------------------- frameworks' own examples
    Script("lightning-fabric-mnist", "pytorch-lightning", "examples/fabric/image_classifier/train_fabric.py",
           ("--epochs", "1", "--batch-size", "32"), r"Test set: Average loss", "Lightning Fabric image classifier",
           native={"replace": {"--accelerator=cuda": "--accelerator=cpu"}}, launcher="fabric",
           launcher_args=("run", "--accelerator=cuda", "--devices=1"),
           data=(("mnist", "{src}/Datasets", {"n": 256, "test": 64}),)),
    Script("lightning-torch-mnist", "pytorch-lightning", "examples/fabric/image_classifier/train_torch.py",
           ("--epochs", "1", "--batch-size", "32"), r"Test set: Average loss", "the same classifier in plain PyTorch",
           native=CUDA_HIDDEN, data=(("mnist", "{src}/Datasets", {"n": 256, "test": 64}),)),
    Script("lightning-autoencoder", "pytorch-lightning", "examples/pytorch/basics/autoencoder.py",
           ("--trainer.max_epochs=1", "--trainer.accelerator=gpu", "--trainer.devices=1",
            "--trainer.limit_train_batches=4", "--trainer.limit_val_batches=2", "--data.batch_size=16"),
           r"`Trainer.fit` stopped", "Lightning Trainer + LightningCLI autoencoder",
           native={"replace": {"--trainer.accelerator=gpu": "--trainer.accelerator=cpu"}},
           data=(("mnist", "{src}/examples/Datasets", {"n": 60000, "test": 64}),  # random_split(55000, 5000)
                 ("mnist", "w/data", {"n": 64, "test": 16}))),  # Lightning's MNIST() probes torchvision at ./data
    Script("ignite-mnist", "ignite", "examples/mnist/mnist.py", ("--epochs", "1", "--batch_size", "32",
           "--val_batch_size", "64", "--log_interval", "2"), r"Validation Results - Epoch: 1",
           "ignite Engine", native=CUDA_HIDDEN, data=(("mnist", "w", {"n": 256, "test": 64}),)),
    Script("opacus-mnist", "opacus", "examples/mnist.py", ("--epochs", "1", "-b", "64", "--test-batch-size", "64",
           "-n", "1", "--data-root", "{run}/data"), r"Test set: Average loss", "Opacus DP-SGD",
           native={"args": ["--device", "cpu"]}, data=(("mnist", "data", {"n": 256, "test": 64}),)),
    Script("rlzoo-ppo", "rl-baselines3-zoo", "train.py", ("--algo", "ppo", "--env", "CartPole-v1", "-n", "1024",
           "--seed", "1", "--device", "cuda", "-f", "logs", "--eval-freq", "-1"), r"Saving to",
           "RL Zoo (stable-baselines3 PPO)", native={"replace": {"cuda": "cpu"}}, path=(".",)),
    Script("rlzoo-dqn", "rl-baselines3-zoo", "train.py", ("--algo", "dqn", "--env", "CartPole-v1", "-n", "1500",
           "--seed", "1", "--device", "cuda", "-f", "logs", "--eval-freq", "-1"), r"Saving to",
           "RL Zoo (stable-baselines3 DQN)", native={"replace": {"cuda": "cpu"}}, path=(".",)),
    # ---------------------------------------------------------------- detection
    Script("yolov5n-train", "yolov5", "train.py", ("--img", "64", "--batch-size", "4", "--epochs", "1", "--data",
           "{run}/data/data.yaml", "--weights", "", "--cfg", "yolov5n.yaml", "--workers", "0", "--noplots",
           "--project", "{run}/out", "--name", "exp"), r"1 epochs completed in",
           "YOLOv5n detection from scratch (AMP, EMA, mosaic, deterministic seeding)",
           native={"args": ["--device", "cpu"]}, data=(("yolo", "data", {"config": "cfg"}),),
           env=(("YOLOV5_CONFIG_DIR", "cfg"), ("YOLO_CONFIG_DIR", "cfg"), ("YOLO_OFFLINE", "1")),
           timeout=600),  # both settings folders in the run's own, not ~/.config
    # ---------------------------------------------------------------- speech
    Script("autovc", "autovc", "main.py", ("--num_iters", "20", "--log_step", "5", "--batch_size", "2",
           "--len_crop", "64", "--dim_pre", "128"), r"Iteration \[20/20\]",
           "AutoVC voice conversion (LSTM autoencoder on mel spectrograms)", native=CUDA_HIDDEN,
           data=(("autovc", "w/spmel", {}),), losses=r"G/loss_id: [0-9.]+"),
)

#: Scripts tried and not run, each with its reason.
NOT_RUN: Tuple[Tuple[str, str, str], ...] = (
    ("aitorzip/PyTorch-CycleGAN", "train", "imports visdom, whose sdist fails to build here (no wheel on PyPI)"),
    ("graykode/nlp-tutorial", "5-1.Transformer/Transformer.py and the others", "CPU-only scripts (no CUDA path)"),
    ("pytorch/examples", "imagenet/main.py --dummy", "its FakeData is 1,281,167 images of 224x224, hard-coded: hours "
     "of ResNet-18 per epoch on a CPU (tests/test_port_upstream.py runs a shrunk copy)"),
    ("karpathy/ng-video-lecture", "gpt.py", "5000 iterations of a 6-layer, 384-wide GPT hard-coded: hours on a CPU"),
    ("huggingface/accelerate", "examples/nlp_example.py, cv_example.py", "load bert-base-cased / a pretrained "
     "resnet50d and GLUE from the hub (no network); the snapshot of huggingface/transformers (its no-trainer "
     "examples) is larger than this workplace can fetch"),
    ("facebookresearch/DiT", "train.py", "loads the pretrained sd-vae-ft VAE from the hub"),
    ("karpathy/build-nanogpt", "train_gpt2.py", "evaluates HellaSwag, downloaded at its first step; tiktoken"),
    ("junyanz/pytorch-CycleGAN-and-pix2pix", "train.py", "its snapshot (3 GB) is larger than this workplace can fetch"),
    ("facebookresearch/moco", "main_moco.py", "the repository is archived: its default branch holds no files"),
    ("cloneofsimo/minDiffusion", "superminddpm.py", "100 epochs hard-coded, each sampling 1000 DDPM steps; cuda:0 "
     "hard-coded: no tiny size and no CPU path"),
    ("sthalles/SimCLR", "run.py", "reads STL10 / CIFAR-10 through torchvision, which verifies the archives' MD5: no "
     "synthetic stand-in can pass"),
    ("karpathy/llm.c", "train_gpt2.py", "imports tiktoken's GPT-2 encoding, which downloads its BPE files at run time"),
    ("pytorch/vision", "references/detection/train.py", "its snapshot (1.4 GB) is larger than this workplace can "
     "fetch (500 MB); ultralytics/yolov5 stands for detection"),
    ("tugstugi/pytorch-speech-commands", "train_speech_commands.py", "`loss.data[0]` of a 0-dim loss (PyTorch 0.3 "
     "code): fails on CUDA with any torch >= 0.5; auspicious3000/autovc stands for speech"),
)

#: Known outcomes: (script, target) -> (class, note). Classes: transfer (a defect of transfer), standin (a defect of
#: a stand-in in tests/vendors), need (the script's own need: a GPU-only package, CUDA-only code we do not provide),
#: bug (the script's own bug: fails natively too), vendor (what the real vendor plug-in lacks too; the stand-in is
#: faithful to it).
TIMM_OLD = ("need", "written for timm 0.3/0.4 (README pins it); timm 1.0 has no `_pil_interp` / `Nadam`: fails the "
            "same way on CUDA with today's timm")
NO_IPC = ("standin", "hogwild on sdaa/gcu: nothing is known of torch_sdaa's / torch_gcu's IPC, so their stand-ins "
          "share no device memory between processes, and transfer refuses the send with UnsupportedCudaAPI naming "
          "the fix (keep the shared model on the CPU, or use DDP; docs/limits.md, tests/vendors/README.md)")
SPARSE = ("standin", "sparse COO tensors: the stand-ins make strided tensors only; whether torch_sdaa / torch_gcu have "
          "sparse kernels is not known (tests/vendors/README.md, Limits)")
KNOWN: Dict[Tuple[str, str], Tuple[str, str]] = {
    ("examples-time-sequence", "*"): ("bug", "torch.load of its numpy traindata.pt: refused by torch >= 2.6's "
                                      "weights_only default, natively too (fixed upstream after this commit)"),
    ("deit-tiny", "*"): TIMM_OLD,
    ("convnext-tiny", "*"): TIMM_OLD,
    ("mae-pretrain", "*"): ("need", "asserts timm.__version__ == '0.3.2' (which needs torch._six, gone since torch 2.0)"),
    ("rlzoo-ppo", "*"): ("need", "huggingface_sb3 needs huggingface_hub.Repository (hub < 1.0) while transformers 5 "
                         "needs hub >= 1.31: no one environment holds both"),
    ("rlzoo-dqn", "*"): ("need", "huggingface_sb3 needs huggingface_hub.Repository (hub < 1.0) while transformers 5 "
                         "needs hub >= 1.31: no one environment holds both"),
    ("timm-vit-ddp-syncbn", "native"): ("bug", "its CPU path passes device_ids=[device('cpu')] to DDP, which torch "
                                        "refuses (and SyncBatchNorm has no CPU kernels): the CUDA path is the one "
                                        "users run"),
    ("dino-vit-tiny", "*"): ("need", "builds its argument parser with torch.hub.list('facebookresearch/xcit:main'), "
                             "which asks GitHub (no network here; on any offline machine too)"),
    ("beginner-simple-autoencoder", "*"): ("bug", "`loss.data[0]` of a 0-dim tensor (PyTorch 0.3 code): fails on "
                                           "CUDA with any torch >= 0.5 too"),
    ("examples-hogwild", "sdaa"): NO_IPC,
    ("examples-hogwild", "gcu"): NO_IPC,
    ("pygcn", "npu"): ("vendor", "sparse COO tensors on npu: torch_npu registers ~160 sparse kernels "
                       "(SparsePrivateUse1) but no sparse `addmm`, which `torch.spmm` reaches through `mm`; its "
                       "sparse fallback raises 'CAUTION: The operator aten::addmm is not currently supported on the "
                       "NPU backend', as the strict stand-in does (tests/vendors/torch_npu/_data/sparse_ops.txt, "
                       "docs/limits.md)"),
    ("pygcn", "sdaa"): SPARSE,
    ("pygcn", "gcu"): SPARSE,
}
