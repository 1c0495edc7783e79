"""Feature extraction (ELMo-style use of BERT): layers → combine → pool, streamed to disk in shards."""

from .extractor import FeatureExtractor
from .layers import combine_layers, parse_layers, pool_pieces
from .store import FeatureReader, ShardWriter

__all__ = ["FeatureExtractor", "FeatureReader", "ShardWriter", "combine_layers", "parse_layers", "pool_pieces"]
