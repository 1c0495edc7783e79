"""Encoder families through one contract matrix: tiny random BERT, DistilBERT, ELECTRA, RoBERTa, XLM-RoBERTa,
DeBERTa-v2, ALBERT and ModernBERT (hidden 32, 2 layers), with the real uncased vocabulary for the WordPiece
families and a byte-level BPE or sentencepiece Unigram trained here with `tokenizers` for the others.

Each cell of family × task fine-tunes 2 steps through `bertkit finetune`; `predict` through the run folder answers
the run's own evaluation rows exactly as the run scored them, and `serve` answers exactly as `predict`. Per family:
one ONNX export whose ONNX Runtime answers agree with torch, one LoRA run, `bertkit extract --layers last2`, and the
family facts of `bertkit/families.py`. What does not apply (NER's casing where a family reads no token type ids)
is an explicit exception below that checks bertkit's own message; docs/families.md has the matrix as it ran."""

from __future__ import annotations

import ast
import json
import random
import string
from pathlib import Path

import numpy as np
import pytest
import transformers
from packaging.version import Version

from bertkit.cli import main

from .conftest import (
    COLOURS,
    MULTI,
    NER_FILLER,
    NER_FIRST,
    NER_LABELS,
    NER_LAST,
    NER_LOC,
    NER_MISC,
    NER_ORG,
    QUESTIONS,
    REPO,
    SENTENCES,
    cli_extract,
    cli_predict,
    on_the_cpu,
    sentence,
    squad_json,
    swag_rows,
    synthetic_sentence,
    vocab_path,
    write_conll_dir,
    write_multi_label,
    write_rte,
    write_squad,
    write_squad_v2,
    write_sst2,
    write_sts,
    write_swag,
)

FAMILIES = ["bert", "distilbert", "electra", "roberta", "xlm-roberta", "deberta-v2", "albert", "modernbert"]
TOKEN_TYPES = {"bert": 2, "electra": 2, "albert": 2}  # token types each tiny model reads; the others none
SIZE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
QA = ["--max-question-length", "16", "--window-overlap", "16"]
# cell → (recipe, data writer, extra flags, evaluation split whose predictions predict must reproduce)
CELLS = {
    "sst2": ("sst2", lambda d: write_sst2(d, n_train=32, n_dev=16), [], "dev"),
    "rte": ("rte", lambda d: write_rte(d, n_train=32, n_dev=16), [], "dev"),
    "stsb": ("stsb", lambda d: write_sts(d, n_train=32, n_dev=16), [], "sts-dev"),
    "multi-label": ("sst2", lambda d: write_multi_label(d, n_train=32, n_dev=16), MULTI, "dev"),
    "ner": ("conll2003", lambda d: write_conll_dir(d, n_train=32, n_dev=12), [], "valid"),
    "ner-casing": ("conll2003", lambda d: write_conll_dir(d, n_train=32, n_dev=12), ["--casing"], "valid"),
    "squad": ("squad", lambda d: write_squad(d, n_train=16, n_dev=8), QA, "validation"),
    "squad_v2": ("squad_v2", lambda d: write_squad_v2(d, n_train=16, n_dev=8), QA, "validation"),
    "swag": ("swag", lambda d: write_swag(d, n_train=16, n_dev=8), [], "val"),
}
STEPS = ["--max-steps", "2", "--precision", "fp32", "--batch-size", "8", "--max-length", "64", "--lr", "1e-2",
         "--seed", "0", "--eval-batch-size", "128"]
# What does not apply, and why: (family, cell) → the message bertkit stops with (exit 2, no run folder)
NO_CASING = "read no token type ids; casing is for uncased checkpoints of families that do"
EXCEPTIONS = {(f, "ner-casing"): NO_CASING for f in FAMILIES if f not in TOKEN_TYPES}  # roberta: cased BPE, ...
if Version(transformers.__version__) < Version("5.14"):  # XLMRobertaForMultipleChoice without its pooler
    EXCEPTIONS["xlm-roberta", "swag"] = "is built without the pooler its head reads"
