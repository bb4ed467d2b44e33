"""A language model on Lightning's demo Transformer and WikiText2 dataset, as Lightning's
``examples/pytorch/basics/transformer.py`` trains it (SGD, gradient clipping 0.25, a random
train/val/test split, seed 42). The corpus is written here (no download): WikiText2-like lines
of words drawn from a small vocabulary, so that the run is small and offline."""
import random
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, random_split

import lightning as L
from lightning.pytorch.demos import Transformer, WikiText2


def write_corpus(data_dir, lines: int = 120, vocabulary: int = 60) -> Path:
    words = [f"w{i}" for i in range(vocabulary)]
    rng = random.Random(0)
    path = Path(data_dir) / "wikitext-2.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(" ".join(rng.choices(words, k=rng.randint(8, 30))) for _ in range(lines)) + "\n")
    return path


class LanguageModel(L.LightningModule):
    def __init__(self, vocab_size):
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size, ninp=32, nhead=2, nhid=64, nlayers=1)

    def training_step(self, batch, batch_idx):
        input, target = batch
        output = self.model(input, target)
        loss = F.nll_loss(output, target.view(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        input, target = batch
        output = self.model(input, target)
        loss = F.nll_loss(output, target.view(-1))
        self.log("val_loss", loss, prog_bar=True)
        return loss

    def test_step(self, batch, batch_idx):
        input, target = batch
        output = self.model(input, target)
        loss = F.nll_loss(output, target.view(-1))
        self.log("test_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root_dir, **trainer_kwargs):
    L.seed_everything(42)
    write_corpus(Path(root_dir) / "data")
    dataset = WikiText2(data_dir=Path(root_dir) / "data", download=False)

    n = len(dataset)
    train_dataset, val_dataset, test_dataset = random_split(dataset, [n - 20, 10, 10])
    train_dataloader = DataLoader(train_dataset, batch_size=10, shuffle=True)
    val_dataloader = DataLoader(val_dataset, batch_size=10, shuffle=False)
    test_dataloader = DataLoader(test_dataset, batch_size=10, shuffle=False)

    model = LanguageModel(vocab_size=dataset.vocab_size)

    trainer = L.Trainer(accelerator="cpu", default_root_dir=root_dir, gradient_clip_val=0.25, max_epochs=2,
                        log_every_n_steps=2, **trainer_kwargs)
    trainer.fit(model, train_dataloader, val_dataloader)
    trainer.test(model, test_dataloader, verbose=False)
    return model, trainer
