"""GPT-2@WikiText: block chunking, perplexity, the tokenizer and its cache, text-file data
roots (tiny files written here and the offline WikiText-2 slice), clear data errors, both
profiles' parameter counts, vmap gradients, end-to-end runs with every method, and --init
pretrained with from_pretrained and the tokenizer faked (no download)."""

import math
import random
from pathlib import Path

import pytest
import torch
import yaml

import decobench.tasks
from decobench.cli.main import main
from decobench.errors import DecobenchError
from decobench.methods import method_specs
from decobench.runs.rundir import read_metrics, read_summary
from decobench.tasks import gpt2_wikitext
from decobench.tasks.base import build_seeded_model, parameter_count
from decobench.tasks.gpt2_wikitext import (
    MODELS,
    Gpt2Shape,
    Gpt2WikiText,
    TokenBlocks,
    block_batch,
    join_rows,
    num_blocks,
    perplexity,
)
from decobench.tasks.tokenizer import (
    GPT2_VOCAB_SIZE,
    TextTokenizer,
    choose_tokenizer,
    load_gpt2_bpe,
    trained_bpe,
    trained_bpe_path,
)
from decobench.training.flat import FlatLayout
from decobench.training.gradients import WorkerGradients

WIKITEXT2 = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wikitext-2"
WORDS = ("the river city was built in a long war of kings and ships ; it is known for "
         "music , stone bridges and the old market where people sell fish and bread").split()


@pytest.fixture(scope="module")
def wikitext2_root() -> Path:
    if not ((WIKITEXT2 / "valid.txt").is_file() and (WIKITEXT2 / "test.txt").is_file()):
        pytest.skip(f"offline WikiText-2 slice missing at {WIKITEXT2}")
    return WIKITEXT2


