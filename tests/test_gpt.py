"""Part 8's GPT and its text: the model's contract the chapters shard, and the data every rank reads."""
import pytest
import torch

from helpers import gpt, models, text


def test_the_tied_head_is_the_token_embedding_and_untied_adds_its_own_weight():
    tied, untied = gpt.GPT(gpt.GPTConfig(tied=True)), gpt.GPT(gpt.GPTConfig(tied=False))
    assert tied.head.weight is tied.tok_emb.weight
    cfg = tied.cfg
    assert models.n_params(untied) - models.n_params(tied) == cfg.vocab * cfg.hidden


def test_a_forward_gives_logits_and_the_loss_of_a_uniform_guess_at_init():
    torch.manual_seed(0)
    m = gpt.build("gpt-tiny")
    x, y = text.batch(text.tokens(), 4, m.cfg.seq, torch.Generator().manual_seed(0))
    logits, loss = m(x, y)
    assert logits.shape == (4, m.cfg.seq, text.VOCAB)
    # std-0.02 weights make every byte about equally likely: ln(256) = 5.55
    assert loss.item() == pytest.approx(torch.log(torch.tensor(256.0)).item(), abs=0.1)


def test_attention_is_causal_a_later_token_never_changes_an_earlier_logit():
    torch.manual_seed(0)
    m = gpt.build("gpt-tiny").eval()
    x = torch.randint(256, (1, 16))
    y = x.clone()
    y[0, 10:] = (y[0, 10:] + 1) % 256
    torch.testing.assert_close(m(x)[:, :10], m(y)[:, :10])
    assert not torch.allclose(m(x)[:, 10:], m(y)[:, 10:])


def test_generate_extends_past_the_context_and_refuses_a_zero_temperature():
    torch.manual_seed(0)
    m = gpt.build("gpt-tiny")
    out = m.generate(text.encode("def f")[None], 70, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 5 + 70) and text.decode(out[0]).startswith("def f")
    with pytest.raises(ValueError, match="temperature"):
        m.generate(out, 1, temperature=0)


@pytest.mark.parametrize("kwargs, match", [({"hidden": 130, "heads": 4}, "heads"), ({"layers": 0}, "layers"),
                                           ({"dropout": 1.0}, "dropout")])
def test_a_config_that_cannot_build_says_why(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gpt.GPTConfig(**kwargs)


def test_a_sequence_longer_than_the_context_is_refused():
    with pytest.raises(ValueError, match="context"):
        gpt.build("gpt-tiny")(torch.zeros(1, 65, dtype=torch.long))


def test_the_corpus_is_pythons_own_documentation_and_the_split_holds_out_its_end():
    ids = text.tokens()
    assert len(ids) > 400_000 and int(ids.max()) < 256
    train, val = text.split(0.1)
    assert len(train) + len(val) == len(ids) and torch.equal(val, ids[len(train):])
    assert "with" in text.decode(ids[:20_000])


def test_every_world_size_reads_the_same_global_batches():
    ids = text.tokens()
    whole = text.batches(ids, 8, 32, 3, seed=1)
    parts = [text.batches(ids, 4, 32, 3, seed=1, rank=r, world_size=2) for r in range(2)]
    for step, (x, y) in enumerate(whole):
        assert torch.equal(y[:, :-1], x[:, 1:])  # targets are the next bytes
        for r in range(2):
            assert torch.equal(parts[r][step][0], x[r::2]) and torch.equal(parts[r][step][1], y[r::2])


def test_bad_batches_are_refused():
    with pytest.raises(ValueError, match="rank"):
        text.batches(text.tokens(), 4, 8, 1, rank=2, world_size=2)
    with pytest.raises(ValueError, match="window"):
        text.batch(torch.arange(8), 1, 8, torch.Generator())
