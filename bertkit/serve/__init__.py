"""`bertkit serve`: the model (`engine.py`), dynamic batching (`batcher.py`), request bodies (`schemas.py`: pydantic,
the tasks' request dataclasses adapted) and the HTTP app (`app.py`)."""