LORA_LAYERS = {"bert": {"query", "value"}, "electra": {"query", "value"}, "roberta": {"query", "value"},
               "xlm-roberta": {"query", "value"}, "deberta-v2": {"query_proj", "value_proj"},
               "albert": {"query", "value"}, "distilbert": {"q_lin", "v_lin"}, "modernbert": {"Wqkv"}}
EXTRACT = ["Peter Blackburn visited Paris, today .", "the film was good"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread for these tiny models: a second one has nothing to share, and on a busy 2-core machine
    OpenMP's waiting threads make every step several times slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- the tiny models ---------------------------------------------------------------------------------------------
def corpus() -> list[str]:
    """The texts of the synthetic data sets (conftest's writers), for training the small tokenizers."""
    rng = random.Random(0)
    texts = [sentence(rng, i % 2) for i in range(200)]
    texts += [" ".join(w for w, _ in synthetic_sentence(rng, 12)) for _ in range(200)]
    texts += [p["context"] for p in squad_json(rng, 50, "c")["data"][0]["paragraphs"]] + QUESTIONS * 10
    texts += [" ".join(r[2:3] + r[6:10]) for r in swag_rows(rng, 50)] + SENTENCES * 5 + EXTRACT * 5
    names = NER_FIRST + NER_LAST + NER_LOC + NER_MISC + [w for org in NER_ORG for w in org] + NER_FILLER + COLOURS
    return texts + [" ".join(names)] * 5


def unigram(specials: list[str], unk: str, lower: bool = False) -> list[tuple[str, float]]:
    """A sentencepiece-style Unigram vocabulary [(piece, score)], the special tokens first in the given order."""
    from tokenizers import SentencePieceUnigramTokenizer

    sp = SentencePieceUnigramTokenizer()
    texts = [t.lower() for t in corpus()] if lower else corpus()
    sp.train_from_iterator(texts, vocab_size=400, special_tokens=specials, unk_token=unk, show_progress=False,
                           initial_alphabet=list(string.ascii_letters + string.digits + string.punctuation))
    return [tuple(p) for p in json.loads(sp._tokenizer.to_str())["model"]["vocab"]]


def byte_bpe(specials: list[str]):
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus(), vocab_size=600, special_tokens=specials, show_progress=False)
    return bpe


def make_family(family: str, directory: Path) -> Path:
    """A random 2-layer, 32-wide base model of `family` with its tokenizer, saved in `directory`."""
    import torch
    import transformers as t
    from tokenizers import processors

    torch.manual_seed(0)
    if family == "distilbert":
        model = t.DistilBertModel(t.DistilBertConfig(vocab_size=30522, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                                     max_position_embeddings=128))
        tok = t.DistilBertTokenizerFast(vocab=str(vocab_path()))
    elif family == "electra":
        model = t.ElectraModel(t.ElectraConfig(vocab_size=30522, embedding_size=32, max_position_embeddings=128,
                                               **SIZE))
        tok = t.ElectraTokenizerFast(vocab=str(vocab_path()))
    elif family == "roberta":
        bpe = json.loads(byte_bpe(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])._tokenizer.to_str())["model"]
        tok = t.RobertaTokenizerFast(vocab=bpe["vocab"], merges=[tuple(m) for m in bpe["merges"]])
        model = t.RobertaModel(t.RobertaConfig(vocab_size=len(tok), max_position_embeddings=130, type_vocab_size=1,
                                               **SIZE))
    elif family == "modernbert":  # as answerdotai/ModernBERT-base: byte-level BPE, [CLS]/[SEP], no token type ids
        backend = byte_bpe(["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"])._tokenizer
        backend.post_processor = processors.TemplateProcessing(
            single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
            special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
        tok = t.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", cls_token="[CLS]",
                                        sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]",
                                        model_input_names=["input_ids", "attention_mask"])
        model = t.ModernBertModel(t.ModernBertConfig(
            vocab_size=len(tok), max_position_embeddings=128, pad_token_id=3, bos_token_id=1, eos_token_id=2,
            cls_token_id=1, sep_token_id=2, local_attention=16, **SIZE))
    elif family == "xlm-roberta":
        tok = t.XLMRobertaTokenizer(vocab=unigram(["<s>", "<pad>", "</s>", "<unk>", "<mask>"], "<unk>"))
        model = t.XLMRobertaModel(t.XLMRobertaConfig(vocab_size=len(tok), max_position_embeddings=130,
                                                     type_vocab_size=1, **SIZE))
    elif family == "deberta-v2":  # as DeBERTa-v3: relative positions only, no token types
        tok = t.DebertaV2Tokenizer(vocab=unigram(["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"], "[UNK]"))
        model = t.DebertaV2Model(t.DebertaV2Config(
            vocab_size=len(tok), max_position_embeddings=128, type_vocab_size=0, relative_attention=True,
            position_buckets=32, pos_att_type=["p2c", "c2p"], position_biased_input=False, norm_rel_ebd="layer_norm",
            share_att_key=True, **SIZE))
    elif family == "albert":  # uncased, as albert-base-v2
        tok = t.AlbertTokenizer(vocab=unigram(["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"], "<unk>", lower=True))
        model = t.AlbertModel(t.AlbertConfig(vocab_size=len(tok), embedding_size=16, max_position_embeddings=128,
                                             **SIZE))
    else:
        raise ValueError(family)
    tok.model_max_length = 128
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


