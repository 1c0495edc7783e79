"""Feature extraction: parity with transformers' output_hidden_states, pooling, order, shards, bad input."""

import json

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from bertkit.cli import main
from bertkit.errors import BertkitError
from bertkit.extract import FeatureExtractor, FeatureReader, parse_layers

SENTENCES = [["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
             ["Peter", "Blackburn"],
             ["unbelievably", "hyperparameterised", "tokenisation", "x"],  # multi-piece words
             ["a"] + ["very"] * 20 + ["long", "sentence"]]


def reference(tiny_bert, words, layers, combine, pool):
    """What a user would compute by hand from output_hidden_states, one sentence at a time."""
    tok, model = AutoTokenizer.from_pretrained(tiny_bert), AutoModel.from_pretrained(tiny_bert).eval()
    enc = tok(words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**enc, output_hidden_states=True).hidden_states
    h = torch.stack([hidden[i][0] for i in layers])  # [layers, pieces, H]
    v = {"concat": torch.cat(list(h), -1), "mean": h.mean(0), "sum": h.sum(0), "none": h.transpose(0, 1)}[combine]
    ids = enc.word_ids(0)
    text = [i for i, w in enumerate(ids) if w is not None]
    if pool == "cls":
        return v[0].numpy()
    if pool == "sentence-mean":
        return v[text].mean(0).numpy()
    if pool == "none":
        return v[text].numpy()
    rows = []
    for w in range(len(words)):
        pieces = [i for i in text if ids[i] == w]
        rows.append({"first": v[pieces[0]], "last": v[pieces[-1]], "mean": v[pieces].mean(0)}[pool])
    return torch.stack(rows).numpy()


@pytest.mark.parametrize("combine", ["concat", "mean", "sum", "none"])
@pytest.mark.parametrize("pool", ["first", "last", "mean", "cls", "sentence-mean", "none"])
@pytest.mark.usefixtures("cpu_only")  # to 1e-5 of transformers on the CPU (tests/test_gpu.py: the GPU's, to 1e-4)
def test_vectors_equal_output_hidden_states_slices(tiny_bert, combine, pool):
    fx = FeatureExtractor(str(tiny_bert), layers="0,-1,1", combine=combine, pool=pool, precision="fp32",
                          batch_size=3)
    got = fx(SENTENCES)  # batched, padded and length-sorted internally
    for words, g in zip(SENTENCES, got, strict=True):
        np.testing.assert_allclose(g, reference(tiny_bert, words, [0, 2, 1], combine, pool), atol=1e-5)


def test_word_rows_align_with_words_and_multi_piece_words(tiny_bert):
    fx = FeatureExtractor(str(tiny_bert), layers="last", combine="concat", pool="first", precision="fp32")
    pieces = fx.tokenizer(SENTENCES[2], is_split_into_words=True).word_ids()
    assert len(pieces) > len(SENTENCES[2]) + 2  # the words really are split into several pieces
    assert [v.shape for v in fx(SENTENCES)] == [(len(s), 32) for s in SENTENCES]


def test_raw_text_is_split_into_words_as_the_cli_splits_a_line(tiny_bert):
    """A notebook's raw text (a str sentence; one str alone is one sentence) gives the rows of its words as
    `bertkit extract` splits a text line."""
    from bertkit.extract.inputs import split_text

    fx = FeatureExtractor(str(tiny_bert), layers="last", pool="mean", precision="fp32")
    text = "EU rejects German call, says Smith."
    words = split_text(text, fx.tokenizer)
    assert words == ["EU", "rejects", "German", "call", ",", "says", "Smith", "."]  # punctuation: words of its own
    (split,), (raw,), (alone,) = fx([words]), fx([text]), fx(text)
    assert split.shape == (8, 32) and np.array_equal(split, raw) and np.array_equal(raw, alone)


@pytest.mark.parametrize("spec, expected", [("embeddings", [0]), ("last", [2]), ("second-to-last", [1]),
                                            ("all", [1, 2]), ("-1,-2", [2, 1]), ("1-2", [1, 2]), ("0", [0]),
                                            ("embeddings,all", [0, 1, 2]), ("-3", [0]), ("last2", [1, 2]),
                                            ("last1", [2]), ("first1", [1]), ("first2,embeddings", [1, 2, 0])])
def test_layer_specs(spec, expected):
    assert parse_layers(spec, 2) == expected
    assert parse_layers("last4", 6) == [3, 4, 5, 6] and parse_layers("-4--1", 6) == [3, 4, 5, 6]
    assert parse_layers("last5", 6) == [2, 3, 4, 5, 6] and parse_layers("first3", 6) == [1, 2, 3]


@pytest.mark.parametrize("spec, message", [("7", "layer 7 does not exist; the model has 6 layers"),
                                           ("-8", "layer -8 does not exist"), ("top", "is not a layer number"),
                                           ("1-9", "layer 9 does not exist"), (",", "is not a layer number"),
                                           ("1,1", "'1,1' selects layer 1 more than once"),  # was 2 copies
                                           ("last2,-1", "selects layer 6 more than once")])
def test_bad_layer_specs(spec, message):
    with pytest.raises(BertkitError, match=message):
        parse_layers(spec, 6)
    with pytest.raises(BertkitError, match=r"--layers last4: the model has 2 layers \(choose last1 to last2, or all; "
                                           r"last4 is the default of extract, probe and /embed\)"):  # not asked for
        parse_layers("last4", 2)
    with pytest.raises(BertkitError, match=r"--layers first0: the model has 6 layers"):
        parse_layers("first0", 6)


def test_cli_writes_shards_index_and_reader_restores_order(tiny_bert, tmp_path):
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(" ".join(s) for s in SENTENCES) + "\n")
    out = tmp_path / "feats"
    assert main(["extract", "--model", str(tiny_bert), "--input", str(inp), "--output", str(out), "--layers", "last",
                 "--pool", "mean", "--input-format", "pretokenized", "--shard-rows", "10", "--dtype", "float32",
                 "--precision", "fp32", "--batch-size", "2"]) == 0
    reader = FeatureReader(out)
    assert len(reader) == 4 and len(list(out.glob("shard-*.npy"))) == 2  # 11 rows, then 27
    direct = FeatureExtractor(str(tiny_bert), layers="last", pool="mean", precision="fp32")(SENTENCES)
    for (words, rows), s, d in zip(reader, SENTENCES, direct, strict=True):
        assert words == s
        np.testing.assert_allclose(rows, d, atol=1e-5)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["rows"] == sum(map(len, SENTENCES)) and meta["layers"] == [2]
    assert main(["extract", "--model", str(tiny_bert), "--input", str(inp), "--output", str(tmp_path / "neg"),
                 "--layers", "-1,-2", "--input-format", "pretokenized"]) == 0  # was "expected one argument"
    assert json.loads((tmp_path / "neg" / "meta.json").read_text())["layers"] == [2, 1]
    assert main(["extract", "--model", str(tiny_bert), "--input", str(inp), "--output", str(tmp_path / "pieces"),
                 "--layers", "last", "--pool", "none", "--input-format", "pretokenized"]) == 0
    index = [json.loads(line) for line in (tmp_path / "pieces" / "index.jsonl").read_text().splitlines()]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert))
    for entry, words in zip(index, SENTENCES, strict=True):  # a row a word piece: the word of each (was not said)
        pieces = [w for w in tokenizer(words, is_split_into_words=True).word_ids() if w is not None]
        assert entry["row_words"] == pieces and len(pieces) == entry["end"] - entry["start"]
    assert len(index[2]["row_words"]) > len(SENTENCES[2])  # words of several pieces