@pytest.fixture(autouse=True)
def tokenizer_cache(tmp_path, monkeypatch) -> Path:
    """Every test trains tokenizers into its own cache, never ~/.cache/decobench."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("DECOBENCH_CACHE", str(cache))
    return cache


def tiny_text(seed: int, lines: int = 120) -> str:
    """WikiText-like lines (a heading, sentences of space-separated words) from a seed."""
    rng = random.Random(seed)
    out = [" = Tiny article = \n", " \n"]
    for _ in range(lines):
        out.append(" " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20))) + " . \n")
    return "".join(out)


def write_root(root: Path, *names: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        (root / name).write_text(tiny_text(i), encoding="utf-8")
    return root


# --- blocks, shift and perplexity (hand-checked) ---------------------------------------

def test_blocks_are_non_overlapping_and_targets_shift_by_one():
    tokens = torch.arange(10, dtype=torch.int32)
    assert [num_blocks(n, 3) for n in (10, 9, 4, 3, 1, 0)] == [3, 2, 1, 0, 0, 0]
    inputs, targets = block_batch(tokens, torch.tensor([[0, 2], [1, 1]]), 3)
    assert inputs.dtype == targets.dtype == torch.int64
    assert inputs.tolist() == [[[0, 1, 2], [6, 7, 8]], [[3, 4, 5], [3, 4, 5]]]
    assert targets.tolist() == [[[1, 2, 3], [7, 8, 9]], [[4, 5, 6], [4, 5, 6]]]
    data = TokenBlocks(train_tokens=tokens, test_tokens=tokens[:7], context=3, source="x")
    assert (data.num_train, data.num_test) == (3, 2)


def test_perplexity_of_uniform_and_perfect_predictors():
    vocab, context = 50, 4
    stream = torch.arange(41, dtype=torch.int32) % vocab
    data = TokenBlocks(train_tokens=stream, test_tokens=stream, context=context, source="x")
    seen = []

    def uniform(inputs):
        seen.append(inputs.shape[0])
        return torch.zeros(*inputs.shape, vocab)

    # every token gets probability 1/V: cross-entropy log V, perplexity exactly V
    assert perplexity(uniform, data, batch=3) == pytest.approx(vocab, rel=1e-6)
    assert seen == [3, 3, 3, 1]                      # all 10 blocks, 3 per forward pass
    seen.clear()
    assert perplexity(uniform, data, max_blocks=4, batch=3) == pytest.approx(vocab, rel=1e-6)
    assert seen == [3, 1]                            # the cap: first 4 blocks only

    def perfect(inputs):                             # the stream counts up: next = input + 1
        return 100.0 * torch.nn.functional.one_hot((inputs + 1) % vocab, vocab).float()

    assert perplexity(perfect, data) == pytest.approx(1.0, abs=1e-6)

    def wrong(inputs):                               # 1e4 nats on every token
        logits = torch.zeros((*inputs.shape, vocab))
        logits.scatter_(-1, ((inputs + 1) % vocab).unsqueeze(-1), -1e4)
        return logits

    # exp(1e4) overflows a float: a diverging run's perplexity is inf, not an OverflowError
    # (robust-planner-tasks' gpt2-high-latency cocktail-sgd-topk, seed 1, crashed on it)
    assert perplexity(wrong, data) == math.inf

    def half(inputs):                                # p = 1/2 on the right token: ppl 2
        logits = torch.full((*inputs.shape, vocab), -1e4)
        logits.scatter_(-1, ((inputs + 1) % vocab).unsqueeze(-1), 0.0)
        logits.scatter_(-1, ((inputs + 2) % vocab).unsqueeze(-1), 0.0)
        return logits

    assert perplexity(half, data) == pytest.approx(2.0, rel=1e-6)


def test_loss_is_mean_token_cross_entropy():
    task = Gpt2WikiText()
    logits = torch.zeros(2, 3, 5, 7)                 # [n-like, B, L, V]
    targets = torch.zeros(2, 3, 5, dtype=torch.long)
    assert float(task.loss(logits, targets)) == pytest.approx(math.log(7))


# --- tokenizer --------------------------------------------------------------------------

def test_trained_bpe_is_cached_and_reused(tmp_path):
    text = tiny_text(0) * 3
    first = trained_bpe(text, 300, tmp_path)
    path = trained_bpe_path(text, 300, tmp_path)
    assert not first.from_cache and path.is_file() and path.parent == tmp_path
    assert 256 < first.vocab_size <= 300 and str(path) in first.description
    stamp = path.stat().st_mtime_ns
    second = trained_bpe(text, 300, tmp_path)
    assert second.from_cache and path.stat().st_mtime_ns == stamp      # not retrained
    assert second.tokenizer.to_str() == first.tokenizer.to_str()
    assert second.description == first.description
    ids = first.encode(text)
    assert ids.dtype == torch.int32 and len(ids) < 0.6 * len(text.encode())  # merges happened
    assert first.tokenizer.decode(ids.tolist()) == text                   # byte-level: lossless
    assert trained_bpe_path(text, 301, tmp_path) != path
    assert trained_bpe_path(text + " ", 300, tmp_path) != path


def test_damaged_cache_entry_is_retrained(tmp_path):
    text = tiny_text(1)
    path = trained_bpe_path(text, 280, tmp_path)
    path.write_text("{not json")
    tok = trained_bpe(text, 280, tmp_path)
    assert not tok.from_cache and trained_bpe(text, 280, tmp_path).from_cache


def test_cache_location_follows_decobench_cache_at_call_time(tmp_path, monkeypatch):
    monkeypatch.setenv("DECOBENCH_CACHE", str(tmp_path / "elsewhere"))
    assert trained_bpe_path("abc", 260).parent == tmp_path / "elsewhere" / "tokenizers"


def test_gpt2_bpe_is_used_only_for_gpt2_vocab_and_only_when_available(tmp_path):
    text = tiny_text(2)
    fake = TextTokenizer(trained_bpe(text, 270, tmp_path).tokenizer, "GPT-2 BPE (fake)")
    assert choose_tokenizer(text, GPT2_VOCAB_SIZE, tmp_path, gpt2=lambda: fake) is fake
    fallback = choose_tokenizer(text, GPT2_VOCAB_SIZE, tmp_path, gpt2=lambda: None)
    assert "byte-level BPE trained" in fallback.description
    assert f"of {GPT2_VOCAB_SIZE} requested" in fallback.description

    def never():
        raise AssertionError("the small vocabulary must not look up GPT-2's BPE")

    assert "byte-level BPE" in choose_tokenizer(text, 270, tmp_path, gpt2=never).description


def test_gpt2_bpe_missing_or_wrong_size_is_not_used(tmp_path):
    from transformers import GPT2TokenizerFast

    assert load_gpt2_bpe(str(tmp_path / "nothing-here")) is None
    small = GPT2TokenizerFast(tokenizer_object=trained_bpe(tiny_text(3), 270, tmp_path).tokenizer)
    small.save_pretrained(str(tmp_path / "small"))
    assert load_gpt2_bpe(str(tmp_path / "small")) is None            # not 50,257 tokens


# --- data -------------------------------------------------------------------------------

def test_text_root_trains_on_train_txt_else_valid_txt(tmp_path, tokenizer_cache):
    task = Gpt2WikiText()
    profile = task.profile("cpu")
    root = write_root(tmp_path / "full", "train.txt", "valid.txt", "test.txt")
    data = task.load_data(root, False, profile)
    assert "trains on train.txt" in data.source and str(tokenizer_cache) in data.source
    assert "byte-level BPE trained" in data.source
    assert data.train_tokens.tolist() != data.test_tokens.tolist()
    inputs, targets = data.train_batch(torch.tensor([[0, 1], [2, 3]]))
    assert inputs.shape == targets.shape == (2, 2, MODELS["gpt2-tiny"].context)
    assert torch.equal(inputs[..., 1:], targets[..., :-1])
    assert int(inputs.max()) < MODELS["gpt2-tiny"].vocab_size
    (root / "train.txt").unlink()
    assert "trains on valid.txt" in task.load_data(root, False, profile).source


def test_offline_wikitext2_slice(wikitext2_root):
    task = Gpt2WikiText()
    data = task.load_data(wikitext2_root, False, task.profile("cpu"))
    assert "trains on valid.txt" in data.source and "vocab 4096 of 4096" in data.source
    # 217k words of valid.txt -> ~300k BPE tokens -> > 2,000 blocks of 128
    assert 2000 < data.num_train < 3000 and data.num_test > data.eval_blocks == 256


def hf_rows(text: str) -> list[str]:
    """``text`` as Hugging Face's wikitext rows: one per line, blank lines as ""."""
    return ["" if line == " \n" else line for line in text.splitlines(keepends=True)]


