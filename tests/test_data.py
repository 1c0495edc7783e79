import pytest

from bertkit import SequenceClassification
from bertkit.config_files import load_recipe
from bertkit.data import read_classification_file, read_rows
from bertkit.errors import BertkitError, DataError

from .conftest import SHARED_DATA

NAMES = ["negative", "positive"]


def write(path, text, encoding="utf-8"):
    path.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return path


def test_glue_tsv_quoting_off_and_null_stays_text(tmp_path):
    f = write(tmp_path / "d.tsv", 'sentence\tlabel\n"quoted" start \t1\nnull\t0\nNA\t1\n')
    out = read_classification_file(f, "sentence", "label", NAMES)
    assert out["text"] == ['"quoted" start', "null", "NA"] and out["label"] == [1, 0, 1]


def test_bom_and_crlf_just_work(tmp_path):
    f = write(tmp_path / "d.tsv", "\ufeffsentence\tlabel\r\nfine\tpositive\r\n")
    assert read_classification_file(f, "sentence", "label", NAMES) == {"text": ["fine"], "label": [1]}


@pytest.mark.parametrize("content, line, field, message", [
    ("sentence\tlabel\nok\t1\nmissing a column\n", 3, None, "expected 2 columns"),
    ("sentence\tlabel\nok\t1\nfine\tneutral\n", 3, "label", "unknown label 'neutral' (expected one of: negative, "
     "positive: the run's labels, from --label-names, or with --label-names '' from the training file)"),
    ("sentence\tlabel\nok\t1\n  \t0\n", 3, "sentence", "empty text"),
    ("sentence\tlabel\nok\t1\nfine\t \n", 3, "label", "no label (every row of a labelled file has one; `bertkit "
     "predict` reads texts without)"),
    ("text\tlabel\nok\t1\n", 2, "sentence", "missing column (found: text, label; --text-column names the column to "
     "read)"),
])
def test_bad_rows_name_file_line_and_field(tmp_path, content, line, field, message):
    f = write(tmp_path / "dev.tsv", content)
    with pytest.raises(DataError) as e:
        read_classification_file(f, "sentence", "label", NAMES)
    assert e.value.line == line and e.value.field == field and message in str(e.value)
    assert str(f) in str(e.value)


@pytest.mark.parametrize("name, content, message", [
    ("missing.tsv", None, "file not found"),
    ("empty.tsv", "", "file is empty"),
    ("latin1.tsv", b"sentence\tlabel\ncaf\xe9\t1\n", "not UTF-8"),
    ("utf16.tsv", "sentence\tlabel\ncafé\t1\n".encode("utf-16"), "line 1: UTF-16 text .* save it as UTF-8"),
    ("utf16be.jsonl", '{"sentence": "a", "label": 1}\n'.encode("utf-16"), "line 1: UTF-16 text"),
    ("bad.jsonl", '{"sentence": "ok", "label": 1}\n{"sentence": \n', "not valid JSON"),
    ("data.xml", "<a/>", "unknown file type"),
])
def test_unreadable_files(tmp_path, name, content, message):
    if content is not None:
        write(tmp_path / name, content)
    with pytest.raises(DataError, match=message):
        read_rows(tmp_path / name)


def test_csv_jsonl_parquet_with_chosen_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    write(tmp_path / "a.csv", 'review,stars\n"good, really",positive\nbad,negative\n')
    write(tmp_path / "a.jsonl", '{"review": "good, really", "stars": "positive"}\n{"review": "bad", "stars": 0}\n')
    pq.write_table(pa.table({"review": ["good, really", "bad"], "stars": ["positive", "negative"]}),
                   tmp_path / "a.parquet")
    for ext in ("csv", "jsonl", "parquet"):
        out = read_classification_file(tmp_path / f"a.{ext}", "review", "stars", NAMES)
        assert out == {"text": ["good, really", "bad"], "label": [1, 0]}, ext


def test_label_set_discovered_from_generic_training_file(tmp_path):
    write(tmp_path / "train.csv", "text,label\nx,spam\ny,ham\nz,spam\n")
    write(tmp_path / "dev.csv", "text,label\nx,ham\n")
    cfg = load_recipe("sst2", {"data_dir": str(tmp_path), "train_file": "train.csv", "validation_files": "dev.csv",
                               "text_column": "text", "label_names": []})
    train, evals, names = SequenceClassification.load_data(cfg)
    assert names == ["ham", "spam"] and train["label"] == [1, 0, 1] and evals["dev"]["label"] == [0]
    write(tmp_path / "dev.csv", "text,label\nx,ham\ny,eggs (fried)\n")  # a label the training file lacks: said so (the
    with pytest.raises(DataError) as e:  # general advice named --label-names '', which this run had given)
        SequenceClassification.load_data(cfg)
    assert (e.value.line, e.value.field) == (3, "label") and e.value.reason == (
        "unknown label 'eggs (fried)' (the labels found in the training file: ham, spam; to train with more, list "
        "them all with --label-names)")


