"""What `transfer` costs: per-call overhead, training steps, activation/startup,
torch.compile graph breaks and peak memory, each measured against the native
equivalent (a hand port run with the shim uninstalled).

``python -m benchmarks [--quick] [--out DIR]`` runs everything; see README.md.
Every measurement that times code alternates native and shim samples inside one
process (or alternates whole processes) so that machine drift cancels, and
reports the median ratio with its spread over the repeats.
"""
