"""A character-level LSTM language model (the word_language_model example, shrunk).

Run: python lstm_lm.py
"""
import hashlib

import torch
import torch.nn as nn

TEXT = "the quick brown fox jumps over the lazy dog. " * 20


class RNNModel(nn.Module):
    def __init__(self, vocab, emb=16, hidden=48, layers=2):
        super().__init__()
        self.encoder = nn.Embedding(vocab, emb)
        self.rnn = nn.LSTM(emb, hidden, layers, dropout=0.1)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, x, hidden):
        output, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(output), hidden

    def init_hidden(self, batch):
        weight = next(self.parameters())
        n = self.rnn.num_layers
        return (weight.new_zeros(n, batch, self.rnn.hidden_size), weight.new_zeros(n, batch, self.rnn.hidden_size))


def batchify(data, bsz, device):
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous().to(device)


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    vocab = sorted(set(TEXT))
    ids = torch.tensor([vocab.index(c) for c in TEXT])
    data = batchify(ids, 4, device)
    model = RNNModel(len(vocab)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    bptt = 20

    losses = []
    for epoch in range(4):
        hidden = model.init_hidden(4)
        for i in range(0, data.size(0) - 1, bptt):
            seq = min(bptt, data.size(0) - 1 - i)
            inputs, targets = data[i:i + seq], data[i + 1:i + 1 + seq]
            hidden = tuple(h.detach() for h in hidden)
            output, hidden = model(inputs, hidden)
            loss = nn.functional.cross_entropy(output.view(-1, len(vocab)), targets.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25 * 10)
            optimizer.step()
            losses.append(loss.item())

    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(repr(t.detach().cpu().flatten().tolist()).encode())
    print(f"rank 0: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    print(f"rank 0: parameters {h.hexdigest()[:16]} on {next(model.parameters()).device}")
    print("rank 0: done")


if __name__ == "__main__":
    main()
