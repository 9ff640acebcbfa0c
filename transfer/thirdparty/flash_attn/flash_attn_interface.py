def flash_attn_func(*a, **k):
    raise NotImplementedError
flash_attn_kvpacked_func = flash_attn_qkvpacked_func = flash_attn_varlen_func = flash_attn_func
flash_attn_varlen_kvpacked_func = flash_attn_varlen_qkvpacked_func = flash_attn_with_kvcache = flash_attn_func
