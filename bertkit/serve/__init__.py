"""`bertkit serve`: the model (`engine.py`), dynamic batching (`batcher.py`), request bodies (`schemas.py`) and the
HTTP app (`app.py`)."""

CALL_CHARS = 200  # what one more model call costs, in padded characters (docs/speed.md, "Serving at the model's ...")