@pytest.mark.parametrize("given, words", [
    (b"first sentence\nsecond one\nthird one\n", [["first", "sentence"], ["second", "one"], ["third", "one"]]),
    (b"only one\n", [["only", "one"]]),
    (b"-DOCSTART- -X- O\n\nEU B-ORG\nrejects O\n", [["EU", "rejects"]]),  # CoNLL, told by its first line
])
def test_standard_input_is_read_whole_after_its_format_is_told(tiny_bert, tmp_path, monkeypatch, given, words):
    """The format's detection reads standard input's first line: the reading after it still starts there."""
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(given)))
    assert main(["extract", "--model", str(tiny_bert), "--input", "-", "--output", str(tmp_path / "f"),
                 "--layers", "last"]) == 0
    assert [w for w, _ in FeatureReader(tmp_path / "f")] == words


def test_standard_input_peeked_twice_and_then_replaced(monkeypatch):
    """`first_line` asked twice gives the same line; a new standard input (a notebook's next) is read from its own
    start, not after the lines peeked from the one before."""
    import io
    import sys

    from bertkit.data.readers import first_line, iter_lines

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\n\nfirst\nsecond\n")))
    assert first_line("-") == first_line("-") == "first"
    assert list(iter_lines("-")) == [(1, ""), (2, ""), (3, "first"), (4, "second")]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"one\n")))
    assert first_line("-") == "one"
    monkeypatch.setattr(sys, "stdin", io.StringIO("other\n"))  # (a text stream without .buffer)
    assert list(iter_lines("-")) == [(1, "other")]


