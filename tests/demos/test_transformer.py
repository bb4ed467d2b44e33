"""`trainer.lightning.demos.transformer` against Lightning's: `WikiText2` read from a small local file gives
the same ids, vocabulary and blocks; `Transformer` the same weights and outputs from the same seed;
`LightningTransformer` fitted a few steps the same parameters (1e-6). The download runs against a
real HTTP server on this machine (a thread), as the demo reaches the internet's."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.demos_parity import demos, fit_both, max_parameter_difference, write_corpus
from tests.helpers.optional import importorskip

importorskip("lightning", reason="the comparison needs `lightning` (the dev extra)")


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(Path("data"))  # the demos' default data_dir, under the test's own working folder


def test_wikitext2_from_a_local_file_is_lightning_s(corpus):
    theirs, ours = (demos(f).transformer.WikiText2(block_size=20) for f in ("lightning", "lockstep"))
    assert torch.equal(theirs.data, ours.data) and ours.data.dtype == torch.int64
    assert theirs.dictionary.idx2word == ours.dictionary.idx2word and theirs.dictionary.word2idx == ours.dictionary.word2idx
    assert len(theirs) == len(ours) == len(ours.data) // 20 - 1 and ours.vocab_size == theirs.vocab_size == 41
    for index in (0, 1, len(ours) - 1):
        assert all(torch.equal(a, b) for a, b in zip(theirs[index], ours[index]))
    assert corpus.read_text(encoding="utf8").count("\n") == int((ours.data == ours.dictionary.word2idx["<eos>"]).sum())


def test_transformer_gives_lightning_s_weights_and_outputs():
    results = {}
    for framework in ("lightning", "lockstep"):
        torch.manual_seed(2)
        model = demos(framework).transformer.Transformer(vocab_size=50, ninp=16, nhead=2, nhid=24, nlayers=2)
        inputs, target = torch.randint(0, 50, (3, 7)), torch.randint(0, 50, (3, 7))
        results[framework] = (model, model(inputs, target), model.eval()(inputs, target), torch.randn(1))
    theirs, ours = results["lightning"], results["lockstep"]
    assert max_parameter_difference(theirs[0], ours[0]) == 0
    assert ours[1].shape == (21, 50)
    assert torch.allclose(theirs[1], ours[1], atol=1e-6)  # train mode: the same dropout draws
    assert torch.allclose(theirs[2], ours[2], atol=1e-6)
    assert torch.equal(theirs[3], ours[3])
    assert torch.equal(demos("lightning").transformer.Transformer(vocab_size=5, ninp=4, nhid=4).generate_square_subsequent_mask(4),
                       ours[0].generate_square_subsequent_mask(4))


def test_lightning_transformer_fits_to_lightning_s_parameters(corpus):
    def build(d):
        return d.transformer.LightningTransformer(vocab_size=d.transformer.WikiText2().vocab_size)

    runs = fit_both(build, max_steps=4)
    (theirs, t_trainer), (ours, o_trainer) = runs["lightning"], runs["lockstep"]
    assert o_trainer.global_step == t_trainer.global_step == 4
    assert max_parameter_difference(theirs, ours) < 1e-6


@pytest.mark.timeout(60)
def test_wikitext2_downloads_once_and_an_error_page_writes_nothing(server, monkeypatch):
    import trainer.lightning.demos.transformer as transformer

    served, url = server
    text = write_corpus(served, lines=60).read_text(encoding="utf8")
    monkeypatch.setattr(transformer, "_WIKITEXT2_URL", f"{url}/missing.txt")
    import requests

    with pytest.raises(requests.HTTPError):
        transformer.WikiText2(data_dir=Path("fetched"))
    assert not Path("fetched/wikitext-2.txt").exists()  # a 404 page is not the corpus
    monkeypatch.setattr(transformer, "_WIKITEXT2_URL", f"{url}/wikitext-2.txt")
    dataset = transformer.WikiText2(data_dir=Path("fetched"))
    assert Path("fetched/wikitext-2.txt").read_text() == text and len(dataset) > 0
    (served / "wikitext-2.txt").unlink()  # a file already there is read, not fetched again
    assert torch.equal(transformer.WikiText2(data_dir=Path("fetched")).data, dataset.data)
