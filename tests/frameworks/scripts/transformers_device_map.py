"""A tiny LLaMA saved and loaded back with device_map="auto", as TRL's scripts load their models.

    python transformers_device_map.py WORK_DIR

Prints one JSON line: the device map transformers chose, the parameters' devices, and how far the
loaded model's logits are from the same weights run without a device map.
"""

import json
import sys

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM


def main(work_dir):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    LlamaForCausalLM(config).save_pretrained(work_dir)
    reference = AutoModelForCausalLM.from_pretrained(work_dir).eval()
    model = AutoModelForCausalLM.from_pretrained(work_dir, device_map="auto", torch_dtype=torch.float32).eval()
    tokens = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        expected = reference(input_ids=tokens).logits
        logits = model(input_ids=tokens.to(model.device)).logits.cpu()
    print(json.dumps({
        "device_map": {k: str(v) for k, v in getattr(model, "hf_device_map", {}).items()},
        "model_device": str(model.device),
        "param_devices": sorted({str(p.device) for p in model.parameters()}),
        "cuda_available": torch.cuda.is_available(),
        "max_diff": (logits - expected).abs().max().item(),
    }))


if __name__ == "__main__":
    main(sys.argv[1])