def test_bytes_that_are_not_utf8_on_standard_input_are_one_line(tiny_bert, tmp_path, monkeypatch, capsys):
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"good\ngood \xff bad\n")))
    assert main(["extract", "--model", str(tiny_bert), "--input", "-", "--output", str(tmp_path / "f"),
                 "--layers", "last"]) == 2
    assert capsys.readouterr().err.strip().endswith("error: <stdin>, line 2: not UTF-8 text (byte 0xff)")
    assert not (tmp_path / "f").exists()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("good\n".encode("utf-16"))))  # PowerShell's pipe
    assert main(["extract", "--model", str(tiny_bert), "--input", "-", "--output", str(tmp_path / "f"),
                 "--layers", "last"]) == 2
    assert capsys.readouterr().err.strip().endswith("<stdin>, line 1: UTF-16 text (its byte-order mark says so): "
                                                    "save it as UTF-8")


def test_conll_input_one_row_per_word_and_sentence_level_output(tiny_bert, tmp_path):
    conll = tmp_path / "x.txt"
    conll.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\n")
    out = tmp_path / "f"
    assert main(["extract", "--model", str(tiny_bert), "--input", str(conll), "--output", str(out), "--pool",
                 "first", "--layers", "all", "--combine", "mean"]) == 0
    assert [w for w, _ in FeatureReader(out)] == [["EU", "rejects"], ["Peter"]]
    out2 = tmp_path / "g"
    assert main(["extract", "--model", str(tiny_bert), "--input", str(conll), "--output", str(out2), "--pool",
                 "cls", "--layers", "last", "--format", "safetensors"]) == 0
    assert [v.shape for _, v in FeatureReader(out2)] == [(32,), (32,)]
    # the same words as JSONL in the datasets layout (--text-field tokens): the same rows
    jsonl = tmp_path / "x.jsonl"
    jsonl.write_text('{"tokens": ["EU", "rejects"], "ner_tags": [3, 0]}\n{"tokens": ["Peter"], "ner_tags": [1]}\n')
    out3 = tmp_path / "h"
    assert main(["extract", "--model", str(tiny_bert), "--input", str(jsonl), "--output", str(out3), "--pool",
                 "first", "--layers", "all", "--combine", "mean", "--text-field", "tokens"]) == 0
    for (words, rows), (words3, rows3) in zip(FeatureReader(out), FeatureReader(out3), strict=True):
        assert words3 == words and np.array_equal(rows3, rows)


def test_a_table_gives_its_text_column_a_sentence_a_row(tiny_bert, tmp_path, capsys):
    table = tmp_path / "dev.tsv"  # SST-2's layout: a header, the label in the last column
    table.write_text("sentence\tlabel\nit 's a charming journey . \t1\nbleak and desperate \t0\n")
    text = tmp_path / "dev.txt"
    text.write_text("it 's a charming journey .\nbleak and desperate\n")
    outs = [tmp_path / "t", tmp_path / "x", tmp_path / "c"]
    for source, out in zip((table, text), outs, strict=False):
        assert main(["extract", "--model", str(tiny_bert), "--input", str(source), "--output", str(out), "--layers",
                     "last", "--precision", "fp32"]) == 0
    (tables, texts) = [list(FeatureReader(out)) for out in outs[:2]]
    assert [w for w, _ in tables] == [["it", "'", "s", "a", "charming", "journey", "."], ["bleak", "and", "desperate"]]
    for (words, rows), (words2, rows2) in zip(tables, texts, strict=True):
        assert words == words2 and np.array_equal(rows, rows2)
    pairs = tmp_path / "pairs.csv"
    pairs.write_text('id,sentence1,sentence2\n7,"one, two",three four\n')
    assert main(["extract", "--model", str(tiny_bert), "--input", str(pairs), "--output", str(outs[2]), "--layers",
                 "last", "--text-field", "sentence2"]) == 0
    assert [w for w, _ in FeatureReader(outs[2])] == [["three", "four"]]
    assert main(["extract", "--model", str(tiny_bert), "--input", str(pairs), "--output", str(tmp_path / "n"),
                 "--layers", "last", "--text-field", "nope"]) == 2
    assert 'line 1: no text column nope (found: id, sentence1, sentence2)' in capsys.readouterr().err
    assert not (tmp_path / "n").exists()
    pairs.write_text("id,sentence1\n")
    assert main(["extract", "--model", str(tiny_bert), "--input", str(pairs), "--output", str(tmp_path / "n"),
                 "--layers", "last"]) == 2
    assert "pairs.csv: no rows (a header only)" in capsys.readouterr().err and not (tmp_path / "n").exists()


