"""bertkit: the BERT paper's recipes, one command each, on Hugging Face transformers + accelerate.

Notebook use:
```python
>>> import bertkit
>>> clf = bertkit.SequenceClassification.from_pretrained("minilm-l6", label_names=["negative", "positive"])
>>> cfg = bertkit.FinetuneConfig(epochs=1, output_dir="runs/demo", precision="auto")
>>> bertkit.Trainer(clf, cfg).fit({"text": texts, "label": labels}, {"dev": {"text": dev, "label": dev_labels}})
>>> clf.predict(["a gripping, funny film"])
>>> ner = bertkit.TokenClassification.from_pretrained("runs/conll2003")  # a run of `bertkit finetune conll2003`
>>> ner.predict([["EU", "rejects", "German", "call"]])  # [{tokens, tags, entities}]
>>> qa = bertkit.QuestionAnswering.from_pretrained("runs/squad")  # a run of `bertkit finetune squad`
>>> qa.predict(["Who won?"], ["The Denver Broncos won Super Bowl 50."])  # [{answer, score, start, end}]
```
"""

__version__ = "0.1.0"

from .config import FinetuneConfig, load_recipe  # noqa: E402
from .errors import BertkitError, DataError  # noqa: E402
from .metrics import compute_metrics, resolve_metrics  # noqa: E402
from .tasks import (  # noqa: E402
    Adapter,
    MultiLabelClassification,
    QuestionAnswering,
    SequenceClassification,
    SequenceRegression,
    TokenClassification,
    adapter_for_checkpoint,
)
from .tasks.casing import casing_type_ids  # noqa: E402
from .training import Trainer  # noqa: E402

__all__ = ["Adapter", "BertkitError", "DataError", "FinetuneConfig", "MultiLabelClassification", "QuestionAnswering",
           "SequenceClassification", "SequenceRegression", "TokenClassification", "Trainer", "adapter_for_checkpoint",
           "casing_type_ids", "compute_metrics", "load_recipe", "resolve_metrics", "__version__"]