def test_join_rows_restores_the_raw_file():
    text = tiny_text(4)
    assert join_rows(hf_rows(text)) == text
    assert join_rows(["", " = A = \n", "b"]) == " \n = A = \nb\n"


def test_without_data_root_the_variant_comes_from_hf_datasets(tmp_path, monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(path, name, cache_dir):
        calls.append((path, name, cache_dir))
        return {"train": {"text": hf_rows(tiny_text(0))}, "test": {"text": hf_rows(tiny_text(1))}}

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    task = Gpt2WikiText()
    task.check_data(None, True, "wikitext-103-raw-v1")           # nothing to check: downloads
    data = task.load_data(None, True, task.profile("cpu"), "wikitext-103-raw-v1")
    cache = str(tmp_path / "home" / ".cache" / "decobench" / "data" / "huggingface")
    assert calls == [("Salesforce/wikitext", "wikitext-103-raw-v1", cache)]
    assert data.source.startswith("Salesforce/wikitext wikitext-103-raw-v1")
    reference = task.load_data(write_root(tmp_path / "files", "train.txt", "test.txt"), False,
                               task.profile("cpu"))
    assert torch.equal(data.train_tokens, reference.train_tokens)   # same text, same tokens
    task.load_data(None, True, task.profile("cpu"))
    assert calls[-1][1] == "wikitext-2-raw-v1"                      # the default variant


@pytest.mark.parametrize("names,missing", [
    ((), "train.txt (or valid.txt"),
    (("test.txt",), "train.txt (or valid.txt"),
    (("valid.txt",), "test.txt"),
    (("train.txt",), "test.txt"),
])
def test_missing_files_are_named(tmp_path, names, missing):
    root = write_root(tmp_path / "root", *names)
    with pytest.raises(DecobenchError, match="WikiText text files missing") as info:
        Gpt2WikiText().check_data(root, False)
    assert missing in str(info.value) and "../shared/data/wikitext-2" in str(info.value)


def test_empty_or_malformed_text_is_rejected(tmp_path):
    task = Gpt2WikiText()
    root = write_root(tmp_path / "r", "valid.txt", "test.txt")
    (root / "test.txt").write_text("")
    with pytest.raises(DecobenchError, match="test.txt is empty"):
        task.check_data(root, False)
    write_root(root, "test.txt", "train.txt")
    (root / "valid.txt").write_text("")
    task.check_data(root, False)                       # valid.txt is unused beside train.txt
    (root / "train.txt").unlink()
    with pytest.raises(DecobenchError, match="valid.txt is empty"):
        task.check_data(root, False)
    write_root(root, "valid.txt", "test.txt")
    (root / "test.txt").write_bytes(b"\xff\xfe not utf-8 \x80")
    task.check_data(root, False)
    with pytest.raises(DecobenchError, match="not UTF-8"):
        task.load_data(root, False, task.profile("cpu"))
    (root / "test.txt").write_text(" short . \n")
    with pytest.raises(DecobenchError, match="test text has fewer than 129 tokens"):
        task.load_data(root, False, task.profile("cpu"))


def test_dataset_variants_and_targets():
    task = Gpt2WikiText()
    assert task.dataset_variant(None) == "wikitext-2-raw-v1"
    assert task.dataset_variant("wikitext-103-raw-v1") == "wikitext-103-raw-v1"
    with pytest.raises(DecobenchError, match="choose from: wikitext-2-raw-v1, wikitext-103"):
        task.dataset_variant("wikitext-2-v1")
    task.validate_target(30.0)
    for bad in (1.0, 0.75, -3.0, math.inf, math.nan):
        with pytest.raises(DecobenchError, match="not a perplexity"):
            task.validate_target(bad)
    assert task.target_reached(29.0, 30.0) and not task.target_reached(31.0, 30.0)


# --- models -----------------------------------------------------------------------------

def gpt2_parameters(vocab: int, positions: int, width: int, layers: int) -> int:
    """wte + wpe + per block (2 LayerNorms, qkv, attention out, MLP 4x) + final LayerNorm;
    the LM head is tied to wte."""
    block = 2 * 2 * width + (3 * width * width + 3 * width) + (width * width + width) + (
        4 * width * width + 4 * width) + (4 * width * width + width)
    return vocab * width + positions * width + layers * block + 2 * width


def test_parameter_counts_of_the_profiles():
    task = Gpt2WikiText()
    assert parameter_count(task, task.profile("paper")) == 124_439_808
    assert gpt2_parameters(50257, 1024, 768, 12) == 124_439_808
    assert parameter_count(task, task.profile("cpu")) == gpt2_parameters(4096, 128, 128, 2)
    assert gpt2_parameters(4096, 128, 128, 2) == 937_472
    mid = parameter_count(task, task.profile("mid"))
    assert mid == gpt2_parameters(16384, 256, 512, 6) == 27_435_008
    # the tied embedding's share of the parameters, as in GPT-2 small (31%)
    assert round(16384 * 512 / mid, 2) == 0.31 == round(50257 * 768 / 124_439_808, 2)


def test_vmap_gradients_match_autograd_with_tied_embeddings():
    task = Gpt2WikiText()
    profile = task.profile("cpu")
    model = build_seeded_model(task, profile, seed=0)
    again = build_seeded_model(task, profile, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters(),
                                                 strict=True))
    layout = FlatLayout.of(model)
    assert "gpt.lm_head.weight" not in layout.names           # tied to gpt.transformer.wte
    assert task.vectorise
    gradients = WorkerGradients(model, layout, task.loss, vectorise=True)
    gen = torch.Generator().manual_seed(0)
    inputs = torch.randint(0, 4096, (2, 2, 16), generator=gen)
    targets = torch.randint(0, 4096, (2, 2, 16), generator=gen)
    grads, losses = gradients(layout.flatten(model), inputs, targets)
    for i in range(2):
        model.zero_grad()
        loss = task.loss(model(inputs[i]), targets[i])
        loss.backward()
        expected = torch.cat([p.grad.reshape(-1) for n, p in model.named_parameters()
                              if n in layout.names])
        assert float(losses[i]) == pytest.approx(float(loss.detach()), rel=1e-5)
        assert torch.allclose(grads[i], expected, atol=1e-6, rtol=1e-4)