def tiny(tmp_path_factory, tiny_bert, family: str) -> Path:
    """The tiny model of `family`, made once per session (BERT: conftest's tiny BERT)."""
    if family == "bert":
        return tiny_bert
    path = tmp_path_factory.getbasetemp() / "families" / "models" / family
    return path if (path / "config.json").is_file() else make_family(family, path)


def finetune(tmp_path_factory, tiny_bert, family: str, cell: str, *flags: str) -> tuple[Path, int]:
    """(run folder, exit code) of `cell` for `family`, run once per session and set of flags, on the CPU on any
    machine (tests compare its recorded predictions with CPU arithmetic exactly)."""
    recipe, write, extra, _ = CELLS[cell]
    root = tmp_path_factory.getbasetemp() / "families"
    data, out = root / "data" / cell, root / "runs" / "-".join([family, cell, *[f.strip("-") for f in flags]])
    if not data.is_dir():
        write(data)
    if (out / "config.json").is_file():
        return out, 0
    with on_the_cpu():
        code = main(["finetune", recipe, "--model", str(tiny(tmp_path_factory, tiny_bert, family)), "--data-dir",
                     str(data), *STEPS, *extra, *flags, "--output-dir", str(out)])
    return out, code


# --- what a run answers -------------------------------------------------------------------------------------------
def evaluation_rows(run: Path, split: str) -> tuple[list[dict], list[dict]]:
    """(input rows, the run's predictions) of an evaluation split, as `predict` reads and answers them."""
    from bertkit.config_files import load_run_config
    from bertkit.tasks import load_task

    cfg, task = load_run_config(run / "config.yaml"), load_task(str(run))
    examples = type(task).load_split(cfg, split, task.label_names)
    if "tokens" in examples.column_names:
        rows = [{"sentence": words} for words in examples["tokens"]]
    else:
        keys = [k for k in ("text", "text_pair", "question", "context", "start", "endings")
                if k in examples.column_names]
        rows = [{k: example[k] for k in keys} for example in examples]
    predictions = [json.loads(line) for line in (run / f"predictions_{split}.jsonl").read_text().splitlines()]
    return rows, predictions


def serve_body(task_type: str, rows: list[dict]) -> dict:
    if task_type == "sequence-classification":
        return {"texts": [r["text"] for r in rows], **({"text_pairs": [r["text_pair"] for r in rows]}
                                                      if "text_pair" in rows[0] else {})}
    if task_type == "token-classification":
        return {"sentences": [r["sentence"] for r in rows]}
    if task_type == "question-answering":
        return {"questions": rows}
    return {"inputs": rows}


