"""A checkpoint's head under each task: kept, replaced or new, said in bertkit's own line (transformers' load report
held back), and the encoder's weights the checkpoint lacks named."""

import contextlib
import logging

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from bertkit import MultipleChoice, QuestionAnswering, SequenceClassification, TokenClassification
from bertkit.extract import FeatureExtractor

NER = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
ENCODER = "bert.encoder.layer.0.attention.self.query.weight"


@contextlib.contextmanager
def transformers_warnings():
    """The messages transformers logs at warning level while the block runs (its verbosity set to warning: a test
    before may have quietened it)."""
    import transformers

    messages = []

    class Keep(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    root, level, keep = logging.getLogger("transformers"), transformers.logging.get_verbosity(), Keep()
    bars = transformers.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_warning()
    transformers.logging.disable_progress_bar()
    root.addHandler(keep)
    try:
        yield messages
    finally:
        root.removeHandler(keep)
        transformers.logging.set_verbosity(level)
        if bars:
            transformers.logging.enable_progress_bar()


def said(capsys, path) -> list[str]:
    """bertkit's lines about the checkpoint at `path` on standard error since the last call."""
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith(path)]


@pytest.fixture
def sst2_run(tiny_bert, tmp_path):
    """A fine-tuned SST-2 checkpoint (its head: `classifier`, 2 × hidden)."""
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert, id2label={0: "negative", 1: "positive"})
    model.save_pretrained(tmp_path / "sst2")
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(tmp_path / "sst2")
    return str(tmp_path / "sst2"), model


def test_a_run_of_one_task_under_every_other_head(sst2_run, capsys):
    """A sentence classifier's run as the start of NER (its `classifier` resized: was transformers' RuntimeError),
    of QA (no such head), of multiple choice (resized), of NER with two tags (the same shape: its weights were kept
    as the tagger's) and of STS-B (its head for other labels); feature extraction from it (the head unused)."""
    path, sst2 = sst2_run
    with transformers_warnings() as logged:
        AutoModel.from_pretrained(path)  # transformers alone: its load report names the unused classifier
    assert any("LOAD REPORT" in m for m in logged)
    capsys.readouterr()
    with transformers_warnings() as logged:
        ner = TokenClassification.from_pretrained(path, label_names=NER)
        qa = QuestionAnswering.from_pretrained(path)
        mc = MultipleChoice.from_pretrained(path)
        two = TokenClassification.from_pretrained(path, label_names=["O", "B-X"])
        sts = SequenceClassification.from_pretrained(path, label_names=["score"])
        FeatureExtractor(path, layers="last1")
    assert logged == []
    assert said(capsys, path) == [f"{path}: its BertForSequenceClassification head is replaced by a new one for {NER}",
                   f"{path}: a new head (qa_outputs), randomly initialised",
                   f"{path}: its BertForSequenceClassification head is replaced by a new one",
                   f"{path}: its BertForSequenceClassification head is replaced by a new one for ['O', 'B-X']",
                   f"{path}: its head for ['negative', 'positive'] is replaced by a new one for ['score']"]
    assert ner.model.classifier.out_features == 9 and mc.model.classifier.out_features == 1
    assert not torch.equal(two.model.classifier.weight, sst2.classifier.weight)
    for task in (ner, qa, mc, two, sts):
        assert torch.equal(task.model.state_dict()[ENCODER], sst2.state_dict()[ENCODER])


def test_a_base_checkpoint_gets_a_new_head_in_one_line(tiny_bert, capsys):
    with transformers_warnings() as logged:
        clf = SequenceClassification.from_pretrained(tiny_bert, label_names=["negative", "positive"])
    assert logged == []
    assert said(capsys, str(tiny_bert)) == \
        [f"{tiny_bert}: a new head for ['negative', 'positive'] (classifier), randomly initialised"]
    assert clf.model.config.id2label == {0: "negative", 1: "positive"} and clf.model.classifier.out_features == 2


def test_weights_of_the_encoder_a_checkpoint_lacks_are_named(tiny_bert, tmp_path, capsys):
    AutoModel.from_pretrained(tiny_bert).save_pretrained(tmp_path / "m")
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(tmp_path / "m")
    weights = load_file(tmp_path / "m" / "model.safetensors")
    save_file({k: v for k, v in weights.items() if ".layer.1.intermediate." not in k},
              tmp_path / "m" / "model.safetensors", metadata={"format": "pt"})
    path = str(tmp_path / "m")
    capsys.readouterr()
    FeatureExtractor(path, layers="last1")
    assert said(capsys, path) == \
        [f"{path}: the checkpoint has no weights for encoder.layer.1.intermediate.dense: it starts random"]
    SequenceClassification.from_pretrained(path, label_names=["a", "b"])
    assert said(capsys, path) == \
        [f"{path}: the checkpoint has no weights for bert.encoder.layer.1.intermediate.dense: it starts random",
         f"{path}: a new head for ['a', 'b'] (classifier), randomly initialised"]