def test_attention_is_sdpa_only_on_a_gpu_outside_vmap():
    from torch.func import grad, vmap

    from decobench.tasks.gpt2_wikitext import attention_for, under_vmap

    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert attention_for(gpu, vmapped=False) == "sdpa"
    assert attention_for(gpu, vmapped=True) == "eager"
    assert attention_for(cpu, vmapped=False) == attention_for(cpu, vmapped=True) == "eager"
    seen: list[bool] = []

    def probe(x: torch.Tensor) -> torch.Tensor:
        seen.append(under_vmap())
        return x.sum()

    probe(torch.ones(2))
    grad(probe)(torch.ones(2))                 # the loop engine: grad, no vmap
    vmap(probe)(torch.ones(2, 3))              # the vmap engine: vmap over grad
    vmap(grad(probe))(torch.ones(2, 3))
    assert seen == [False, False, True, True]


def test_cpu_forward_keeps_eager_attention():
    """On the CPU every forward pass uses the eager code the project's pinned results come
    from, whatever the model was last set to."""
    task = Gpt2WikiText()
    model = build_seeded_model(task, task.profile("cpu"), seed=0)
    model.gpt.config._attn_implementation = "sdpa"
    model(torch.zeros(1, 8, dtype=torch.long))
    assert model.gpt.config._attn_implementation == "eager"