def served(run: Path, body: dict) -> list[dict]:
    """`POST /predict` of `body` to an in-process server of the run (torch, fp32)."""
    from fastapi.testclient import TestClient

    from bertkit.serve.app import create_app
    from bertkit.serve.engine import Engine

    with TestClient(create_app(Engine(str(run), precision="fp32", threads=1))) as client:
        r = client.post("/predict", json=body)
    assert r.status_code == 200, r.text
    return r.json()["predictions"]


# --- the matrix ---------------------------------------------------------------------------------------------------
@pytest.mark.usefixtures("cpu_only")  # exact equality of the run's, predict's and serve's scores: one device, the CPU
@pytest.mark.parametrize("cell", list(CELLS))
@pytest.mark.parametrize("family", FAMILIES)
def test_task(tmp_path_factory, tiny_bert, capsys, family, cell):
    """Fine-tune, predict (the run's evaluation exactly) and serve (predict exactly) for one family and task."""
    from bertkit.tasks import load_task

    run, code = finetune(tmp_path_factory, tiny_bert, family, cell)
    if (family, cell) in EXCEPTIONS:  # does not apply: a clear message, no traceback, no run folder
        assert code == 2 and not run.exists()
        err = capsys.readouterr().err
        assert "Traceback" not in err and EXCEPTIONS[family, cell] in err, err[-2000:]
        return
    assert code == 0
    recipe, _, _, split = CELLS[cell]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["train"]["steps"] == 2 and metrics["name"] == recipe
    task = load_task(str(run))
    assert metrics["task"] == task.name and metrics["main_metric"] in metrics[split]
    assert (run / "config.json").is_file() and json.loads((run / "config.json").read_text())["model_type"] == family
    if cell == "ner-casing":
        config = json.loads((run / "config.json").read_text())
        assert config["bertkit_casing"] is True and config["type_vocab_size"] == 4
    rows, expected = evaluation_rows(run, split)
    answers = task.predict_rows(rows, batch_size=128)
    assert [{k: e[k] for k in a} for a, e in zip(answers, expected, strict=True)] == answers
    if task.name == "question-answering":  # spans cut from the context, without the space a token's offsets hold
        assert all(a["answer"] == r["context"][a["start"]:a["end"]] == a["answer"].strip()
                   for r, a in zip(rows, answers, strict=True))
    some = rows[:3]
    answers = [task.echo(r, a) for r, a in zip(some, task.predict_rows(some), strict=True)]
    assert served(run, serve_body(task.name, some)) == json.loads(json.dumps(answers))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.usefixtures("cpu_only")  # torch's answers on the CPU, as ONNX Runtime's, to 1e-5
def test_export_answers_as_torch(tmp_path_factory, tiny_bert, tmp_path, family):
    """`bertkit export --no-features` of the family's SST-2 run: `bertkit predict --backend onnx` gives torch's
    probabilities."""
    run, code = finetune(tmp_path_factory, tiny_bert, family, "sst2")
    assert code == 0
    out = tmp_path / "onnx"
    assert main(["export", "--model", str(run), "--format", "onnx", "--output", str(out), "--no-features"]) == 0
    graph = json.loads((out / "export.json").read_text())["graphs"]["model.onnx"]
    assert graph["inputs"] == ["input_ids", "attention_mask"] + (["token_type_ids"] if family in TOKEN_TYPES else [])
    assert graph["max_abs_diff_fp32"] < 1e-4
    rows, _ = evaluation_rows(run, "dev")
    torch_answers = cli_predict(run, rows, tmp_path, "--probs")
    onnx_answers = cli_predict(out, rows, tmp_path, "--backend", "onnx", "--probs")
    assert [a["text"] for a in onnx_answers] == [r["text"] for r in rows]
    for t, o in zip(torch_answers, onnx_answers, strict=True):
        np.testing.assert_allclose(list(o["probabilities"].values()), list(t["probabilities"].values()), atol=1e-5)


