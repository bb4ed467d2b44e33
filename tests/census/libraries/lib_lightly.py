"""lightly (self-supervised learning): its SimCLR Lightning example on synthetic images (torchvision's
`FakeData`), written against ``pytorch_lightning`` as lightly's examples are.

Drives lightly's `SimCLRTransform` (random augmentations drawn in the loader), `LightlyDataset`,
`SimCLRProjectionHead`, and `NTXentLoss(gather_distributed=True)`, which all-gathers the embeddings of
every rank through lightly's own `torch.distributed` helpers; the module is the example's own.
"""
import pytorch_lightning as pl
import torch
import torchvision
from lightly.data import LightlyDataset
from lightly.loss import NTXentLoss
from lightly.models.modules import SimCLRProjectionHead
from lightly.transforms import SimCLRTransform

import _record


class SimCLR(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
        self.projection_head = SimCLRProjectionHead(8, 16, 8)
        self.criterion = NTXentLoss(gather_distributed=True)

    def forward(self, x):
        return self.projection_head(self.backbone(x))

    def training_step(self, batch, batch_index):
        (x0, x1), _, _ = batch
        loss = self.criterion(self.forward(x0), self.forward(x1))
        self.log("train_loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.06)


_record.seed(0)
images = torchvision.datasets.FakeData(size=48, image_size=(3, 32, 32), num_classes=2, random_offset=0)
dataset = LightlyDataset.from_torch_dataset(images, transform=SimCLRTransform(input_size=32, gaussian_blur=0.0))
loader = torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=True, drop_last=True, num_workers=0)
model = SimCLR()
trainer = pl.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False, **_record.trainer_kwargs())
trainer.fit(model, loader)
model.eval()
with torch.no_grad():
    plain = torchvision.datasets.FakeData(size=8, image_size=(3, 32, 32), num_classes=2, random_offset=0,
                                          transform=torchvision.transforms.ToTensor())
    probe = torch.stack([plain[i][0] for i in range(8)])
    predictions = model(probe)
_record.save(trainer, model, predictions, train_loss=trainer.callback_metrics.get("train_loss"))