# --- end to end -------------------------------------------------------------------------

@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(decobench.tasks.TASKS.registered, Gpt2WikiText.name, Gpt2WikiText)


def run_tiny(tmp_path: Path, name: str, *extra: str) -> Path:
    root = tmp_path / "text"
    if not root.exists():
        write_root(root, "valid.txt", "test.txt")
    out = tmp_path / name
    assert main(["run", "--task", "gpt2-wikitext", "--profile", "cpu", "--workers", "2",
                 "--batch-size", "2", "--max-iters", "3", "--eval-every", "3", "--no-progress",
                 "--trace", "wan-200ms-lowbw-varying", "--data-root", str(root),
                 "--out", str(out), *extra]) == 0
    return out


def test_mid_profile_trains_deco_sgd_with_layerwise_topk_at_a_tiny_size(
        tmp_path, registered, tokenizer_cache):
    """The mid model itself (27.4M parameters) on a tiny text, 2 iterations of batch 1:
    per-tensor Top-k over its tensors (tied embedding included) and the update rules."""
    out = run_tiny(tmp_path, "mid", "--profile", "mid", "--batch-size", "1", "--max-iters",
                   "2", "--eval-every", "2", "--method", "deco-sgd", "--deco-interval", "1",
                   "--topk-scope", "layer", "--ef-units", "update", "--clip-norm", "1")
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["parameters"] == 27_435_008 and config["profile"] == "mid"
    assert config["update_rules"]["topk_scope"] == "layer"
    rows = read_metrics(out)
    assert [r["iteration"] for r in rows if "metric" in r] == [2]
    assert all(math.isfinite(r["loss"]) for r in rows)


def test_autocast_bf16_run_end_to_end(tmp_path, registered, tokenizer_cache):
    """``--autocast bf16`` trains and evaluates, and config.yaml says so (the gradients it
    computes: tests/test_autocast.py)."""
    out = run_tiny(tmp_path, "bf16", "--method", "deco-sgd", "--autocast", "bf16")
    assert yaml.safe_load((out / "config.yaml").read_text())["autocast"] == "bf16"
    rows = read_metrics(out)
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert all(math.isfinite(r["loss"]) for r in rows)
    summary = read_summary(out)
    assert summary["status"] == "finished" and 1.0 < summary["final_metric"] < 3 * 4096


