"""`bertkit serve`: the model (`engine.py`), dynamic batching (`batcher.py`), request bodies (`schemas.py`) and the
HTTP app (`app.py`)."""