def test_fractional_labels_are_not_discovered_as_classes_but_name_regression(tmp_path):
    """run_glue.py regresses on float labels; a discovered label set made each score a class (20 scores, 20 classes)
    and then refused the validation file's first unseen score."""
    f = write(tmp_path / "train.csv", "sentence1,sentence2,label\na,b,3\nc,d,2.52\n")
    with pytest.raises(DataError) as e:
        read_classification_file(f, "sentence1", "label", None, text_pair_column="sentence2")
    assert (e.value.line, e.value.field) == (3, "label") and "label '2.52' is a number with a fraction: for a " \
        "regression target pass --problem-type regression" in str(e.value)
    assert read_classification_file(f, "sentence1", "label", None, problem_type="regression")["label"] == [3.0, 2.52]
    assert read_classification_file(f, "sentence1", "label", ["3", "2.52"])["label"] == [0, 1]  # classes named


def test_a_json_array_of_objects_is_read_with_each_objects_line(tmp_path):
    """`datasets.load_dataset("json")` (run_glue.py's, run_ner.py's) reads one JSON array as well as JSON lines; the
    array was 'line 1: not valid JSON: Expecting value'."""
    import json

    rows = [{"sentence": "good", "label": "pos"}, {"sentence": "bad", "label": "neg"}]
    f = write(tmp_path / "train.json", json.dumps(rows, indent=2))  # each object 4 lines, from line 2
    assert read_rows(f) == [(2, rows[0]), (6, rows[1])]
    assert read_rows(write(tmp_path / "one.json", json.dumps(rows))) == [(1, rows[0]), (1, rows[1])]
    f = write(tmp_path / "bad.json", json.dumps([*rows, {"sentence": "meh"}], indent=2))
    with pytest.raises(DataError) as e:
        read_classification_file(f, "sentence", "label", None)
    assert (e.value.line, e.value.field) == (10, "label") and "missing column" in str(e.value)
    for content, message in (("[1, 2]", "item 1 of the array is not a JSON object"),
                             ('[{"a": 1},\n{"a": }]', "line 2: not valid JSON")):
        with pytest.raises(DataError, match=message):
            read_rows(write(tmp_path / "x.json", content))


def test_no_local_data_offline_says_how_to_point_at_data(monkeypatch, tmp_path):
    monkeypatch.setenv("BERTKIT_DATA_DIR", str(tmp_path))
    with pytest.raises(BertkitError, match="BERTKIT_DATA_DIR=/path/to/data"):
        SequenceClassification.load_data(load_recipe("sst2"))


@pytest.mark.skipif(not (SHARED_DATA / "sst2").is_dir(), reason="shared SST-2 not available")
def test_real_sst2_files_parse_completely():
    cfg = load_recipe("sst2", {"data_dir": str(SHARED_DATA / "sst2")})
    train, evals, names = SequenceClassification.load_data(cfg)
    assert len(train) == 67349 and len(evals["dev"]) == 872 and names == NAMES
    assert set(train["label"]) == {0, 1} and all(t == t.strip() for t in train["text"][:1000])


def test_the_main_split_is_the_first_validation_files_stem_or_the_hubs_first_evaluation_split(tmp_path, monkeypatch):
    from bertkit.data.sources import main_split

    monkeypatch.setenv("BERTKIT_DATA_DIR", str(tmp_path / "empty"))  # no local data: the hub's names
    assert [main_split(load_recipe(r)) for r in ("sst2", "stsb", "mnli", "conll2003")] == [
        "validation", "validation", "validation_matched", "validation"]
    (tmp_path / "stsb").mkdir()
    assert main_split(load_recipe("stsb", {"data_dir": str(tmp_path / "stsb")})) == "sts-dev"
    assert main_split(load_recipe("mnli", {"data_dir": str(tmp_path / "stsb")})) == "dev_matched"
    assert SequenceClassification.main_split(load_recipe("qnli", {"data_dir": str(tmp_path / "stsb"),
                                                                  "carve_eval": 20})) == "dev_carved20"