@pytest.mark.parametrize("method", sorted(method_specs()))
def test_cpu_profile_runs_with_every_method(tmp_path, registered, tokenizer_cache, method):
    extra = ["--deco-interval", "3"] if method == "deco-sgd" else []
    out = run_tiny(tmp_path, method, "--method", method, *extra)
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["task"] == "gpt2-wikitext" and config["metric_name"] == "perplexity"
    assert config["parameters"] == 937_472
    assert "byte-level BPE trained" in config["data_source"]
    assert str(tokenizer_cache / "tokenizers") in config["data_source"]
    rows = read_metrics(out)
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert all(math.isfinite(r["loss"]) for r in rows)
    summary = read_summary(out)
    assert summary["status"] == "finished" and summary["metric_name"] == "perplexity"
    # an untrained model is close to uniform over the 4,096 tokens: perplexity in the 1000s
    assert 1.0 < summary["final_metric"] < 3 * 4096


def test_same_seed_same_metrics_and_tokenizer_reused(tmp_path, registered, tokenizer_cache):
    a = run_tiny(tmp_path, "a", "--method", "d-sgd")
    cached = list((tokenizer_cache / "tokenizers").iterdir())
    stamps = [p.stat().st_mtime_ns for p in cached]
    b = run_tiny(tmp_path, "b", "--method", "d-sgd")
    assert len(cached) == 1 and [p.stat().st_mtime_ns for p in cached] == stamps

    def rows(out):
        return [{k: v for k, v in r.items() if k != "wall_time_s"} for r in read_metrics(out)]

    assert rows(a) == rows(b)
    assert rows(run_tiny(tmp_path, "c", "--method", "d-sgd", "--seed", "1")) != rows(a)


@pytest.mark.parametrize("extra,message", [
    (["--data-root", "/nonexistent/wikitext"], "WikiText text files missing"),
    (["--dataset", "wikitext-2-v1"], "--dataset 'wikitext-2-v1' is not a data set"),
    (["--target", "0.75"], "not a perplexity"),
])
def test_bad_input_is_one_line_before_training(tmp_path, registered, capsys, extra, message):
    root = write_root(tmp_path / "text", "valid.txt", "test.txt")
    args = ["run", "--task", "gpt2-wikitext", "--profile", "cpu", "--method", "d-sgd",
            "--trace", "constant-20mbps-100ms", "--data-root", str(root),
            "--out", str(tmp_path / "x"), "--no-progress", *extra]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("decobench: error: ") and message in err[0]
    assert not (tmp_path / "x").exists()



# --- --init pretrained (from_pretrained is faked: no download, no weights) ---------------

SMALL_PRETRAINED = Gpt2Shape(n_layer=1, n_embd=16, n_head=2, context=32,
                             vocab_size=GPT2_VOCAB_SIZE, eval_blocks=4, eval_batch=2,
                             pretrained="gpt2")
OVERRIDES = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "use_cache": False,
             "attn_implementation": "eager"}


@pytest.fixture
def fake_pretrained(monkeypatch, tmp_path):
    """The paper profile shrunk to a 1-layer GPT-2 with GPT-2's vocabulary; from_pretrained
    records its calls and returns a random model of that shape (``layers`` changes it);
    GPT-2's BPE is a small trained BPE flagged as GPT-2's."""
    from transformers import GPT2Config, GPT2LMHeadModel

    calls: list = []
    state = {"layers": 1, "fail": None}

    def from_pretrained(name, **kwargs):
        calls.append((name, kwargs))
        if state["fail"] is not None:
            raise state["fail"]
        shape = gpt2_wikitext.MODELS["gpt2-small"]
        return GPT2LMHeadModel(GPT2Config(
            vocab_size=shape.vocab_size, n_positions=shape.context, n_embd=shape.n_embd,
            n_layer=state["layers"], n_head=shape.n_head, **kwargs)).eval()

    monkeypatch.setattr(GPT2LMHeadModel, "from_pretrained", staticmethod(from_pretrained))
    monkeypatch.setitem(gpt2_wikitext.MODELS, "gpt2-small", SMALL_PRETRAINED)
    bpe = TextTokenizer(trained_bpe(tiny_text(0), 300, tmp_path / "bpe").tokenizer,
                        "GPT-2 BPE (fake)", gpt2=True)
    monkeypatch.setattr(gpt2_wikitext, "fetch_gpt2_bpe", lambda name="gpt2": bpe)
    monkeypatch.setattr(gpt2_wikitext, "choose_tokenizer", lambda text, vocab, *a, **k: bpe)
    return calls, state