def test_an_operation_the_exporter_cannot_take_is_named(tmp_path_factory, tiny_bert, tmp_path, monkeypatch, capsys):
    """Where torch's exporter cannot take a model (an operation torch.export does not support), `bertkit export`
    stops with exit 2 and names the model family and the exporter's reason; no export folder is left."""
    import torch

    def unsupported(*args, **kwargs):
        raise RuntimeError("Unsupported: aten.some_op.default has no ONNX translation\nmore detail")

    run, code = finetune(tmp_path_factory, tiny_bert, "modernbert", "sst2")
    assert code == 0
    monkeypatch.setattr(torch.onnx, "export", unsupported)
    out = tmp_path / "onnx"
    assert main(["export", "--model", str(run), "--format", "onnx", "--output", str(out), "--no-features"]) == 2
    err = capsys.readouterr().err
    assert "model.onnx: torch's ONNX exporter cannot export this modernbert model (RuntimeError: Unsupported: " \
           "aten.some_op.default has no ONNX translation)" in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("family", FAMILIES)
def test_lora(tmp_path_factory, tiny_bert, family):
    """`--peft lora` on SST-2: the family's default layers are adapted (peft's, or bertkit's where peft has none),
    and the merged run folder answers as the adapter model scored its evaluation."""
    from bertkit.tasks import load_task

    run, code = finetune(tmp_path_factory, tiny_bert, family, "sst2", "--peft", "lora", "--lora-r", "2")
    assert code == 0
    adapter = json.loads((run / "adapter" / "adapter_config.json").read_text())
    assert set(adapter["target_modules"]) == LORA_LAYERS[family]
    rows, expected = evaluation_rows(run, "dev")
    for a, e in zip(load_task(str(run)).predict_rows(rows, batch_size=128), expected, strict=True):
        # the merged weights are the adapter's up to rounding: the probability of the run's label, to 1e-5
        assert abs((a["score"] if a["label"] == e["label"] else 1 - a["score"]) - e["score"]) < 1e-5


@pytest.mark.parametrize("family", FAMILIES)
def test_extract_last2(tmp_path_factory, tiny_bert, tmp_path, family):
    """`bertkit extract --layers last2 --pool mean` on the base model: one 2 × 32 vector per word, the words as
    the family's pre-tokenizer splits raw text (byte-level BPE and WordPiece split off punctuation)."""
    model = tiny(tmp_path_factory, tiny_bert, family)
    got = cli_extract(model, EXTRACT, tmp_path, "--layers", "last2", "--pool", "mean")
    apart = family in ("bert", "distilbert", "electra", "roberta", "modernbert")
    first = ["Peter", "Blackburn", "visited", *(["Paris", ","] if apart else ["Paris,"]), "today", "."]
    assert [words for words, _ in got] == [first, ["the", "film", "was", "good"]]
    assert [vectors.shape for _, vectors in got] == [(len(first), 64), (4, 64)]
    assert all(np.isfinite(vectors).all() for _, vectors in got)


# --- the family facts ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_token_types_and_pre_split_words(tmp_path_factory, tiny_bert, family):
    """The tokenizer gives token type ids exactly when the model reads them (ALBERT's transformers 5 tokenizer
    leaves them out), the [CLS]-like token is the first, and a word given pre-split is the same pieces as in running
    text."""
    from transformers import AutoConfig

    from bertkit.families import family as family_of
    from bertkit.families import token_types, words_tokenizer
    from bertkit.models import load_tokenizer

    model = str(tiny(tmp_path_factory, tiny_bert, family))
    config, tokenizer = AutoConfig.from_pretrained(model), load_tokenizer(model)
    assert token_types(config) == TOKEN_TYPES.get(family, 0)
    enc = tokenizer("a film", "was good")
    assert enc["input_ids"][0] == tokenizer.cls_token_id and tokenizer.cls_token == family_of(config).cls_token
    if family in TOKEN_TYPES:
        n = len(tokenizer("a film")["input_ids"])
        assert enc["token_type_ids"] == [0] * n + [1] * (len(enc["input_ids"]) - n)
    else:
        assert "token_type_ids" not in enc
    text = "Peter Blackburn visited Paris with the United Nations"
    words = words_tokenizer(tokenizer, config)(text.split(), is_split_into_words=True)
    running = tokenizer(text)
    for w in range(1, len(text.split())):  # the first word has no space before it in running text
        assert [i for i, x in zip(words["input_ids"], words.word_ids(), strict=True) if x == w] == \
            [i for i, x in zip(running["input_ids"], running.word_ids(), strict=True) if x == w]


