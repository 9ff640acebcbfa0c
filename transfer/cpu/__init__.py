"""The cpu target's machinery: `runtime` answers ``torch.cuda``, `kernels` serves SyncBatchNorm's ops,
`graph_replay` replays CUDA graphs op by op, `target` says where the cpu target departs from a vendor's.

Importing this package imports none of them (and not torch).
"""