def test_pretrained_loads_gpt2_with_the_tasks_overrides(fake_pretrained, tmp_path):
    calls, state = fake_pretrained
    task = Gpt2WikiText()
    paper = task.profile("paper")
    assert "from_pretrained('gpt2')" in task.pretrained_weights(paper)
    assert task.pretrained_weights(task.profile("cpu")) is None
    task.select_init("pretrained", paper)
    model = build_seeded_model(task, paper, 0)
    assert calls == [("gpt2", OVERRIDES)]
    assert model.training and next(model.parameters()).dtype == torch.float32
    assert model(torch.zeros(1, 8, dtype=torch.long)).shape == (1, 8, GPT2_VOCAB_SIZE)
    state["layers"] = 2                               # weights of another shape: one line
    with pytest.raises(DecobenchError, match=r"do not have this profile's GPT-2 shape: "
                       r"n_layer 2 \(expected 1\)"):
        build_seeded_model(task, paper, 0)
    state["fail"] = OSError("We couldn't connect to 'https://huggingface.co'\nsecond line")
    with pytest.raises(DecobenchError) as info:
        build_seeded_model(task, paper, 0)
    assert "from_pretrained('gpt2')" in str(info.value) and "HF_HOME" in str(info.value)
    assert "\n" not in str(info.value)


def test_pretrained_needs_gpt2s_tokenizer(fake_pretrained, tmp_path, monkeypatch):
    task = Gpt2WikiText()
    paper = task.profile("paper")
    task.select_init("pretrained", paper)
    root = write_root(tmp_path / "text", "valid.txt", "test.txt")
    assert "GPT-2 BPE (fake)" in task.load_data(root, False, paper).source
    other = TextTokenizer(trained_bpe(tiny_text(1), 300, tmp_path / "other").tokenizer,
                          "byte-level BPE trained on the training text")
    monkeypatch.setattr(gpt2_wikitext, "choose_tokenizer", lambda *a, **k: other)
    with pytest.raises(DecobenchError, match="GPT-2's weights need GPT-2's BPE tokenizer"):
        task.load_data(root, False, paper)
    Gpt2WikiText().load_data(root, False, paper)          # scratch: any tokenizer


def test_gpt2_tokenizer_that_cannot_be_fetched_is_one_line(monkeypatch):
    from transformers import GPT2TokenizerFast

    from decobench.tasks.tokenizer import fetch_gpt2_bpe

    calls = []

    def offline(name, **kwargs):
        calls.append((name, kwargs))
        raise OSError("We couldn't connect to 'https://huggingface.co'\nsecond line")

    monkeypatch.setattr(GPT2TokenizerFast, "from_pretrained", staticmethod(offline))
    with pytest.raises(DecobenchError) as info:
        fetch_gpt2_bpe()
    assert calls == [("gpt2", {"local_files_only": True}), ("gpt2", {})]   # cache, then Hub
    message = str(info.value)
    assert "GPT-2's tokenizer" in message and "HF_HOME" in message and "\n" not in message

    class Empty:                     # what recent transformers return for missing files
        backend_tokenizer = None

        def __len__(self):
            return 1

    monkeypatch.setattr(GPT2TokenizerFast, "from_pretrained",
                        staticmethod(lambda name, **kwargs: Empty()))
    with pytest.raises(DecobenchError, match="tokenizer of 1 tokens, not GPT-2's 50257"):
        fetch_gpt2_bpe()


def test_pretrained_run_end_to_end(fake_pretrained, tmp_path, registered):
    calls, _ = fake_pretrained
    root = write_root(tmp_path / "text", "valid.txt", "test.txt")
    out = tmp_path / "pretrained"
    assert main(["run", "--task", "gpt2-wikitext", "--profile", "paper", "--init", "pretrained",
                 "--method", "d-sgd", "--workers", "2", "--batch-size", "1", "--max-iters", "2",
                 "--eval-every", "2", "--no-progress", "--trace", "constant-20mbps-100ms",
                 "--data-root", str(root), "--out", str(out)]) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["init"] == "pretrained" and "GPT-2 BPE (fake)" in config["data_source"]
    assert calls == [("gpt2", OVERRIDES)] and read_summary(out)["status"] == "finished"