@pytest.mark.parametrize("family", FAMILIES)
def test_ner_reads_a_word_from_its_first_piece_with_characters(tmp_path_factory, tiny_bert, family):
    """A word that a sentencepiece or byte-level tokenizer starts with a bare '▁' / 'Ġ' piece (a rare first
    letter) is labelled and predicted at its next piece; the bare piece is context, as [CLS] is."""
    from bertkit.tasks import TokenClassification

    task = TokenClassification.from_pretrained(str(tiny(tmp_path_factory, tiny_bert, family)), label_names=NER_LABELS)
    words = ["Zqxj", "visited", "Paris"]
    feature = task.encode(task.examples({"tokens": [words], "tags": [["B-PER", "O", "B-LOC"]]}))[0]
    pieces = task.tokenizer.convert_ids_to_tokens(feature["input_ids"])
    marker = {"roberta": "Ġ", "modernbert": "Ġ", "xlm-roberta": "▁", "deberta-v2": "▁", "albert": "▁"}
    assert pieces[1] == marker.get(family, "z")  # WordPiece: the uncased vocabulary's 'z'
    bare = int(family in marker)
    first = 1 + bare  # [CLS], then the bare piece where there is one
    assert feature["word_ids"][:first + 1] == [-1] * first + [0]
    assert feature["labels"][:first + 1] == [-100] * first + [NER_LABELS.index("B-PER")]
    assert feature["word_ids"].count(0) == len(task.tokenizer(["Zqxj"], is_split_into_words=True,
                                                              add_special_tokens=False)["input_ids"]) - bare
    (prediction,) = task.predict([words])
    assert prediction["tokens"] == words and len(prediction["tags"]) == 3


@pytest.mark.parametrize("family", FAMILIES)
def test_pooler_and_cpu_speedups(tmp_path_factory, tiny_bert, family):
    """`reinit_pooler` re-draws the pre-trained pooler where the family's classification head reads one and says
    why not elsewhere; the CPU speed-ups (measured on BERT only) apply to BERT alone."""
    import torch

    from bertkit.config import run_config
    from bertkit.errors import BertkitError
    from bertkit.tasks import SequenceClassification
    from bertkit.training.changes import model_changes, reinit_pooler

    task = SequenceClassification.from_pretrained(str(tiny(tmp_path_factory, tiny_bert, family)),
                                                  label_names=["negative", "positive"])
    pooled = {"bert": "bert.pooler.dense.weight", "albert": "albert.pooler.weight",
              "deberta-v2": "pooler.dense.weight"}
    if family in pooled:
        before = task.model.state_dict()[pooled[family]].clone()
        reinit_pooler(task.model)
        assert not torch.equal(task.model.state_dict()[pooled[family]], before)
    else:
        with pytest.raises(BertkitError, match=f"{family} models have no pre-trained pooler under this head"):
            reinit_pooler(task.model)
    logs = []
    cfg = run_config(name="sst2", label_names=["negative", "positive"], precision="fp32")
    with model_changes(task, cfg, cpu=True, log=logs.append) as applied:
        pass
    if family == "bert":
        assert applied == ["fast_dropout", "unfused_attention"] and logs == []
    else:
        assert applied == [] and logs == [f"cpu speed-ups: none for {family} models (measured on BERT only, "
                                          "docs/speed.md)"]


@pytest.mark.parametrize("family", FAMILIES)
def test_max_positions_is_the_longest_sequence_the_model_runs(tmp_path_factory, tiny_bert, family):
    """`max_positions`: a sequence of that many tokens runs and one more is the model's own size error where a
    position table limits it; with relative or rotary positions (None) twice `max_position_embeddings` runs. A
    task asked for more says so in one line."""
    import torch
    from transformers import AutoModel

    from bertkit.errors import BertkitError
    from bertkit.families import max_positions
    from bertkit.tasks import SequenceClassification

    path = tiny(tmp_path_factory, tiny_bert, family)
    model = AutoModel.from_pretrained(path).eval()
    limit = max_positions(model.config)
    assert (limit is None) == (family in ("deberta-v2", "modernbert"))

    def run(n):
        with torch.no_grad():
            model(input_ids=torch.full((1, n), 5), attention_mask=torch.ones(1, n, dtype=torch.long))

    if limit is None:
        run(2 * model.config.max_position_embeddings)
        return
    run(limit)
    with pytest.raises((IndexError, RuntimeError)):
        run(limit + 1)
    with pytest.raises(BertkitError, match=f"max_length {limit + 1}: the model takes at most {limit} tokens"):
        SequenceClassification.from_pretrained(str(path), label_names=["a", "b"], max_length=limit + 1)


