"""A misspelled keyword of a built-in callback or logger names the closest argument, as the Trainer's does."""
from __future__ import annotations

import inspect

import pytest

import callbacks
from callbacks import CSVLogger, EarlyStopping, LearningRateMonitor, ModelCheckpoint, RichProgressBar


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: ModelCheckpoint(monitr="val_loss"),
         "ModelCheckpoint() got an unexpected keyword argument 'monitr': did you mean `monitor`?"),
        (lambda: EarlyStopping(monitor="val_loss", patiense=3),
         "EarlyStopping() got an unexpected keyword argument 'patiense': did you mean `patience`?"),
        (lambda: LearningRateMonitor(logging_intervall="step"),
         "LearningRateMonitor() got an unexpected keyword argument 'logging_intervall': did you mean `logging_interval`?"),
        (lambda: CSVLogger("logs", flush_logs_every_n_step=10),
         "CSVLogger() got an unexpected keyword argument 'flush_logs_every_n_step': did you mean `flush_logs_every_n_steps`?"),
        (lambda: RichProgressBar(refresh_rat=2),  # ProgressBar's constructor: the class built is named
         "RichProgressBar() got an unexpected keyword argument 'refresh_rat': did you mean `refresh_rate`?"),
        (lambda: ModelCheckpoint(qwertyuiop=1),
         "ModelCheckpoint() got an unexpected keyword argument 'qwertyuiop' (help(ModelCheckpoint) lists the arguments)"),
    ],
)
def test_a_misspelled_keyword_names_the_closest_argument(build, message):
    with pytest.raises(TypeError) as error:
        build()
    assert str(error.value) == message


def _public_classes_with_keywords() -> list[type]:
    classes = [getattr(callbacks, name) for name in callbacks.__all__]
    return [
        cls for cls in classes
        if isinstance(cls, type) and not issubclass(cls, BaseException) and cls.__init__ is not object.__init__
        and len(inspect.signature(cls.__init__).parameters) > 1  # more than self: a name to suggest
    ]


@pytest.mark.parametrize("cls", _public_classes_with_keywords(), ids=lambda cls: cls.__name__)
def test_every_built_in_constructor_hints_unless_it_passes_keywords_on(cls):
    """One rule for all: a constructor without ``**kwargs`` hints; one with ``**kwargs`` passes every
    keyword on (TensorBoardLogger to SummaryWriter, WeightAveraging to AveragedModel)."""
    parameters = list(inspect.signature(cls.__init__).parameters.values())
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        assert cls.__name__ in {"TensorBoardLogger", "WeightAveraging", "EMAWeightAveraging"}
        return
    name = next(p.name for p in parameters if p.name != "self" and p.kind is not p.VAR_POSITIONAL)
    with pytest.raises(TypeError, match=rf"'{name}x': did you mean `{name}`\?$"):
        cls(**{f"{name}x": None})
    assert inspect.signature(cls.__init__) == inspect.signature(cls.__init__.__wrapped__)  # for the CLI and the docs


def test_a_subclass_that_passes_its_keywords_on_gets_the_hint_with_its_own_arguments():
    class EveryStep(ModelCheckpoint):
        def __init__(self, every: int = 1, **kwargs):
            super().__init__(every_n_train_steps=every, **kwargs)

    with pytest.raises(TypeError) as error:
        EveryStep(monitr="val_loss")
    assert str(error.value) == "EveryStep() got an unexpected keyword argument 'monitr': did you mean `monitor`?"
    with pytest.raises(TypeError, match="'evry': did you mean `every`"):
        EveryStep(evry=2)