@pytest.mark.parametrize("content, rows, blank", [
    ("one\ntwo\n", [(1, "one"), (2, "two")], None),
    ("one\ntwo\n\n \r\n", [(1, "one"), (2, "two")], None),  # blank lines at the end: an editor's, left out
    ("one\n\ntwo\n", None, 2),  # a blank line before a text: refused, the output would not line up
    ("\n\n", None, "empty"),
])
def test_one_text_per_line_leaves_out_blank_lines_at_the_end_only(tmp_path, content, rows, blank):
    from bertkit.data.readers import read_lines

    f = write(tmp_path / "in.txt", content)
    if rows is not None:
        assert read_lines(f) == rows
        return
    with pytest.raises(DataError) as e:
        read_lines(f)
    assert (e.value.line, e.value.reason) == (2, "empty text (one text per line; remove blank lines)") if blank == 2 \
        else e.value.reason == "file is empty"


def test_a_discovered_label_set_has_no_empty_label_and_numbers_in_numeric_order(tmp_path):
    """--label-names '': the training file's labels. An empty cell was a class named ""; stars 1-10 sorted as text
    put 10 second."""
    from bertkit.data.classification import label_order

    f = write(tmp_path / "train.csv", "text,stars\nfine,1\nbad,\n")
    with pytest.raises(DataError) as e:
        read_classification_file(f, "text", "stars", None)
    assert (e.value.line, e.value.field) == (3, "stars") and str(e.value).endswith("no label (every row of a "
                                                                                   "labelled file has one; `bertkit "
                                                                                   "predict` reads texts without)")
    assert label_order({str(n) for n in range(1, 11)}) == [str(n) for n in range(1, 11)]
    assert label_order({"0.5", "-1", "2"}) == ["-1", "0.5", "2"]
    assert label_order({"pos", "neg", "10", "2"}) == ["10", "2", "neg", "pos"]  # not all numbers: as text


def test_a_column_named_twice_in_the_header_is_refused_where_it_is_read(tmp_path):
    """A row is a dict: the last of two columns of one name was read, silently."""
    f = write(tmp_path / "dup.csv", "text,label,text\nthe good film,pos,x\n")
    with pytest.raises(DataError) as e:
        read_classification_file(f, "text", "label", None)
    assert e.value.line == 1 and str(e.value).endswith("the header names 'text' twice (columns 1 and 3): rename one")
    f = write(tmp_path / "notes.csv", "text,label,notes,notes\nthe good film,pos,x,y\n")  # not read: no matter
    assert read_classification_file(f, "text", "label", None) == {"text": ["the good film"], "label": ["pos"]}


def test_a_tsv_quoted_throughout_is_read_with_csv_quoting(tmp_path, capsys):
    """R's write.table quotes every field, header included, without doubled quotes inside: read with quoting off,
    its columns were named "text" with the quotes, and no column was found."""
    f = write(tmp_path / "r.tsv", '"text"\t"label"\n"good film 1"\t"pos"\n"bad film"\t"neg"\n')
    assert read_rows(f) == [(2, {"text": "good film 1", "label": "pos"}), (3, {"text": "bad film", "label": "neg"})]
    assert "read with CSV quoting (its header's names in quotes)" in capsys.readouterr().err
    f = write(tmp_path / "glue.tsv", 'sentence\tlabel\n"quoted" start\t1\n')  # GLUE's bare quotes: as they are
    assert read_rows(f) == [(2, {"sentence": '"quoted" start', "label": "1"})]


def test_a_file_without_the_delimiter_it_is_read_with_says_so(tmp_path):
    """The stsb recipe reads tab-separated files without a header; a comma-separated one of one's own was 'expected
    7 columns, found 1' with a hint about quoting."""
    f = write(tmp_path / "train.csv", "s1,s2,score\na man plays,a person plays,4.5\n")
    with pytest.raises(DataError) as e:
        read_rows(f, delimiter="\t", columns=["genre", "file", "year", "id", "score", "sentence1", "sentence2"],
                  required=["s1", "s2", "score"])
    assert str(e.value).endswith(": its first line has no tab, the delimiter it is read with (--delimiter none "
                                 "reads a file by its extension, --delimiter names another)"), str(e.value)
    assert "quoting" not in str(e.value)


def test_a_label_is_an_index_only_where_no_label_name_is_a_number(tmp_path):
    """A dev file coded 0/1 beside training labels 1/2 (its label names, found in the training file) read 0 as the
    index of '1': every row of a run scored right, accuracy 1.0, without a word."""
    f = write(tmp_path / "dev.tsv", "sentence\tlabel\nok\t1\nfine\t0\n")
    with pytest.raises(DataError, match="unknown label '0' \\(expected one of: 1, 2:"):
        read_classification_file(f, "sentence", "label", ["1", "2"])
    assert read_classification_file(f, "sentence", "label", NAMES)["label"] == [1, 0]  # SST-2's ids
