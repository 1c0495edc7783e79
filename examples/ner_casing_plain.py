"""Use a `--casing` checkpoint from plain transformers (no bertkit model code), and see what the casing ids
are worth: entity F1 on a CoNLL file with `bertkit.casing_type_ids` as the token type ids, and without them (all
0, what plain transformers passes by default: every word read as lower case).

    python examples/ner_casing_plain.py runs/conll2003 ../shared/data/conll2003/test.txt

Each sentence is one input (up to 512 word pieces, no windows; batches of 32); a word is tagged from its first
piece; F1 is seqeval's default mode, which counts entities as conlleval does.
"""

import sys

import torch
from seqeval.metrics import f1_score
from transformers import AutoModelForTokenClassification, AutoTokenizer

import bertkit
from bertkit.data.conll import read_conll_file

run, path = sys.argv[1], sys.argv[2]
model = AutoModelForTokenClassification.from_pretrained(run).eval()
tokenizer = AutoTokenizer.from_pretrained(run)
data = read_conll_file(path)
print(f"{run}: type_vocab_size {model.config.type_vocab_size}, bertkit_casing "
      f"{getattr(model.config, 'bertkit_casing', False)}; {len(data['tokens'])} sentences")

predictions = {"with casing ids": [], "without (all 0)": []}
for start in range(0, len(data["tokens"]), 32):  # batches of 32 sentences, padded
    batch = data["tokens"][start:start + 32]
    enc = tokenizer(batch, is_split_into_words=True, truncation=True, max_length=512, padding=True,
                    return_tensors="pt")
    length = enc["input_ids"].shape[1]
    casing = [bertkit.casing_type_ids(tokenizer, words)[:length] for words in batch]
    casing = torch.tensor([ids + [0] * (length - len(ids)) for ids in casing])  # [sentences, pieces]
    for name, types in (("with casing ids", casing), ("without (all 0)", torch.zeros_like(casing))):
        with torch.no_grad():
            logits = model(**{**enc, "token_type_ids": types}).logits  # [sentences, pieces, labels]
        for i, words in enumerate(batch):
            ids = enc.word_ids(i)
            firsts = [p for p, w in enumerate(ids) if w is not None and (p == 0 or ids[p - 1] != w)]
            tags = [model.config.id2label[int(logits[i, p].argmax())] for p in firsts]
            predictions[name].append(tags + ["O"] * (len(words) - len(tags)))  # words cut by truncation: O
for name, tags in predictions.items():
    print(f"entity F1 {name}: {100 * f1_score(data['tags'], tags):.2f}")
