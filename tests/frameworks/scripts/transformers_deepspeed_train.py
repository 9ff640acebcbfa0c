"""A tiny GPT-2 (tied embeddings) trained by the transformers Trainer with DeepSpeed ZeRO-3 on 2 GPUs.

    torchrun --nproc_per_node 2 transformers_deepspeed_train.py OUT_DIR

The Trainer's ``deepspeed=`` config (what ``--deepspeed ds_config.json`` gives), with "auto" values the
Trainer fills in; the trained model is gathered from its ZeRO-3 partitions to be evaluated.
"""

import sys

import deepspeed
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from tinydata import counting_sequences, write_result

VOCAB = 16


class Sequences(torch.utils.data.Dataset):
    def __init__(self):
        self.tokens = counting_sequences(vocab=VOCAB)

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, i):
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


DS = {"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
      "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto", "gradient_accumulation_steps": "auto"}


def main(out_dir):
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                        tie_word_embeddings=True)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(output_dir=out_dir, per_device_train_batch_size=16, num_train_epochs=4,
                             learning_rate=5e-3, report_to=[], save_strategy="no", logging_steps=10,
                             dataloader_num_workers=0, seed=0, deepspeed=DS)
    trainer = Trainer(model=model, args=args, train_dataset=Sequences())
    trainer.train()
    model = trainer.model
    model.eval()
    full = deepspeed.zero.GatheredParameters(list(model.parameters()))  # ZeRO-3: the whole model, to evaluate
    full.__enter__()
    tokens = counting_sequences(n=64, vocab=VOCAB, seed=1).to(model.device)
    with torch.no_grad():
        predicted = model(input_ids=tokens).logits[:, :-1].argmax(-1)
    accuracy = (predicted == tokens[:, 1:]).float().mean().item()
    tied = model.lm_head.weight is model.transformer.wte.weight
    write_result(out_dir, model, accuracy=accuracy, device=str(model.device), framework_device=str(args.device),
                 tied=tied,
                 tied_storage=model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(),
                 wrapper=type(trainer.model_wrapped).__name__, zero_stage=trainer.model_wrapped.zero_optimization_stage(),
                 finished=True)


if __name__ == "__main__":
    main(sys.argv[1])