def test_only_families_py_compares_model_types():
    """No module of bertkit but families.py names a model type or compares `model_type`."""
    names = set(FAMILIES)
    for path in (REPO / "bertkit").rglob("*.py"):
        if path.name == "families.py" and path.parent.name == "bertkit":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                raise AssertionError(f"{path}:{node.lineno}: model type {node.value!r} outside bertkit/families.py")
            if isinstance(node, ast.Compare) and any(isinstance(n, ast.Attribute) and n.attr == "model_type"
                                                     for n in ast.walk(node)):
                raise AssertionError(f"{path}:{node.lineno}: compares model_type outside bertkit/families.py")


@pytest.mark.parametrize("config_class, pad, expected", [("CamembertConfig", 1, 256), ("MPNetConfig", 1, 256),
                                                         ("MegatronBertConfig", 0, 257)])
def test_a_family_outside_the_table_is_counted_after_its_padding(config_class, pad, expected):
    """CamemBERT and MPNet (RoBERTa's kin, not in the table) were said to take 258 tokens of a 258-row table; a
    run at 258 failed inside the model (index out of range) and left a run folder behind. A family not in the table
    is counted as after padding's: at worst one position short, never over."""
    import torch
    import transformers

    from bertkit.families import max_positions

    config = getattr(transformers, config_class)(vocab_size=100, hidden_size=16, num_hidden_layers=1,
                                                 num_attention_heads=2, intermediate_size=32,
                                                 max_position_embeddings=258, pad_token_id=pad)
    assert max_positions(config) == expected
    model = transformers.AutoModel.from_config(config).eval()
    with torch.no_grad():  # the limit runs
        model(input_ids=torch.full((1, expected), 5), attention_mask=torch.ones(1, expected, dtype=torch.long))


def test_a_byte_level_family_outside_the_table_takes_pre_split_words_as_running_text():
    """DeBERTa v1 (`deberta`, not in the table) has a byte-level BPE tokenizer (GPT-2's): its pre-split words (NER,
    `bertkit extract`) were tokenized without the space before them ('B' 'lack' 'bur' 'n' for ' Blackburn' in
    running text, 'ĠBlackburn'). A family outside the table gets `add_prefix_space` where its tokenizer is byte-level
    BPE, and keeps a WordPiece tokenizer as it is."""
    from transformers import DebertaConfig, DebertaTokenizerFast, MPNetConfig, MPNetTokenizerFast

    from bertkit.families import words_tokenizer

    bpe = json.loads(byte_bpe(["[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"])._tokenizer.to_str())["model"]
    deberta = DebertaTokenizerFast(vocab=bpe["vocab"], merges=[tuple(m) for m in bpe["merges"]])
    mpnet = MPNetTokenizerFast(vocab=str(vocab_path()), unk_token="[UNK]")
    text = "Peter Blackburn visited Paris with the United Nations"
    for tokenizer, config in ((deberta, DebertaConfig()), (mpnet, MPNetConfig())):
        words = words_tokenizer(tokenizer, config)(text.split(), is_split_into_words=True)
        running = tokenizer(text)
        for w in range(1, len(text.split())):  # the first word has no space before it in running text
            assert [i for i, x in zip(words["input_ids"], words.word_ids(), strict=True) if x == w] == \
                [i for i, x in zip(running["input_ids"], running.word_ids(), strict=True) if x == w]
    assert words_tokenizer(mpnet, MPNetConfig()) is mpnet
