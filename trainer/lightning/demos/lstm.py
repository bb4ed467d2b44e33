"""Lightning's demo LSTM language model (``lightning.pytorch.demos.lstm``): `SimpleLSTM`,
`SequenceSampler` (batches that carry the hidden state from one to the next) and `LightningLSTM`,
which trains it on `WikiText2`, with Lightning 2.6's layers, initialization and optimizer.
"""
from __future__ import annotations

from typing import Iterator, Sized

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Sampler

from trainer.lightning.demos.transformer import WikiText2
from trainer.module import TrainModule


class SimpleLSTM(nn.Module):
    """Embedding, a multi-layer LSTM (batch first), a linear decoder, log-softmax; dropout between them."""

    def __init__(self, vocab_size: int = 33278, ninp: int = 512, nhid: int = 512, nlayers: int = 4,
                 dropout: float = 0.2) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab_size, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(nhid, vocab_size)
        self.nlayers = nlayers
        self.nhid = nhid
        self.init_weights()

    def init_weights(self) -> None:
        """Embedding and decoder weights uniform in [-0.1, 0.1], the decoder's bias zero (in that order)."""
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input: Tensor, hidden: tuple[Tensor, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        output, hidden = self.rnn(self.drop(self.encoder(input)), hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.vocab_size)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, batch_size: int) -> tuple[Tensor, Tensor]:
        """Zero ``(h, c)`` of ``[nlayers, batch_size, nhid]``, on the weights' device and dtype."""
        weight = next(self.parameters())
        return weight.new_zeros(self.nlayers, batch_size, self.nhid), weight.new_zeros(self.nlayers, batch_size, self.nhid)


class SequenceSampler(Sampler[list[int]]):
    """The dataset cut into ``batch_size`` contiguous streams; batch ``i`` holds item ``i`` of each
    stream, so row ``j`` of one batch continues row ``j`` of the one before."""

    def __init__(self, dataset: Sized, batch_size: int) -> None:
        super().__init__()
        self.dataset = dataset
        self.batch_size = batch_size
        self.chunk_size = len(dataset) // batch_size

    def __iter__(self) -> Iterator[list[int]]:
        end = len(self.dataset) - len(self.dataset) % self.batch_size
        return (list(range(i, end, self.chunk_size)) for i in range(self.chunk_size))

    def __len__(self) -> int:
        return self.chunk_size


class LightningLSTM(TrainModule):
    """Trains `SimpleLSTM` on `WikiText2` in `SequenceSampler` batches of 20, the hidden state carried
    (detached) from batch to batch and reset each epoch; NLL loss logged as ``train_loss``; SGD(lr=20)."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = SimpleLSTM(vocab_size=vocab_size)
        self.hidden: tuple[Tensor, Tensor] | None = None

    def on_train_epoch_end(self) -> None:
        self.hidden = None

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        input, target = batch
        if self.hidden is None:
            self.hidden = self.model.init_hidden(input.size(0))
        output, self.hidden = self.model(input, (self.hidden[0].detach(), self.hidden[1].detach()))
        loss = F.nll_loss(output, target.view(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def prepare_data(self) -> None:
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader[tuple[Tensor, Tensor]]:
        dataset = WikiText2()
        return DataLoader(dataset, batch_sampler=SequenceSampler(dataset, batch_size=20))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=20.0)
