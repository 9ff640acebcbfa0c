"""A CUDA user's script whose objects cross process boundaries by pickling:
a Dataset holding a torch.Generator read by spawn-mode DataLoader workers, and
a functools.partial(torch.zeros, ...) default factory sent to mp.spawn workers.
Prints SPAWN OK <devices> at the end."""
import functools
import sys

import torch
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset


class Noisy(Dataset):
    def __init__(self):
        self.generator = torch.Generator()
        self.generator.manual_seed(7)

    def __len__(self):
        return 4

    def __getitem__(self, index):
        return (torch.randn(2, generator=self.generator) + index).tolist()  # plain data: no shared memory


def worker(rank, factory, out):
    tensor = factory()
    torch.save({"rank": rank, "device": str(tensor.device), "sum": float(tensor.sum())}, f"{out}.{rank}")


def main(out):
    mp.set_sharing_strategy("file_system")  # this machine's /dev/shm refuses the fd strategy, natively too
    loader = DataLoader(Noisy(), batch_size=2, num_workers=2, multiprocessing_context="spawn", collate_fn=list)
    batches = [torch.tensor(batch).cuda() for batch in loader]
    assert len(batches) == 2 and batches[0].shape == (2, 2), batches
    factory = functools.partial(torch.zeros, 3, device="cuda")
    mp.spawn(worker, args=(factory, out), nprocs=2)
    results = [torch.load(f"{out}.{rank}") for rank in range(2)]
    assert [r["sum"] for r in results] == [0.0, 0.0], results
    print("SPAWN OK", " ".join(r["device"] for r in results), batches[0].device)


if __name__ == "__main__":
    main(sys.argv[1])
