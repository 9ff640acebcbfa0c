"""A tiny LLaMA with attn_implementation="flash_attention_2", checked against SDPA, as a CUDA user runs it.

Prints one JSON line: whether transformers finds flash-attention 2, the implementation the model took,
where flash_attn came from, and the largest logit difference to the same weights under "sdpa" with a
left-padded batch (the varlen path: transformers unpads the batch for flash_attn_varlen_func).
"""

import json

import flash_attn
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import is_flash_attn_2_available


def main():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    sdpa = LlamaForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16).cuda().eval()
    fa2 = LlamaForCausalLM._from_config(config, attn_implementation="flash_attention_2",
                                        dtype=torch.bfloat16).cuda().eval()
    fa2.load_state_dict(sdpa.state_dict())
    ids = torch.randint(0, 128, (2, 16), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # left padding
    with torch.no_grad():
        a = sdpa(input_ids=ids, attention_mask=mask).logits
        b = fa2(input_ids=ids, attention_mask=mask).logits
    keep = mask.bool()
    print(json.dumps({"available": is_flash_attn_2_available(), "implementation": fa2.config._attn_implementation,
                      "flash_attn": flash_attn.__file__, "version": flash_attn.__version__,
                      "device": str(b.device), "max_diff": (a[keep] - b[keep]).abs().max().item(),
                      "scale": a[keep].abs().max().item()}))


if __name__ == "__main__":
    main()
