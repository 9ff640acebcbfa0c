"""Whole-network CUDA graph capture of a static-shape training step, as in PyTorch's CUDA graphs docs,
followed by a captured inference step. --cuda-graph off runs the same steps eagerly.

Usage: python cuda_graph_train.py [--cuda-graph on|off]
"""
import argparse
import hashlib

import torch
import torch.nn as nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cuda-graph", default="on", choices=["on", "off"])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    use_graph = args.cuda_graph == "on"

    torch.manual_seed(0)
    N, D_in, H, D_out = 64, 16, 32, 2
    model = nn.Sequential(nn.Linear(D_in, H), nn.ReLU(), nn.Linear(H, D_out)).cuda()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    g = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(args.steps):
        x = torch.randn(N, D_in, generator=g)
        batches.append((x, (x[:, 0] - x[:, 1] > 0).long()))

    static_input = torch.randn(N, D_in, device="cuda")
    static_target = torch.zeros(N, dtype=torch.long, device="cuda")

    # warmup on a side stream, as the docs require before capture
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for x, y in batches[:3]:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x.cuda()), y.cuda()).backward()
            optimizer.step()
    torch.cuda.current_stream().wait_stream(s)

    losses = []
    if use_graph:
        graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_y_pred = model(static_input)
            static_loss = loss_fn(static_y_pred, static_target)
            static_loss.backward()
            optimizer.step()
        for x, y in batches[3:]:
            static_input.copy_(x)
            static_target.copy_(y)
            graph.replay()
            losses.append(static_loss.item())
    else:
        for x, y in batches[3:]:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            losses.append(loss.item())

    # a captured inference step
    model.eval()
    probe = torch.randn(N, D_in, generator=g)
    with torch.no_grad():
        if use_graph:
            infer = torch.cuda.CUDAGraph()
            with torch.cuda.graph(infer):
                static_logits = model(static_input)
            static_input.copy_(probe)
            infer.replay()
            logits = static_logits.clone()
        else:
            logits = model(probe.cuda())
    accuracy = (logits.argmax(1).cpu() == (probe[:, 0] - probe[:, 1] > 0).long()).float().mean().item()

    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(repr(t.detach().cpu().flatten().tolist()).encode())
    print("losses", " ".join(f"{v:.6f}" for v in losses))
    print(f"rank 0: loss {losses[0]:.4f} -> {losses[-1]:.4f}, accuracy {accuracy:.3f}, logits {logits.sum().item():.6f}")
    print(f"rank 0: parameters {h.hexdigest()[:16]} on {next(model.parameters()).device}")
    print("rank 0: done")


if __name__ == "__main__":
    main()