def test_pretrained_cpu_profile_is_one_line_before_training(tmp_path, registered, capsys):
    root = write_root(tmp_path / "text", "valid.txt", "test.txt")
    assert main(["run", "--task", "gpt2-wikitext", "--profile", "cpu", "--init", "pretrained",
                 "--method", "d-sgd", "--trace", "constant-20mbps-100ms", "--data-root",
                 str(root), "--out", str(tmp_path / "x"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "profile 'cpu' of task gpt2-wikitext has no published" in err[0]
    assert "profiles with pretrained weights: paper" in err[0]
    assert not (tmp_path / "x").exists()


def test_gpu_check_suite_at_a_tiny_size_on_the_cpu(tmp_path, registered, tokenizer_cache):
    """`make gpu-check`'s two commands on the gpu-stability suite shrunk to the cpu profile
    and 8 iterations: the sweep, then step_times.json and curves.csv from its runs."""
    import csv
    import json

    from decobench.sweeps import cost
    from decobench.sweeps.suite import SUITES_DIR

    suite = yaml.safe_load((SUITES_DIR / "gpu-stability.yaml").read_text())
    suite["defaults"] |= {"profile": "cpu", "eval_every": 4, "batch_size": 2}
    suite["experiments"] = suite["experiments"][:1]  # the γ 0.01 pair; the other differs in options
    suite["experiments"][0]["max_iters"] = 8
    path = tmp_path / "gpu-stability.yaml"
    path.write_text(yaml.safe_dump(suite))
    root = tmp_path / "text"
    write_root(root, "valid.txt", "test.txt")
    out = tmp_path / "results"
    assert main(["sweep", str(path), "--out", str(out), "--jobs", "1", "--no-wandb",
                 "--no-progress", "--data-root", f"gpt2-wikitext={root}"]) == 0
    assert cost.main([str(out)]) == 0
    times = json.loads((out / "step_times.json").read_text())
    assert sorted(t["label"] for t in times.values()) == ["d-sgd+clip1", "deco-sgd+clip1"]
    assert all(t["step_s"] > 0 and t["iterations"] == 2 for t in times.values())
    rows = list(csv.DictReader((out / "curves.csv").open()))
    assert len(rows) == 16 and {r["label"] for r in rows} == {"d-sgd+clip1", "deco-sgd+clip1"}
    assert [r["metric"] != "" for r in rows[:8]] == [False] * 3 + [True] + [False] * 3 + [True]


def test_gpu_1000_suite_runs_what_point_3_needs(tmp_path):
    """The gpu-1000 suite (`make gpu-check GPU_SUITE=gpu-1000`): D-SGD for 1,000 iterations,
    then DeCo-SGD for 1,500, the per-tensor Top-k variant for 300 and the other compared
    methods for 50, all clipped to norm 1
    at the paper profile's γ 0.01 in bfloat16, evaluated every 25 (the training path with
    --autocast bf16: test_autocast_bf16_run_end_to_end; the sweep and cost steps:
    test_gpu_check_suite_at_a_tiny_size_on_the_cpu)."""
    from decobench.sweeps.suite import expand_cells, load_suite

    cells = expand_cells(load_suite("gpu-1000")[0], tmp_path)
    got = [(c.config.label, c.config.method, c.config.max_iters, c.config.topk_scope)
           for c in cells]
    assert got == [("d-sgd+clip1", "d-sgd", 1000, None),
                   ("deco-sgd+clip1", "deco-sgd", 1500, None),
                   ("deco-sgd+clip1+topk-layer", "deco-sgd", 300, "layer"),
                   *((f"{m}+clip1", m, 50, None) for m in ("accordion", "dga", "cocktail-sgd",
                                                            "cocktail-sgd-topk"))]
    for cell in cells:
        config = cell.config
        assert (config.task, config.profile, config.regime) == (
            "gpt2-wikitext", "paper", "paper:deco52-gpt2-wikitext")
        assert (config.autocast, config.clip_norm, config.eval_every, config.seed,
                config.gradient_engine) == ("bf16", 1.0, 25, 0, "loop")
        assert config.lr is None and config.schedule is None    # the profile's constant γ
