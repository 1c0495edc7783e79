"""Property-based fuzzing of every parser: any input either parses or raises bertkit's own error."""

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertkit.config import resolve, run_config
from bertkit.data import read_classification_file, read_rows
from bertkit.data.conll import read_conll_file
from bertkit.data.squad import read_squad_file
from bertkit.errors import BertkitError
from bertkit.extract import parse_layers
from bertkit.extract.inputs import read_sentences

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# text made of the characters that matter to these formats, plus anything else
TEXTISH = st.text(alphabet=st.sampled_from(list("\t ,\n\r\"'{}[]:-_ABIO0123456789abc\ufeffé\x00")) | st.characters(),
                  max_size=300)
BYTES = st.binary(max_size=300)


def parse(suffix: str, content, fn):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"f{suffix}"
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
        try:
            return fn(path)
        except BertkitError:
            return None


@FUZZ
@given(content=TEXTISH | BYTES, suffix=st.sampled_from([".tsv", ".csv", ".jsonl", ".parquet"]))
def test_table_readers(content, suffix):
    parse(suffix, content, read_rows)
    parse(suffix, content, lambda p: read_classification_file(p, "sentence", "label", ["neg", "pos"]))


@FUZZ
@given(content=TEXTISH | BYTES, suffix=st.sampled_from([".tsv", ".csv", ".jsonl"]),
       quoting=st.sampled_from(["auto", "none", "csv"]),
       problem=st.sampled_from(["regression", "multi_label_classification"]), headerless=st.booleans())
def test_label_kinds_quoting_and_headerless_files(content, suffix, quoting, problem, headerless):
    names = None if problem == "regression" else ["neg", "pos"]
    parse(suffix, content, lambda p: read_classification_file(
        p, "sentence", "label", names, problem_type=problem, quoting=quoting,
        columns=["label", "sentence"] if headerless else None))


@FUZZ
@given(content=TEXTISH | BYTES, tag_column=st.integers(-3, 3))
def test_conll_reader(content, tag_column):
    parse(".txt", content, lambda p: read_conll_file(p, tag_column=tag_column))


TAGGED = st.recursive(st.none() | st.booleans() | st.integers(-2, 12) | st.sampled_from(["O", "B-PER", "I-LOC", "X",
                                                                                         "", " ", "a b", "EU"]),
                      lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
                          st.sampled_from(["tokens", "ner_tags", "id"]), kids, max_size=3), max_leaves=12)


@FUZZ
@given(rows=st.lists(TAGGED, max_size=4), raw=TEXTISH, names=st.sampled_from([None, ["O", "B-PER", "I-PER"]]),
       tagged=st.sampled_from([True, None, False]))
def test_tagged_jsonl_reader(rows, raw, names, tagged):
    parse(".jsonl", "".join(json.dumps(r) + "\n" for r in rows), lambda p: read_conll_file(p, label_names=names,
                                                                                         tagged=tagged))
    parse(".jsonl", raw, lambda p: read_conll_file(p, label_names=names, tagged=tagged))


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                       lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
                           st.sampled_from(["data", "paragraphs", "qas", "context", "question", "id", "answers",
                                            "text", "answer_start", "title", "is_impossible"]), kids, max_size=6),
                       max_leaves=30)


@FUZZ
@given(doc=JSONISH, raw=TEXTISH, skip=st.booleans(), no_answer=st.booleans())
def test_squad_reader(doc, raw, skip, no_answer):
    parse(".json", json.dumps(doc), lambda p: read_squad_file(p, skip_bad=skip, no_answer=no_answer))
    parse(".json", raw, lambda p: read_squad_file(p, skip_bad=skip, no_answer=no_answer))
    rows = doc if isinstance(doc, list) else [doc]  # JSONL in the datasets layout: a question a line
    parse(".jsonl", "".join(json.dumps(r) + "\n" for r in rows), lambda p: read_squad_file(p, skip, None, no_answer))
    parse(".jsonl", raw, lambda p: read_squad_file(p, skip_bad=skip, no_answer=no_answer))


@FUZZ
@given(content=TEXTISH | BYTES, fmt=st.sampled_from(["auto", "text", "pretokenized", "conll", "jsonl"]))
def test_extract_input_reader(content, fmt):
    parse(".txt", content, lambda p: list(read_sentences(p, fmt)))


@FUZZ
@given(spec=st.text(alphabet=st.sampled_from(list("0123456789-,last4embdingsco ")), max_size=12),
       layers=st.integers(1, 24))
def test_layer_specs(spec, layers):
    try:
        chosen = parse_layers(spec, layers)
    except BertkitError:
        return
    assert chosen and all(0 <= i <= layers for i in chosen)


SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
VALUES = SCALARS | st.lists(st.integers() | st.text(max_size=4), max_size=3) | st.dictionaries(
    st.sampled_from(["precision", "dataset", "splits", "text_column", "context", "window_overlap", "nope"]), SCALARS,
    max_size=3)
# run fields, flat group and task-option keys, the nested groups, a 0.2 name, the task itself, and an unknown key
KEYS = st.sampled_from(["lr", "batch_size", "epochs", "eval_every", "precision", "hub_splits", "metrics", "max_steps",
                        "text_column", "class_weights", "ner_context", "window_overlap", "compute", "hub",
                        "task_options", "task", "nope"])


@FUZZ
@given(values=st.dictionaries(KEYS, VALUES, max_size=4))
def test_recipe_values(values):
    for flat in (True, False):  # flat keys (command line, model overrides) and a recipe file's layout
        try:
            resolve([(values, "fuzz", flat)])
        except BertkitError:
            pass
    try:
        run_config(lr=1e-3).replace(**{k: v for k, v in values.items() if k != "task"})
    except BertkitError:
        pass