@pytest.mark.parametrize("content, args, message", [
    ("a sentence\n\nanother\n", [], "line 2: empty text"),
    ("", [], "file is empty"),
    ('{"txt": "x"}\n', ["--input-format", "jsonl"], 'line 1, field "text": missing text field'),
    ('{"text": ["EU", "New York"]}\n', ["--input-format", "jsonl"],
     'line 1, field "text": a list of words must hold non-empty words without white space'),
    ("ok\n", ["--layers", "9"], "layer 9 does not exist"),
    ("ok\n" + "word " * 600 + "\n", ["--input-format", "pretokenized"], "line 2: 602 word pieces"),
])
def test_bad_extract_input_exits_2_and_leaves_nothing(tiny_bert, tmp_path, capsys, content, args, message):
    inp = tmp_path / "in.txt"
    inp.write_text(content)
    out = tmp_path / "feats"
    args = ["--layers", "last", *args]  # the tiny model has 2 layers; a later --layers wins
    assert main(["extract", "--model", str(tiny_bert), "--input", str(inp), "--output", str(out), *args]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.glob(".feats*"))


def test_blank_lines_at_the_end_of_the_input_are_left_out(tiny_bert, tmp_path):
    inp = tmp_path / "in.txt"
    inp.write_text("a sentence\nanother one\n\n  \n")
    out = tmp_path / "feats"
    assert main(["extract", "--model", str(tiny_bert), "--input", str(inp), "--output", str(out), "--layers",
                 "last"]) == 0
    assert [w for w, _ in FeatureReader(out)] == [["a", "sentence"], ["another", "one"]]


def test_pool_pieces_by_hand():
    from bertkit.extract import pool_pieces

    vectors = torch.arange(12.0).view(6, 2)  # [CLS], w0, w1, w1, w1, [SEP]
    ids = [None, 0, 1, 1, 1, None]
    assert pool_pieces(vectors, ids, 2, "first").tolist() == [[2, 3], [4, 5]]
    assert pool_pieces(vectors, ids, 2, "last").tolist() == [[2, 3], [8, 9]]
    assert pool_pieces(vectors, ids, 2, "mean").tolist() == [[2, 3], [6, 7]]
    with pytest.raises(BertkitError, match="word 1 has no word piece"):
        pool_pieces(vectors, [None, 0, 2, 2, 2, None], 3, "mean")


def test_a_batch_pools_as_its_sentences_one_by_one():
    from bertkit.extract.layers import WordError, pool_pieces, pool_words

    torch.manual_seed(0)
    vectors = torch.randn(3, 7, 2, 4)  # [batch, pieces, layers, dim]: 6, 7 and 4 pieces, then padding
    ids = [[None, 0, 1, 1, 2, None], [None, 0, 0, 1, 2, 3, None], [None, 0, 1, None]]
    words = [3, 4, 2]
    for mode in ("first", "last", "mean"):
        batch = pool_words(vectors, ids, words, mode).split(words)
        for j in range(3):
            alone = pool_pieces(vectors[j, :len(ids[j])], ids[j], words[j], mode)
            assert batch[j].shape == (words[j], 2, 4) and torch.allclose(batch[j], alone, atol=1e-6), (mode, j)
    with pytest.raises(WordError, match="word 1 has no word piece") as e:
        pool_words(vectors, [ids[0], [None, 0, 0, 2, 2, 3, None], ids[2]], words, "mean")
    assert e.value.sentence == 1


def test_the_writer_makes_its_temporary_only_when_it_begins_and_abort_removes_it(tmp_path):
    """The temporary was made by the constructor, before the command's `try` that removes it: a SIGTERM between the
    two left `.feats.tmp` behind (seen once in the CI)."""
    from bertkit.extract import ShardWriter

    out = tmp_path / "feats"
    writer = ShardWriter(out, sentence_level=True)
    assert list(tmp_path.iterdir()) == []
    writer.begin()
    writer.add("s0", ["a", "film"], np.ones(4, dtype=np.float32))
    (made,) = tmp_path.iterdir()
    assert made.name.startswith(".feats.") and made.name.endswith(".tmp"), made
    writer.abort()
    assert list(tmp_path.iterdir()) == []
    ShardWriter(out, sentence_level=True).abort()  # nothing begun: nothing to remove, no error
    assert list(tmp_path.iterdir()) == []


def test_two_writers_of_one_output_keep_their_shards_apart_and_the_second_to_finish_is_refused(tmp_path):
    """Both used `.feats.tmp`: the second to begin removed the first's shards and index and the first wrote on into
    the second's folder, so the first to finish published a mixture of both runs' files; the other failed on its
    vanished temporary."""
    from bertkit.extract import ShardWriter

    out = tmp_path / "feats"
    first, second = ShardWriter(out, sentence_level=True), ShardWriter(out, sentence_level=True)
    first.add("a", ["a"], np.zeros(4, dtype=np.float32))
    second.add("b", ["b"], np.ones(4, dtype=np.float32))
    first.close({})
    with pytest.raises(BertkitError, match="not empty: another run wrote it while this one ran"):
        second.close({})
    reader = FeatureReader(out)
    assert len(reader) == 1 and reader[0][0] == ["a"] and not reader[0][1].any()
    assert [p.name for p in tmp_path.iterdir()] == ["feats"]
