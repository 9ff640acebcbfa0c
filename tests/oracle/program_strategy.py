"""Hypothesis strategy: op sequences in cuda_semantics.run_program's vocabulary."""

from __future__ import annotations

from hypothesis import strategies as st

import cuda_semantics


@st.composite
def programs(draw, tensor_draws):
    """Sequences of ops in cuda_semantics.run_program's vocabulary."""
    ops, hosts, devices = [("host", "h0", draw(st.integers(-3, 3)))], 1, 0
    draws = cuda_semantics.FACTORY_DRAWS + (cuda_semantics.TENSOR_DRAWS if tensor_draws else ())
    for _ in range(draw(st.integers(1, 16))):
        kind = draw(st.sampled_from(["host", "move", "inplace", "binary", "seed", "draw", "draw_cpu", "state",
                                     "autocast"]))
        if kind == "host":
            ops.append(("host", f"h{hosts}", draw(st.integers(-3, 3))))
            hosts += 1
        elif kind == "move":
            ops.append(("move", f"h{draw(st.integers(0, hosts - 1))}", f"d{devices}",
                        draw(st.sampled_from(cuda_semantics.MOVES))))
            devices += 1
        elif kind == "inplace":
            name = draw(st.sampled_from([f"h{i}" for i in range(hosts)] + [f"d{i}" for i in range(devices)]))
            ops.append(("inplace", name, draw(st.sampled_from(["add_", "sub_", "mul_", "remainder_"])),
                        draw(st.sampled_from([-2, -1, 1, 2, 3]))))
        elif kind == "binary" and devices:
            ops.append(("binary", f"d{draw(st.integers(0, devices - 1))}", f"d{draw(st.integers(0, devices - 1))}",
                        f"d{devices}"))
            devices += 1
        elif kind == "seed":
            ops.append(("seed", draw(st.sampled_from(["torch.manual_seed", "torch.cuda.manual_seed",
                                                      "torch.cuda.manual_seed_all"])), draw(st.sampled_from([0, 1, 2]))))
        elif kind == "draw":
            ops.append(("draw", f"d{devices}", draw(st.sampled_from(draws))))
            devices += 1
        elif kind == "draw_cpu":
            ops.append(("draw_cpu", f"h{hosts}"))
            hosts += 1
        elif kind == "state":
            ops.append(("state", draw(st.sampled_from(["save", "restore"])), draw(st.sampled_from(["cuda", "cpu"]))))
        elif kind == "autocast" and devices:
            ops.append(("autocast", f"d{draw(st.integers(0, devices - 1))}", f"d{draw(st.integers(0, devices - 1))}",
                        f"d{devices}", draw(st.sampled_from(cuda_semantics.AUTOCASTS))))
            devices += 1
    return ops
