"""Lightning's demo language model (``lightning.pytorch.demos.transformer``): a small
encoder-decoder `Transformer`, the `WikiText2` dataset it trains on, and `LightningTransformer`,
the module that trains it, with Lightning 2.6's layers, initialization order and quirks (so the
same seed gives the same weights and losses).

`WikiText2` downloads PyTorch's word-language-model copy of WikiText-2's training text into
``data_dir / "wikitext-2.txt"`` (it needs ``requests`` and the internet); an existing file there
is read as it is, so offline, put the text file there.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from trainer.module import TrainModule

_WIKITEXT2_URL = "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2/train.txt"


def _causal_mask(size: int, device: torch.device) -> Tensor:
    # 0 on and below the diagonal, -inf above: a position sees itself and the ones before
    return torch.full((size, size), float("-inf"), device=device).triu(1)


class PositionalEncoding(nn.Module):
    """Sinusoidal position encoding, then dropout.

    As in Lightning's demo, every position of a sequence of length ``t`` gets the encoding of
    position ``t`` (one row, broadcast); kept, because it is what the demo's numbers are made of.
    """

    def __init__(self, dim: int, dropout: float = 0.1, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.dim = dim
        self.max_len = max_len
        # not a buffer: it must stay out of the state dict, and is made on the input's device on first use
        self.pe: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        if self.pe is None:
            self.pe = self._table(x.device)
        out: Tensor = self.dropout(x + self.pe[:, x.size(1)])  # nn.Module.__call__ is typed Any
        return out

    def _table(self, device: torch.device) -> Tensor:
        position = torch.arange(0, self.max_len, dtype=torch.float, device=device).unsqueeze(1)
        frequency = torch.exp(torch.arange(0, self.dim, 2, device=device).float() * (-math.log(10000.0) / self.dim))
        table = torch.zeros(self.max_len, self.dim, device=device)
        table[:, 0::2] = torch.sin(position * frequency)
        table[:, 1::2] = torch.cos(position * frequency)
        return table.unsqueeze(0)


class Transformer(nn.Module):
    """Embedding (scaled by sqrt(ninp)) + `PositionalEncoding`, ``nn.Transformer`` (batch first, a causal
    target mask), a linear decoder and log-softmax: ``forward(inputs, target)`` gives
    ``[batch * length, vocab_size]`` log-probabilities."""

    def __init__(self, vocab_size: int = 33278, ninp: int = 200, nhead: int = 2, nhid: int = 200,
                 nlayers: int = 2, dropout: float = 0.2) -> None:
        super().__init__()
        # the construction order is the order of the random draws: Lightning's
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.embedding = nn.Embedding(vocab_size, ninp)
        self.transformer = nn.Transformer(d_model=ninp, nhead=nhead, num_encoder_layers=nlayers,
                                          num_decoder_layers=nlayers, dim_feedforward=nhid, dropout=dropout,
                                          batch_first=True)
        self.decoder = nn.Linear(ninp, vocab_size)
        self.ninp = ninp
        self.vocab_size = vocab_size

    def generate_square_subsequent_mask(self, size: int) -> Tensor:
        """The ``[size, size]`` causal mask: 0 where a position may look, ``-inf`` at later positions."""
        return _causal_mask(size, torch.device("cpu"))

    def forward(self, inputs: Tensor, target: Tensor, mask: Tensor | None = None) -> Tensor:
        if mask is None:
            mask = _causal_mask(inputs.size(1), inputs.device)
        scale = math.sqrt(self.ninp)
        src = self.pos_encoder(self.embedding(inputs) * scale)
        tgt = self.pos_encoder(self.embedding(target) * scale)
        output = self.decoder(self.transformer(src, tgt, tgt_mask=mask))
        return F.log_softmax(output, dim=-1).view(-1, self.vocab_size)


class Dictionary:
    """Words and their ids, in order of first appearance."""

    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        """``word``'s id, a new one if it is new."""
        if word not in self.word2idx:
            self.word2idx[word] = len(self.idx2word)
            self.idx2word.append(word)
        return self.word2idx[word]

    def __len__(self) -> int:
        return len(self.idx2word)


def tokenize(path: Path) -> tuple[Tensor, Dictionary]:
    """The file's words, each line's ended by ``<eos>``, as one int64 tensor of ids, and their `Dictionary`."""
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    dictionary = Dictionary()
    with open(path, encoding="utf8") as f:
        ids = [dictionary.add_word(word) for line in f for word in [*line.split(), "<eos>"]]
    return torch.tensor(ids, dtype=torch.int64), dictionary


class WikiText2(Dataset["tuple[Tensor, Tensor]"]):
    """WikiText-2's training text as ``(inputs, target)`` blocks of ``block_size`` token ids, the target
    shifted one token on; consecutive, non-overlapping blocks."""

    def __init__(self, data_dir: Path = Path("./data"), block_size: int = 35, download: bool = True) -> None:
        super().__init__()
        self.path = Path(data_dir) / "wikitext-2.txt"
        if download:
            self.download(self.path)
        self.data, self.dictionary = tokenize(self.path)
        self.block_size = block_size

    @property
    def vocab_size(self) -> int:
        """How many distinct words (``<eos>`` included)."""
        return len(self.dictionary)

    def __len__(self) -> int:
        return len(self.data) // self.block_size - 1

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        start = index * self.block_size
        return self.data[start:start + self.block_size], self.data[start + 1:start + self.block_size + 1]

    @staticmethod
    def download(destination: Path) -> None:
        """Fetch the text to ``destination`` unless a file is there (needs ``requests``)."""
        import requests  # Lightning's demo needs it too; a missing one is the ModuleNotFoundError

        os.makedirs(destination.parent, exist_ok=True)
        if os.path.exists(destination):
            return
        response = requests.get(_WIKITEXT2_URL)
        response.raise_for_status()  # an error page must not become the corpus
        with open(destination, "w") as f:
            f.write(response.text)


class LightningTransformer(TrainModule):
    """Trains `Transformer` on `WikiText2` (batches of one block): NLL loss, SGD(lr=0.1)."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size)

    def forward(self, inputs: Tensor, target: Tensor) -> Tensor:
        out: Tensor = self.model(inputs, target)  # nn.Module.__call__ is typed Any: the Transformer's output
        return out

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        inputs, target = batch
        return F.nll_loss(self(inputs, target), target.view(-1))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=0.1)

    def prepare_data(self) -> None:
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader[tuple[Tensor, Tensor]]:
        return DataLoader(WikiText2())
